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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows = table(&stdout);
    // (after the table: what the run said on stderr)
    let stdout = format!("{stdout}\n{stderr}");
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
        "-nxmxfile",
        "noisy.nxs",
        "-nxmx_compression",
        "deflate",
    ]);
    let out = nanobragg(&dir, &truth);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // noiseless, exact f64 image: every parameter to 1e-4 relative
    let (stdout, rows, secs) = refine(&dir, "truth.bin", &[]);
    assert!(stdout.contains("sse loss"), "a float image of fractions defaults to sse");
    assert!(!stdout.contains("warning: -observed"), "a raw image has no geometry: {stdout}");
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
    // (-N where the three counts are equal)
    let na = if args.contains(&"-Na") { after("-Na") } else { after("-N") };
    assert!((after("-distance") - 60.0).abs() < 1e-6 && na == 5.0, "{line}");
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

    // the same noise image as NXmx (gzip chunks): the same pixels (none
    // reaches 65535 here), so the same fit (miniCBF cannot hold these ADXV
    // axes: crates/cli/tests/formats.rs)
    let max = nanobragg_io::read_image::read_image(&dir.join("noisy.nxs"), 0).unwrap();
    assert!(max.pixels.iter().all(|&v| v < 65535.0));
    for file in ["noisy.nxs"] {
        let (other, again, _) = refine(&dir, file, &[]);
        assert!(other.contains("poisson loss"), "{other}");
        // the file's geometry is the truth's, not the start's
        let warned =
            format!("warning: -observed {file}: the file's distance is 60 mm, the model's 61 mm");
        assert!(other.contains(&warned), "{other}");
        // (ADXV pivots about the beam spot: -Xbeam/-Ybeam keep it in place)
        for same in ["beam centre", "wavelength", "pixel size"] {
            assert!(!other.contains(&format!("the file's {same}")), "{other}");
        }
        for ((name, a), (_, b)) in again.iter().zip(&rows) {
            let rel = (a.refined - b.refined).abs() / b.refined.abs().max(1e-12);
            assert!(rel < 1e-9, "{file} {name}: {} vs {} from SMV", a.refined, b.refined);
        }
    }
}

