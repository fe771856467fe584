//! A region of interest that covers no pixel of the detector (its xmin past
//! its xmax, or past the detector's edge) renders an empty image, as in
//! nanoBragg.c, rather than failing.

use nanobragg_core::config::SimConfig;
use nanobragg_core::render::{render, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};

fn image_with_roi(roi: Option<[i64; 4]>) -> Vec<f64> {
    let mut cfg = SimConfig::default();
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 5.0, 5.0);
    cfg.sf.default_f = 100.0;
    cfg.beam.lambda_a = 1.0;
    (cfg.detector.fpixels, cfg.detector.spixels) = (64, 64);
    cfg.detector.roi = roi;
    let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap();
    let opts = RenderOptions::default();
    let mut image =
        render::<f64>(&plan, RenderOptions { precision: Precision::Fast64, ..opts }).image;
    image.extend(
        render::<f64>(&plan, RenderOptions { precision: Precision::Exact64, ..opts }).image,
    );
    image
}

#[test]
fn a_roi_that_covers_no_pixel_renders_nothing() {
    assert!(image_with_roi(None).iter().any(|&v| v > 0.0));
    for roi in [[180, 30, 50, 200], [40, 10, 0, 63], [70, 90, 0, 63], [0, 63, 70, 80]] {
        let image = image_with_roi(Some(roi));
        assert_eq!(image.len(), 2 * 64 * 64);
        assert!(image.iter().all(|&v| v == 0.0), "-roi {roi:?}");
    }
}
