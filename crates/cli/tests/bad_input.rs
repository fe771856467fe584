//! Bad input files and values: every case exits non-zero with one line on
//! stderr naming the problem and the flag or file, does not panic, and leaves
//! no output behind (no image, no Fdump file, no temporary file).
//!
//! `cli_errors.rs` covers argument syntax (unknown flags, missing or
//! non-numeric values, missing files); this file covers what only shows up
//! once files are read or the plan is resolved, and checks that nothing is
//! written.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Arguments of a small run that succeeds; tests add one bad thing to it.
const OK: &[&str] = &[
    "-cell",
    "50",
    "60",
    "70",
    "90",
    "90",
    "90",
    "-N",
    "2",
    "-detpixels",
    "8",
    "-default_F",
    "10",
];

/// Output flags whose values are files the run would write.
const OUTPUT_FLAGS: &[&str] = &[
    "-floatfile",
    "-floatimage",
    "-intfile",
    "-intimage",
    "-pgmfile",
    "-pgmimage",
    "-noisefile",
    "-noiseimage",
    "-dump",
];

static N: AtomicUsize = AtomicUsize::new(0);

/// A fresh working directory with the input files a test put there.
struct Scratch {
    dir: PathBuf,
    inputs: BTreeSet<String>,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir()
            .join(format!("nanobragg-bad-input-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir, inputs: BTreeSet::new() }
    }

    /// Writes an input file.
    fn file(&mut self, name: &str, bytes: impl AsRef<[u8]>) -> &mut Self {
        std::fs::write(self.dir.join(name), bytes).unwrap();
        self.inputs.insert(name.to_string());
        self
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_nanobragg"))
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("run nanobragg")
    }

    /// Files now in the directory that the test did not put there.
    fn written(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !self.inputs.contains(n))
            .collect()
    }

