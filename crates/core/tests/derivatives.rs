//! Derivatives of the setup leaves (everything the kernel reads) and of the
//! rendered images by every parameter, seeded duals against central finite
//! differences in f64.

use nanobragg_core::config::{CrystalShape, Misset, SfSource, SimConfig};
use nanobragg_core::diff::leaves::check_param;
use nanobragg_core::diff::{
    hessian_with, jacobian, jacobian_in, Deltas, Dense64, Leaves, Param, Seeded,
};
use nanobragg_core::real::Real;
use nanobragg_core::render::kernel::{Exact, Kernel};
use nanobragg_core::render::{render, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};
use std::path::Path;

const SEEDS: SetupSeeds = SetupSeeds { misset_idum: -5 };
type D8 = Dense64<8>;

/// Every leaf, flattened in a fixed order: scalars first, then three-vectors.
const SCALARS: usize = 11;

fn flatten_with<R: Real, T>(l: &Leaves<R>, f: impl Fn(R) -> T) -> Vec<T> {
    let mut v = vec![l.pixel, l.distance, l.close_distance, l.fudge, l.kahn, l.scale, l.i_bg];
    v.push(l.default_f);
    v.extend(l.n_cells);
    assert_eq!(v.len(), SCALARS);
    for x in [l.fdet, l.sdet, l.odet, l.pix0, l.beam, l.polar_axis] {
        v.extend(x);
    }
    for s in &l.sources {
        v.extend(s.incident);
        v.extend([s.lambda; 3]);
    }
    for c in l.cells.iter().chain(std::iter::once(&l.recip)) {
        for x in c {
            v.extend(x);
        }
    }
    v.into_iter().map(f).collect()
}

/// The size each leaf's error is measured against: its own magnitude for
/// scalars, the length of its vector for vector components.
fn scales(values: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = values[..SCALARS].iter().map(|v| v.abs()).collect();
    for t in values[SCALARS..].chunks(3) {
        let m = (t[0] * t[0] + t[1] * t[1] + t[2] * t[2]).sqrt();
        s.extend([m; 3]);
    }
    s
}

fn flatten<R: Real>(l: &Leaves<R>) -> Vec<f64> {
    flatten_with(l, R::val)
}

fn leaves_f64(cfg: &SimConfig) -> Vec<f64> {
    let plan = Plan::new(cfg, SEEDS).unwrap();
    flatten(&Leaves::<f64>::new(cfg, &plan, SEEDS, &Deltas::zero()).unwrap())
}

fn step(p: Param, plan: &Plan) -> f64 {
    match p {
        Param::Fluence => 1e-4 * plan.fluence,
        Param::Lambda => 1e-6,
        Param::Mosaic => 0.05,
        Param::Na | Param::Nb | Param::Nc | Param::Polar | Param::Fudge => 1e-4,
        _ => 1e-3,
    }
}

/// Compare every applicable parameter; returns the worst relative L2 error.
fn check(cfg: &SimConfig, tol: f64) -> f64 {
    let plan = Plan::new(cfg, SEEDS).unwrap();
    // zero deltas reproduce the plan exactly
    let l0 = Leaves::<f64>::new(cfg, &plan, SEEDS, &Deltas::zero()).unwrap();
    assert_eq!(l0.pix0, plan.detector.pix0);
    assert_eq!(l0.cells.len(), plan.cells_m.len());
    for (c, m) in l0.cells.iter().zip(&plan.cells_m) {
        assert_eq!(c.concat(), m.to_vec());
    }
    let values = flatten(&l0);
    let params: Vec<Param> = Param::ALL
        .into_iter()
        .filter(|&p| check_param(cfg, &plan, p).is_ok())
        .filter(|&p| p.nudged(cfg, &plan, 0.0).is_ok())
        .collect();
    let mut worst = 0.0f64;
    for chunk in params.chunks(8) {
        let mut deltas = Deltas::<D8>::zero();
        for (i, &p) in chunk.iter().enumerate() {
            deltas.set(p, D8::seed(0.0, i));
        }
        let dual = Leaves::<D8>::new(cfg, &plan, SEEDS, &deltas).unwrap();
        // num-dual rounds some operations differently (division by reciprocal)
        for (a, b) in flatten(&dual).iter().zip(&values) {
            assert!((a - b).abs() <= 1e-14 * b.abs(), "value {a} vs {b}");
        }
        for (i, &p) in chunk.iter().enumerate() {
            let h = step(p, &plan);
            let up = leaves_f64(&p.nudged(cfg, &plan, h).unwrap());
            let down = leaves_f64(&p.nudged(cfg, &plan, -h).unwrap());
            let fd: Vec<f64> = up.iter().zip(&down).map(|(u, d)| (u - d) / (2.0 * h)).collect();
            let ad = flatten_with(&dual, |x| Seeded::derivative(x, i));
            // relative L2 error over the leaves, each leaf scaled by its size
            let (mut num, mut den) = (0.0f64, 0.0f64);
            for ((a, f), &s) in ad.iter().zip(&fd).zip(&scales(&values)) {
                if s == 0.0 {
                    continue;
                }
                num += ((a - f) / s).powi(2);
                den += (f / s).powi(2);
            }
            let err = if den > 0.0 { (num / den).sqrt() } else { num.sqrt() };
            eprintln!("{p:>14}: relative error {err:.2e}");
            assert!(err <= tol, "{p}: relative error {err:e}");
            worst = worst.max(err);
        }
    }
    worst
}

