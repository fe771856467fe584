//! Values that used to slip past the checks (issue 19): SMV header values,
//! short `-img` pixel data, overflowing images, impossible detector
//! geometry, non-finite refine losses, `-gradient all`, errors blamed on the
//! wrong input, and the echo of offending values.

use std::path::Path;
use std::process::Output;

mod common;
use common::{nanobragg, scratch};

/// A small run that succeeds; tests add one bad thing to it.
const BASE: &[&str] = &[
    "-default_F",
    "100",
    "-cell",
    "100",
    "100",
    "100",
    "90",
    "90",
    "90",
    "-lambda",
    "6.2",
    "-N",
    "5",
    "-pixel",
    "0.1",
    "-distance",
    "100",
    "-detpixels",
    "16",
    "-nonoise",
    "-nopgm",
];

fn run(dir: &Path, extra: &[&str]) -> Output {
    nanobragg(dir, &[BASE, extra].concat())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A clean failure: exit 1, one `error:` line on stderr holding every needle.
fn assert_fails(out: &Output, needles: &[&str]) -> String {
    let e = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(e.lines().count(), 1, "not one line: {e}");
    assert!(e.starts_with("error: "), "{e}");
    for n in needles {
        assert!(e.contains(n), "stderr lacks {n:?}: {e}");
    }
    e
}

/// An SMV image of 16 x 16 pixels whose header has `keys` (`KEY=value;`
/// lines) and `data_bytes` bytes of pixel data (all of them when `None`).
fn smv(keys: &str, data_bytes: Option<usize>) -> Vec<u8> {
    let mut head = format!(
        "{{\nHEADER_BYTES=512;\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE=unsigned_short;\nSIZE1=16;\nSIZE2=16;\n{keys}}}\x0c"
    );
    while head.len() < 512 {
        head.push(' ');
    }
    let mut bytes = head.into_bytes();
    bytes.resize(512 + data_bytes.unwrap_or(2 * 16 * 16), 1);
    bytes
}

const KEYS: &str = "PIXEL_SIZE=0.1;\nDISTANCE=100;\nWAVELENGTH=6.2;\n";

#[test]
fn smv_header_values_get_the_flag_checks() {
    let dir = scratch("bad-values", "header");
    for (key_value, flag, why) in [
        ("PHI=inf", "-phi", "finite"),
        ("OSC_RANGE=inf", "-osc", "finite"),
        ("OSC_RANGE=-1", "-osc", "must be >= 0"),
        ("CLOSE_DISTANCE=-85", "-close_distance", "must be > 0"),
        ("BEAM_CENTER_X=inf", "-Xbeam", "finite"),
        ("PIXEL_SIZE=-0.1", "-pixel", "must be > 0"),
    ] {
        std::fs::write(dir.join("h.img"), smv(&format!("{KEYS}{key_value};\n"), None)).unwrap();
        for img in ["-img", "-mask"] {
            let out = nanobragg(&dir, &[img, "h.img", "-default_F", "1", "-cell", "50", "-nopgm"]);
            let e = assert_fails(&out, &[img, "h.img", key_value, flag, why]);
            // the header value is named, not a geometry consequence of it
            assert!(!e.contains("DISTANCE=100"), "{e}");
        }
    }
    // a flag given with the header still wins over it, as in nanoBragg
    std::fs::write(dir.join("ok.img"), smv(KEYS, None)).unwrap();
    let out = run(&dir, &["-img", "ok.img", "-phi", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn img_pixel_data_may_be_short_but_a_mask_may_not() {
    let dir = scratch("bad-values", "short");
    std::fs::write(dir.join("short.img"), smv(KEYS, Some(100))).unwrap();
    std::fs::write(dir.join("full.img"), smv(KEYS, None)).unwrap();
    let out = run(&dir, &["-img", "short.img", "-floatfile", "short.bin"]);
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("warning: -img short.img"), "{e}");
    assert!(e.contains("612 bytes in the file, 1024 for its 16 x 16 pixels"), "{e}");
    // the image is the one the header alone gives
    let out = run(&dir, &["-img", "full.img", "-floatfile", "full.bin"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", stderr(&out));
    let short = std::fs::read(dir.join("short.bin")).unwrap();
    assert_eq!(short.len(), 16 * 16 * 4);
    assert_eq!(short, std::fs::read(dir.join("full.bin")).unwrap());
    // a mask's pixels are used: short data is an error
    let out = nanobragg(&dir, &["-mask", "short.img", "-default_F", "1", "-cell", "50"]);
    assert_fails(&out, &["-mask", "short.img", "truncated"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_overflowing_image_is_refused_and_old_outputs_stay() {
    let dir = scratch("bad-values", "overflow");
    std::fs::write(dir.join("floatimage.bin"), b"old").unwrap();
    std::fs::write(dir.join("intimage.img"), b"old").unwrap();
    let out = run(&dir, &["-fluence", "1e300"]);
    assert_fails(&out, &["256 non-finite pixels (of 256)", "-fluence 1e+300"]);
    let out = run(&dir, &["-flux", "1e300", "-exposure", "1e300", "-beamsize", "1e-300"]);
    assert_fails(&out, &["-flux", "-exposure", "-beamsize", "fluence is not finite"]);
    assert_eq!(std::fs::read(dir.join("floatimage.bin")).unwrap(), b"old");
    assert_eq!(std::fs::read(dir.join("intimage.img")).unwrap(), b"old");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    // an ordinary fluence still renders
    let out = run(&dir, &["-fluence", "1e24"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn impossible_detector_geometry_is_refused() {
    let dir = scratch("bad-values", "geometry");
    for (extra, needles) in [
        (&["-twotheta", "180"][..], &["does not face the beam", "180.000 deg", "-twotheta"][..]),
        (&["-twotheta", "90"], &["does not face the beam", "90.000 deg"]),
        (&["-twotheta", "-95"], &["does not face the beam"]),
        (&["-beam_vector", "0", "0", "1"], &["does not face the beam", "-beam_vector"]),
        (
            &["-fdet_vector", "0", "0", "1", "-sdet_vector", "0", "0", "1"],
            &["-fdet_vector/-sdet_vector", "parallel"],
        ),
        (
            &["-fdet_vector", "0", "0", "1", "-sdet_vector", "0", "0", "-3"],
            &["-fdet_vector/-sdet_vector", "parallel"],
        ),
    ] {
        let out = run(&dir, extra);
        let e = assert_fails(&out, needles);
        assert!(!e.contains("-oversample"), "{extra:?}: {e}");
    }
    // a large swing the geometry can honour still renders
    let out = run(&dir, &["-twotheta", "60"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn errors_name_the_input_that_caused_them() {
    let dir = scratch("bad-values", "blame");
    // the automatic oversampling comes from the geometry, not from -oversample
    let out = run(&dir, &["-distance", "1e-9"]);
    let e = assert_fails(&out, &["automatic oversampling", "-distance", "give -oversample"]);
    assert!(!e.contains("invalid -oversample"), "{e}");
    // a given -oversample that is too large is still blamed on itself
    let out = run(&dir, &["-oversample", "20000"]);
    assert_fails(&out, &["invalid -oversample", "20000"]);
    let out = nanobragg(
        &dir,
        &[
            "-default_F",
            "1",
            "-cell",
            "1e300",
            "1e300",
            "1e300",
            "90",
            "90",
            "90",
            "-detpixels",
            "8",
        ],
    );
    let e = assert_fails(&out, &["invalid -cell", "volume"]);
    assert!(!e.contains("-mat"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gradient_all_skips_what_does_not_apply() {
    let dir = scratch("bad-values", "gradient-all");
    let out = run(&dir, &["-gradient", "all", "-gradfile", "g"]);
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("note: -gradient all: skipped mosaic: needs -mosaic > 0"), "{e}");
    assert!(e.contains("fudge: square"), "{e}");
    for written in ["distance", "cell_a", "lambda", "fluence"] {
        assert!(dir.join(format!("g_{written}.bin")).is_file(), "{written}");
    }
    for skipped in ["mosaic", "fudge", "dispersion"] {
        assert!(!dir.join(format!("g_{skipped}.bin")).exists(), "{skipped}");
    }
    // named explicitly, a parameter that does not apply is still an error
    let out = run(&dir, &["-gradient", "distance,mosaic"]);
    assert_fails(&out, &["-gradient", "mosaic: needs -mosaic > 0"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn refine_fails_when_the_loss_is_not_finite() {
    let dir = scratch("bad-values", "refine-nan");
    let out = run(&dir, &["-floatfile", "obs.bin"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let args: Vec<&str> = [
        &["refine", "-observed", "obs.bin", "-refine", "distance,Na"][..],
        BASE,
        &["-fluence", "1e300"],
    ]
    .concat();
    let out = nanobragg(&dir, &args);
    assert_fails(
        &out,
        &["refine: the loss is not finite at the start", "distance = 100 mm", "Na = 5"],
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("refined command line"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn echoed_values_are_short_and_escaped() {
    let dir = scratch("bad-values", "echo");
    let long = "1".repeat(100_000);
    let out = nanobragg(&dir, &["-distance", &long]);
    let e = assert_fails(&out, &["-distance", "… (100000 characters)"]);
    assert!(e.len() < 200, "{} bytes", e.len());
    let out = nanobragg(&dir, &["-distance", "\u{feff}"]);
    assert_fails(&out, &["'\\u{feff}' is not a number"]);
    let out = nanobragg(&dir, &["-N", "\x1b[31mred"]);
    let e = assert_fails(&out, &["'\\u{1b}[31mred' is not an integer"]);
    assert!(!e.contains('\x1b'), "{e:?}");
    // tokens from files too
    std::fs::write(dir.join("esc.hkl"), b"0 0 1 10\n1 0 \x1b]0;title\x07 20\n").unwrap();
    let out = nanobragg(&dir, &["-hkl", "esc.hkl", "-cell", "50", "-detpixels", "8"]);
    let e = assert_fails(&out, &["-hkl", "esc.hkl", "line 2", "\\u{1b}]0;title\\u{7}"]);
    assert!(!e.contains('\x1b') && !e.contains('\x07'), "{e:?}");
    let mut long = b"0 0 1 10\n0 1 0 ".to_vec();
    long.extend(std::iter::repeat_n(b'x', 1 << 20));
    std::fs::write(dir.join("long.hkl"), &long).unwrap();
    let out = nanobragg(&dir, &["-hkl", "long.hkl", "-cell", "50", "-detpixels", "8"]);
    let e = assert_fails(&out, &["-hkl", "long.hkl", "line 2", "(1048576 characters)"]);
    assert!(e.len() < 300, "{} bytes", e.len());
    let out = run(&dir, &["-gradient", "\u{202e}distance"]);
    assert!(stderr(&out).contains("unknown parameter '\\u{202e}distance'"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}
