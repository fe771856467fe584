//! Command-line errors: every bad invocation exits non-zero with a one-line
//! message naming the flag (and file), and never panics.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch directory for one test, used as the working directory so that no
/// stray Fdump.bin is picked up and nothing is written elsewhere.
fn scratch(name: &str) -> PathBuf {
    let d =
        std::env::temp_dir().join(format!("nanobragg-cli-errors-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary with `args` in `dir`.
fn run_in(dir: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run nanobragg")
}

/// Asserts that the run failed cleanly and that stderr mentions every string in `needles`.
fn assert_fails(out: &Output, args: &[&str], needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: stderr lacks {n:?}: {stderr}");
    }
}

/// Runs `args` in a fresh scratch directory and checks the failure.
fn fails(name: &str, args: &[&str], needles: &[&str]) {
    let dir = scratch(name);
    let out = run_in(&dir, args);
    assert_fails(&out, args, needles);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unknown_flag_suggests() {
    fails("unknown", &["-distanse", "100"], &["unknown flag -distanse", "did you mean -distance?"]);
    fails("unknown2", &["--pixel", "0.1"], &["--pixel", "-pixel"]);
    fails("unknown3", &["-qwertyuiopasdf"], &["unknown flag -qwertyuiopasdf"]);
    // exact matching: substrings the original would have accepted are not flags here
    fails("unknown4", &["-distancex", "100"], &["-distancex"]);
}

#[test]
fn missing_values() {
    fails("missing1", &["-distance"], &["-distance needs a value (mm)"]);
    fails("missing2", &["-distance", "-pixel", "0.1"], &["-distance needs a value"]);
    fails("missing3", &["-roi", "1", "2", "3"], &["-roi needs 4 values"]);
    fails("missing4", &["-fdet_vector", "0", "0"], &["-fdet_vector needs 3 values"]);
    fails("missing5", &["-cell"], &["-cell needs"]);
    fails("missing6", &["-misset", "10", "20"], &["-misset needs"]);
    fails("missing7", &["-hkl"], &["-hkl needs a value"]);
    fails("missing8", &["-detector_abs"], &["-detector_abs needs a value"]);
}

#[test]
fn non_numeric_values() {
    fails("nan1", &["-distance", "abc"], &["-distance: 'abc' is not a number"]);
    fails("nan2", &["-lambda", "1.0A"], &["-lambda", "'1.0A'"]);
    fails("nan3", &["-N", "ten"], &["-N: 'ten' is not an integer"]);
    fails("nan4", &["-detpixels", "1e3"], &["-detpixels", "not an integer"]);
    fails("nan5", &["-Xbeam", "nan"], &["-Xbeam", "not a number"]);
    fails("nan6", &["-pixel", "inf"], &["-pixel", "must be finite"]);
}

#[test]
fn out_of_range_values() {
    for (flag, value) in [
        ("-pixel", "0"),
        ("-pixel", "-0.1"),
        ("-detpixels", "-5"),
        ("-detpixels", "0"),
        ("-lambda", "0"),
        ("-energy", "0"),
        ("-distance", "0"),
        ("-N", "-1"),
        ("-Na", "-2"),
        ("-mosaic", "-1"),
        ("-oversample", "-3"),
        ("-threads", "-1"),
        ("-detector_thick", "-10"),
        ("-beamsize", "0"),
    ] {
        fails("range", &[flag, value], &[flag, value, "is not allowed"]);
    }
    fails("range-cell", &["-cell", "0", "10", "10"], &["-cell", "'0'"]);
    fails("range-vec", &["-beam_vector", "0", "0", "0"], &["-beam_vector", "zero vector"]);
}

#[test]
fn bad_words() {
    fails("word1", &["-pivot", "middle"], &["-pivot", "'middle'", "sample, beam"]);
    fails("word2", &["-dtype", "float16"], &["-dtype", "float64, float32"]);
    fails("word3", &["-device", "tpu"], &["-device", "cpu, cuda, auto"]);
}

#[test]
fn unexpected_arguments() {
    fails("unexp1", &["image.img"], &["unexpected argument 'image.img'"]);
    fails("unexp2", &["-N", "3", "4"], &["unexpected argument '4'"]);
    fails(
        "unexp3",
        &["-cell", "50", "60", "70", "-90", "90", "90"],
        &["unexpected argument '-90'", "-cell"],
    );
}

#[test]
fn missing_input_files() {
    for flag in ["-hkl", "-mat", "-sourcefile", "-img", "-mask"] {
        fails("nofile", &[flag, "no_such_file.txt"], &[flag, "no_such_file.txt", "no such file"]);
    }
    fails("dirfile", &["-hkl", "."], &["-hkl", "not a regular file"]);
}

#[test]
fn malformed_input_files() {
    let dir = scratch("malformed");
    std::fs::write(dir.join("short.mat"), "1 2 3\n4 5 6\n").unwrap();
    std::fs::write(dir.join("word.mat"), "1 2 3\n4 x 6\n7 8 9\n").unwrap();
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    std::fs::write(dir.join("bad.txt"), "0 0 -10 1\n0 zero -10\n").unwrap();
    std::fs::write(dir.join("notsmv.img"), vec![b'x'; 1024]).unwrap();
    std::fs::write(dir.join("bad.hkl"), "1 2 3\n").unwrap();
    for (args, needles) in [
        (vec!["-mat", "short.mat"], vec!["-mat", "short.mat"]),
        (vec!["-mat", "word.mat"], vec!["-mat", "word.mat", "line 2"]),
        (vec!["-sourcefile", "empty.txt"], vec!["-sourcefile", "empty.txt"]),
        (vec!["-sourcefile", "bad.txt"], vec!["-sourcefile", "bad.txt", "line 2"]),
        (vec!["-img", "notsmv.img"], vec!["-img", "notsmv.img"]),
        (vec!["-mask", "notsmv.img"], vec!["-mask", "notsmv.img"]),
        (vec!["-hkl", "bad.hkl", "-cell", "50"], vec!["-hkl", "bad.hkl"]),
    ] {
        let out = run_in(&dir, &args);
        assert_fails(&out, &args, &needles);
    }
    // a corrupt Fdump.bin in the working directory is read when no -hkl is given
    std::fs::write(dir.join("Fdump.bin"), b"garbage").unwrap();
    let args = ["-default_F", "10", "-cell", "50"];
    assert_fails(&run_in(&dir, &args), &args, &["-dump", "Fdump.bin"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn errors_are_one_line() {
    let dir = scratch("oneline");
    let out = run_in(&dir, &["-pixel", "0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(!out.status.success());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn help_lists_flags() {
    let dir = scratch("help");
    for flag in ["-h", "--help"] {
        let out = run_in(&dir, &[flag]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
        for name in ["-distance <mm>", "-hkl <file>", "-misset", "-floatimage", "-dtype"] {
            assert!(stdout.contains(name), "{flag}: help lacks {name}");
        }
    }
    // nothing was written
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ignored_flags_warn_on_stderr_in_one_line() {
    let dir = scratch("ignored");
    let base = ["-default_F", "1", "-cell", "50", "-detpixels", "4", "-nopgm", "-nonoise"];
    // (-stol, -4stol, -Q, -density, -MW, -molecules act: tests/stol.rs)
    for extra in [&["-stolout", "x"][..], &["-coherent"]] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let out = run_in(&dir, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert_eq!(
            stderr,
            format!("warning: flag {} has no effect in nanoBragg; ignored\n", extra[0]),
            "{args:?}"
        );
        assert!(!stdout.contains("ignored"), "{args:?}: {stdout}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unknown_flags_name_the_closest_new_flag() {
    fails("unknown-new1", &["-printout_pixle", "1", "2"], &["did you mean -printout_pixel?"]);
    fails("unknown-new2", &["-noprogres"], &["did you mean -noprogress?"]);
    fails("unknown-new3", &["-dtyp", "float32"], &["did you mean -dtype?"]);
}

/// Without the `cuda` feature, `-device cuda` is a clear error (never a panic)
/// and `-device auto` falls back to the CPU.
#[cfg(not(feature = "cuda"))]
#[test]
fn device_cuda_without_support() {
    let base = ["-default_F", "100", "-cell", "100", "100", "100", "90", "90", "90", "-N", "2"];
    let small = ["-detpixels", "16", "-nonoise", "-nopgm", "-floatfile", "f.bin"];
    let mut args: Vec<&str> = base.iter().chain(small.iter()).copied().collect();
    args.extend(["-device", "cuda"]);
    fails("device-cuda", &args, &["-device cuda", "CUDA support"]);
    let dir = scratch("device-auto");
    let n = args.len();
    args[n - 1] = "auto";
    let out = run_in(&dir, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::metadata(dir.join("f.bin")).unwrap().len(), 16 * 16 * 4);
    std::fs::remove_dir_all(&dir).ok();
}
