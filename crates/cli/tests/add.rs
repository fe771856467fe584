//! `nanobragg add`: sums of float images, scales, and refusals of images that
//! do not match.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("add-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn floats(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn read(path: &Path) -> Vec<f32> {
    fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn add(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .arg("add")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn sums_images_with_scales() {
    let dir = scratch("sum");
    // more values than one block, so the blocked loop is crossed
    let n = 70_000;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| 1.0 / (1.0 + i as f32)).collect();
    fs::write(dir.join("a.bin"), floats(&a)).unwrap();
    fs::write(dir.join("b.bin"), floats(&b)).unwrap();
    let out = add(&dir, &["a.bin", "b.bin", "-floatfile", "sum.bin"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sum = read(&dir.join("sum.bin"));
    assert_eq!(sum.len(), n);
    for i in 0..n {
        assert_eq!(sum[i], (a[i] as f64 + b[i] as f64) as f32, "pixel {i}");
    }
    let out = add(&dir, &["a.bin", "b.bin", "-scale", "2,-1", "-floatfile", "diff.bin"]);
    assert!(out.status.success());
    let diff = read(&dir.join("diff.bin"));
    assert_eq!(diff[10], (2.0 * a[10] as f64 - b[10] as f64) as f32);
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn mismatched_inputs_are_refused_and_nothing_is_written() {
    let dir = scratch("bad");
    fs::write(dir.join("a.bin"), floats(&[1.0; 16])).unwrap();
    fs::write(dir.join("b.bin"), floats(&[1.0; 15])).unwrap();
    fs::write(dir.join("odd.bin"), [0u8; 7]).unwrap();
    fs::write(dir.join("out.bin"), b"old").unwrap();
    for (args, want) in [
        (&["a.bin", "b.bin", "-floatfile", "out.bin"][..], "differ in size"),
        (&["a.bin", "odd.bin", "-floatfile", "out.bin"][..], "whole number of 4-byte floats"),
        (&["a.bin", "missing.bin", "-floatfile", "out.bin"][..], "missing.bin"),
        (
            &["a.bin", "a.bin", "-scale", "1", "-floatfile", "out.bin"][..],
            "-scale has 1 values for 2",
        ),
        (&["a.bin", "a.bin"][..], "no output file"),
        (&["a.bin", "-bogus", "-floatfile", "out.bin"][..], "unknown flag -bogus"),
    ] {
        let out = add(&dir, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(fs::read(dir.join("out.bin")).unwrap(), b"old", "{args:?}");
    }
    fs::remove_dir_all(&dir).ok();
}
