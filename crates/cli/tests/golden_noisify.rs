//! Parity of `nanobragg noisify` with the reference noisify.c on the golden set
//! in `tests/golden-noisify/` (see its README.md): every case's console output
//! identical, PGM files identical, SMV headers identical, noiseless SMV pixels
//! within 1 ADU and noise images identical in at least 99 % of the pixels.

mod common;

use std::fs;
use std::process::Command;

use common::{read_zst, set_cases, set_dir, set_scratch};

/// Header length of an SMV file (its HEADER_BYTES).
fn header_len(bytes: &[u8]) -> usize {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]);
    let v = text.split("HEADER_BYTES=").nth(1).and_then(|r| r.split(';').next()).unwrap_or("512");
    v.trim().parse().unwrap_or(512)
}

/// Compares one output file; returns a description of the difference.
fn compare(name: &str, ours: &[u8], theirs: &[u8], bits32: bool) -> Result<String, String> {
    if name.ends_with(".pgm") {
        return if ours == theirs {
            Ok("identical".into())
        } else {
            Err(format!("{name}: PGM differs"))
        };
    }
    let h = header_len(theirs);
    if ours.len() != theirs.len() || ours[..h] != theirs[..h] {
        return Err(format!(
            "{name}: header or length differs ({} vs {} bytes)",
            ours.len(),
            theirs.len()
        ));
    }
    let width = if bits32 { 4 } else { 2 };
    let pixel = |b: &[u8], i: usize| -> i64 {
        let p = &b[h + i * width..h + (i + 1) * width];
        if bits32 {
            u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as i64
        } else {
            u16::from_le_bytes([p[0], p[1]]) as i64
        }
    };
    let n = (theirs.len() - h) / width;
    let same = (0..n).filter(|&i| pixel(ours, i) == pixel(theirs, i)).count();
    let max_diff = (0..n).map(|i| (pixel(ours, i) - pixel(theirs, i)).abs()).max().unwrap_or(0);
    let summary = format!("{name}: {same}/{n} identical, max |diff| {max_diff}");
    let ok = if name.contains("noise") { same as f64 >= 0.99 * n as f64 } else { max_diff <= 1 };
    if ok {
        Ok(summary)
    } else {
        Err(summary)
    }
}

#[test]
fn noisify_matches_reference() {
    let mut failures = Vec::new();
    let cases = set_cases("golden-noisify");
    assert_eq!(cases.len(), 31);
    for case in &cases {
        let dir = set_scratch("golden-noisify", &case.id);
        let args: Vec<&str> = case.args.split_whitespace().collect();
        let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
            .arg("noisify")
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let want = fs::read_to_string(
            set_dir("golden-noisify").join("out").join(&case.id).join("stdout.txt"),
        )
        .unwrap();
        let mut notes = Vec::new();
        if !out.status.success() {
            failures.push(format!(
                "{}: exit {:?}: {}",
                case.id,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        if stdout != want {
            let first = stdout.lines().zip(want.lines()).find(|(a, b)| a != b);
            failures.push(format!("{}: stdout differs, first: {first:?}", case.id));
        }
        for name in &case.outputs {
            let theirs = read_zst(
                &set_dir("golden-noisify").join("out").join(&case.id).join(format!("{name}.zst")),
            )
            .unwrap();
            match fs::read(dir.join(name)) {
                Err(e) => failures.push(format!("{}: {name} not written: {e}", case.id)),
                Ok(ours) => match compare(name, &ours, &theirs, case.args.contains("-bits 32")) {
                    Ok(s) => notes.push(s),
                    Err(s) => failures.push(format!("{}: {s}", case.id)),
                },
            }
        }
        eprintln!("{:<28} {}", case.id, notes.join("; "));
        fs::remove_dir_all(&dir).ok();
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// The binary invoked under the name `noisify` (a link) is noisify.
#[test]
fn link_named_noisify_runs_noisify() {
    let dir = set_scratch("golden-noisify", "link");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nanobragg"), dir.join("noisify")).unwrap();
    let out = Command::new(dir.join("noisify"))
        .args(["-floatfile", "inputs/zeros64.bin", "-seed", "1", "-nopgm"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("noisify - add noise to pixels"), "{stdout}");
    assert_eq!(fs::metadata(dir.join("noiseimage.img")).unwrap().len(), 512 + 2 * 64 * 64);
    fs::remove_dir_all(&dir).ok();
}

/// Bad input: one clear error and a non-zero exit, nothing written.
#[test]
fn noisify_bad_input() {
    let dir = set_scratch("golden-noisify", "bad");
    fs::write(dir.join("empty.bin"), b"").unwrap();
    for (args, want) in [
        (&["-floatfile", "missing.bin"][..], "cannot read the input float image missing.bin"),
        (&["-floatfile", "empty.bin"][..], "empty"),
        (&["-floatfile", "inputs/zeros64.bin", "-bits", "8"][..], "-bits"),
        (&["-floatfile", "inputs/zeros64.bin", "-psf_radius", "-2"][..], "-psf_radius"),
        (&["-floatfile", "inputs/zeros64.bin", "-detpixels", "200"][..], "too short"),
        (&["-floatfile", "inputs/zeros64.bin", "-header", "inputs/zeros64.bin"][..], "SMV"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
            .arg("noisify")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("error:") && err.contains(want), "{args:?}: {err}");
        let mut names: Vec<_> =
            fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["empty.bin", "inputs"], "{args:?}");
    }
    fs::remove_dir_all(&dir).ok();
}
