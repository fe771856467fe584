//! `-corrected` physics against analytic values and an independent
//! brute-force renderer (docs/compat.md, the "corrected" column):
//! - the triclinic cell is the requested one (lengths, angles, volume);
//! - a pixel's solid angle is the integral of cos ψ / r² over its area
//!   (the analytic solid angle of a rectangle), to which the sub-pixel sum
//!   converges;
//! - the solid angle, polarization and capture fraction of every sub-pixel,
//!   sensor layer and source multiply that sample's photons once
//!   ([`reference_pixel`]); `-oversample_omega/_polar/_thick` change nothing
//!   more;
//! - N sensor layers are T/N thick, and their capture fractions add up to
//!   the integral of the attenuation, 1 − exp(−μT/cos ψ);
//! - interpolation is chosen from the cell counts `-xtalsize` gives, and a
//!   point outside the structure-factor grid falls back to the nearest
//!   value alone (later points still interpolate);
//! - the gauss/tophat spot radius, from the reciprocal vectors of the
//!   unrotated crystal, is the one of each rotated cell (rotations keep
//!   lengths: nothing to correct).

// index loops over the three axes and the 4 × 4 × 4 interpolation stencil
#![allow(clippy::needless_range_loop)]

use nanobragg_core::config::{CrystalShape, SfSource, SimConfig};
use nanobragg_core::render::kernel::{Exact, Fast, Kernel};
use nanobragg_core::render::{render, Precision, RenderOptions, SimdLevel};
use nanobragg_core::setup::{Interpolation, Plan, SetupSeeds};
use nanobragg_core::sf::HklEntry;
use std::f64::consts::PI;

const SEEDS: SetupSeeds = SetupSeeds { misset_idum: -5 };
type V3 = [f64; 3];

fn dot(a: V3, b: V3) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}
fn cross(a: V3, b: V3) -> V3 {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}
fn norm(a: V3) -> f64 {
    dot(a, a).sqrt()
}
fn axpy(s: f64, x: V3, y: V3) -> V3 {
    [s * x[0] + y[0], s * x[1] + y[1], s * x[2] + y[2]]
}
fn unit(a: V3) -> V3 {
    let n = norm(a);
    [a[0] / n, a[1] / n, a[2] / n]
}

/// The centre of sub-pixel (`i`, `j`) of pixel (`f`, `s`) in sensor layer `t`.
fn sample_at(plan: &Plan, f: usize, s: usize, [i, j]: [usize; 2], t: usize) -> V3 {
    let d = &plan.detector;
    let os = plan.oversample;
    let sub = d.pixel_size_m / os as f64;
    let fpos = ((f * os + i) as f64 + 0.5) * sub;
    let spos = ((s * os + j) as f64 + 0.5) * sub;
    let p = axpy(fpos, d.fdet, d.pix0);
    let p = axpy(spos, d.sdet, p);
    axpy(t as f64 * d.thickstep_m, d.odet, p)
}

/// The Kahn polarization factor as the weighted sum of the two linear
/// polarizations: along the E axis (the polarization axis made
/// perpendicular to the beam) with weight (1 + K)/2, along B = beam × E
/// with (1 − K)/2; a dipole along e scatters 1 − (e·d)² towards d.
fn polarization(kahn: f64, beam: V3, polar_axis: V3, d: V3) -> f64 {
    let e = unit(axpy(-dot(polar_axis, beam), beam, polar_axis));
    let b = cross(beam, e);
    0.5 * (1.0 + kahn) * (1.0 - dot(e, d).powi(2)) + 0.5 * (1.0 - kahn) * (1.0 - dot(b, d).powi(2))
}

/// sin(πNx)/sin(πx).
fn grating(x: f64, n: f64) -> f64 {
    let den = (PI * x).sin();
    if den.abs() < 1e-300 {
        n
    } else {
        (PI * n * x).sin() / den
    }
}

