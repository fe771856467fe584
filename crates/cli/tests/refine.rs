//! `nanobragg refine`: recovers known parameters from a rendered image (the
//! issue's acceptance test) and refuses bad requests with one clear line.

use std::path::{Path, PathBuf};
use std::time::Instant;

mod common;
use common::nanobragg;

fn scratch(name: &str) -> PathBuf {
    common::scratch("refine", name)
}

/// Shared by truth and start: ADXV axes (beam along +z, so that
/// `detector_rotx` tilts the detector instead of turning it about the beam,
/// which a crystal rotation would mimic exactly), 96² pixels of 0.4 mm,
/// strong broad spots (5 cells, F = 100).
const COMMON: &[&str] = &[
    "-adxv",
    "-lambda",
    "1",
    "-pixel",
    "0.4",
    "-detpixels",
    "96",
    "-Nb",
    "5",
    "-Nc",
    "5",
    "-default_F",
    "100",
    "-nopgm",
    "-threads",
    "2",
];

/// True values: name, value, flag arguments.
const TRUTH: &[&str] = &[
    "-cell",
    "40",
    "40",
    "40",
    "90",
    "90",
    "90",
    "-distance",
    "60",
    "-detector_rotx",
    "1",
    "-Na",
    "5",
    "-misset",
    "5",
    "10",
    "15",
];

/// The start: distance +1 mm, detector_rotx +0.3°, cell_a +0.5%,
/// Na +1, misset +0.2° about each axis.
const START: &[&str] = &[
    "-cell",
    "40.2",
    "40",
    "40",
    "90",
    "90",
    "90",
    "-distance",
    "61",
    "-detector_rotx",
    "1.3",
    "-Na",
    "6",
    "-misset",
    "5.2",
    "10.2",
    "15.2",
];

const PARAMS: &str = "distance,detector_rotx,cell_a,Na,misset_x,misset_y,misset_z";
const TRUE_VALUES: [(&str, f64); 7] = [
    ("distance", 60.0),
    ("detector_rotx", 1.0),
    ("cell_a", 40.0),
    ("Na", 5.0),
    ("misset_x", 5.0),
    ("misset_y", 10.0),
    ("misset_z", 15.0),
];

/// One row of the result table.
#[derive(Debug)]
struct Row {
    start: f64,
    refined: f64,
    se: Option<f64>,
}

fn table(stdout: &str) -> Vec<(String, Row)> {
    let mut rows = Vec::new();
    let mut on = false;
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"parameter") {
            on = true;
            continue;
        }
        if on && f.len() == 6 {
            rows.push((
                f[0].to_string(),
                Row {
                    start: f[2].parse().unwrap(),
                    refined: f[3].parse().unwrap(),
                    se: f[4].parse().ok(),
                },
            ));
        } else if on && !rows.is_empty() {
            break;
        }
    }
    rows
}

fn refine(dir: &Path, observed: &str, extra: &[&str]) -> (String, Vec<(String, Row)>, f64) {
    let mut args = vec!["refine", "-observed", observed, "-refine", PARAMS];
    args.extend_from_slice(extra);
    args.extend_from_slice(COMMON);
    args.extend_from_slice(START);
    let t = Instant::now();
    let out = nanobragg(dir, &args);
    let secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let rows = table(&stdout);
    assert_eq!(rows.len(), TRUE_VALUES.len(), "{stdout}");
    (stdout, rows, secs)
}

fn floats(path: &Path) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap();
    bytes.chunks(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).collect()
}