/// The exact f64 image of `cfg`, pixel by pixel in raster order (the shared
/// interpolation flag as nanoBragg.c keeps it), without rounding to f32.
fn image_f64(cfg: &SimConfig) -> Vec<f64> {
    let plan = Plan::new(cfg, SEEDS).unwrap();
    let k = Kernel::<f64, Exact>::new(&plan);
    let mut interp = k.interpolates();
    let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
    (0..fp * sp).map(|i| k.pixel(i % fp, i / fp, &mut interp).value).collect()
}

/// The derivative image by `p` in f64 (no rounding to f32), pixel by pixel
/// in raster order as [`image_f64`].
fn derivative_f64(cfg: &SimConfig, p: Param) -> Vec<f64> {
    type D1 = Dense64<1>;
    let plan = Plan::new(cfg, SEEDS).unwrap();
    let mut deltas = Deltas::<D1>::zero();
    deltas.set(p, D1::seed(0.0, 0));
    let leaves = Leaves::new(cfg, &plan, SEEDS, &deltas).unwrap();
    let k = Kernel::<D1, Exact>::from_leaves(&plan, &leaves);
    let mut interp = k.interpolates();
    let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
    (0..fp * sp)
        .map(|i| k.pixel(i % fp, i / fp, &mut interp).value)
        .map(|x| Seeded::derivative(x, 0))
        .collect()
}

/// Relative L2 distance of `a` from the reference `r`.
fn rel_l2(a: &[f32], r: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&a, &r) in a.iter().zip(r) {
        num += (a as f64 - r).powi(2);
        den += r * r;
    }
    if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    }
}

/// The parameters of `cfg` the image tests differentiate by.
fn image_params(cfg: &SimConfig, skip: &[Param]) -> Vec<Param> {
    let plan = Plan::new(cfg, SEEDS).unwrap();
    Param::ALL
        .into_iter()
        .filter(|&p| check_param(cfg, &plan, p).is_ok())
        .filter(|&p| p.nudged(cfg, &plan, 0.0).is_ok())
        .filter(|p| !skip.contains(p))
        // without water the derivative by its size is 0 (size cubed)
        .filter(|&p| p != Param::Water || cfg.sampling.water_um > 0.0)
        .collect()
}

/// Central finite difference by `a` of the f64 derivative image by `b`
/// (long steps with Richardson extrapolation for the mosaic spread, whose
/// domain angles are drawn in f32).
fn fd_second(cfg: &SimConfig, a: Param, b: Param, step_scale: f64) -> Vec<f64> {
    let plan = Plan::new(cfg, SEEDS).unwrap();
    let h = image_step(a, &plan) * step_scale;
    let central = |h: f64| -> Vec<f64> {
        let up = derivative_f64(&a.nudged(cfg, &plan, h).unwrap(), b);
        let down = derivative_f64(&a.nudged(cfg, &plan, -h).unwrap(), b);
        up.iter().zip(&down).map(|(u, w)| (u - w) / (2.0 * h)).collect()
    };
    if a == Param::Mosaic {
        let (d1, d2) = (central(h), central(h / 2.0));
        d1.iter().zip(&d2).map(|(x, y)| (4.0 * y - x) / 3.0).collect()
    } else {
        central(h)
    }
}