/// One pixel of the corrected physics, written out from the formulas on
/// a flat detector with square spots and `default_F`: for every sub-pixel
/// centre, sensor layer and source, the solid angle `pixel² cos ψ / r²`,
/// the fraction absorbed in the layer and the polarization multiply that
/// sample's photons (the water background's share included, i_bg · steps
/// over the sub-pixels and sources), summed and scaled by
/// `r_e² fluence / steps`.
fn reference_pixel(plan: &Plan, f: usize, s: usize) -> f64 {
    let d = &plan.detector;
    let os = plan.oversample;
    let nsrc = plan.sources.list.len();
    let mut sum = 0.0;
    for t in 0..d.thicksteps {
        for j in 0..os {
            for i in 0..os {
                let pos = sample_at(plan, f, s, [i, j], t);
                let r = norm(pos);
                let dir = unit(pos);
                let omega = if d.point_pixel {
                    1.0 / (r * r)
                } else {
                    d.pixel_size_m.powi(2) * dot(pos, d.odet) / r.powi(3)
                };
                let capture = if d.thick_m == 0.0 {
                    1.0
                } else {
                    let depth = d.mu_per_m * d.thickstep_m / dot(dir, d.odet);
                    (-(t as f64) * depth).exp() - (-(t as f64 + 1.0) * depth).exp()
                };
                for src in &plan.sources.list {
                    let beam = src.dir.map(|x| -x);
                    let q = axpy(-1.0, beam, dir).map(|x| x / src.lambda_m);
                    let polar = if plan.nopolar {
                        1.0
                    } else {
                        polarization(plan.kahn_factor, beam, d.polar, dir)
                    };
                    let w = omega * capture * polar;
                    // the water background: i_bg times the mean of the
                    // samples' factors, after the division by steps below
                    sum += plan.i_bg * plan.steps as f64 / (os * os * nsrc) as f64 * w;
                    for m in &plan.cells_m {
                        let hkl = [[m[0], m[1], m[2]], [m[3], m[4], m[5]], [m[6], m[7], m[8]]]
                            .map(|v| dot(v, q));
                        let mut f_latt = 1.0;
                        for (x, n) in hkl.iter().zip(plan.n_cells) {
                            if n > 1.0 {
                                f_latt *= grating(*x, n);
                            }
                        }
                        sum += plan.default_f.powi(2) * f_latt * f_latt * w;
                    }
                }
            }
        }
    }
    plan.leaves.scale * sum / plan.steps as f64
}

/// A close, tilted detector with everything the corrected factors act on:
/// sub-pixels, sensor layers, polarization, two sources of different
/// wavelength and direction, mosaic domains, phi steps and water.
fn busy() -> SimConfig {
    let mut cfg = SimConfig::default();
    cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (3.0, 4.0, 5.0);
    cfg.crystal.mosaic_deg = 0.5;
    cfg.crystal.mosaic_domains = 2;
    cfg.crystal.osc_deg = 1.0;
    cfg.crystal.phisteps = 2;
    cfg.beam.lambda_a = 1.2;
    cfg.beam.kahn_factor = 0.8;
    cfg.beam.hdivrange_mrad = 20.0;
    cfg.beam.hdivsteps = 2;
    cfg.beam.dispersion_pct = 2.0;
    cfg.beam.dispsteps = 2;
    cfg.detector.distance_mm = 20.0;
    cfg.detector.roty_deg = 25.0;
    cfg.detector.rotx_deg = -5.0;
    (cfg.detector.fpixels, cfg.detector.spixels) = (22, 18);
    cfg.detector.pixel_mm = 0.4;
    cfg.detector.thick_um = 200.0;
    cfg.detector.thicksteps = 3;
    cfg.detector.attenuation_um = Some(Some(150.0));
    cfg.sampling.oversample = 3;
    cfg.sampling.water_um = 5.0;
    cfg.sf.default_f = 2.0;
    cfg.sampling.corrected = true;
    cfg
}

fn plan(cfg: &SimConfig) -> Plan {
    Plan::new(cfg, SEEDS).expect("test plan")
}

/// The largest |a − b| over the largest |b|.
fn rel_max(a: &[f64], b: &[f64]) -> f64 {
    let top = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / top
}