#[test]
fn bad_requests_are_refused() {
    let dir = scratch("errors");
    std::fs::write(dir.join("short.bin"), [0u8; 400]).unwrap();
    std::fs::write(dir.join("ok.bin"), vec![0u8; 96 * 96 * 4]).unwrap();
    std::fs::write(
        dir.join("cut.cbf"),
        b"###CBF: VERSION 1.5\r\nconversions=\"x-CBF_BYTE_OFFSET\"\r\nX-Binary-Size: 900\r\n\
          X-Binary-Size-Fastest-Dimension: 96\r\nX-Binary-Size-Second-Dimension: 96\r\n\r\n\x0c\x1a\x04\xd5\x01",
    )
    .unwrap();
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
        (&["-observed", "ok.bin", "-refine", "Na", "-max_chi2", "0.5"], "is not a number >= 1"),
        (&["-observed", "/dev/zero", "-refine", "Na"], "-observed /dev/zero: not a regular file"),
        // an image of no photons has nothing to fit (it once "explained" 0 of 0 spots)
        (&["-observed", "ok.bin", "-refine", "distance"], "has no photons in the pixels fitted"),
        (
            &["-observed", "ok.bin", "-refine", "distance", "-observed_frame", "1"],
            "a raw float image holds one frame",
        ),
        (&["-observed", "cut.cbf", "-refine", "distance"], "the file ends first"),
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

/// Pixels along each side of a module of [`four_modules`].
const MODULE: usize = 128;

/// A module's first-pixel corner (CrystFEL pixels from the beam) before its
/// move: 2 × 2 around the beam, 4 pixels apart.
fn corner(k: usize) -> (f64, f64) {
    let at = |i: usize| (i * (MODULE + 4)) as f64 - (MODULE + 2) as f64;
    (at(k % 2), at(k / 2))
}

/// A CrystFEL geometry of four square modules of 0.172 mm at 50 mm, each
/// moved by `moves[k]` (pixels along x and y, mm along the beam).
fn four_modules(moves: [[f64; 3]; 4]) -> String {
    let mut geom = String::from("clen = 0.05\nres = 5813.953488372\nphoton_energy = 12398.42 eV\n");
    for (k, [dx, dy, dz]) in moves.into_iter().enumerate() {
        let (cx, cy) = corner(k);
        geom += &format!(
            "m{k}/min_fs = 0\nm{k}/max_fs = {}\nm{k}/min_ss = {}\nm{k}/max_ss = {}\n\
             m{k}/corner_x = {}\nm{k}/corner_y = {}\nm{k}/coffset = {}\n\
             m{k}/fs = +1x +0y +0z\nm{k}/ss = +0x +1y +0z\n",
            MODULE - 1,
            MODULE * k,
            MODULE * (k + 1) - 1,
            cx + dx,
            cy + dy,
            dz / 1000.0
        );
    }
    geom
}

/// Each module's own shifts (`Xbeam@K`, `Ybeam@K`, `close_distance@K`)
/// refined with the crystal from the nominal geometry recover the modules'
/// true places (within 3 standard errors), and the fit check passes.
#[test]
fn recovers_the_panels_shifts() {
    let dir = scratch("panels");
    let moves = [[0.6, -0.4, 0.2], [-0.8, 0.3, -0.3], [0.2, 0.9, 0.1], [-0.5, -0.7, 0.25]];
    std::fs::write(dir.join("truth.geom"), four_modules(moves)).unwrap();
    std::fs::write(dir.join("start.geom"), four_modules([[0.0; 3]; 4])).unwrap();
    let model = "-default_F 200 -N 10 -fluence 1e27 -oversample 1 -nopgm -threads 2";
    let mut truth: Vec<&str> = "-geom truth.geom -cell 61 67 73 90 90 90 -misset 12 -7 33"
        .split(' ')
        .chain(model.split(' '))
        .collect();
    truth.extend(["-noisefile", "obs.img", "-seed", "7"]);
    let out = nanobragg(&dir, &truth);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let params = "cell_a,cell_b,cell_c,misset_x,misset_y,misset_z,Xbeam@*,Ybeam@*,close_distance@*";
    let mut args: Vec<&str> = vec!["refine", "-observed", "obs.img", "-refine", params];
    args.extend("-geom start.geom -cell 61.3 66.8 73.2 90 90 90 -misset 12.2 -7.2 33.1".split(' '));
    args.extend(model.split(' '));
    let out = nanobragg(&dir, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows = table(&stdout);
    // (after the table: what the run said on stderr)
    let stdout = format!("{stdout}\n{stderr}");
    assert_eq!(rows.len(), 18, "{stdout}");
    let pixel = 0.172;
    let mut want: Vec<(String, f64)> = [61.0, 67.0, 73.0, 12.0, -7.0, 33.0]
        .iter()
        .zip(["cell_a", "cell_b", "cell_c", "misset_x", "misset_y", "misset_z"])
        .map(|(v, n)| (n.to_string(), *v))
        .collect();
    // a module's own flags: Xbeam = −corner_x · pixel (CrystFEL's x is
    // DIALS's −x), Ybeam = −corner_y · pixel, close_distance = clen + coffset
    for (k, [dx, dy, dz]) in moves.into_iter().enumerate() {
        let (cx, cy) = corner(k);
        want.push((format!("Xbeam@{k}"), -(cx + dx) * pixel));
        want.push((format!("Ybeam@{k}"), -(cy + dy) * pixel));
        want.push((format!("close_distance@{k}"), 50.0 + dz));
    }
    for (name, truth) in want {
        let (_, row) =
            rows.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("{name}: {stdout}"));
        let se = row.se.unwrap_or_else(|| panic!("{name}: no standard error\n{stdout}"));
        let z = (row.refined - truth) / se;
        eprintln!("{name}: {} ± {se:.2e} for {truth} (start {}, z {z:.2})", row.refined, row.start);
        assert!(z.abs() < 3.0, "{name}: {} ± {se} for {truth}\n{stdout}", row.refined);
    }
    assert!(stdout.contains("panel 3 (m3) refined"), "{stdout}");
}

/// Panels' parameters are named as a panel's, and only where there are
/// panels.
#[test]
fn panel_parameters_are_checked() {
    let dir = scratch("panel_errors");
    std::fs::write(dir.join("d.geom"), four_modules([[0.0; 3]; 4])).unwrap();
    std::fs::write(dir.join("ok.bin"), vec![0u8; MODULE * MODULE * 16]).unwrap();
    let model = "-geom d.geom -cell 61 67 73 90 90 90 -default_F 200 -N 10";
    let cases: &[(&str, &str)] = &[
        ("Xbeam", "name a panel, Xbeam@K"),
        ("distance", "placed by its panels' vectors"),
        ("Xbeam@4", "the detector has 4 panels (0 to 3)"),
        ("Xbeam@m9", "no panel named 'm9' (panels: m0, m1, m2, m3)"),
        ("detector_rotx@1", "a panel's parameters are close_distance, Xbeam, Ybeam"),
        ("cell_a@1", "a panel's parameters are"),
    ];
    for (list, want) in cases {
        let mut args = vec!["refine", "-observed", "ok.bin", "-refine", list];
        args.extend(model.split(' '));
        let out = nanobragg(&dir, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{list} was accepted");
        assert!(stderr.contains(want), "{list}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{list}: {stderr}");
    }
    // a single panel has none
    let out = nanobragg(
        &dir,
        &[
            "refine",
            "-observed",
            "ok.bin",
            "-refine",
            "Xbeam@0",
            "-detpixels",
            "96",
            "-cell",
            "61",
            "67",
            "73",
            "90",
            "90",
            "90",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the detector is a single panel"), "{stderr}");
}