#[test]
fn recovers_known_parameters() {
    let dir = scratch("recover");
    let mut truth: Vec<&str> = COMMON.to_vec();
    truth.extend_from_slice(TRUTH);
    truth.extend_from_slice(&[
        "-exact",
        "-floatfile",
        "truth.bin",
        "-noisefile",
        "noisy.img",
        "-seed",
        "7",
        "-intfile",
        "int.img",
    ]);
    let out = nanobragg(&dir, &truth);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // noiseless, exact f64 image: every parameter to 1e-4 relative
    let (stdout, rows, secs) = refine(&dir, "truth.bin", &[]);
    assert!(stdout.contains("sse loss"), "a float image of fractions defaults to sse");
    assert!(stdout.lines().filter(|l| l.starts_with("iteration")).count() >= 2);
    for ((name, row), (want_name, truth)) in rows.iter().zip(TRUE_VALUES) {
        assert_eq!(name, want_name);
        let rel = (row.refined - truth).abs() / truth.abs();
        eprintln!(
            "noiseless {name}: start {} refined {} relative error {rel:.2e}",
            row.start, row.refined
        );
        assert!(rel < 1e-4, "{name}: {} vs {truth}\n{stdout}", row.refined);
        assert!((row.start - truth).abs() > 100.0 * (row.refined - truth).abs());
    }
    eprintln!("noiseless refine: {secs:.1} s");

    // the refined command line renders the true image
    let line = stdout.lines().skip_while(|l| *l != "refined command line:").nth(1).unwrap();
    let mut args: Vec<&str> = line.split_whitespace().skip(1).collect();
    let after = |flag: &str| -> f64 {
        let i = args.iter().position(|a| *a == flag).unwrap_or_else(|| panic!("{flag}: {line}"));
        args[i + 1].parse().unwrap()
    };
    assert!((after("-distance") - 60.0).abs() < 1e-6 && after("-Na") == 5.0, "{line}");
    args.extend_from_slice(&[
        "-exact",
        "-floatfile",
        "again.bin",
        "-nonoise",
        "-intfile",
        "i2.img",
    ]);
    assert!(nanobragg(&dir, &args).status.success());
    let (a, b) = (floats(&dir.join("again.bin")), floats(&dir.join("truth.bin")));
    let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    assert!((num / den).sqrt() < 1e-6, "refined image differs: {}", (num / den).sqrt());

    // Poisson counts (the -noisefile SMV, ADC offset removed): within 3 σ
    let (stdout, rows, secs) = refine(&dir, "noisy.img", &[]);
    assert!(stdout.contains("poisson loss"), "SMV counts default to poisson");
    for ((name, row), (_, truth)) in rows.iter().zip(TRUE_VALUES) {
        let se = row.se.unwrap_or_else(|| panic!("{name}: no standard error\n{stdout}"));
        let z = (row.refined - truth) / se;
        eprintln!("noisy {name}: refined {} ± {se:.3e}: {z:+.2} σ", row.refined);
        assert!(z.abs() < 3.0, "{name}: {} ± {se} vs {truth}\n{stdout}", row.refined);
        // the noise is what limits it, not the optimiser: σ well below the start error
        assert!(se < 0.2 * (row.start - truth).abs(), "{name}: σ {se}");
    }
    eprintln!("noisy refine: {secs:.1} s");
}

#[test]
fn bad_requests_are_refused() {
    let dir = scratch("errors");
    std::fs::write(dir.join("short.bin"), [0u8; 400]).unwrap();
    std::fs::write(dir.join("ok.bin"), vec![0u8; 96 * 96 * 4]).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["-refine", "distance"], "-observed FILE is required"),
        (&["-observed", "ok.bin"], "-refine NAME[,NAME...] is required"),
        (&["-observed", "short.bin", "-refine", "distance"], "400 bytes is not a 96 x 96 image"),
        (&["-observed", "missing.bin", "-refine", "distance"], "-observed missing.bin"),
        (&["-observed", "ok.bin", "-refine", "distance,bogus"], "unknown parameter 'bogus'"),
        (&["-observed", "ok.bin", "-refine", "fudge"], "square (default) spots do not use -fudge"),
        (&["-observed", "ok.bin", "-refine", "mosaic"], "needs -mosaic > 0"),
        (
            &["-observed", "ok.bin", "-refine", "Na", "-loss", "l2"],
            "-loss: 'l2' is not sse or poisson",
        ),
        (
            &["-observed", "ok.bin", "-refine", "Na", "-xtalsize", "0.0002"],
            "comes from the crystal size",
        ),
        (&["-observed", "ok.bin", "-refine", "Na", "-distanse", "3"], "unknown flag -distanse"),
        (
            &["-observed", "ok.bin", "-refine", "Na", "-history", "18446744073709551615"],
            "from 1 to 1000",
        ),
        (&["-observed", "ok.bin", "-refine", "Na", "-history", "1001"], "from 1 to 1000"),
        (&["-observed", "/dev/zero", "-refine", "Na"], "-observed /dev/zero: not a regular file"),
        // what is wrong with the model comes before what is wrong with the file
        (&["-observed", "missing.bin", "-refine", "mosaic"], "needs -mosaic > 0"),
        (
            &["-observed", "missing.bin", "-refine", "Na", "-misset", "random"],
            "-misset random needs -misset_seed",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["refine"];
        args.extend_from_slice(COMMON);
        args.extend_from_slice(START);
        args.extend_from_slice(extra);
        let out = nanobragg(&dir, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        assert!(stderr.contains(want), "{extra:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{extra:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
}