/// Every pixel of the busy case equals the brute-force sum, on every path:
/// exact and fast f64, f32, each SIMD level; the `-oversample_*` flags add
/// nothing (each contribution is multiplied once).
#[test]
fn corrected_pixels_are_the_brute_force_sum() {
    let cfg = busy();
    let p = plan(&cfg);
    assert!(p.sources.list.len() >= 2, "{} sources", p.sources.list.len());
    assert_eq!((p.cells_m.len(), p.detector.thicksteps), (4, 3));
    let (fp, sp) = (p.detector.fpixels, p.detector.spixels);
    let want: Vec<f64> = (0..fp * sp).map(|i| reference_pixel(&p, i % fp, i / fp)).collect();
    assert!(want.iter().all(|&v| v > 0.0));
    let k = Kernel::<f64, Exact>::new(&p);
    let exact: Vec<f64> = (0..fp * sp).map(|i| k.pixel(i % fp, i / fp, &mut false).value).collect();
    let e = rel_max(&exact, &want);
    assert!(e < 1e-12, "exact kernel vs brute force: {e:e}");
    let fast = Kernel::<f64, Fast>::new(&p);
    let fast: Vec<f64> =
        (0..fp * sp).map(|i| fast.pixel(i % fp, i / fp, &mut false).value).collect();
    assert!(rel_max(&fast, &want) < 1e-12);
    let opts = RenderOptions::default().threads(2);
    for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
        for (precision, tol) in
            [(Precision::Exact64, 1e-7), (Precision::Fast64, 1e-7), (Precision::Fast32, 2e-5)]
        {
            let img = render::<f32>(&p, RenderOptions { precision, ..opts }.simd(level)).image;
            let img: Vec<f64> = img.iter().map(|&x| x as f64).collect();
            let e = rel_max(&img, &want);
            assert!(e < tol, "{level:?} {precision:?}: {e:e}");
        }
    }
    // factors applied once: the flags are what -corrected does anyway
    let mut flags = cfg.clone();
    flags.sampling.oversample_omega = true;
    flags.sampling.oversample_polar = true;
    flags.sampling.oversample_thick = true;
    let (with_flags, _) =
        render::<f64>(&plan(&flags), RenderOptions { precision: Precision::Exact64, ..opts })
            .into_parts();
    let (without, _) =
        render::<f64>(&p, RenderOptions { precision: Precision::Exact64, ..opts }).into_parts();
    assert_eq!(with_flags, without);
    assert!(rel_max(&without, &want) < 1e-12);
    // nanoBragg.c's factors (first sub-pixel, compounding flags) differ visibly
    let mut c = cfg.clone();
    c.sampling.corrected = false;
    let (quirky, _) =
        render::<f64>(&plan(&c), RenderOptions { precision: Precision::Exact64, ..opts })
            .into_parts();
    assert!(rel_max(&quirky, &want) > 1e-2);
}

/// The solid angle of the rectangle [x1, x2] × [y1, y2] in a plane at
/// distance `h` from the point, measured from the foot of the perpendicular.
fn rectangle_solid_angle(x: [f64; 2], y: [f64; 2], h: f64) -> f64 {
    let corner = |x: f64, y: f64| (x * y / (h * (x * x + y * y + h * h).sqrt())).atan();
    corner(x[1], y[1]) - corner(x[0], y[1]) - corner(x[1], y[0]) + corner(x[0], y[0])
}

/// A crystal whose every point scatters F = 1 (one cell along each axis):
/// a pixel's photons are `r_e² fluence` times its mean sample factor.
fn flat_scatterer() -> SimConfig {
    let mut cfg = SimConfig::default();
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (1.0, 1.0, 1.0);
    cfg.sf.default_f = 1.0;
    cfg.beam.lambda_a = 1.0;
    cfg.beam.nopolar = true;
    cfg.detector.distance_mm = 3.0;
    cfg.detector.pixel_mm = 1.0;
    (cfg.detector.fpixels, cfg.detector.spixels) = (8, 8);
    cfg
}

/// The pixel in the corner, 53° off the normal at 3 mm: its summed
/// sub-pixel solid angles converge on the analytic solid angle (the
/// midpoint rule, error ∝ 1/N²), while nanoBragg.c's first sub-pixel stays
/// 30 % off however fine the sampling.
#[test]
fn solid_angle_is_the_integral_over_the_pixel() {
    let mut cfg = flat_scatterer();
    cfg.sampling.corrected = true;
    let (f, s) = (0, 0);
    let mut last = f64::INFINITY;
    for os in [1, 2, 4, 8, 16] {
        cfg.sampling.oversample = os;
        let p = plan(&cfg);
        let d = &p.detector;
        let corner = |i: f64, j: f64| {
            let v = axpy(j * d.pixel_size_m, d.sdet, axpy(i * d.pixel_size_m, d.fdet, d.pix0));
            [dot(v, d.fdet), dot(v, d.sdet)]
        };
        let (lo, hi) = (corner(f as f64, s as f64), corner(f as f64 + 1.0, s as f64 + 1.0));
        let want = rectangle_solid_angle([lo[0], hi[0]], [lo[1], hi[1]], dot(d.pix0, d.odet));
        let k = Kernel::<f64, Exact>::new(&p);
        let got = k.pixel(f, s, &mut false).value / p.leaves.scale;
        let err = (got / want - 1.0).abs();
        eprintln!("oversample {os}: {got:e} sr for {want:e}: {err:.2e}");
        assert!(err < last / 3.0, "oversample {os}: {err:e} after {last:e}");
        last = err;
        if os == 16 {
            assert!(err < 1e-3);
            let mut c = cfg.clone();
            c.sampling.corrected = false;
            let quirky = Kernel::<f64, Exact>::new(&plan(&c)).pixel(f, s, &mut false).value;
            let quirky_err = (quirky / p.leaves.scale / want - 1.0).abs();
            assert!(quirky_err > 0.1, "{quirky_err}");
        }
    }
}

