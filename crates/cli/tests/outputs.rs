//! Outputs are replaced atomically: a run that fails or is interrupted
//! leaves the previous outputs (their bytes and their inodes) as they were
//! and no temporary behind; a run that succeeds replaces them whole.

#![cfg(unix)]

mod common;

use common::signal_ignored;
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

/// SIGINT, SIGTERM or SIGABRT during a long render leaves the old outputs as they
/// were and no temporary, and the exit status tells of the signal.
#[test]
fn an_interrupted_run_keeps_the_old_outputs() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("interrupted");
    run(&dir, &format!("{MODEL} -detpixels 64"));
    let before = snapshot(&dir);
    for (signal, number) in [("-INT", 2), ("-TERM", 15), ("-ABRT", 6)] {
        if signal_ignored(number as u32) {
            // inherited by the run, which keeps an ignored signal ignored (nohup)
            continue;
        }
        // 64 samples per pixel over 4096² pixels on one thread: seconds even
        // with AVX-512 (the run is interrupted after 0.2 s); no core file
        // (SIGABRT) in the directory
        let args = format!("{MODEL} -detpixels 4096 -oversample 8 -threads 1");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("ulimit -c 0 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_nanobragg"))
            .args(args.split_whitespace())
            .current_dir(&dir)
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

/// The hidden files left in `dir` (temporaries).
fn hidden(dir: &Path) -> Vec<String> {
    names(dir).into_iter().filter(|n| n.starts_with('.')).collect()
}

