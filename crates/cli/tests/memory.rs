//! Runs too large for the memory this process may allocate are refused up
//! front, under an address-space limit too (`ulimit -v`), with a message
//! naming the flags behind them: exit status 1, never an allocation failure
//! (abort), and no file left behind. The Fdump file is streamed (a failed
//! write is an error) and the per-step report lines are never held.

#![cfg(unix)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const MODEL: &str = "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -pixel 0.1 \
                     -distance 100 -detpixels 64";

const GIB: u64 = 1 << 30;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nanobragg-memory-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Whether `sh` can set an address-space limit here.
fn can_limit() -> bool {
    let ok = Command::new("sh").args(["-c", "ulimit -v 4194304"]).status();
    if !ok.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot set an address-space limit (ulimit -v)");
        return false;
    }
    true
}

/// nanobragg with `args`, in `dir`, under an address-space limit of `bytes`.
fn limited(dir: &Path, bytes: u64, args: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", bytes / 1024))
        .arg(env!("CARGO_BIN_EXE_nanobragg"))
        .args(args.split_whitespace())
        .current_dir(dir);
    cmd
}

/// Exit status 1 with an error naming each of `words`, no abort, and no
/// output written.
fn refused(out: &Output, dir: &Path, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("memory allocation of"), "{stderr}");
    for w in words {
        assert!(stderr.contains(w), "{w:?} not in {stderr}");
    }
    assert!(out.stdout.is_empty(), "refused before the report");
    assert_eq!(names(dir), Vec::<String>::new());
}

/// The reproducers that need more than 4 GiB, refused up front.
#[test]
fn large_sampling_is_refused_under_an_address_space_limit() {
    if !can_limit() {
        return;
    }
    for (extra, words) in [
        ("-mosaic_dom 100000000 -mosaic 1", &["-mosaic_domains", "100000000 mosaic domains"][..]),
        ("-phisteps 30000000 -osc 1", &["-phisteps", "30000000 phi steps"]),
        ("-divsteps 10000 -divergence 1", &["-divsteps", "100000000 source points"]),
    ] {
        let dir = scratch("refused");
        let out = limited(&dir, 4 * GIB, &format!("{MODEL} {extra}")).output().unwrap();
        refused(&out, &dir, &[words, &["memory", "address-space"]].concat());
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // ten million wavelengths take about 4 GB: under 1 GiB, refused
    let dir = scratch("dispersion");
    let args = format!("{MODEL} -dispsteps 10000000 -dispersion 1");
    let out = limited(&dir, GIB, &args).output().unwrap();
    refused(&out, &dir, &["10000000 source points", "-dispsteps", "memory"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A 31-byte hkl file asking for a 2.5 GB grid: under a 4 GiB limit it
/// renders (the grid held once, the Fdump file streamed) or, where less
/// memory is free, is refused naming the file; never an abort. Under 2 GiB
/// it is refused.
#[test]
fn a_large_structure_factor_grid_is_held_once() {
    if !can_limit() {
        return;
    }
    let dir = scratch("grid");
    std::fs::write(dir.join("big.hkl"), "-339 -339 -339 1\n339 339 339 1\n").unwrap();
    let model = MODEL.replace("-default_F 100 ", "");
    let args = format!("{model} -hkl big.hkl -dump /dev/null -floatfile f.bin -nonoise -nopgm");
    let out = limited(&dir, 4 * GIB, &args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    match out.status.code() {
        Some(0) => {
            assert!(stdout.contains("writing dump file for next time: /dev/null"), "{stdout}");
            assert!(stdout.contains("2 initialized hkls"), "{stdout}");
            assert_eq!(names(&dir), ["big.hkl", "f.bin", "intimage.img"]);
        }
        Some(1) => {
            assert!(stderr.contains("-hkl big.hkl: structure factor grid needs"), "{stderr}");
            assert_eq!(names(&dir), ["big.hkl"]);
        }
        other => panic!("exit {other:?}: {stderr}"),
    }
    assert!(!stderr.contains("memory allocation of"), "{stderr}");
    let out = limited(&dir, 2 * GIB, &args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("-hkl big.hkl: structure factor grid needs 2.3 GiB"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A full disk while the Fdump file is written is an error naming `-dump`
/// and the file, with no output left; a dump file that cannot be opened is
/// nanoBragg.c's warning, and the run goes on.
#[test]
fn fdump_write_failure_is_an_error_open_failure_a_warning() {
    if !Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full");
        return;
    }
    let dir = scratch("dump");
    std::fs::write(dir.join("s.hkl"), "-3 -3 -3 1\n3 3 3 1\n").unwrap();
    let model = MODEL.replace("-default_F 100 ", "-hkl s.hkl ");
    let run = |extra: &str| {
        Command::new(env!("CARGO_BIN_EXE_nanobragg"))
            .args(format!("{model} {extra}").split_whitespace())
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let out = run("-dump /dev/full");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("-dump: cannot write '/dev/full'"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("writing dump file for next time: /dev/full\n"), "{stdout}");
    assert_eq!(names(&dir), ["s.hkl"]);

    let out = run("-dump no/such/dir/F.bin");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\nWARNING: unable to open dump file: no/such/dir/F.bin\n"));
    assert!(!stdout.contains("writing dump file"), "{stdout}");

    // written whole, through a temporary that is gone
    let out = run("-dump F.bin");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump = std::fs::read(dir.join("F.bin")).unwrap();
    assert!(dump.starts_with(b"-3 3 -3 3 -3 3\n\x0c"));
    assert_eq!(dump.len(), 16 + 8 * 8 * 8 * 8);
    let names = names(&dir);
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A hundred million sensor layers: their report lines are printed as they
/// come (under a 1 GiB limit, where holding them would abort), and a reader
/// that stops reading ends the run quietly with no file left.
#[test]
fn per_layer_report_lines_are_streamed() {
    if !can_limit() {
        return;
    }
    let dir = scratch("layers");
    let args = format!("{MODEL} -thicksteps 100000000 -detector_thick 100 -detector_abs 100");
    let mut child =
        limited(&dir, GIB, &args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut last = String::new();
    for _ in 0..1_000_000 {
        line.clear();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if line.starts_with("thick") {
            std::mem::swap(&mut last, &mut line);
        }
    }
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(last.starts_with("thick9999"), "{last:?}: {stderr}");
    // a reader gone away ends the run quietly, as SIGPIPE ends the C program
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    assert_eq!(names(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}
