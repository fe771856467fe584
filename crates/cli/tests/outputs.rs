//! Outputs are replaced atomically: a run that fails or is interrupted
//! leaves the previous outputs (their bytes and their inodes) as they were
//! and no temporary behind; a run that succeeds replaces them whole.

#![cfg(unix)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MODEL: &str = "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100 \
                     -floatfile f.bin -intfile i.img -pgmfile p.pgm -noisefile n.img";

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nanobragg-outputs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn nanobragg(dir: &Path, args: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nanobragg"));
    cmd.args(args.split_whitespace()).current_dir(dir);
    cmd
}

fn run(dir: &Path, args: &str) -> Output {
    let out = nanobragg(dir, args).output().expect("run nanobragg");
    assert!(out.status.success(), "{args}: {}", String::from_utf8_lossy(&out.stderr));
    out
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

/// Every file in `dir` with its bytes and inode.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u64)> {
    names(dir)
        .into_iter()
        .map(|n| {
            let p = dir.join(&n);
            (n, std::fs::read(&p).unwrap(), std::fs::metadata(&p).unwrap().ino())
        })
        .collect()
}

/// A run that fails after rendering, because one of its outputs cannot be
/// written (/dev/full: every write fails), changes none of the old outputs
/// and leaves no temporary.
#[test]
fn a_failed_run_keeps_the_old_outputs() {
    if !Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full");
        return;
    }
    let dir = scratch("failed");
    run(&dir, &format!("{MODEL} -detpixels 64 -seed 1"));
    let before = snapshot(&dir);
    assert_eq!(before.len(), 4);
    for flag in ["-floatfile", "-intfile", "-pgmfile", "-noisefile"] {
        // another image, so that any output written would differ
        let args = format!("{MODEL} -detpixels 48 -seed 2 {flag} /dev/full");
        let out = nanobragg(&dir, &args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: the run succeeded");
        assert!(stderr.contains(flag) && stderr.contains("/dev/full"), "{flag}: {stderr}");
        assert!(snapshot(&dir) == before, "{flag}: the old outputs changed: {:?}", names(&dir));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGINT or SIGTERM during a long render leaves the old outputs as they
/// were and no temporary, and the exit status tells of the signal.
#[test]
fn an_interrupted_run_keeps_the_old_outputs() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("interrupted");
    run(&dir, &format!("{MODEL} -detpixels 64"));
    let before = snapshot(&dir);
    for (signal, number) in [("-INT", 2), ("-TERM", 15)] {
        // 64 samples per pixel over 4096² pixels on one thread: seconds even
        // with AVX-512 (the run is interrupted after 0.2 s)
        let mut child =
            nanobragg(&dir, &format!("{MODEL} -detpixels 4096 -oversample 8 -threads 1"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
        // the outputs are open (under temporary names) before the report is printed
        let mut first = [0u8; 1];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
        assert!(names(&dir).iter().any(|n| n.starts_with(".f.bin.tmp.")), "{:?}", names(&dir));
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it was interrupted");
        let kill = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
        assert!(kill.success());
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(number), "{status:?}");
        assert!(snapshot(&dir) == before, "{signal}: the old outputs changed: {:?}", names(&dir));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run over old outputs writes the bytes of the same run in an empty
/// directory, as new files (new inodes) whatever the old ones held; an
/// output reached through a symbolic link replaces the file the link points
/// to and keeps the link; another hard link to an old output keeps the old
/// content.
#[test]
fn old_outputs_are_replaced_whole() {
    let (old, fresh) = (scratch("old"), scratch("fresh"));
    let small = format!("{MODEL} -detpixels 40 -seed 3");
    run(&old, &small);
    let before = snapshot(&old);
    std::fs::hard_link(old.join("f.bin"), old.join("f.bin.keep")).unwrap();
    std::fs::rename(old.join("i.img"), old.join("i.real")).unwrap();
    std::os::unix::fs::symlink("i.real", old.join("i.img")).unwrap();
    let larger = format!("{MODEL} -detpixels 48 -roi 3 25 2 20 -oversample 2 -seed 3");
    run(&old, &larger);
    run(&fresh, &larger);
    for f in ["f.bin", "i.img", "p.pgm", "n.img"] {
        let (a, b) = (std::fs::read(old.join(f)).unwrap(), std::fs::read(fresh.join(f)).unwrap());
        assert!(a == b, "{f} differs from a fresh run");
    }
    for (name, bytes, inode) in &before {
        let real = if name == "i.img" { "i.real" } else { name.as_str() };
        assert_ne!(std::fs::metadata(old.join(real)).unwrap().ino(), *inode, "{name}: same inode");
        if name == "f.bin" {
            assert!(std::fs::read(old.join("f.bin.keep")).unwrap() == *bytes);
        }
    }
    assert!(std::fs::symlink_metadata(old.join("i.img")).unwrap().file_type().is_symlink());
    assert_eq!(names(&old), ["f.bin", "f.bin.keep", "i.img", "i.real", "n.img", "p.pgm"]);
    std::fs::remove_dir_all(&old).unwrap();
    std::fs::remove_dir_all(&fresh).unwrap();
}

/// One file named by two output flags holds the image written last, as with
/// nanoBragg.c (which writes the float image, then the int image): the int
/// image, over an old file of either kind, and no temporary is left.
#[test]
fn an_output_named_twice_holds_the_last_image() {
    let dir = scratch("twice");
    let model = "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100 \
                 -detpixels 64 -nopgm -nonoise";
    run(&dir, &format!("{model} -floatfile f.bin -intfile i.img"));
    let int = std::fs::read(dir.join("i.img")).unwrap();
    for _ in 0..5 {
        run(&dir, &format!("{model} -floatfile x.img -intfile x.img"));
        assert!(std::fs::read(dir.join("x.img")).unwrap() == int);
    }
    assert_eq!(names(&dir), ["f.bin", "i.img", "x.img"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