/// Second derivatives of [`hessian_with`]: the diagonal by every applicable
/// parameter (not in `skip`) and the mixed derivatives of `pairs` against
/// finite differences of f64 first-derivative images; returns the worst
/// relative L2 error.
fn check_curvatures(
    name: &str,
    cfg: &SimConfig,
    skip: &[Param],
    step_scale: f64,
    pairs: &[(Param, Param)],
    tol: f64,
) -> f64 {
    let params = image_params(cfg, skip);
    let hs = hessian_with(cfg, &params, SEEDS, RenderOptions::default(), false).unwrap();
    assert!(hs.mixed.is_empty());
    let j = jacobian(cfg, &params, SEEDS).unwrap();
    // the hyper-dual value and first derivatives are the dual ones
    assert_eq!(hs.image, j.image);
    for (p, (g, d)) in params.iter().zip(hs.gradient.iter().zip(&j.derivatives)) {
        let d: Vec<f64> = d.iter().map(|&x| x as f64).collect();
        assert!(rel_l2(g, &d) < 1e-6, "{name} {p}: gradient {:e}", rel_l2(g, &d));
    }
    let mut worst = 0.0f64;
    for (&p, d2) in params.iter().zip(&hs.diagonal) {
        if matches!(p, Param::Fluence | Param::Polar) {
            // the image is linear in these: the second derivative is exactly 0
            assert!(d2.iter().all(|&x| x == 0.0), "{name} {p}: not linear");
            continue;
        }
        let err = rel_l2(d2, &fd_second(cfg, p, p, step_scale));
        eprintln!("{name} {p:>14}: second derivative relative error {err:.2e}");
        worst = worst.max(err);
    }
    for &(a, b) in pairs {
        let hm =
            hessian_with(cfg, &[a, b], SEEDS, RenderOptions::default().threads(1), true).unwrap();
        assert_eq!((hm.mixed.len(), hm.mixed[0].0, hm.mixed[0].1), (1, 0, 1));
        // the diagonal does not depend on the other parameters asked for
        let i = params.iter().position(|&p| p == a).unwrap();
        assert_eq!(hm.diagonal[0], hs.diagonal[i]);
        let fd = fd_second(cfg, a, b, step_scale);
        let err = rel_l2(&hm.mixed[0].2, &fd);
        // and it is symmetric: the pair asked for the other way round (the
        // finite differences the other way round are limited by rounding
        // at these steps: up to 1e-4 for cell_alpha and twotheta)
        let ba =
            hessian_with(cfg, &[b, a], SEEDS, RenderOptions::default().threads(1), true).unwrap();
        let mixed: Vec<f64> = hm.mixed[0].2.iter().map(|&x| x as f64).collect();
        let sym = rel_l2(&ba.mixed[0].2, &mixed);
        assert!(sym < 1e-12, "{name} {a} {b}: not symmetric ({sym:e})");
        eprintln!(
            "{name} {a:>14} {b:>14}: mixed relative error {err:.2e} ({sym:.2e} from the pair swapped)"
        );
        assert!(fd.iter().any(|&x| x != 0.0), "{name} {a} {b}: zero");
        worst = worst.max(err);
    }
    assert!(worst <= tol, "{name}: worst second-derivative relative error {worst:e}");
    worst
}

/// Derivative images in f32 duals against the f64 ones; returns the worst
/// relative L2 error over the image and every parameter.
fn check_f32(name: &str, cfg: &SimConfig, tol: f64) -> f64 {
    let params = image_params(cfg, &[]);
    let j64 = jacobian(cfg, &params, SEEDS).unwrap();
    let j32 =
        jacobian_in(cfg, &params, SEEDS, RenderOptions::default(), Precision::Fast32).unwrap();
    let image: Vec<f64> = j64.image.iter().map(|&x| x as f64).collect();
    let mut worst = rel_l2(&j32.image, &image);
    eprintln!("{name} image: f32 relative error {worst:.2e}");
    for (p, (a, b)) in params.iter().zip(j32.derivatives.iter().zip(&j64.derivatives)) {
        let b: Vec<f64> = b.iter().map(|&x| x as f64).collect();
        let err = rel_l2(a, &b);
        eprintln!("{name} {p:>14}: f32 relative error {err:.2e}");
        worst = worst.max(err);
    }
    assert!(worst <= tol, "{name}: worst f32 relative error {worst:e}");
    worst
}

