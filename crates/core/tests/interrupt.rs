//! Stopping a render: rows after a request are left out and counted, and
//! the next render runs whole. (Its own test binary: the request is
//! process-wide, and would stop the renders of tests running beside it.)

use nanobragg_core::config::SimConfig;
use nanobragg_core::render::interrupt::{clear, request};
use nanobragg_core::render::{render, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};

#[test]
fn a_request_stops_the_rows_after_it() {
    let mut cfg = SimConfig::default();
    cfg.crystal.cell = Some([50.0, 50.0, 50.0, 90.0, 90.0, 90.0]);
    cfg.sf.default_f = 10.0;
    (cfg.detector.fpixels, cfg.detector.spixels) = (32, 64);
    let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -5 }).unwrap();
    let opts = RenderOptions::default().threads(1);
    let whole = render::<f64>(&plan, RenderOptions { precision: Precision::Fast64, ..opts }).image;
    assert!(whole.iter().all(|&v| v > 0.0));
    request();
    let stopped =
        render::<f64>(&plan, RenderOptions { precision: Precision::Fast64, ..opts }).image;
    let skipped = clear();
    // no row rendered, every one of the 64 counted
    assert!(stopped.iter().all(|&v| v == 0.0));
    assert_eq!(skipped, 64);
    // and the next render runs to the end
    assert_eq!(
        render::<f64>(&plan, RenderOptions { precision: Precision::Fast64, ..opts }).image,
        whole
    );
    assert_eq!(clear(), 0);
}