/// A `-gradfile` in a missing directory is refused before anything is
/// rendered or replaced: the old images stay, no temporary is left, and the
/// message names the flag and the file once.
#[test]
fn an_unwritable_gradient_file_changes_nothing() {
    let dir = scratch("gradfile");
    run(&dir, &format!("{MODEL} -detpixels 64 -seed 1"));
    let before = snapshot(&dir);
    let args = format!("{MODEL} -detpixels 48 -seed 2 -gradient distance -gradfile no/g");
    let out = nanobragg(&dir, &args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("-gradfile") && stderr.matches("no/g_distance.bin").count() == 1,
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "rendered before refusing: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(snapshot(&dir) == before, "the old outputs changed: {:?}", names(&dir));
    // written, the derivative image comes with the others
    run(&dir, &format!("{MODEL} -detpixels 48 -seed 2 -gradient distance -gradfile g"));
    assert_eq!(std::fs::metadata(dir.join("g_distance.bin")).unwrap().len(), 48 * 48 * 4);
    assert!(hidden(&dir).is_empty(), "{:?}", names(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An empty output name is refused, naming the flag.
#[test]
fn an_empty_output_name_is_refused() {
    let dir = scratch("empty");
    for flag in ["-floatfile", "-intfile", "-pgmfile", "-noisefile"] {
        let mut cmd = nanobragg(&dir, &format!("{MODEL} -detpixels 32"));
        let out = cmd.args([flag, ""]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(flag) && stderr.contains("empty"),
            "{stderr}"
        );
    }
    assert!(names(&dir).is_empty(), "{:?}", names(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An output name of 255 bytes, the most a filesystem takes, is written
/// (its temporary's name is cut short to fit).
#[test]
fn the_longest_names_work() {
    let dir = scratch("long");
    let name = "f".repeat(251) + ".bin";
    run(&dir, &format!("{MODEL} -detpixels 32 -floatfile {name}"));
    assert_eq!(std::fs::metadata(dir.join(&name)).unwrap().len(), 32 * 32 * 4);
    assert!(hidden(&dir).is_empty(), "{:?}", names(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An existing output this user may not write is refused, as nanoBragg.c's
/// fopen refuses it: the error names the flag and the file, nothing changes.
/// Root may write anything (as with C); run as root, the test runs the
/// program as `nobody` where setpriv can.
#[test]
fn a_read_only_output_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("readonly");
    run(&dir, &format!("{MODEL} -detpixels 32 -seed 1"));
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let mut program = vec![env!("CARGO_BIN_EXE_nanobragg").to_string()];
    if root {
        let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups", "--"];
        let can = Command::new("setpriv").args(nobody).arg("true").status();
        if !can.is_ok_and(|s| s.success()) {
            eprintln!("skipped: run as root and no setpriv");
            return;
        }
        program = [&["setpriv".to_string()][..], &nobody.map(String::from), &program].concat();
        // the directory is writable by all, so only the file's mode refuses
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        for n in names(&dir) {
            std::fs::set_permissions(dir.join(n), std::fs::Permissions::from_mode(0o666)).unwrap();
        }
    }
    std::fs::set_permissions(dir.join("i.img"), std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = snapshot(&dir);
    let out = Command::new(&program[0])
        .args(&program[1..])
        .args(format!("{MODEL} -detpixels 40 -seed 2").split_whitespace())
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a read-only output was replaced");
    assert!(stderr.contains("-intfile") && stderr.contains("i.img"), "{stderr}");
    assert!(snapshot(&dir) == before, "the old outputs changed: {:?}", names(&dir));
    // through a symbolic link: the file it points to decides
    std::fs::rename(dir.join("i.img"), dir.join("i.real")).unwrap();
    std::os::unix::fs::symlink("i.real", dir.join("i.img")).unwrap();
    let out = Command::new(&program[0])
        .args(&program[1..])
        .args(format!("{MODEL} -detpixels 40 -seed 2").split_whitespace())
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a read-only output was replaced through a link");
    std::fs::set_permissions(dir.join("i.real"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = Command::new(&program[0])
        .args(&program[1..])
        .args(format!("{MODEL} -detpixels 40 -seed 2").split_whitespace())
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(dir.join("i.img")).unwrap().file_type().is_symlink());
    assert!(std::fs::metadata(dir.join("i.real")).unwrap().len() > 40 * 40 * 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reader of stdout that goes away (`nanobragg -printout | head`) ends the
/// run quietly: no message, a non-zero status, the old outputs as they were
/// and no temporary.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let dir = scratch("pipe");
    run(&dir, &format!("{MODEL} -detpixels 64 -seed 1"));
    let before = snapshot(&dir);
    let mut child = nanobragg(&dir, &format!("{MODEL} -detpixels 64 -seed 2 -printout"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.is_empty(), "{stderr}");
    assert!(snapshot(&dir) == before, "the old outputs changed: {:?}", names(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The workspace's `tests/golden-nonbragg/inputs/water.stol`, copied into `dir`.
fn water(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden-nonbragg/inputs");
    std::fs::copy(src.join("water.stol"), dir.join("water.stol")).unwrap();
}

/// A command that fails.
fn fails(dir: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nanobragg")).args(args).current_dir(dir).output();
    let out = out.expect("run nanobragg");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?} did not fail: {stderr}");
    (stderr, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An output that cannot be written, among good ones, is refused before any
/// output changes, by every command: the render (an `-intfile` that names a
/// directory, which once failed only at the rename, after the float image
/// was replaced), nonbragg and noisify (once written one file at a time, the
/// earlier ones replaced or created before the bad one failed) and add. The
/// message names the flag and the file, and gives the reason once.
#[test]
fn a_bad_output_name_changes_no_output() {
    let dir = scratch("bad-name");
    water(&dir);
    std::fs::write(dir.join("in.bin"), vec![0u8; 4 * 32 * 32]).unwrap();
    let model: Vec<&str> = MODEL.split_whitespace().collect();
    let render = || [&model[..], &["-detpixels", "32"][..]].concat();
    let nonbragg = ["nonbragg", "-stol", "water.stol", "-detpixels", "16", "-noprogress"];
    let noisify = ["noisify", "-floatfile", "in.bin", "-detpixels", "32", "-seed", "1"];
    let commands: [(Vec<&str>, &[&str], &str); 6] = [
        (render(), &["-intfile", "nodir/"], "-intfile"),
        (render(), &["-noisefile", "no/such/dir/n.img"], "-noisefile"),
        (nonbragg.to_vec(), &["-pgmfile", "nodir/x.pgm"], "-pgmfile"),
        (nonbragg.to_vec(), &["-noisefile", "nodir/"], "-noisefile"),
        (noisify.to_vec(), &["-noisefile", "nodir/x.img"], "-noisefile"),
        (
            vec!["add", "in.bin", "in.bin", "-floatfile", "sum.bin"],
            &["-floatfile", "nodir/x"],
            "-floatfile",
        ),
    ];
    for (good, bad, flag) in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
            .args(&good)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{good:?}: {}", String::from_utf8_lossy(&out.stderr));
        let before = snapshot(&dir);
        // other pixel counts, so that any output replaced would differ
        let changed: Vec<&str> = good
            .iter()
            .map(|&a| {
                if a == "32" {
                    "24"
                } else if a == "16" {
                    "12"
                } else {
                    a
                }
            })
            .collect();
        let (stderr, _) = fails(&dir, &[&changed[..], bad].concat());
        let name = bad[1];
        assert!(
            stderr.contains(flag) && stderr.matches(name).count() == 1,
            "{bad:?}: the message names the flag and the file once: {stderr}"
        );
        assert!(stderr.matches("os error").count() <= 1, "{bad:?}: {stderr}");
        assert!(snapshot(&dir) == before, "{bad:?}: the outputs changed: {:?}", names(&dir));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// nonbragg refuses an image of pixels that are not numbers before writing
/// any file, naming the cause: a `.stol` table with one sin θ/λ twice (all
/// pixels infinite), a `-sourcefile` source of wavelength 0, at the sample
/// or not (all NaN).
#[test]
fn nonbragg_refuses_non_finite_images() {
    let dir = scratch("nonbragg-nan");
    water(&dir);
    std::fs::write(dir.join("twice.stol"), "0.1 2\n0.1 2\n0.2 3\n").unwrap();
    std::fs::write(dir.join("at_sample.txt"), "0 0 0 1 0\n").unwrap();
    std::fs::write(dir.join("no_lambda.txt"), "-10 0 0 1 0\n").unwrap();
    let before = snapshot(&dir);
    let base = ["nonbragg", "-detpixels", "16", "-distance", "100", "-noprogress"];
    for (extra, says) in [
        (&["-stol", "twice.stol"][..], "-stol twice.stol: rows 1 and 2 have the same"),
        (&["-stol", "water.stol", "-sourcefile", "at_sample.txt"], "source 1 has the wavelength 0"),
        (&["-stol", "water.stol", "-sourcefile", "no_lambda.txt"], "source 1 has the wavelength 0"),
    ] {
        let (stderr, _) = fails(&dir, &[&base[..], extra].concat());
        assert!(
            stderr.contains("non-finite pixels") && stderr.contains(says),
            "{extra:?}: {stderr}"
        );
        assert!(snapshot(&dir) == before, "{extra:?}: files written: {:?}", names(&dir));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `dataset -resume` removes the temporaries that stopped processes of this
/// host left in the output folder (a SIGKILLed rank's) and says so; those of
/// a running process or of another host stay.
#[test]
fn resume_removes_the_temporaries_of_stopped_processes() {
    let dir = scratch("resume-stale");
    std::fs::write(
        dir.join("set.toml"),
        "args = \"-default_F 100 -cell 50 50 50 90 90 90 -lambda 1.3 -distance 80 -detpixels 16 \
         -pixel 0.2\"\nshots = 2\nseed = 3\noutput = \"out\"\nname = \"run\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    // no process has an id at or above pid_max
    let gone: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304);
    let host = nanobragg_io::temp_names::host_name();
    let stale = format!(".run_00000.nxs.tmp.{host}.{gone}.0");
    let kept = [
        format!(".run_00000.nxs.tmp.{host}.{}.0", std::process::id()),
        format!(".run_00000.nxs.tmp.elsewhere-{host}.{gone}.0"),
    ];
    for name in std::iter::once(&stale).chain(&kept) {
        std::fs::write(out.join(name), b"partial").unwrap();
    }
    let run = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .args(["dataset", "set.toml", "-resume", "-threads", "1"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("removed 1 temporaries") && stderr.contains(&stale), "{stderr}");
    let mut left = names(&out);
    left.retain(|n| !(n.starts_with("run_00000") && n.ends_with(".nxs")));
    assert_eq!(left.len() + 1, names(&out).len(), "one file of shots: {:?}", names(&out));
    let mut want: Vec<String> = kept.to_vec();
    want.sort();
    assert_eq!(left, want, "{:?}", names(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}
