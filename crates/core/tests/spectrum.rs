//! Weighted sources: a spectrum's lines (and a source file's weights under
//! `-corrected`) are fractions of the fluence, so the image of several
//! wavelengths is the weight-normalised sum of single-wavelength images.

use nanobragg_core::config::SimConfig;
use nanobragg_core::render::{render, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};

const SEEDS: SetupSeeds = SetupSeeds { misset_idum: -5 };

fn model() -> SimConfig {
    let mut cfg = SimConfig::default();
    (cfg.detector.fpixels, cfg.detector.spixels) = (40, 36);
    cfg.detector.pixel_mm = 0.3;
    cfg.detector.distance_mm = 60.0;
    cfg.crystal.cell = Some([40.0, 50.0, 60.0, 90.0, 90.0, 90.0]);
    cfg.crystal.misset = nanobragg_core::config::Misset::Angles([5.0, -8.0, 12.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (4.0, 4.0, 4.0);
    cfg.sf.default_f = 100.0;
    cfg.beam.kahn_factor = 0.8;
    cfg
}

fn image(cfg: &SimConfig, precision: Precision) -> Vec<f64> {
    let plan = Plan::new(cfg, SEEDS).unwrap();
    render::<f64>(&plan, RenderOptions::new(precision)).image
}

/// `got` against Σ wᵢ Iᵢ / Σ wᵢ pixel by pixel, relative to each pixel (and
/// to 1e-300 absolute where the image is 0).
fn assert_weighted_sum(got: &[f64], parts: &[(f64, Vec<f64>)], tol: f64, what: &str) {
    let total: f64 = parts.iter().map(|p| p.0).sum();
    let mut lit = 0;
    for (i, &g) in got.iter().enumerate() {
        let want: f64 = parts.iter().map(|(w, im)| w * im[i]).sum::<f64>() / total;
        assert!((g - want).abs() <= tol * want.abs() + 1e-300, "{what} pixel {i}: {g} vs {want}");
        lit += (want > 0.0) as usize;
    }
    assert!(lit > got.len() / 2, "{what}: the test image is mostly dark");
    // and the weights matter: the unweighted mean differs
    let mean: Vec<f64> = (0..got.len())
        .map(|i| parts.iter().map(|p| p.1[i]).sum::<f64>() / parts.len() as f64)
        .collect();
    assert!(
        got.iter().zip(&mean).any(|(g, m)| (g - m).abs() > 1e-6 * m.abs()),
        "{what}: the weights changed nothing"
    );
}

fn single(cfg: &SimConfig, lambda_a: f64) -> SimConfig {
    let mut c = cfg.clone();
    c.beam.lambda_a = lambda_a;
    c
}

#[test]
fn two_line_spectrum_is_the_weighted_sum() {
    let lines = [[1.0, 0.3], [1.06, 0.9]];
    for (divergence, label) in [(false, "beam axis"), (true, "divergence")] {
        let mut base = model();
        if divergence {
            base.beam.hdivrange_mrad = 2.0;
            base.beam.hdivsteps = 3;
            base.beam.vdivrange_mrad = 1.0;
            base.beam.vdivsteps = 2;
            base.beam.round_div = false;
        }
        let mut cfg = base.clone();
        cfg.beam.spectrum = Some(lines.to_vec());
        let plan = Plan::new(&cfg, SEEDS).unwrap();
        assert!(plan.sources.weighted && plan.sources.spectrum);
        assert_eq!(plan.sources.list.len(), if divergence { 12 } else { 2 });
        for precision in [Precision::Exact64, Precision::Fast64] {
            let got = image(&cfg, precision);
            let parts: Vec<(f64, Vec<f64>)> =
                lines.iter().map(|&[l, w]| (w, image(&single(&base, l), precision))).collect();
            assert_weighted_sum(&got, &parts, 1e-12, &format!("{label} {precision:?}"));
        }
    }
}

#[test]
fn spectrum_weights_are_relative_and_equal_weights_are_unweighted() {
    let mut a = model();
    a.beam.spectrum = Some(vec![[1.0, 0.3], [1.06, 0.9]]);
    let mut b = model();
    b.beam.spectrum = Some(vec![[1.0, 3.0], [1.06, 9.0]]);
    let (ia, ib) = (image(&a, Precision::Exact64), image(&b, Precision::Exact64));
    for (x, y) in ia.iter().zip(&ib) {
        assert!((x - y).abs() <= 1e-13 * x.abs(), "{x} vs {y}");
    }
    // equal weights: nanoBragg.c's unweighted sum (the -dispersion wavelengths)
    let mut eq = model();
    eq.beam.spectrum = Some(vec![[0.98, 2.0], [1.02, 2.0]]);
    let mut disp = model();
    (disp.beam.dispersion_pct, disp.beam.dispsteps) = (4.0, 2);
    assert!(!Plan::new(&eq, SEEDS).unwrap().sources.weighted);
    let de = Plan::new(&disp, SEEDS).unwrap();
    let pe = Plan::new(&eq, SEEDS).unwrap();
    let lambdas = |p: &Plan| p.sources.list.iter().map(|s| s.lambda_m).collect::<Vec<_>>();
    for (x, y) in lambdas(&de).iter().zip(lambdas(&pe)) {
        assert!((x - y).abs() < 1e-24, "{x} vs {y}");
    }
    // a zero-weight line adds nothing
    let mut z = model();
    z.beam.spectrum = Some(vec![[1.0, 1.0], [1.06, 0.0]]);
    let iz = image(&z, Precision::Exact64);
    let i1 = image(&single(&model(), 1.0), Precision::Exact64);
    for (x, y) in iz.iter().zip(&i1) {
        assert!((x - y).abs() <= 1e-12 * y.abs(), "{x} vs {y}");
    }
}

#[test]
fn spectrum_conflicts_are_refused() {
    let mut cfg = model();
    cfg.beam.spectrum = Some(vec![[1.0, 1.0]]);
    cfg.beam.dispersion_pct = 1.0;
    let e = Plan::new(&cfg, SEEDS).unwrap_err().to_string();
    assert!(e.contains("-spectrum") && e.contains("-dispersion"), "{e}");
    cfg.beam.dispersion_pct = 0.0;
    cfg.beam.sources = Some(vec![[f64::NAN; 5]]);
    let e = Plan::new(&cfg, SEEDS).unwrap_err().to_string();
    assert!(e.contains("-spectrum") && e.contains("-sourcefile"), "{e}");
}

#[test]
fn source_file_weights_count_only_when_corrected() {
    let nan = f64::NAN;
    let weights = [1.0, 3.0];
    let lambdas = [1.0e-10, 1.05e-10];
    let rows: Vec<[f64; 5]> = (0..2).map(|i| [nan, nan, nan, weights[i], lambdas[i]]).collect();
    for corrected in [false, true] {
        let mut cfg = model();
        cfg.sampling.corrected = corrected;
        let mut file = cfg.clone();
        file.beam.sources = Some(rows.clone());
        let plan = Plan::new(&file, SEEDS).unwrap();
        assert_eq!(plan.sources.weighted, corrected);
        let got = image(&file, Precision::Exact64);
        let parts: Vec<(f64, Vec<f64>)> = (0..2)
            .map(|i| {
                let w = if corrected { weights[i] } else { 1.0 };
                (w, image(&single(&cfg, lambdas[i] * 1e10), Precision::Exact64))
            })
            .collect();
        let total: f64 = parts.iter().map(|p| p.0).sum();
        for (i, &g) in got.iter().enumerate() {
            let want: f64 = parts.iter().map(|(w, im)| w * im[i]).sum::<f64>() / total;
            assert!((g - want).abs() <= 1e-12 * want.abs(), "{corrected} pixel {i}: {g} vs {want}");
        }
    }
    // applied weights must be usable
    let mut cfg = model();
    cfg.sampling.corrected = true;
    cfg.beam.sources = Some(vec![[nan, nan, nan, -1.0, nan], [nan, nan, nan, 1.0, nan]]);
    let e = Plan::new(&cfg, SEEDS).unwrap_err().to_string();
    assert!(e.contains("-sourcefile") && e.contains("-1"), "{e}");
    cfg.beam.sources = Some(vec![[nan, nan, nan, 0.0, nan]]);
    let e = Plan::new(&cfg, SEEDS).unwrap_err().to_string();
    assert!(e.contains("every source weight is 0"), "{e}");
    // ... and are not looked at without -corrected (nanoBragg.c ignores them)
    cfg.sampling.corrected = false;
    assert!(Plan::new(&cfg, SEEDS).is_ok());
}

#[test]
fn lambda_offset_and_scale_move_every_wavelength() {
    let mut cfg = model();
    cfg.beam.spectrum = Some(vec![[1.0, 1.0], [1.05, 2.0]]);
    cfg.beam.lambda_offset_a = 0.02;
    cfg.beam.lambda_scale = 0.99;
    let plan = Plan::new(&cfg, SEEDS).unwrap();
    let got: Vec<f64> = plan.sources.list.iter().map(|s| s.lambda_m * 1e10).collect();
    for (g, l) in got.iter().zip([1.0, 1.05]) {
        assert!((g - (0.02 + 0.99 * l)).abs() < 1e-14, "{g} for {l}");
    }
    // and the image is the spectrum's with the moved lines
    let mut moved = model();
    moved.beam.spectrum = Some(vec![[0.02 + 0.99, 1.0], [0.02 + 0.99 * 1.05, 2.0]]);
    let (a, b) = (image(&cfg, Precision::Exact64), image(&moved, Precision::Exact64));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-9 * y.abs(), "{x} vs {y}");
    }
    // a single -lambda moves too; a non-positive result is refused
    let mut one = model();
    one.beam.lambda_scale = 2.0;
    let plan = Plan::new(&one, SEEDS).unwrap();
    assert!((plan.sources.list[0].lambda_m - 2e-10).abs() < 1e-24);
    one.beam.lambda_offset_a = -3.0;
    let e = Plan::new(&one, SEEDS).unwrap_err().to_string();
    assert!(e.contains("-lambda_offset"), "{e}");
}

