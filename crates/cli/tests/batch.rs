//! `-batch`: each shot equals the single run with the same `-misset`.

use std::path::PathBuf;
use std::process::Command;

mod common;

fn scratch(name: &str) -> PathBuf {
    common::scratch("batch", name)
}

const BASE: [&str; 17] = [
    "-default_F",
    "100",
    "-cell",
    "70",
    "80",
    "90",
    "75",
    "85",
    "95",
    "-N",
    "4",
    "-lambda",
    "1.0",
    "-distance",
    "100",
    "-detpixels",
    "96",
];

fn run(dir: &PathBuf, extra: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .args(BASE)
        .args(extra)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn batch_shots_equal_single_runs() {
    let dir = scratch("eq");
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
fn malformed_batch_file_is_an_error() {
    let dir = scratch("bad");
    std::fs::write(dir.join("shots.txt"), "1 2\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .args(BASE)
        .args(["-batch", "shots.txt"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-batch") && err.contains("line 1"), "{err}");
    assert!(!err.contains("panicked"));
    std::fs::remove_dir_all(&dir).ok();
}