/// Finite-difference step of each parameter for images.
fn image_step(p: Param, plan: &Plan) -> f64 {
    match p {
        Param::Fluence => 1e-3 * plan.fluence,
        Param::Mosaic => 0.05,
        _ => 1e-4,
    }
}

/// Derivative images of every applicable parameter against central finite
/// differences of exact f64 renders (steps of [`image_step`] times
/// `step_scale`), all but those in `skip`; returns the worst relative L2
/// error.
fn check_images(name: &str, cfg: &SimConfig, skip: &[Param], step_scale: f64, tol: f64) -> f64 {
    let plan = Plan::new(cfg, SEEDS).unwrap();
    let params = image_params(cfg, skip);
    let j = jacobian(cfg, &params, SEEDS).unwrap();
    // the image is the exact render's (the duals' values to rounding)
    let exact = render::<f32>(&plan, RenderOptions::new(Precision::Exact64)).image;
    assert!(exact.iter().any(|&v| v > 0.0));
    for (a, b) in j.image.iter().zip(&exact) {
        assert!((a - b).abs() <= 1e-6 * b.abs(), "value {a} vs {b}");
    }
    let mut worst = 0.0f64;
    for (p, d) in params.iter().zip(&j.derivatives) {
        let h = image_step(*p, &plan) * step_scale;
        let central = |h: f64| -> Vec<f64> {
            let up = image_f64(&p.nudged(cfg, &plan, h).unwrap());
            let down = image_f64(&p.nudged(cfg, &plan, -h).unwrap());
            up.iter().zip(&down).map(|(u, w)| (u - w) / (2.0 * h)).collect()
        };
        let fd = if *p == Param::Mosaic {
            // nanoBragg.c draws the domain angles in f32: short steps drown
            // in its rounding, so long steps with Richardson extrapolation
            let (d1, d2) = (central(h), central(h / 2.0));
            d1.iter().zip(&d2).map(|(a, b)| (4.0 * b - a) / 3.0).collect()
        } else {
            central(h)
        };
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for (&fd, &a) in fd.iter().zip(d) {
            num += (a as f64 - fd).powi(2);
            den += fd * fd;
        }
        let err = if den > 0.0 { (num / den).sqrt() } else { num.sqrt() };
        eprintln!("{name} {p:>14}: image relative error {err:.2e}");
        worst = worst.max(err);
    }
    assert!(worst <= tol, "{name}: worst image relative error {worst:e}");
    worst
}

fn base() -> SimConfig {
    let mut cfg = SimConfig::default();
    cfg.detector.fpixels = 48;
    cfg.detector.spixels = 48;
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    cfg.crystal.na = 5.0;
    cfg.crystal.nb = 5.0;
    cfg.crystal.nc = 5.0;
    cfg.sf.default_f = 100.0;
    cfg.sampling.water_um = 10.0;
    cfg
}

#[test]
fn cubic_leaves() {
    let w = check(&base(), 1e-6);
    eprintln!("cubic: worst {w:e}");
}

fn cubic_image() -> SimConfig {
    let mut cfg = base();
    (cfg.detector.fpixels, cfg.detector.spixels) = (40, 40);
    cfg.sampling.water_um = 0.0;
    cfg.crystal.mosaic_deg = 0.5;
    cfg.crystal.mosaic_domains = 4;
    cfg
}

#[test]
fn cubic_images() {
    let w = check_images("cubic", &cubic_image(), &[], 1.0, 1e-5);
    eprintln!("cubic images: worst {w:e}");
}

#[test]
fn cubic_second_derivatives() {
    use Param::*;
    let pairs = [(Distance, Lambda), (CellA, Na), (MissetX, MissetY), (Xbeam, Mosaic)];
    let w = check_curvatures("cubic", &cubic_image(), &[], 1.0, &pairs, 1e-4);
    eprintln!("cubic second derivatives: worst {w:e}");
}

#[test]
fn cubic_f32_derivatives() {
    let w = check_f32("cubic", &cubic_image(), 1e-3);
    eprintln!("cubic f32: worst {w:e}");
}