/// The polarization of every sub-pixel centre (a fully polarized beam,
/// K = 1, at large angles), against the formula at each centre.
#[test]
fn polarization_per_sub_pixel() {
    let mut cfg = flat_scatterer();
    cfg.sampling.corrected = true;
    cfg.beam.nopolar = false;
    cfg.beam.kahn_factor = 1.0;
    cfg.detector.point_pixel = true;
    cfg.sampling.oversample = 5;
    let p = plan(&cfg);
    let k = Kernel::<f64, Exact>::new(&p);
    let beam = p.sources.list[0].dir.map(|x| -x);
    for (f, s) in [(0, 0), (7, 0), (3, 6)] {
        let mut want = 0.0;
        for j in 0..5 {
            for i in 0..5 {
                let pos = sample_at(&p, f, s, [i, j], 0);
                // a dipole along the polarization axis: 1 − (e·d)²
                let e = unit(axpy(-dot(p.detector.polar, beam), beam, p.detector.polar));
                want += (1.0 - dot(e, unit(pos)).powi(2)) / dot(pos, pos) / 25.0;
            }
        }
        let got = k.pixel(f, s, &mut false).value / p.leaves.scale;
        assert!((got / want - 1.0).abs() < 1e-13, "pixel {f} {s}: {got:e} for {want:e}");
        let mut c = cfg.clone();
        c.sampling.corrected = false;
        let quirky = Kernel::<f64, Exact>::new(&plan(&c)).pixel(f, s, &mut false).value;
        assert!((quirky / p.leaves.scale / want - 1.0).abs() > 1e-3);
    }
}

/// N layers of T/N add up to T; their capture fractions (at one direction)
/// add up to the absorbed fraction 1 − exp(−μT/cos ψ); the pixel is the
/// sum over the layers of each layer's own direction and distance. C's
/// T/(N − 1) layers model N·T/(N − 1).
#[test]
fn sensor_layers_add_up_to_the_thickness() {
    let mut cfg = flat_scatterer();
    cfg.detector.point_pixel = true;
    cfg.detector.thick_um = 300.0;
    cfg.detector.attenuation_um = Some(Some(250.0));
    cfg.sampling.oversample = 1;
    for n in [1, 2, 3, 7] {
        cfg.detector.thicksteps = n;
        cfg.sampling.corrected = true;
        let p = plan(&cfg);
        let d = &p.detector;
        assert_eq!(d.thicksteps, n as usize);
        assert!((d.thickstep_m * n as f64 - 300e-6).abs() < 1e-18);
        // the sum over the layers at a fixed direction
        let cos = 0.6f64;
        let depth = d.mu_per_m * d.thickstep_m / cos;
        let layers: f64 =
            (0..n).map(|t| (-(t as f64) * depth).exp() - (-(t as f64 + 1.0) * depth).exp()).sum();
        let closed = 1.0 - (-d.mu_per_m * 300e-6 / cos).exp();
        assert!((layers - closed).abs() < 1e-15, "{n} layers: {layers} for {closed}");
        // the pixel: each layer at its own depth and direction
        let (f, s) = (1, 2);
        let mut want = 0.0;
        for t in 0..n as usize {
            let pos = sample_at(&p, f, s, [0, 0], t);
            let c = dot(unit(pos), d.odet);
            let x = d.mu_per_m * d.thickstep_m / c;
            want += ((-(t as f64) * x).exp() - (-(t as f64 + 1.0) * x).exp()) / dot(pos, pos);
        }
        let got = Kernel::<f64, Exact>::new(&p).pixel(f, s, &mut false).value / p.leaves.scale;
        assert!((got / want - 1.0).abs() < 1e-13, "{n} layers: {got:e} for {want:e}");
        cfg.sampling.corrected = false;
        let c = plan(&cfg).detector;
        let layers = c.thicksteps.max(2) - 1;
        assert!((c.thickstep_m * layers as f64 - 300e-6).abs() < 1e-18, "{n}");
    }
}

