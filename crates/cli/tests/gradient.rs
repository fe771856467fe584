//! `-gradient`: derivative images written next to the usual outputs.

use std::path::Path;
use std::process::Output;

mod common;
use common::{float_file as floats, nanobragg, rel_l2, TRICLINIC};

fn scratch(name: &str) -> std::path::PathBuf {
    common::scratch("gradient", name)
}

/// Runs the triclinic crystal at 48², exact f64, no noise or PGM, with `extra`.
fn run(dir: &Path, extra: &[&str]) -> Output {
    let base = ["-N", "5", "-lambda", "1.0", "-detpixels", "48", "-nonoise", "-nopgm", "-exact"];
    nanobragg(dir, &[&TRICLINIC[..], &base, extra].concat())
}

#[test]
fn derivative_images_match_finite_differences() {
    let dir = scratch("fd");
    let out = run(&dir, &["-distance", "100", "-gradient", "distance,lambda,Na", "-gradfile", "g"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in ["distance", "lambda", "Na"] {
        let path = dir.join(format!("g_{name}.bin"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 48 * 48 * 4, "{name}");
        assert!(stdout.contains(&format!("g_{name}.bin")), "{stdout}");
    }
    assert!(dir.join("floatimage.bin").exists());
    let h = 0.01;
    for (d, file) in [(100.0 + h, "up.bin"), (100.0 - h, "down.bin")] {
        let out = run(&dir, &["-distance", &d.to_string(), "-floatfile", file]);
        assert!(out.status.success());
    }
    let (up, down) = (floats(&dir.join("up.bin")), floats(&dir.join("down.bin")));
    let ad = floats(&dir.join("g_distance.bin"));
    let (mut num, mut den) = (0.0, 0.0);
    for ((u, w), a) in up.iter().zip(&down).zip(&ad) {
        let fd = (u - w) / (2.0 * h);
        num += (a - fd) * (a - fd);
        den += fd * fd;
    }
    let err = (num / den).sqrt();
    eprintln!("distance: relative L2 error {err:e}");
    assert!(den > 0.0 && err < 1e-4, "relative L2 error {err:e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn curvatures_match_finite_differences_of_gradients() {
    let dir = scratch("curv");
    let args = ["-distance", "100", "-gradient", "distance,lambda", "-gradfile", "c"];
    let out = run(&dir, &[&args[..], &["-curvatures_mixed"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in ["distance", "lambda", "distance_distance", "lambda_lambda", "distance_lambda"] {
        let path = dir.join(format!("c_{name}.bin"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 48 * 48 * 4, "{name}");
        assert!(stdout.contains(&format!("c_{name}.bin")), "{stdout}");
    }
    assert!(!dir.join("c_lambda_distance.bin").exists());
    // -curvatures alone: the diagonal only
    let out =
        run(&dir, &["-distance", "100", "-gradient", "lambda", "-gradfile", "d", "-curvatures"]);
    assert!(out.status.success());
    assert!(dir.join("d_lambda_lambda.bin").exists() && dir.join("d_lambda.bin").exists());
    assert_eq!(floats(&dir.join("d_lambda_lambda.bin")), floats(&dir.join("c_lambda_lambda.bin")));
    // against central differences of first-derivative images (f32 files)
    let h = 0.1;
    for (d, prefix) in [(100.0 + h, "up"), (100.0 - h, "down")] {
        let grad = ["-gradient", "distance,lambda", "-gradfile", prefix];
        let out = run(&dir, &[&["-distance", &d.to_string()][..], &grad].concat());
        assert!(out.status.success());
    }
    for (first, second) in [("distance", "distance_distance"), ("lambda", "distance_lambda")] {
        let up = floats(&dir.join(format!("up_{first}.bin")));
        let down = floats(&dir.join(format!("down_{first}.bin")));
        let fd: Vec<f64> = up.iter().zip(&down).map(|(u, w)| (u - w) / (2.0 * h)).collect();
        let err = rel_l2(&floats(&dir.join(format!("c_{second}.bin"))), &fd);
        eprintln!("{second}: relative L2 error {err:e}");
        assert!(err < 1e-3, "{second}: relative L2 error {err:e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn float32_gradients_match_float64() {
    let dir = scratch("f32");
    let list = ["-gradient", "distance,lambda,Na,cell_a"];
    for (dtype, prefix) in [("float64", "g64"), ("float32", "g32")] {
        let out = run(&dir, &[&list[..], &["-dtype", dtype, "-gradfile", prefix]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for name in ["distance", "lambda", "Na", "cell_a"] {
        let a = floats(&dir.join(format!("g32_{name}.bin")));
        let b = floats(&dir.join(format!("g64_{name}.bin")));
        let err = rel_l2(&a, &b);
        eprintln!("{name}: f32 relative L2 error {err:e}");
        assert!(a != b && err < 1e-3, "{name}: {err:e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_gradients_are_refused_before_writing() {
    let dir = scratch("bad");
    for (list, want) in [
        ("distance,nonsense", "unknown parameter 'nonsense'"),
        ("fudge", "square (default) spots do not use -fudge"),
        ("mosaic", "needs -mosaic"),
    ] {
        let out = run(&dir, &["-gradient", list]);
        assert!(!out.status.success(), "{list}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("-gradient") && err.contains(want), "{err}");
        assert!(!dir.join("floatimage.bin").exists());
    }
    let out = run(&dir, &["-curvatures"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("-curvatures: needs -gradient"), "{err}");
    assert!(!dir.join("floatimage.bin").exists());
    std::fs::remove_dir_all(&dir).ok();
}