fn triclinic() -> SimConfig {
    let mut cfg = base();
    cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
    cfg.crystal.mosaic_deg = 0.5;
    cfg.crystal.mosaic_domains = 4;
    cfg.crystal.phi0_deg = 10.0;
    cfg.crystal.osc_deg = 1.0;
    cfg.crystal.phisteps = 3;
    cfg.crystal.shape = CrystalShape::Gauss;
    let hkl = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/inputs/p1_tric.hkl");
    let entries = nanobragg_core::sf::hkl::read_hkl(&hkl).unwrap();
    cfg.sf.source = SfSource::Hkl(entries.into());
    cfg.sf.interpolate = Some(true);
    cfg
}

#[test]
fn triclinic_mosaic_phi_leaves() {
    let w = check(&triclinic(), 1e-5);
    eprintln!("triclinic: worst {w:e}");
}

fn triclinic_image() -> SimConfig {
    let mut cfg = triclinic();
    (cfg.detector.fpixels, cfg.detector.spixels) = (40, 40);
    cfg.sampling.water_um = 0.0;
    // gauss spots of a non-orthogonal cell jump where the nearest (h, k, l)
    // switches (see docs/derivatives.md); square spots are smooth
    cfg.crystal.shape = CrystalShape::Square;
    cfg
}

#[test]
fn triclinic_mosaic_phi_images() {
    // tricubic interpolation has kinks at whole h, k, l: short steps; the
    // mosaic spread needs long ones (f32 domain angles), so it is checked
    // on the smooth cubic crystal instead
    let w = check_images("triclinic", &triclinic_image(), &[Param::Mosaic], 0.1, 1e-5);
    eprintln!("triclinic images: worst {w:e}");
}

#[test]
fn triclinic_second_derivatives() {
    use Param::*;
    let pairs = [(CellAlpha, Twotheta), (Phi, Osc), (CellC, Lambda), (Nc, Distance)];
    let cfg = triclinic_image();
    let w = check_curvatures("triclinic", &cfg, &[Mosaic], 0.1, &pairs, 1e-4);
    eprintln!("triclinic second derivatives: worst {w:e}");
}

#[test]
fn triclinic_f32_derivatives() {
    let w = check_f32("triclinic", &triclinic_image(), 1e-3);
    eprintln!("triclinic f32: worst {w:e}");
}

fn tilted() -> SimConfig {
    let mut cfg = base();
    cfg.detector.twotheta_deg = 20.0;
    cfg.detector.rotx_deg = 5.0;
    cfg.detector.roty_deg = -3.0;
    cfg.detector.rotz_deg = 2.0;
    cfg.detector.xbeam_mm = Some(2.0);
    cfg.detector.ybeam_mm = Some(3.0);
    cfg.detector.attenuation_um = Some(Some(200.0));
    cfg.detector.thick_um = 100.0;
    cfg.detector.thicksteps = 2;
    cfg.beam.kahn_factor = 0.9;
    cfg.beam.hdivrange_mrad = 0.2;
    cfg.beam.vdivrange_mrad = 0.2;
    cfg.beam.hdivsteps = 3;
    cfg.beam.vdivsteps = 3;
    cfg.beam.dispersion_pct = 1.0;
    cfg.beam.dispsteps = 3;
    cfg.sampling.oversample = 2;
    cfg.crystal.shape = CrystalShape::Round;
    cfg
}

fn tilted_image() -> SimConfig {
    let mut cfg = tilted();
    (cfg.detector.fpixels, cfg.detector.spixels) = (32, 32);
    cfg.sampling.water_um = 1.0;
    cfg
}

#[test]
fn tilted_detector_images() {
    // round spots have kinks where the nearest (h, k, l) switches: short steps
    let w = check_images("tilted", &tilted_image(), &[], 0.1, 1e-5);
    eprintln!("tilted images: worst {w:e}");
}

/// `-corrected` (factors per sample, T/N layers, exact cell) through the
/// same kernel: the derivative images against finite differences.
#[test]
fn corrected_tilted_detector_images() {
    let mut cfg = tilted_image();
    cfg.sampling.corrected = true;
    cfg.crystal.cell = Some([100.0, 95.0, 105.0, 88.0, 93.0, 91.0]);
    // the corrected water background does not shrink with the 108 samples
    // per pixel (27 sources, 2 x 2 sub-pixels) as nanoBragg.c's does: a
    // 0.2 µm droplet (108^(-1/3) of 1 µm) keeps it the share of the image
    // it has in the default model, so the finite differences of the Bragg
    // terms are not lost under its rounding
    cfg.sampling.water_um = 0.2;
    let w = check_images("corrected", &cfg, &[], 0.1, 1e-5);
    eprintln!("corrected images: worst {w:e}");
}