/// The cell built from `-cell` has the requested lengths, angles and
/// volume to 1e-12 (nanoBragg.c's drifts by about 0.1°), and its reciprocal
/// vectors are its duals.
#[test]
fn triclinic_cell_is_the_requested_one() {
    for cell in [
        [70.0, 80.0, 90.0, 75.0, 85.0, 95.0],
        [41.3, 57.9, 102.6, 101.2, 73.4, 118.9],
        [30.0, 30.0, 200.0, 60.0, 120.0, 80.0],
    ] {
        let mut cfg = flat_scatterer();
        cfg.crystal.cell = Some(cell);
        let angles_of = |cfg: &SimConfig| {
            let c = plan(cfg).cell;
            let v = [c.a_m, c.b_m, c.c_m].map(|v| v.map(|x| x * 1e10));
            let cos = |i: usize, j: usize| dot(v[i], v[j]) / norm(v[i]) / norm(v[j]);
            (v, [cos(1, 2), cos(0, 2), cos(0, 1)], c)
        };
        let want_cos = [3, 4, 5].map(|i| cell[i].to_radians().cos());
        let (ca, cb, cg) = (want_cos[0], want_cos[1], want_cos[2]);
        let volume = cell[0]
            * cell[1]
            * cell[2]
            * (1.0 - ca * ca - cb * cb - cg * cg + 2.0 * ca * cb * cg).sqrt();
        cfg.sampling.corrected = true;
        let (v, cos, c) = angles_of(&cfg);
        for i in 0..3 {
            assert!((norm(v[i]) / cell[i] - 1.0).abs() < 1e-12, "{cell:?} length {i}");
            assert!((cos[i] - want_cos[i]).abs() < 1e-12, "{cell:?} angle {i}");
            assert!((c.cell[3 + i] - cell[3 + i]).abs() < 1e-10, "{cell:?} reported angle {i}");
        }
        let v_cell = dot(v[0], cross(v[1], v[2]));
        assert!((v_cell / volume - 1.0).abs() < 1e-12, "{cell:?} volume {v_cell}");
        assert!((c.volume_a3 / volume - 1.0).abs() < 1e-12);
        let stars = [c.a_star, c.b_star, c.c_star];
        for i in 0..3 {
            for j in 0..3 {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((dot(v[i], stars[j]) - want).abs() < 1e-12, "{cell:?} {i} {j}");
            }
        }
        cfg.sampling.corrected = false;
        let (_, cos, _) = angles_of(&cfg);
        let drift = (0..3).map(|i| (cos[i] - want_cos[i]).abs()).fold(0.0, f64::max);
        assert!(drift > 1e-6, "{cell:?}: nanoBragg.c's cell drifts ({drift:e})");
    }
}

/// A few structure factors around the origin, F = 10 + h + 2k + 3l.
fn grid_entries(n: i32) -> Vec<HklEntry> {
    let mut v = Vec::new();
    for h in -n..=n {
        for k in -n..=n {
            for l in -n..=n {
                let f = 10.0 + h as f64 + 2.0 * k as f64 + 3.0 * l as f64 + 0.1 * (h * k) as f64;
                v.push(HklEntry { h: h as f64, k: k as f64, l: l as f64, f });
            }
        }
    }
    v
}

/// Interpolation is chosen from the cell counts the crystal size gives:
/// `-N 1` with a 2 µm crystal of a 100 Å cell is 200 cells (no
/// interpolation), where nanoBragg.c looks at the 1 given.
#[test]
fn interpolation_is_chosen_after_the_crystal_size() {
    let mut cfg = flat_scatterer();
    cfg.sf.source = SfSource::Hkl(grid_entries(2).into());
    cfg.crystal.size_mm = [0.002; 3];
    cfg.beam.beamsize_mm = 0.1;
    cfg.sampling.oversample = 1;
    let p = plan(&cfg);
    assert!(p.n_cells.iter().all(|&n| n >= 200.0), "{:?}", p.n_cells);
    assert_eq!((p.interpolation, p.interpolation_auto), (Interpolation::Tricubic, Some(true)));
    cfg.sampling.corrected = true;
    let p = plan(&cfg);
    assert!(p.n_cells.iter().all(|&n| n >= 200.0), "{:?}", p.n_cells);
    assert_eq!((p.interpolation, p.interpolation_auto), (Interpolation::Nearest, Some(false)));
}

/// Four-point Lagrange weights at x of the nodes floor(x) − 1 .. floor(x) + 2.
fn lagrange(x: f64) -> [f64; 4] {
    let x0 = x.floor() - 1.0;
    let nodes = [x0, x0 + 1.0, x0 + 2.0, x0 + 3.0];
    std::array::from_fn(|i| {
        (0..4).filter(|&j| j != i).map(|j| (x - nodes[j]) / (nodes[i] - nodes[j])).product()
    })
}

