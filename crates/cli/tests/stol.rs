//! The amorphous background in a render (`-stol` with the sample flags):
//! equal to `nonbragg` of the same geometry added to the Bragg image with
//! `add`, for any thread count; refusals of bad tables and of flags that
//! need `-stol`.

mod common;

use common::{float_file, nanobragg_on_threads, scratch};
use std::path::Path;
use std::process::{Command, Output};

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nanobragg")).args(args).current_dir(dir).output().unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn water(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden-nonbragg/inputs");
    std::fs::copy(src.join("water.stol"), dir.join("water.stol")).unwrap();
}

/// nanobragg's MOSFLM beam centre (`-Xbeam` along slow, `-Ybeam` along
/// fast, each to the pixel's centre) as nonBragg's (`-Xbeam` along fast,
/// `-Ybeam` along slow, to the pixel's corner): the same pix0.
const PIXEL_MM: f64 = 0.4;
const XBEAM_MM: f64 = 11.3;
const YBEAM_MM: f64 = 12.9;

fn bragg_args(extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "-default_F",
        "30",
        "-cell",
        "60",
        "70",
        "80",
        "90",
        "90",
        "90",
        "-N",
        "4",
        "-lambda",
        "1.2",
        "-distance",
        "90",
        "-detpixels",
        "64",
        "-pixel",
        "0.4",
        "-Xbeam",
        "11.3",
        "-Ybeam",
        "12.9",
        "-fluence",
        "1e24",
        "-beamsize",
        "0.08",
        "-oversample",
        "2",
        "-nonoise",
        "-nopgm",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn nonbragg_args(extra: &[&str]) -> Vec<String> {
    let xbeam = YBEAM_MM + PIXEL_MM / 2.0;
    let ybeam = XBEAM_MM + PIXEL_MM / 2.0;
    let mut a: Vec<String> = [
        "-stol",
        "water.stol",
        "-lambda",
        "1.2",
        "-distance",
        "90",
        "-detpixels",
        "64",
        "-pixel",
        "0.4",
        "-fluence",
        "1e24",
        "-beamsize",
        "0.08",
        "-oversample",
        "2",
        "-nonoise",
        "-nopgm",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(["-Xbeam".into(), format!("{xbeam}"), "-Ybeam".into(), format!("{ybeam}")]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Bragg image + `nonbragg` image through `add`, against one render with
/// `-stol`: every pixel within 1e-6 relative, for one and two threads, in the
/// fast f64 and f32 renders (the background's lanes) and `-exact` (the
/// C-bit sum); with a spectrum and a divergence, several sources in each of
/// several directions.
#[test]
fn in_run_background_equals_nonbragg_plus_add() {
    let dir = scratch("stol", "equal");
    water(&dir);
    let spread = ["-dispersion", "3", "-dispsteps", "5", "-divergence", "0.2", "-divsteps", "3"];
    let cases: [(&str, &[&str], &[&str]); 4] = [
        ("plain", &[], &[]),
        ("spectrum and divergence", &spread, &spread),
        (
            "sample and polarization",
            &["-polar", "0.8", "-amorphous_thick", "0.03", "-density", "0.92", "-MW", "18.5"],
            &["-polar", "0.8", "-thick", "0.03", "-density", "0.92", "-MW", "18.5"],
        ),
        ("molecules", &["-molecules", "1e18"], &["-molecules", "1e18"]),
    ];
    for (name, ours, theirs) in cases {
        ok(&dir, &strs(&bragg_args(&["-floatfile", "bragg.bin"])));
        let mut nb = vec!["nonbragg".to_string()];
        nb.extend(nonbragg_args(&[theirs, &["-floatfile", "bg.bin"]].concat()));
        ok(&dir, &strs(&nb));
        ok(&dir, &["add", "bragg.bin", "bg.bin", "-floatfile", "sum.bin"]);
        let want = float_file(&dir.join("sum.bin"));
        let bg = float_file(&dir.join("bg.bin"));
        assert!(bg.iter().all(|&v| v > 0.0), "{name}: the background lights every pixel");
        // the background is a real part of the sum, not a rounding error
        let share = bg.iter().sum::<f64>() / want.iter().sum::<f64>();
        assert!(share > 0.01, "{name}: background share {share}");
        let runs =
            [["1", "-dtype", "float64"], ["2", "-dtype", "float64"], ["2", "-dtype", "float32"]];
        for [threads, how, what] in runs.into_iter().chain([["2", "-exact", ""]]) {
            let mut args = bragg_args(&["-stol", "water.stol", "-floatfile", "in_run.bin"]);
            args.extend(ours.iter().map(|s| s.to_string()));
            args.extend(
                ["-threads", threads, how, what]
                    .iter()
                    .filter(|a| !a.is_empty())
                    .map(|s| s.to_string()),
            );
            ok(&dir, &strs(&args));
            let got = float_file(&dir.join("in_run.bin"));
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs(),
                    "{name}, {threads} threads {how} {what}, pixel {i}: {g} vs {w}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn refused(dir: &Path, args: &[&str], says: &str) {
    let out = run(dir, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
    assert!(!dir.join("x.bin").exists(), "{args:?} left an output");
}

#[test]
fn bad_tables_and_lone_sample_flags_are_refused() {
    let dir = scratch("stol", "bad");
    water(&dir);
    std::fs::write(dir.join("bad.stol"), "0.1 2.0\n0.2 abc\n").unwrap();
    std::fs::write(dir.join("down.stol"), "0.1 2.0\n0.3 1.0\n0.2 1.5\n0.4 1.0\n").unwrap();
    std::fs::write(dir.join("empty.stol"), "").unwrap();
    let base =
        ["-default_F", "10", "-cell", "50", "50", "50", "90", "90", "90", "-detpixels", "16"];
    let base = [&base[..], &["-floatfile", "x.bin", "-nonoise"]].concat();
    let with = |more: &[&'static str]| [&base[..], more].concat();
    refused(&dir, &with(&["-stol", "bad.stol"]), "bad.stol");
    refused(&dir, &with(&["-stol", "down.stol"]), "must increase");
    refused(&dir, &with(&["-stol", "missing.stol"]), "-stol");
    refused(&dir, &with(&["-stol", "empty.stol"]), "-stol");
    refused(&dir, &with(&["-density", "1.2"]), "give -stol");
    refused(&dir, &with(&["-stol", "water.stol", "-MW", "-3"]), "-MW");
    refused(&dir, &with(&["-stol", "water.stol", "-gradient", "distance"]), "-stol");
    std::fs::remove_dir_all(&dir).ok();
}

/// `nonbragg -noise_rng parallel` takes the background's fast form: every
/// pixel within 1e-6 relative of the C stream's C-bit sum, the same solid
/// angle to nonBragg's printed digits, for one and two threads; with the
/// default beam centre one pixel's centre lies on the direct beam (sin θ = 0,
/// where a lane's square root must not be 0 · ∞).
#[test]
fn nonbragg_parallel_stream_takes_the_fast_background() {
    let dir = scratch("stol", "nonbragg_fast");
    water(&dir);
    let base = [
        "nonbragg",
        "-stol",
        "water.stol",
        "-lambda",
        "1.0",
        "-distance",
        "100",
        "-detpixels",
        "256",
        "-pixel",
        "0.1",
        "-flux",
        "1e11",
        "-exposure",
        "0.5",
        "-beamsize",
        "0.1",
        "-seed",
        "5",
        "-noprogress",
    ];
    let solid_angle = |out: &str| {
        out.lines().find(|l| l.starts_with("solid angle")).map(str::to_string).expect(out)
    };
    let c = ok(&dir, &[&base[..], &["-floatfile", "c.bin"]].concat());
    let want = float_file(&dir.join("c.bin"));
    for threads in ["1", "2"] {
        let args = [&base[..], &["-floatfile", "p.bin", "-noise_rng", "parallel"]].concat();
        let p = nanobragg_on_threads(&dir, &args, threads);
        assert_eq!(solid_angle(&p), solid_angle(&c), "{threads} threads");
        let got = float_file(&dir.join("p.bin"));
        assert_eq!(got.len(), want.len());
        let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs() / w.abs()).fold(0.0, f64::max);
        assert!(worst <= 1e-6, "{threads} threads: worst relative difference {worst:e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