/// The automatic oversampling of a `-spectrum` is the one its shortest line
/// needs (nanoBragg.c's rule looks at `-lambda`, 1 Å by default, which is
/// no line of it): a 1.50/1.53 Å spectrum is sampled as `-lambda 1.50` is,
/// and its image is the weighted sum of the two single-line images.
#[test]
fn automatic_oversampling_follows_the_shortest_line() {
    let mut cfg = model();
    // 3 · 800 Å · 0.1 mm / (λ · 100 mm): 2.4 at 1 Å (3×3), 1.6 at 1.5 Å (2×2)
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (8.0, 8.0, 8.0);
    cfg.detector.pixel_mm = 0.1;
    cfg.detector.distance_mm = 100.0;
    cfg.sampling.oversample = 0;
    let lines = [[1.50, 1.0], [1.53, 2.0]];
    let mut spectrum = cfg.clone();
    spectrum.beam.spectrum = Some(lines.to_vec());
    let oversample = |c: &SimConfig| Plan::new(c, SEEDS).unwrap().oversample;
    assert_eq!(oversample(&single(&cfg, 1.0)), 3);
    assert_eq!(oversample(&single(&cfg, 1.50)), 2);
    assert_eq!(oversample(&spectrum), 2);
    let parts: Vec<(f64, Vec<f64>)> =
        lines.iter().map(|&[l, w]| (w, image(&single(&cfg, l), Precision::Exact64))).collect();
    assert_weighted_sum(&image(&spectrum, Precision::Exact64), &parts, 1e-9, "1.50/1.53 Å");
}