/// One point per pixel (one cell, source, sub-pixel, layer): each pixel is
/// F² times the same factors as its nearest-neighbour render, with F the
/// tricubic interpolation (a tensor of Lagrange weights over the grid)
/// where its 4 × 4 × 4 neighbourhood is on the grid and the nearest value
/// elsewhere, point by point: pixels after the first fallback still
/// interpolate. nanoBragg.c's image is nearest-neighbour from there on.
#[test]
fn interpolation_falls_back_per_point() {
    let mut cfg = SimConfig::default();
    cfg.crystal.cell = Some([25.0, 28.0, 31.0, 88.0, 93.0, 91.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (2.0, 2.0, 2.0);
    cfg.beam.lambda_a = 1.0;
    cfg.detector.distance_mm = 40.0;
    cfg.detector.pixel_mm = 1.0;
    (cfg.detector.fpixels, cfg.detector.spixels) = (24, 24);
    cfg.sampling.oversample = 1;
    cfg.sf.source = SfSource::Hkl(grid_entries(3).into());
    cfg.sf.interpolate = Some(true);
    cfg.sampling.corrected = true;
    let p = plan(&cfg);
    let g = p.grid.as_ref().expect("a grid");
    let opts = RenderOptions::default().threads(2);
    let (image, info) =
        render::<f64>(&p, RenderOptions { precision: Precision::Exact64, ..opts }).into_parts();
    assert!(info.interpolation_fallback.is_some(), "the test should leave the grid");
    let mut nn_cfg = cfg.clone();
    nn_cfg.sf.interpolate = Some(false);
    let (nearest, _) =
        render::<f64>(&plan(&nn_cfg), RenderOptions { precision: Precision::Exact64, ..opts })
            .into_parts();
    let m = &p.cells_m[0];
    let abc = [[m[0], m[1], m[2]], [m[3], m[4], m[5]], [m[6], m[7], m[8]]];
    let src = &p.sources.list[0];
    let fp = p.detector.fpixels;
    let (mut outside, mut inside_after) = (0, 0);
    let mut first_out = None;
    for (idx, (&got, &nn)) in image.iter().zip(&nearest).enumerate() {
        let pos = sample_at(&p, idx % fp, idx / fp, [0, 0], 0);
        let q = axpy(-1.0, src.dir.map(|x| -x), unit(pos)).map(|x| x / src.lambda_m);
        let hkl = abc.map(|v| dot(v, q));
        let h0 = hkl.map(|x| (x - 0.5).ceil() as i64);
        let f_nn = g.index_of(h0[0], h0[1], h0[2]).map_or(p.default_f, |i| g.data[i]);
        // nanoBragg.c's test: h − 2 and h + 2 (not their floors) on the grid
        let lo = [g.h_min, g.k_min, g.l_min].map(|x| x as f64);
        let hi = [g.h_max, g.k_max, g.l_max].map(|x| x as f64);
        let on_grid = (0..3).all(|i| hkl[i] - 2.0 >= lo[i] && hkl[i] + 2.0 <= hi[i]);
        let f = if on_grid {
            let w = hkl.map(lagrange);
            let base = hkl.map(|x| x.floor() as i32 - 1);
            let mut f = 0.0;
            for i in 0..4 {
                for j in 0..4 {
                    for k in 0..4 {
                        let at = g.at(
                            base[0] + i as i32 - g.h_min,
                            base[1] + j as i32 - g.k_min,
                            base[2] + k as i32 - g.l_min,
                        );
                        f += w[0][i] * w[1][j] * w[2][k] * at;
                    }
                }
            }
            if first_out.is_some() {
                inside_after += 1;
            }
            f
        } else {
            outside += 1;
            first_out.get_or_insert(idx);
            f_nn
        };
        if nn == 0.0 || f_nn == 0.0 {
            continue;
        }
        let want = nn * (f / f_nn).powi(2);
        assert!((got - want).abs() <= 1e-9 * want.abs(), "pixel {idx}: {got:e} for {want:e}");
    }
    assert!(outside > 0 && inside_after > 0, "{outside} outside, {inside_after} inside after");
    // nanoBragg.c: nearest-neighbour after its first fallback
    let mut c = cfg.clone();
    c.sampling.corrected = false;
    let (quirky, _) =
        render::<f64>(&plan(&c), RenderOptions { precision: Precision::Exact64, ..opts })
            .into_parts();
    c.sf.interpolate = Some(false);
    let (quirky_nearest, _) =
        render::<f64>(&plan(&c), RenderOptions { precision: Precision::Exact64, ..opts })
            .into_parts();
    let after = first_out.expect("a fallback") + 1;
    assert_eq!(quirky[after..], quirky_nearest[after..]);
    assert_ne!(image[after..], nearest[after..]);
}

/// The gauss and tophat spot radius, |Δh a* + Δk b* + Δl c*|, taken with
/// the reciprocal vectors of each rotated cell (phi over 90°, mosaic
/// domains) is the kernel's, taken with the unrotated ones: a rotation
/// keeps the length of the vector.
#[test]
fn spot_radius_is_the_rotated_cells() {
    let mut cfg = busy();
    cfg.crystal.shape = CrystalShape::Gauss;
    cfg.crystal.osc_deg = 90.0;
    cfg.crystal.phisteps = 3;
    cfg.crystal.mosaic_deg = 5.0;
    cfg.crystal.mosaic_domains = 3;
    (cfg.beam.hdivrange_mrad, cfg.beam.dispersion_pct) = (-1.0, 0.0);
    (cfg.beam.hdivsteps, cfg.beam.dispsteps) = (-1, -1);
    (cfg.detector.thicksteps, cfg.sampling.oversample) = (1, 1);
    cfg.sampling.water_um = 0.0;
    cfg.beam.nopolar = true;
    cfg.detector.point_pixel = true;
    cfg.detector.thick_um = 0.0;
    let p = plan(&cfg);
    assert_eq!((p.sources.list.len(), p.cells_m.len()), (1, 9));
    let k = Kernel::<f64, Exact>::new(&p);
    let (fp, sp) = (p.detector.fpixels, p.detector.spixels);
    let src = &p.sources.list[0];
    let n = p.n_cells;
    let mut top = 0.0f64;
    let mut worst = 0.0f64;
    for idx in 0..fp * sp {
        let pos = sample_at(&p, idx % fp, idx / fp, [0, 0], 0);
        let dir = unit(pos);
        let q = axpy(-1.0, src.dir.map(|x| -x), dir).map(|x| x / src.lambda_m);
        let mut sum = 0.0;
        for m in &p.cells_m {
            let abc = [[m[0], m[1], m[2]], [m[3], m[4], m[5]], [m[6], m[7], m[8]]];
            // this cell's own reciprocal vectors (1/Å)
            let v = dot(abc[0], cross(abc[1], abc[2]));
            let stars = [cross(abc[1], abc[2]), cross(abc[2], abc[0]), cross(abc[0], abc[1])]
                .map(|s| s.map(|x| x / v * 1e-10));
            let hkl = abc.map(|a| dot(a, q));
            let dh = hkl.map(|x| x - (x - 0.5).ceil());
            let r = axpy(dh[2], stars[2], axpy(dh[1], stars[1], stars[0].map(|x| x * dh[0])));
            let rad_sqr = dot(r, r) * (n[0] * n[1] * n[2]).powi(2);
            let f_latt = n[0] * n[1] * n[2] * (-(rad_sqr / 0.63 * p.fudge)).exp();
            sum += p.default_f.powi(2) * f_latt * f_latt;
        }
        let want = p.leaves.scale * sum / p.steps as f64 / dot(pos, pos);
        let got = k.pixel(idx % fp, idx / fp, &mut false).value;
        top = top.max(want);
        worst = worst.max((got - want).abs());
    }
    assert!(top > 0.0 && worst <= 1e-9 * top, "{worst:e} of {top:e}");
}

/// Max |Δ|/max, correlation and sum ratio of the `-corrected` image
/// against the default one.
fn change(cfg: &SimConfig) -> (f64, f64, f64) {
    let opts = RenderOptions::default().threads(2);
    let a = render::<f64>(&plan(cfg), RenderOptions { precision: Precision::Fast64, ..opts }).image;
    let mut c = cfg.clone();
    c.sampling.corrected = true;
    let b = render::<f64>(&plan(&c), RenderOptions { precision: Precision::Fast64, ..opts }).image;
    let top = a.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let d = a.iter().zip(&b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / top;
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(&b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    (d, sab / (saa * sbb).sqrt(), mb / ma)
}

/// A golden case's inputs (tests/golden/cases.toml) as a configuration.
fn golden(cell: [f64; 6], n: f64, distance: f64, pixels: i64) -> SimConfig {
    let mut c = SimConfig::default();
    c.crystal.cell = Some(cell);
    (c.crystal.na, c.crystal.nb, c.crystal.nc) = (n, n, n);
    c.beam.lambda_a = 1.0;
    c.detector.distance_mm = distance;
    (c.detector.fpixels, c.detector.spixels) = (pixels, pixels);
    c.detector.pixel_mm = 0.1;
    c.sf.default_f = 100.0;
    c
}

/// The numbers of docs/compat.md's "corrected" column: `cargo test -p
/// nanobragg-core --test corrected -- --ignored --nocapture`.
#[test]
#[ignore = "prints the changes docs/compat.md quotes"]
fn golden_case_changes() {
    use nanobragg_core::config::Misset;
    let cubic = [100.0, 100.0, 100.0, 90.0, 90.0, 90.0];
    let tric = [70.0, 80.0, 90.0, 75.0, 85.0, 95.0];
    let mut cases = vec![("tric-512", golden(tric, 5.0, 100.0, 512))];
    let mut c = golden(cubic, 5.0, 50.0, 256);
    c.sampling.oversample = 4;
    cases.push(("os-4", c));
    let mut c = golden(cubic, 5.0, 40.0, 128);
    c.sampling.oversample = 3;
    c.sampling.oversample_omega = true;
    cases.push(("os-omega", c));
    let mut c = golden(cubic, 5.0, 50.0, 128);
    c.sampling.oversample = 2;
    (c.sampling.oversample_polar, c.sampling.oversample_thick) = (true, true);
    c.beam.kahn_factor = 0.8;
    c.detector.attenuation_um = Some(Some(250.0));
    (c.detector.thick_um, c.detector.thicksteps, c.detector.roty_deg) = (300.0, 3, 15.0);
    cases.push(("os-polar-thick", c));
    let mut c = golden(cubic, 5.0, 60.0, 256);
    c.sampling.oversample = 1;
    c.detector.attenuation_um = Some(Some(320.0));
    (c.detector.thick_um, c.detector.thicksteps, c.detector.rotx_deg) = (450.0, 5, 20.0);
    cases.push(("abs-thicksteps", c));
    let mut c = golden([28.0, 31.0, 35.0, 80.0, 95.0, 105.0], 2.0, 60.0, 192);
    let hkl = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/golden/inputs/p1_tric.hkl");
    c.sf.source =
        SfSource::Hkl(nanobragg_core::sf::hkl::read_hkl(&hkl).expect("golden input").into());
    c.sf.default_f = 0.0;
    c.crystal.misset = Misset::Angles([10.0, -5.0, 20.0]);
    cases.push(("hkl-interp-auto", c));
    let mut c = golden(tric, 5.0, 100.0, 512);
    c.beam.lambda_a = 1.05;
    (c.crystal.mosaic_deg, c.crystal.mosaic_domains, c.crystal.mosaic_seed) = (0.5, 5, 2468);
    (c.crystal.phi0_deg, c.crystal.osc_deg, c.crystal.phisteps) = (-7.25, 90.5, 9);
    (c.detector.rotx_deg, c.detector.roty_deg, c.detector.rotz_deg) = (5.0, 3.0, 2.0);
    c.detector.twotheta_deg = 10.0;
    c.detector.attenuation_um = Some(Some(500.0));
    (c.detector.thick_um, c.detector.thicksteps) = (450.0, 5);
    c.beam.kahn_factor = 0.95;
    c.sampling.oversample = 1;
    cases.push(("comprehensive", c));
    for (id, cfg) in &cases {
        let (d, r, sum) = change(cfg);
        println!("{id}: max|d|/max {d:.2e}, correlation {r:.6}, sum ratio {sum:.4}");
        assert!(d > 0.0);
    }
}

/// Under `-corrected` the water background is the photons per steradian
/// times the pixel's mean solid angle, whatever the sampling: the same sum
/// (to the solid angle's variation over a pixel at 100 mm, < 1e-6) at
/// oversample 1, 2 and 4, with 1 or 4 mosaic domains and 1 or 3
/// wavelengths. nanoBragg.c's (the default) shrinks as 1/oversample².
#[test]
fn water_background_does_not_depend_on_the_sampling() {
    let mut cfg = SimConfig::default();
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    // (F = 1e-20: the crystal's photons are 1e-40 of the water's; F = 0 is
    // refused as "no structure factors")
    cfg.sf.default_f = 1e-20;
    cfg.sampling.water_um = 10.0;
    cfg.detector.distance_mm = 100.0;
    cfg.detector.pixel_mm = 0.1;
    (cfg.detector.fpixels, cfg.detector.spixels) = (16, 16);
    let opts = RenderOptions::default().threads(1);
    let sum = |cfg: &SimConfig| -> f64 {
        render::<f64>(&plan(cfg), RenderOptions { precision: Precision::Exact64, ..opts })
            .image
            .iter()
            .sum()
    };
    let mut c = cfg.clone();
    c.sampling.oversample = 1;
    let quirky_1 = sum(&c);
    c.sampling.oversample = 4;
    let quirky_4 = sum(&c);
    assert!(
        quirky_1 > 0.0 && (quirky_4 / quirky_1 - 1.0 / 16.0).abs() < 1e-6,
        "{quirky_4} {quirky_1}"
    );

    cfg.sampling.corrected = true;
    let mut base = None;
    for (os, domains, dispsteps) in [(1, 1, 1), (2, 1, 1), (4, 1, 1), (1, 4, 1), (2, 4, 3)] {
        let mut c = cfg.clone();
        c.sampling.oversample = os;
        c.crystal.mosaic_deg = if domains > 1 { 0.1 } else { 0.0 };
        c.crystal.mosaic_domains = domains;
        c.beam.dispersion_pct = if dispsteps > 1 { 0.1 } else { 0.0 };
        c.beam.dispsteps = dispsteps;
        let s = sum(&c);
        let base = *base.get_or_insert(s);
        eprintln!("oversample {os}, {domains} domains, {dispsteps} wavelengths: {s:e}");
        assert!(
            s > 0.0 && (s / base - 1.0).abs() < 1e-6,
            "{os} {domains} {dispsteps}: {s} vs {base}"
        );
    }
    // oversample 1, one sample: the corrected background is nanoBragg.c's
    assert!((base.unwrap() / quirky_1 - 1.0).abs() < 1e-9);
}
