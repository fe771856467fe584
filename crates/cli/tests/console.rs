//! Console behaviour beyond the golden cases: the `-printout` pixel trace (its
//! lines checked against nanoBragg.c's output for the same run) and the
//! progress display.

use std::path::PathBuf;
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nanobragg-console-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // a 9 x 9 x 9 grid of structure factors with varied values
    let mut hkl = String::new();
    for h in -4i32..=4 {
        for k in -4i32..=4 {
            for l in -4i32..=4 {
                hkl.push_str(&format!("{h} {k} {l} {}\n", 10 + (h * 7 + k * 3 + l * 5).abs() % 37));
            }
        }
    }
    std::fs::write(d.join("t.hkl"), hkl).unwrap();
    d
}

fn run(dir: &PathBuf, args: &str) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .args(args.split_whitespace())
        .current_dir(dir)
        .output()
        .expect("run nanobragg");
    assert!(out.status.success(), "{args}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The trace blocks in `stdout`: from each `F S : stol = ` line to its `Z:` line.
fn blocks(stdout: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in stdout.lines() {
        if line.contains(" : stol = ") {
            // the interpolation warning may precede the first line, as in C
            let start = line.rfind("printed! ").map(|i| i + "printed! ".len()).unwrap_or(0);
            cur = Some(format!("{}\n", &line[start..]));
        } else if let Some(c) = cur.as_mut() {
            c.push_str(line);
            c.push('\n');
            if line.starts_with("Z:") {
                out.push(cur.take().unwrap());
            }
        }
    }
    out
}

const MOSAIC: &str = "-hkl t.hkl -cell 50 60 70 90 95 100 -N 3 -detpixels 12 -pixel 0.5 -distance 40 \
                      -lambda 1 -mosaic 0.5 -mosaic_dom 2 -mosaic_seed 3 -phi 10 -osc 2 -phisteps 2 \
                      -oversample 2 -seed 1 -nopgm -nonoise";

#[test]
fn printout_pixel_matches_nanobragg() {
    let dir = scratch("one");
    let out = run(&dir, &format!("{MOSAIC} -printout_pixel 9 2"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // nanoBragg.c's lines for this run
    let expected = "   9    2 : stol = 3.15908e+08 or 0.0315908
at 0.04 0.002125 0.001375
hkl= -0.216681 3.150037 2.397341  hkl0= 0 3 2
 F_cell=29  F_latt=-1.84194   I = 481842
I/steps     30115.14128
polar      0.9978510725
omega   0.0001552437733
capfrac               1
pixel       4.665141582
real-space cell vectors (Angstrom):
     a           b           c         
X: 49.79817524 -11.23540198  0.11601513
Y:  0.66022989 58.93860643 -0.07300157
Z: -4.43912594  0.08008712 69.99986579
";
    assert_eq!(blocks(&stdout), vec![expected.to_string()]);
    // printed after the setup report and before the statistics, as in C
    let at = stdout.find(" : stol = ").unwrap();
    assert!(stdout[..at].contains("noise image") || stdout[..at].contains("steps"));
    assert!(stdout[at..].contains("\n\nsolid angle subtended by detector"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn printout_traces_every_rendered_pixel_in_order() {
    let dir = scratch("all");
    let out = run(&dir, &format!("{MOSAIC} -printout -roi 1 2 3 4"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let b = blocks(&stdout);
    let heads: Vec<&str> = b.iter().map(|s| s.lines().next().unwrap()).collect();
    assert_eq!(heads.len(), 4, "{stdout}");
    for (h, want) in heads.iter().zip(["   1    3 :", "   2    3 :", "   1    4 :", "   2    4 :"])
    {
        assert!(h.starts_with(want), "{h} vs {want}");
    }
    // the pixel line is the float image's value
    let float = std::fs::read(dir.join("floatimage.bin")).unwrap();
    let value = |f: usize, s: usize| {
        let i = 4 * (s * 12 + f);
        f32::from_le_bytes(float[i..i + 4].try_into().unwrap()) as f64
    };
    for (block, (f, s)) in b.iter().zip([(1, 3), (2, 3), (1, 4), (2, 4)]) {
        let line = block.lines().find(|l| l.starts_with("pixel ")).unwrap();
        let printed: f64 = line["pixel".len()..].trim().parse().unwrap();
        assert!((printed - value(f, s)).abs() <= 1e-9 * value(f, s).abs(), "{line}");
    }
    // a negative fast index also means every pixel
    let out = run(&dir, &format!("{MOSAIC} -printout_pixel -1 0 -roi 0 1 0 0"));
    assert_eq!(blocks(&String::from_utf8_lossy(&out.stdout)).len(), 2);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn printout_places_the_interpolation_warning_like_nanobragg() {
    let dir = scratch("interp");
    let args = "-hkl t.hkl -cell 50 60 70 90 95 100 -N 2 -detpixels 12 -pixel 0.5 -distance 40 \
                -lambda 1 -interpolate -Xbeam 0.1 -Ybeam 0.1 -seed 1 -nopgm -nonoise";
    let warning = "WARNING: further warnings will not be printed! ";
    // interpolation leaves the grid in pixel (3, 0): its trace follows the warning
    let out = run(&dir, &format!("{args} -printout_pixel 4 0"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("{warning}   4    0 : stol = 2.63614e+08")), "{stdout}");
    // an earlier pixel is traced before the warning
    let out = run(&dir, &format!("{args} -printout_pixel 1 0"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (trace, warn) = (stdout.find("   1    0 : stol").unwrap(), stdout.find(warning).unwrap());
    assert!(trace < warn && stdout.contains(&format!("{warning}\nsolid angle")), "{stdout}");
    // every pixel: the warning comes just before pixel (3, 0)
    let out = run(&dir, &format!("{args} -printout"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches(warning).count(), 1);
    assert!(stdout.contains(&format!("{warning}   3    0 : stol")), "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn printout_pixel_outside_the_detector_warns() {
    let dir = scratch("outside");
    for (pixel, why) in [
        ("12 0", "not on the detector (a 12 x 12 pixel image)"),
        ("0 -3", "not on the detector"),
        ("5 5 -roi 0 1 0 1", "not rendered"),
    ] {
        let out = run(&dir, &format!("{MOSAIC} -printout_pixel {pixel}"));
        assert!(blocks(&String::from_utf8_lossy(&out.stdout)).is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("warning: -printout_pixel") && stderr.contains(why), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn progress_stays_off_stdout() {
    let dir = scratch("progress");
    for flag in ["", "-progress", "-noprogress"] {
        let out = run(&dir, &format!("{MOSAIC} {flag}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("% done") && !stdout.contains("rendering"), "{stdout}");
        // a run this short shows nothing, and stderr is not a terminal here
        assert!(out.stderr.is_empty(), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Outputs are rendered into mapped files where possible: a run leaves
/// exactly the named files (no temporaries), a second run replaces them with
/// the same bytes, and a device as the target is written in place (it stays
/// a device).
#[test]
fn mapped_outputs_leave_only_the_named_files() {
    let dir = scratch("mapped");
    let model = "-hkl t.hkl -cell 50 60 70 90 95 100 -N 3 -detpixels 40 -pixel 0.5 -distance 40 \
                 -seed 5";
    run(&dir, &format!("{model} -floatfile f.bin -intfile i.img -pgmfile p.pgm -noisefile n.img"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["Fdump.bin", "f.bin", "i.img", "n.img", "p.pgm", "t.hkl"]);
    // the same again over the first run's files: replaced, identical
    let before: Vec<Vec<u8>> =
        ["f.bin", "i.img"].iter().map(|f| std::fs::read(dir.join(f)).unwrap()).collect();
    run(&dir, &format!("{model} -floatfile f.bin -intfile i.img -nopgm -nonoise"));
    for (f, b) in ["f.bin", "i.img"].iter().zip(&before) {
        assert_eq!(&std::fs::read(dir.join(f)).unwrap(), b, "{f}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        run(&dir, &format!("{model} -floatfile /dev/null -intfile /dev/null -nopgm -nonoise"));
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
