//! One structure-factor grid for the panels and shots of a run: a plan made
//! with another plan's structure factors holds that plan's grid (the same
//! allocation) and renders the image a plan of its own gives.

use nanobragg_core::config::{Convention, Misset, PanelConfig, SfSource, SimConfig};
use nanobragg_core::geometry::panel_configs;
use nanobragg_core::render::{render, Precision, RenderOptions};
use nanobragg_core::setup::{plan_panels, Plan, SetupSeeds};
use nanobragg_core::sf::HklEntry;
use std::sync::Arc;

const SEEDS: SetupSeeds = SetupSeeds { misset_idum: -1 };

/// A triclinic crystal whose structure factors come from an -hkl table.
fn model() -> SimConfig {
    let mut cfg = SimConfig::default();
    cfg.crystal.cell = Some([40.0, 45.0, 50.0, 85.0, 95.0, 100.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (4.0, 4.0, 4.0);
    cfg.beam.lambda_a = 1.0;
    cfg.detector.distance_mm = 60.0;
    cfg.detector.pixel_mm = 0.5;
    (cfg.detector.fpixels, cfg.detector.spixels) = (40, 36);
    let mut entries = Vec::new();
    for h in -12i32..=12 {
        for k in -12..=12 {
            for l in -12..=12 {
                let f = 5.0 + ((h * 7 + k * 3 + l * 11).rem_euclid(13)) as f64;
                entries.push(HklEntry { h: h as f64, k: k as f64, l: l as f64, f });
            }
        }
    }
    cfg.sf.source = SfSource::Hkl(entries.into());
    cfg
}

fn grid_data(plan: &Plan) -> &Arc<Vec<f64>> {
    &plan.grid.as_ref().expect("an -hkl plan has a grid").data
}

#[test]
fn a_shot_planned_with_anothers_structure_factors_shares_its_grid_and_renders_the_same() {
    let first = Plan::new(&model(), SEEDS).unwrap();
    let mut shot = model();
    shot.crystal.misset = Misset::Angles([10.0, -20.0, 30.0]);
    let own = Plan::new(&shot, SEEDS).unwrap();
    let shared = Plan::sharing_structure_factors(&shot, SEEDS, &first).unwrap();
    assert!(Arc::ptr_eq(grid_data(&shared), grid_data(&first)));
    assert!(!Arc::ptr_eq(grid_data(&own), grid_data(&first)));
    assert_eq!(shared.hkls, own.hkls);
    assert_eq!(grid_data(&shared), grid_data(&own));
    let opts = RenderOptions::default();
    let render =
        |p: &Plan| render::<f64>(p, RenderOptions { precision: Precision::Exact64, ..opts }).image;
    let (a, b) = (render(&own), render(&shared));
    assert!(a.iter().any(|&v| v > 0.0), "the shot scatters");
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
}

#[test]
fn every_panel_of_a_detector_holds_one_grid() {
    let mut cfg = model();
    // the laboratory frame of an experiment list: the beam along -z
    let d = &mut cfg.detector;
    d.convention = Convention::Custom;
    (d.beam, d.polar) = ([0.0, 0.0, -1.0], [1.0, 0.0, 0.0]);
    (d.spindle, d.twotheta_axis) = ([1.0, 0.0, 0.0], [1.0, 0.0, 0.0]);
    cfg.detector.panels = (0..3)
        .map(|k| PanelConfig {
            name: format!("P{k}"),
            origin_mm: [-10.0, 10.0 - 8.0 * k as f64, -60.0],
            fast: [1.0, 0.0, 0.0],
            slow: [0.0, -1.0, 0.0],
            pixel_mm: 0.5,
            fpixels: 40,
            spixels: 16,
            data_origin: None,
        })
        .collect();
    let configs = panel_configs(&cfg).unwrap();
    let plans = plan_panels(&configs, SEEDS, None).unwrap();
    assert_eq!(plans.len(), 3);
    for plan in &plans[1..] {
        assert!(Arc::ptr_eq(grid_data(plan), grid_data(&plans[0])));
    }
    // given a plan of another shot, every panel takes that one's
    let other = Plan::new(&model(), SEEDS).unwrap();
    let plans = plan_panels(&configs, SEEDS, Some(&other)).unwrap();
    assert!(plans.iter().all(|p| Arc::ptr_eq(grid_data(p), grid_data(&other))));
    // and each renders as a plan of its own does
    let render = |p: &Plan| render::<f64>(p, RenderOptions::new(Precision::Exact64)).image;
    for (c, p) in configs.iter().zip(&plans) {
        let own = Plan::new(c, SEEDS).unwrap();
        assert_eq!(render(&own), render(p));
    }
}
