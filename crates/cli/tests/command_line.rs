//! `command_line::to_args`: the flags of a model parse back to the same
//! simulation, on every golden case and on multi-panel files; a model no
//! command line holds is refused, naming what differs.

mod common;

use common::{all_cases, golden_dir, scratch};
use nanobragg_core::config::{Convention, SfSource};
use nanobragg_pipeline::command_line::to_args;
use nanobragg_pipeline::parse_args;
use nanobragg_pipeline::Invocation;

/// The words of `args` with `inputs/...` made absolute (the tests run in
/// the crate's folder, not the golden one).
fn words(args: &str) -> Vec<String> {
    let dir = golden_dir();
    args.split_whitespace()
        .map(|w| match w.starts_with("inputs/") {
            true => dir.join(w).display().to_string(),
            false => w.to_string(),
        })
        .collect()
}

/// Parses `to_args(inv)` and checks it gives `inv`'s simulation and seed.
fn round_trip(what: &str, inv: &Invocation) -> Vec<String> {
    let args = to_args(inv).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut again = parse_args(&args).unwrap_or_else(|e| panic!("{what}: {args:?}: {e}"));
    // the pivot counts for custom vectors on one panel only (the named
    // conventions and a file's panels impose their own)
    let d = &inv.config.detector;
    if d.convention != Convention::Custom || !d.panels.is_empty() {
        again.config.detector.pivot = d.pivot;
    }
    let (a, b) = (&again.config, &inv.config);
    assert_eq!(a.detector, b.detector, "{what}: {args:?}");
    assert_eq!(a.beam, b.beam, "{what}: {args:?}");
    assert_eq!(a.crystal, b.crystal, "{what}: {args:?}");
    assert!(a.sf == b.sf, "{what}: the structure factors differ: {args:?}");
    assert_eq!((&a.sampling, &a.amorphous), (&b.sampling, &b.amorphous), "{what}: {args:?}");
    assert_eq!(again.seed, inv.seed, "{what}: {args:?}");
    // its own command line is a fixed point
    assert_eq!(to_args(&again).unwrap(), args, "{what}");
    args
}

#[test]
fn every_golden_case_parses_back_to_its_simulation() {
    let cases = all_cases();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut flags = 0;
    for case in &cases {
        let inv = parse_args(&words(&case.args)).unwrap_or_else(|e| panic!("{}: {e}", case.id));
        flags += round_trip(&case.id, &inv).len();
    }
    eprintln!("{} golden cases, {flags} words of flags", cases.len());
}

#[test]
fn a_model_changed_in_memory_is_written_with_its_new_values() {
    let mut inv = parse_args(&words(
        "-hkl inputs/p1_tric.hkl -cell 28 31 35 80 95 105 -N 2 -lambda 1.0 -distance 60 \
         -detpixels 192 -misset 10 -5 20 -xds -seed 7 -floatfile f.bin",
    ))
    .unwrap();
    inv.config.crystal.cell.as_mut().unwrap()[0] = 28.1234567;
    inv.config.detector.distance_mm = 61.0 / 3.0;
    inv.config.beam.source_distance_m = 0.3;
    inv.config.detector.pivot = nanobragg_core::config::Pivot::Sample;
    inv.config.detector.convention = Convention::Custom;
    inv.config.detector.attenuation_um = Some(None);
    let args = round_trip("changed", &inv);
    assert!(args.windows(2).any(|w| w[0] == "-cell" && w[1] == "28.1234567"), "{args:?}");
    assert!(args.ends_with(&["-pivot".to_string(), "sample".to_string()]), "{args:?}");
    assert!(!args.iter().any(|a| a == "-floatfile"), "outputs are not the model's: {args:?}");
}

#[test]
fn multi_panel_files_are_named_and_the_flags_after_them_kept() {
    let dir = scratch("command-line", "panels");
    let panel = |k: usize, y: f64| {
        format!(
            r#"{{"name": "P{k}", "origin": [-20.0, {y}, -100.0], "fast_axis": [1, 0, 0], "slow_axis": [0, -1, 0], "pixel_size": [0.2, 0.2], "image_size": [64, 32], "thickness": 0.0, "mu": 0.0}}"#
        )
    };
    let expt = format!(
        r#"{{"__id__": "ExperimentList",
  "experiment": [{{"__id__": "Experiment", "beam": 0, "detector": 0}}],
  "beam": [{{"direction": [0, 0, 1], "wavelength": 1.3, "polarization_normal": [0, 1, 0], "polarization_fraction": 0.999}}],
  "detector": [{{"panels": [{}, {}]}}]}}"#,
        panel(0, 10.0),
        panel(1, 3.0)
    );
    let path = dir.join("two.expt");
    std::fs::write(&path, expt).unwrap();
    let file = path.display().to_string();
    let inv = parse_args(&words(&format!(
        "-expt {file} -cell 61 70 83 88 91 89 -misset 5 10 15 -default_F 100 -N 7 -lambda 1.1"
    )))
    .unwrap();
    assert_eq!(inv.config.detector.panels.len(), 2);
    let args = round_trip("two panels", &inv);
    assert_eq!(args[..2], ["-expt".to_string(), file.clone()]);

    // a panel moved in memory: no flag places it
    let mut moved = inv.clone();
    moved.config.detector.panels[1].origin_mm[2] -= 1.0;
    let e = to_args(&moved).unwrap_err().to_string();
    assert!(e.contains("panels"), "{e}");
    // nor, after the file, the detector's distance
    let mut moved = inv.clone();
    moved.config.detector.distance_mm = 90.0;
    let e = to_args(&moved).unwrap_err().to_string();
    assert!(e.contains("-distance after -expt"), "{e}");
}

#[test]
fn what_no_flag_holds_is_refused() {
    let inv = parse_args(&words(
        "-default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 6.2 -distance 100 -detpixels 64",
    ))
    .unwrap();
    let mut fractional = inv.clone();
    fractional.config.crystal.na = 4.5;
    let e = to_args(&fractional).unwrap_err().to_string();
    assert!(e.contains("-Na 4.5"), "{e}");

    let mut arrays = inv.clone();
    let entries = vec![nanobragg_core::sf::HklEntry { h: 1.0, k: 0.0, l: 0.0, f: 3.0 }];
    arrays.config.sf.source = SfSource::Hkl(entries.into());
    let e = to_args(&arrays).unwrap_err().to_string();
    assert!(e.contains("-hkl"), "{e}");
}