#[test]
fn tilted_detector_second_derivatives() {
    use Param::*;
    let pairs = [(Twotheta, Lambda), (Divergence, Dispersion), (Polar, Xbeam), (Fudge, Na)];
    // round spots' kinks: a step of 1e-5 (0.1) moves one sub-pixel sample
    // across one and its second difference blows up (2.5e-2); 3e-6 does not
    let w = check_curvatures("tilted", &tilted_image(), &[], 0.03, &pairs, 1e-4);
    eprintln!("tilted second derivatives: worst {w:e}");
}

#[test]
fn tilted_detector_f32_derivatives() {
    let w = check_f32("tilted", &tilted_image(), 1e-3);
    eprintln!("tilted f32: worst {w:e}");
}

#[test]
fn tilted_detector_leaves() {
    let mut cfg = tilted();
    let w = check(&cfg, 1e-5);
    eprintln!("tilted: worst {w:e}");
    // misset rotations on top of a given orientation still differentiate
    cfg.crystal.misset = Misset::Angles([10.0, 0.0, 0.0]);
    let plan = Plan::new(&cfg, SEEDS).unwrap();
    let mut deltas = Deltas::<D8>::zero();
    deltas.set(Param::MissetY, D8::seed(0.0, 0));
    let l = Leaves::<D8>::new(&cfg, &plan, SEEDS, &deltas).unwrap();
    assert!(l.cells[0][0].iter().any(|&x| Seeded::derivative(x, 0) != 0.0));
    // tophat spots refuse N
    cfg.crystal.shape = CrystalShape::Tophat;
    let plan = Plan::new(&cfg, SEEDS).unwrap();
    assert!(check_param(&cfg, &plan, Param::Na).is_err());
}

/// The cubic model with a three-line weighted spectrum.
fn spectrum_image() -> SimConfig {
    let mut cfg = cubic_image();
    cfg.beam.spectrum = Some(vec![[0.98, 0.2], [1.0, 1.0], [1.03, 0.5]]);
    cfg
}

#[test]
fn spectrum_images() {
    let cfg = spectrum_image();
    let plan = Plan::new(&cfg, SEEDS).unwrap();
    assert!(plan.sources.weighted);
    // the spectrum sets the wavelengths: -lambda and -dispersion do not move them
    assert!(check_param(&cfg, &plan, Param::Lambda).is_err());
    assert!(check_param(&cfg, &plan, Param::Dispersion).is_err());
    let params = image_params(&cfg, &[]);
    assert!(params.contains(&Param::LambdaOffset) && params.contains(&Param::LambdaScale));
    let w = check_images("spectrum", &cfg, &[], 1.0, 1e-5);
    eprintln!("spectrum images: worst {w:e}");
}

#[test]
fn spectrum_leaves_and_f32_derivatives() {
    let mut cfg = spectrum_image();
    cfg.beam.lambda_offset_a = 0.01;
    cfg.beam.lambda_scale = 1.02;
    let w = check(&cfg, 1e-6);
    eprintln!("spectrum leaves: worst {w:e}");
    let w = check_f32("spectrum", &spectrum_image(), 1e-3);
    eprintln!("spectrum f32: worst {w:e}");
}

#[test]
fn tilted_spectrum_images() {
    // sensor layers, oversampling and divergence: the parameter-carrying
    // renderer, its sources weighted
    let mut cfg = tilted_image();
    (cfg.beam.dispersion_pct, cfg.beam.dispsteps) = (0.0, -1);
    cfg.beam.spectrum = Some(vec![[0.99, 0.4], [1.01, 1.0]]);
    let only = [Param::LambdaOffset, Param::LambdaScale, Param::Distance, Param::CellA];
    let skip: Vec<Param> = Param::ALL.into_iter().filter(|p| !only.contains(p)).collect();
    let w = check_images("tilted spectrum", &cfg, &skip, 0.1, 1e-5);
    eprintln!("tilted spectrum images: worst {w:e}");
}
