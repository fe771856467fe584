//! `-batch`: each shot equals the single run with the same `-misset`.

use std::path::Path;
use std::process::Output;

mod common;
use common::{nanobragg, scratch, TRICLINIC};

/// Runs the triclinic crystal at 96² with `extra`; must succeed.
fn run(dir: &Path, extra: &[&str]) -> Output {
    let base = ["-N", "4", "-lambda", "1.0", "-distance", "100", "-detpixels", "96"];
    let out = nanobragg(dir, &[&TRICLINIC[..], &base, extra].concat());
    assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn batch_shots_equal_single_runs() {
    let dir = scratch("batch", "eq");
    std::fs::write(dir.join("shots.txt"), "0 0 0\n# comment\n10 -20 30.5\n\n4,5,6\n").unwrap();
    run(&dir, &["-batch", "shots.txt", "-floatfile", "shot.bin", "-device", "cpu"]);
    for (i, m) in [["0", "0", "0"], ["10", "-20", "30.5"], ["4", "5", "6"]].iter().enumerate() {
        let name = format!("single{i}.bin");
        run(&dir, &["-misset", m[0], m[1], m[2], "-floatfile", &name, "-nonoise", "-nopgm"]);
        let single = std::fs::read(dir.join(&name)).unwrap();
        let shot = std::fs::read(dir.join(format!("shot_{:05}.bin", i + 1))).unwrap();
        assert_eq!(single.len(), 96 * 96 * 4);
        assert!(single == shot, "shot {} differs from the single run", i + 1);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn batch_honours_exact() {
    let dir = scratch("batch", "exact");
    std::fs::write(dir.join("shots.txt"), "10 -20 30.5\n").unwrap();
    // (three phi steps: here the fast and the exact image differ in a pixel)
    let phi = ["-phi", "0", "-osc", "1", "-phisteps", "3", "-nonoise", "-nopgm"];
    run(&dir, &[&phi[..], &["-batch", "shots.txt", "-floatfile", "shot.bin", "-exact"]].concat());
    let single = [&phi[..], &["-misset", "10", "-20", "30.5"]].concat();
    run(&dir, &[&single[..], &["-exact", "-floatfile", "exact.bin"]].concat());
    run(&dir, &[&single[..], &["-floatfile", "fast.bin"]].concat());
    let shot = std::fs::read(dir.join("shot_00001.bin")).unwrap();
    assert!(shot == std::fs::read(dir.join("exact.bin")).unwrap(), "-batch -exact differs");
    if shot == std::fs::read(dir.join("fast.bin")).unwrap() {
        eprintln!("note: the fast and exact images agree on this CPU: -exact not told apart");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_batch_file_is_an_error() {
    let dir = scratch("batch", "bad");
    std::fs::write(dir.join("shots.txt"), "1 2\n").unwrap();
    let out = nanobragg(&dir, &[&TRICLINIC[..], &["-batch", "shots.txt"]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-batch") && err.contains("line 1"), "{err}");
    assert!(!err.contains("panicked"));
    std::fs::remove_dir_all(&dir).ok();
}