    /// Runs `args` and checks a clean failure: non-zero exit, one `error:`
    /// line mentioning every needle, no panic, nothing written.
    fn fails(&self, args: &[&str], needles: &[&str]) {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded; stderr: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: not one line: {stderr}");
        assert!(lines[0].starts_with("error: "), "{args:?}: {stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{args:?}: stderr lacks {n:?}: {stderr}");
        }
        let written = self.written();
        assert!(written.is_empty(), "{args:?} wrote {written:?}; stderr: {stderr}");
        for pair in args.windows(2) {
            if OUTPUT_FLAGS.contains(&pair[0])
                && !pair[1].is_empty()
                && !self.inputs.contains(pair[1])
            {
                let p = Path::new(pair[1]);
                let p = if p.is_absolute() { p.to_path_buf() } else { self.dir.join(p) };
                assert!(!p.is_file(), "{args:?} wrote {}", p.display());
            }
        }
    }

    /// Runs the base case plus `extra` and checks the failure.
    fn fails_with(&self, extra: &[&str], needles: &[&str]) {
        let args: Vec<&str> = OK.iter().chain(extra).copied().collect();
        self.fails(&args, needles);
    }

    /// Runs `args` and checks that it succeeds.
    fn succeeds(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An SMV image: `keys` are extra header lines (`KEY=value;`), the header is
/// padded to 512 bytes and followed by `data_bytes` bytes of pixels (the
/// right number for `w` x `h` when `None`).
fn smv(w: usize, h: usize, keys: &str, data_bytes: Option<usize>) -> Vec<u8> {
    let mut head = format!(
        "{{\nHEADER_BYTES=  512;\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE=unsigned_short;\nSIZE1={w};\nSIZE2={h};\n{keys}}}\x0c"
    );
    while head.len() < 512 {
        head.push(' ');
    }
    let mut bytes = head.into_bytes();
    let n = data_bytes.unwrap_or(2 * w * h);
    bytes.extend((0..n).map(|i| if i % 2 == 0 { 1 } else { 0 }));
    bytes
}

/// The header lines of a typical image.
const KEYS: &str = "PIXEL_SIZE=0.1;\nDISTANCE=100;\nWAVELENGTH=1;\n";

#[test]
fn hkl_with_a_word_for_a_number() {
    let mut s = Scratch::new("hkl-word");
    s.file("words.hkl", "0 0 1 10\n1 0 x 20\n");
    s.fails(&["-hkl", "words.hkl", "-cell", "50"], &["-hkl", "words.hkl", "line 2", "'x'"]);
    s.file("f.hkl", "0 0 1 10\n1 0 0 twenty\n");
    s.fails(&["-hkl", "f.hkl", "-cell", "50"], &["-hkl", "f.hkl", "line 2", "twenty"]);
}

#[test]
fn hkl_with_missing_columns() {
    let mut s = Scratch::new("hkl-cols");
    s.file("cols.hkl", "0 0 1 10\n1 0\n2 0 0 5\n");
    s.fails(&["-hkl", "cols.hkl", "-cell", "50"], &["-hkl", "cols.hkl", "line 2", "h k l F"]);
}

#[test]
fn hkl_with_unusable_indices() {
    let mut s = Scratch::new("hkl-nan");
    s.file("nan.hkl", "0 0 1 10\n1 nan 0 20\n");
    s.fails(
        &["-hkl", "nan.hkl", "-cell", "50"],
        &["-hkl", "nan.hkl", "line 2: NaN is not a finite"],
    );
    s.file("fnan.hkl", "0 0 1 10\n0 0 0 nan\n");
    s.fails(
        &["-hkl", "fnan.hkl", "-cell", "50"],
        &["-hkl", "fnan.hkl", "line 2: NaN is not a finite"],
    );
    s.file("big.hkl", "0 0 1 10\n1 0 1e12 20\n");
    s.fails(&["-hkl", "big.hkl", "-cell", "50"], &["-hkl", "big.hkl", "Miller index"]);
}

#[test]
fn a_detector_response_without_a_noise_image() {
    let s = Scratch::new("response-nonoise");
    for flag in
        [&["-readout_noise", "3"][..], &["-gain", "2"], &["-psf", "gauss"], &["-bits", "32"]]
    {
        let mut args = vec![
            "-cell",
            "50",
            "-default_F",
            "1",
            "-detpixels",
            "8",
            "-nonoise",
            "-intfile",
            "i.img",
        ];
        args.extend(flag);
        s.fails(&args, &["shape the noise image", "-nonoise leaves none"]);
    }
}

#[test]
fn hkl_ranges_too_large_for_memory() {
    let mut s = Scratch::new("hkl-huge");
    // a 4e9 x 1 x 1 grid of doubles: 32 GB, refused before allocating
    s.file("huge.hkl", "-2000000000 0 0 1\n2000000000 0 0 1\n");
    s.fails(
        &["-hkl", "huge.hkl", "-cell", "50"],
        &["-hkl", "huge.hkl", "structure factor grid", "memory"],
    );
    // each axis modest, the product far too large
    s.file("cube.hkl", "-100000 -100000 -100000 1\n100000 100000 100000 1\n");
    s.fails(&["-hkl", "cube.hkl", "-cell", "50"], &["-hkl", "cube.hkl", "memory"]);
}

#[test]
fn malformed_orientation_matrix() {
    let mut s = Scratch::new("mat");
    s.file("nan.mat", "nan 0 0\n0 0.02 0\n0 0 0.02\n");
    s.fails(
        &["-mat", "nan.mat", "-default_F", "1", "-detpixels", "8"],
        &["-mat", "nan.mat", "line 1"],
    );
    s.file("inf.mat", "0.02 0 0\n0 inf 0\n0 0 0.02\n");
    s.fails(
        &["-mat", "inf.mat", "-default_F", "1", "-detpixels", "8"],
        &["-mat", "inf.mat", "line 2"],
    );
    // nine numbers, but no crystal: coplanar reciprocal vectors
    s.file("zero.mat", "0 0 0\n0 0 0\n0 0 0\n");
    s.fails(
        &["-mat", "zero.mat", "-default_F", "1", "-detpixels", "8"],
        &["-mat", "zero.mat", "coplanar"],
    );
}

#[test]
fn source_file_with_bad_columns() {
    let mut s = Scratch::new("src");
    s.file("inf.txt", "-10 0 0 1 1e-10\n-10 inf 0 1 1e-10\n");
    s.fails_with(&["-sourcefile", "inf.txt"], &["-sourcefile", "inf.txt", "line 2"]);
    s.file("word.txt", "-10 0 0 1 1e-10 \n-10 0 0 heavy\n");
    s.fails_with(&["-sourcefile", "word.txt"], &["-sourcefile", "word.txt", "line 2", "'heavy'"]);
    s.file("lambda0.txt", "-10 0 0 1 0\n");
    s.fails_with(&["-sourcefile", "lambda0.txt"], &["-sourcefile", "lambda0.txt", "wavelength"]);
    s.file("lambdaneg.txt", "-10 0 0 1 -1e-10\n");
    s.fails_with(
        &["-sourcefile", "lambdaneg.txt"],
        &["-sourcefile", "lambdaneg.txt", "wavelength"],
    );
}

#[test]
fn spectrum_file_errors_and_conflicts() {
    let mut s = Scratch::new("spectrum");
    s.file("neg.lam", "# wavelengths, weights\n1.0,1\n1.1,-2\n");
    s.fails_with(&["-spectrum", "neg.lam"], &["-spectrum", "neg.lam", "line 3", "negative"]);
    s.file("word.lam", "1.0,1\n1.1,heavy\n");
    s.fails_with(&["-spectrum", "word.lam"], &["-spectrum", "word.lam", "line 2", "'heavy'"]);
    s.file("zero.lam", "1.0,0\n1.1,0\n");
    s.fails_with(&["-spectrum", "zero.lam"], &["-spectrum", "zero.lam", "every weight is 0"]);
    s.file("lambda0.lam", "0,1\n");
    s.fails_with(&["-spectrum", "lambda0.lam"], &["-spectrum", "lambda0.lam", "not positive"]);
    s.fails_with(&["-spectrum", "none.lam"], &["-spectrum", "none.lam"]);
    s.file("ok.lam", "# wavelengths, weights\n1.0,1\n1.1,2\n");
    s.fails_with(&["-spectrum", "ok.lam", "-dispersion", "1"], &["-spectrum", "-dispersion"]);
    s.file("src.txt", "-10 0 0 1 1e-10\n");
    s.fails_with(
        &["-spectrum", "ok.lam", "-sourcefile", "src.txt"],
        &["-spectrum", "ok.lam", "-sourcefile"],
    );
    // the report names the spectrum
    let args: Vec<&str> = OK.iter().chain(&["-spectrum", "ok.lam"]).copied().collect();
    let out = s.succeeds(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("spectrum: 2 wavelengths"), "{stdout}");
    assert!(stdout.contains("created a total of 2 sources"), "{stdout}");
}

#[test]
fn truncated_or_garbled_smv_headers() {
    for flag in ["-img", "-mask"] {
        let mut s = Scratch::new("smv");
        let good = smv(8, 8, KEYS, None);
        s.file("head.img", &good[..300]);
        s.fails_with(&[flag, "head.img"], &[flag, "head.img", "shorter than"]);
        s.file("data.img", &good[..512 + 50]);
        if flag == "-mask" {
            s.fails_with(&[flag, "data.img"], &[flag, "data.img", "truncated"]);
        }
        let garbled = String::from_utf8_lossy(&good[..512]).replace("SIZE1=8;", "SIZE1=x;");
        let mut garbled = garbled.into_bytes();
        garbled.extend_from_slice(&good[512..]);
        s.file("garbled.img", garbled);
        s.fails_with(&[flag, "garbled.img"], &[flag, "garbled.img", "SIZE1"]);
        let mut nosize =
            String::from_utf8_lossy(&good[..512]).replace("SIZE2=8;", "        ").into_bytes();
        nosize.extend_from_slice(&good[512..]);
        s.file("nosize.img", nosize);
        s.fails_with(&[flag, "nosize.img"], &[flag, "nosize.img", "SIZE2"]);
        s.file("text.img", "just some text, not an image at all\n".repeat(30));
        s.fails_with(&[flag, "text.img"], &[flag, "text.img", "not an SMV image"]);
    }
}

#[test]
fn invalid_values_in_smv_headers() {
    for flag in ["-img", "-mask"] {
        let mut s = Scratch::new("smv-values");
        s.file("lambda.img", smv(8, 8, "PIXEL_SIZE=0.1;\nDISTANCE=100;\nWAVELENGTH=0;\n", None));
        s.fails_with(&[flag, "lambda.img"], &[flag, "lambda.img", "WAVELENGTH=0"]);
        s.file("pixel.img", smv(8, 8, "PIXEL_SIZE=0;\nDISTANCE=100;\nWAVELENGTH=1;\n", None));
        s.fails_with(&[flag, "pixel.img"], &[flag, "pixel.img", "PIXEL_SIZE=0"]);
        s.file("dist.img", smv(8, 8, "PIXEL_SIZE=0.1;\nDISTANCE=-5;\nWAVELENGTH=1;\n", None));
        s.fails_with(&[flag, "dist.img"], &[flag, "dist.img", "DISTANCE=-5"]);
        // as in nanoBragg, a flag overrides the header value
        let out = s.succeeds(&[OK, &[flag, "lambda.img", "-lambda", "1"]].concat());
        assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn mask_size_disagrees_with_detector() {
    let mut s = Scratch::new("mask-size");
    s.file("m128.img", smv(128, 128, KEYS, None));
    // the mask header sets 128 x 128 first; -detpixels then changes the size
    s.fails_with(&["-mask", "m128.img", "-detpixels", "64"], &["-mask", "m128.img", "64 x 64"]);
    // the header is applied first whatever the flag order
    s.fails(
        &["-detpixels", "64", "-mask", "m128.img", "-default_F", "1", "-cell", "50"],
        &["-mask", "m128.img"],
    );
    s.fails(
        &["-mask", "m128.img", "-detpixels_x", "64", "-default_F", "1", "-cell", "50"],
        &["-mask", "m128.img", "64 x 128"],
    );
    // -detsize does not change a pixel count the mask header set (as in nanoBragg)
    s.succeeds(&[
        "-mask",
        "m128.img",
        "-detsize",
        "3.2",
        "-default_F",
        "1",
        "-cell",
        "50",
        "-nonoise",
    ]);
    // same size: fine
    s.succeeds(&["-mask", "m128.img", "-default_F", "1", "-cell", "50", "-nonoise", "-nopgm"]);
}

#[test]
fn img_size_disagreeing_with_detector_only_warns() {
    // nanoBragg reads -img pixels but never uses them: a size mismatch is
    // reported, not refused
    let mut s = Scratch::new("img-size");
    s.file("i128.img", smv(128, 128, KEYS, None));
    let out = s.succeeds(&[OK, &["-img", "i128.img", "-detpixels", "16"]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("warning: -img i128.img") && stderr.contains("16 x 16"), "{stderr}");
}

#[test]
fn fdump_of_the_wrong_length() {
    let mut s = Scratch::new("fdump");
    // header for h 0..1, k 0..0, l 0..1: (2+1)(1+1)(2+1) = 18 doubles
    let mut dump = b"0 1 0 0 0 1\n\x0c".to_vec();
    dump.extend(std::iter::repeat_n(0u8, 18 * 8 - 8));
    s.file("short.bin", &dump);
    s.fails(
        &["-dump", "short.bin", "-cell", "50", "-detpixels", "8"],
        &["-dump", "short.bin", "144 bytes"],
    );
    dump.extend(std::iter::repeat_n(0u8, 16));
    s.file("long.bin", &dump);
    s.fails(&["-dump", "long.bin", "-cell", "50", "-detpixels", "8"], &["-dump", "long.bin"]);
    s.file("text.bin", "not a dump\n");
    s.fails(&["-dump", "text.bin", "-cell", "50", "-detpixels", "8"], &["-dump", "text.bin"]);
    // the default name, left in the working directory by an earlier run
    s.file("Fdump.bin", &dump[..40]);
    s.fails(&["-cell", "50", "-detpixels", "8", "-default_F", "1"], &["-dump", "Fdump.bin"]);
}

#[test]
fn values_that_make_no_sense() {
    let s = Scratch::new("values");
    for (flag, value, why) in [
        ("-pixel", "0", "must be > 0"),
        ("-pixel", "-0.1", "must be > 0"),
        ("-detpixels", "-5", "must be > 0"),
        ("-detpixels", "0", "must be > 0"),
        ("-lambda", "0", "must be > 0"),
        ("-energy", "0", "must be > 0"),
        ("-energy", "inf", "finite"),
        ("-energy", "-inf", "finite"),
        ("-N", "-1", "must be >= 0"),
        ("-distance", "nan", "not a number"),
        ("-distance", "0", "must be > 0"),
        ("-distance", "inf", "finite"),
        ("-lambda", "NaN", "not a number"),
        ("-detsize", "0", "must be > 0"),
        ("-mosaic", "-0.5", "must be >= 0"),
        ("-oversample", "-2", "must be >= 0"),
        ("-Xbeam", "nan", "not a number"),
        ("-beamsize", "0", "must be > 0"),
    ] {
        s.fails_with(&[flag, value], &[flag, &format!("'{value}'"), why]);
    }
    s.fails_with(&["-cell", "50", "0", "-10"], &["-cell"]);
    s.fails_with(&["-spindle_axis", "0", "0", "0"], &["-spindle_axis", "zero vector"]);
}

#[test]
fn runs_too_large_for_memory() {
    let s = Scratch::new("too-large");
    // 1e10 pixels
    s.fails_with(&["-detpixels", "100000"], &["-detpixels", "100000 x 100000", "memory"]);
    s.fails_with(
        &["-detpixels_f", "3000000", "-detpixels_s", "3000000"],
        &["-detpixels", "memory"],
    );
    s.fails(
        &["-cell", "50", "-default_F", "1", "-detsize", "1e5", "-pixel", "0.002"],
        &["-detsize", "memory"],
    );
    // the rotated cells and the source list are arrays too
    s.fails_with(&["-osc", "1", "-phisteps", "2000000000"], &["-phisteps", "memory"]);
    s.fails_with(
        &["-mosaic", "1", "-mosaic_domains", "2000000000"],
        &["-mosaic_domains", "memory"],
    );
    s.fails_with(&["-divergence", "1", "-divsteps", "200000"], &["-divsteps", "memory"]);
}

#[test]
fn missing_input_files() {
    let mut s = Scratch::new("missing");
    s.fails_with(&["-hkl", "nodir/f.hkl"], &["-hkl", "nodir/f.hkl", "no such file"]);
    s.fails_with(&["-mask", "absent.img"], &["-mask", "absent.img", "no such file"]);
    // a -dump that does not exist is no error by itself (nanoBragg then
    // looks no further), but a run with no structure factors at all is
    s.fails(&["-cell", "50", "-dump", "absent.bin", "-detpixels", "8"], &["-hkl", "-default_F"]);
    s.file("f.hkl", "0 0 1 10\n");
    s.fails(&["-hkl", "f.hkl"], &["-cell", "-mat"]);
}

#[test]
fn unwritable_outputs_write_nothing() {
    let mut s = Scratch::new("unwritable");
    s.file("f.hkl", "0 0 1 10\n1 0 0 20\n");
    let hkl = ["-hkl", "f.hkl", "-cell", "50", "-detpixels", "8"];
    for (flag, path, why) in [
        ("-floatfile", "/nonexistent_dir/x.bin", "does not exist"),
        ("-intfile", "nodir/x.img", "does not exist"),
        ("-pgmfile", "nodir/x.pgm", "does not exist"),
        // the last file written: the float, int and PGM images must not be left behind
        ("-noisefile", "nodir/deeper/x.img", "does not exist"),
        ("-floatfile", ".", "is a directory"),
        ("-noisefile", "f.hkl/x.img", "not a directory"),
        ("-floatfile", "", "empty"),
    ] {
        // with -hkl, the Fdump file is not written either
        s.fails(&[&hkl[..], &[flag, path]].concat(), &[flag, path, why]);
        s.fails_with(&[flag, path], &[flag, path, why]);
    }
}

#[cfg(unix)]
#[test]
fn read_only_directory() {
    use std::os::unix::fs::PermissionsExt;
    let mut s = Scratch::new("read-only");
    s.file("f.hkl", "0 0 1 10\n");
    let ro = s.dir.join("ro");
    std::fs::create_dir(&ro).unwrap();
    s.inputs.insert("ro".into());
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // root may write anyway: then there is nothing to test
    let probe = ro.join("probe");
    if std::fs::write(&probe, b"x").is_ok() {
        let _ = std::fs::remove_file(&probe);
    } else {
        s.fails_with(
            &["-noisefile", "ro/noise.img"],
            &["-noisefile", "ro/noise.img", "ermission denied"],
        );
        s.fails(
            &["-hkl", "f.hkl", "-cell", "50", "-detpixels", "8", "-intfile", "ro/int.img"],
            &["-intfile", "ro/int.img"],
        );
        assert_eq!(std::fs::read_dir(&ro).unwrap().count(), 0);
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_good_run_writes_its_outputs_and_nothing_else() {
    let mut s = Scratch::new("good");
    s.file("f.hkl", "0 0 1 10\n1 0 0 20\n");
    s.succeeds(&["-hkl", "f.hkl", "-cell", "50", "-detpixels", "8"]);
    let written: BTreeSet<String> = s.written().into_iter().collect();
    let expected: BTreeSet<String> =
        ["Fdump.bin", "floatimage.bin", "intimage.img", "image.pgm", "noiseimage.img"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    assert_eq!(written, expected);
}
