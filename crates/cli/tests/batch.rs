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

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `-intfile`, `-pgmfile` and `-noisefile` write one image per shot, each
/// the single run's with that shot's `-misset` (shot k's noise from the seed
/// `-seed` + k − 1).
#[test]
fn batch_writes_int_pgm_and_noise_images_per_shot() {
    let dir = scratch("batch", "images");
    std::fs::write(dir.join("shots.txt"), "0 0 0\n10 -20 30.5\n").unwrap();
    let names_of = |stem: &str| ["bin", "img", "pgm"].map(|e| format!("{stem}.{e}"));
    let [f, i, p] = names_of("s");
    run(&dir, &["-batch", "shots.txt", "-floatfile", &f, "-intfile", &i, "-pgmfile", &p]);
    run(&dir, &["-batch", "shots.txt", "-floatfile", "x.bin", "-noisefile", "n.img", "-seed", "7"]);
    for (k, m) in [["0", "0", "0"], ["10", "-20", "30.5"]].iter().enumerate() {
        let seed = (7 + k).to_string();
        let [sf, si, sp] = names_of("single");
        let outs =
            ["-floatfile", &sf, "-intfile", &si, "-pgmfile", &sp, "-noisefile", "single.noise"];
        run(&dir, &[&["-misset", m[0], m[1], m[2], "-seed", &seed][..], &outs].concat());
        let shot = |stem: &str, ext: &str| format!("{stem}_{:05}.{ext}", k + 1);
        for (single, batch) in [
            (sf.clone(), shot("s", "bin")),
            (si.clone(), shot("s", "img")),
            (sp.clone(), shot("s", "pgm")),
            ("single.noise".to_string(), shot("n", "img")),
        ] {
            let a = std::fs::read(dir.join(&single)).unwrap();
            assert!(a == std::fs::read(dir.join(&batch)).unwrap(), "{batch} differs from {single}");
        }
    }
    // without the flags, only the float images (as before)
    assert!(!names(&dir).iter().any(|n| n.starts_with("x_") && !n.ends_with(".bin")));
    assert!(!names(&dir).iter().any(|n| n.starts_with('.')), "{:?}", names(&dir));
    std::fs::remove_dir_all(&dir).ok();
}

/// A device or pipe named as an output takes every shot in turn (no
/// `/dev/null_00001`): a reader of a pipe gets the shots one after another.
#[test]
fn batch_writes_every_shot_into_a_device_or_pipe() {
    let dir = scratch("batch", "device");
    std::fs::write(dir.join("shots.txt"), "0 0 0\n1 2 3\n4 5 6\n").unwrap();
    let out =
        run(&dir, &["-batch", "shots.txt", "-floatfile", "/dev/null", "-intfile", "/dev/null"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote /dev/null, /dev/null"));
    assert!(!Path::new("/dev/null_00001").exists() && !Path::new("/dev/null_00001.img").exists());
    let fifo = dir.join("pipe");
    if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let reader = std::thread::spawn(move || std::fs::read(fifo).unwrap());
        run(&dir, &["-batch", "shots.txt", "-floatfile", "pipe"]);
        let streamed = reader.join().unwrap();
        run(&dir, &["-batch", "shots.txt", "-floatfile", "s.bin"]);
        let files: Vec<u8> = (1..=3)
            .flat_map(|k| std::fs::read(dir.join(format!("s_{k:05}.bin"))).unwrap())
            .collect();
        assert!(streamed == files, "the pipe did not get the three shots in order");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Every shot's outputs are checked before any is rendered: a missing
/// directory, an empty name, or too little free space for all shots is an
/// error naming the flag (the file once) and writes nothing.
#[test]
fn batch_outputs_are_checked_up_front() {
    let dir = scratch("batch", "upfront");
    std::fs::write(dir.join("shots.txt"), "0 0 0\n1 2 3\n").unwrap();
    let base = [&TRICLINIC[..], &["-N", "4", "-lambda", "1.0", "-distance", "100"]].concat();
    let fails = |extra: &[&str]| {
        let out = nanobragg(
            &dir,
            &[&base[..], &["-batch", "shots.txt", "-detpixels", "32"], extra].concat(),
        );
        assert!(!out.status.success(), "{extra:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = fails(&["-floatfile", "s.bin", "-intfile", "no/s.img"]);
    assert!(e.contains("-intfile") && e.matches("no/s_00001.img").count() == 1, "{e}");
    let e = fails(&["-floatfile", ""]);
    assert!(e.contains("-floatfile") && e.contains("empty"), "{e}");
    std::fs::create_dir(dir.join("s_00002.bin")).unwrap();
    let e = fails(&["-floatfile", "s.bin"]);
    assert!(
        e.contains("-floatfile") && e.contains("s_00002.bin") && e.contains("directory"),
        "{e}"
    );
    std::fs::remove_dir(dir.join("s_00002.bin")).unwrap();
    assert_eq!(names(&dir), ["shots.txt"]);
    // 2000 shots of 1 GiB: more than any test machine's disk
    let many: String = (0..2000).map(|i| format!("0 0 {i}\n")).collect();
    std::fs::write(dir.join("many.txt"), many).unwrap();
    let out = nanobragg(
        &dir,
        &[&base[..], &["-batch", "many.txt", "-detpixels", "16384", "-floatfile", "s.bin"]]
            .concat(),
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    if !e.contains("more memory than this machine has") {
        assert!(e.contains("-batch") && e.contains("free"), "{e}");
    }
    assert_eq!(names(&dir), ["many.txt", "shots.txt"]);
    std::fs::remove_dir_all(&dir).ok();
}

/// SIGTERM, SIGINT or SIGHUP at any moment of a batch leaves no temporary:
/// every shot's file is whole or absent.
#[cfg(unix)]
#[test]
fn an_interrupted_batch_leaves_no_temporary() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("batch", "signal");
    // more shots than the run can finish before the signal (and whose lines
    // overflow the pipe, so the run waits for a reader that never comes)
    let shots: String = (0..1500).map(|i| format!("0 0 {i}\n")).collect();
    std::fs::write(dir.join("shots.txt"), shots).unwrap();
    let outs =
        ["-floatfile", "s.bin", "-intfile", "s.img", "-pgmfile", "s.pgm", "-noisefile", "n.img"];
    let signals = [("-TERM", 15), ("-INT", 2), ("-HUP", 1)];
    for (round, (signal, number)) in signals.iter().cycle().take(15).enumerate() {
        if common::signal_ignored(*number as u32) {
            // inherited by the run, which keeps an ignored signal ignored (nohup)
            continue;
        }
        let args =
            [&TRICLINIC[..], &["-N", "2", "-detpixels", "128", "-threads", "1"], &outs].concat();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nanobragg"))
            .args(&args)
            .args(["-batch", "shots.txt"])
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // a few shots in, at a different moment of a shot each round
        for _ in 0..2 + round % 4 {
            lines.next();
        }
        std::thread::sleep(std::time::Duration::from_micros(150 * round as u64));
        assert!(child.try_wait().unwrap().is_none(), "the batch ended before the signal");
        let pid = child.id().to_string();
        let kill = std::process::Command::new("kill").args([*signal, &pid]).status();
        assert!(kill.unwrap().success());
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(*number), "{status:?}");
        let left: Vec<String> = names(&dir).into_iter().filter(|n| n.starts_with('.')).collect();
        assert!(left.is_empty(), "{signal}: temporaries left: {left:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
