//! The detector response in a render (`-readout_noise`, `-flicker`,
//! `-calibration`, `-gain`, `-psf`, ...) equals noisify run on the render's
//! float image with the same seeds and options, for any thread count.

mod common;

use common::nanobragg_on_threads;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("response-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let out =
        Command::new(env!("CARGO_BIN_EXE_nanobragg")).args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// `args` with `-noise_rng philox` fail with one message naming the streams.
fn refuses_unknown_stream(dir: &Path, args: &[&str]) {
    let bad = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .args(args)
        .args(["-noise_rng", "philox"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("c or parallel"));
}

const MODEL: &[&str] = &[
    "-default_F",
    "100",
    "-cell",
    "70",
    "80",
    "90",
    "90",
    "90",
    "90",
    "-lambda",
    "1",
    "-N",
    "8",
    "-distance",
    "60",
    "-pixel",
    "0.1",
    "-detpixels",
    "96",
    "-misset",
    "10",
    "20",
    "30",
    "-fluence",
    "1e26",
    "-nopgm",
];
const RESPONSE: &[&str] = &[
    "-seed",
    "5",
    "-flicker",
    "0.02",
    "-calibration",
    "0.03",
    "-calib_seed",
    "7",
    "-gain",
    "1.5",
    "-adc",
    "30",
    "-psf",
    "gauss",
    "-psf_fwhm",
    "150",
];

/// The pixels of an SMV file after its 512-byte header.
fn pixels(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap()[512..].to_vec()
}

#[test]
fn in_run_response_equals_noisify() {
    let dir = scratch("equal");
    for (threads, noise) in [("1", "n1.img"), ("2", "n2.img")] {
        let mut args = MODEL.to_vec();
        args.extend(RESPONSE);
        args.extend([
            "-readout_noise",
            "3",
            "-threads",
            threads,
            "-floatfile",
            "f.bin",
            "-noisefile",
            noise,
        ]);
        let out = run(&dir, &args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("photons on noise image before PSF"), "{text}");
    }
    let mut args = vec!["noisify", "-floatfile", "f.bin", "-pixel", "0.1", "-readout", "3"];
    args.extend(RESPONSE);
    args.extend(["-nopgm", "-intfile", "i.img", "-noisefile", "m.img"]);
    run(&dir, &args);
    let (n1, n2, m) =
        (pixels(&dir.join("n1.img")), pixels(&dir.join("n2.img")), pixels(&dir.join("m.img")));
    assert_eq!(n1.len(), 2 * 96 * 96);
    assert_eq!(n1, n2, "the noise image depends on the thread count");
    assert_eq!(n1, m, "the in-run response differs from noisify's");
    // the response did something: the plain noise image differs
    let mut args = MODEL.to_vec();
    args.extend(["-seed", "5", "-adc", "30", "-floatfile", "f.bin", "-noisefile", "plain.img"]);
    run(&dir, &args);
    assert_ne!(pixels(&dir.join("plain.img")), n1);
    fs::remove_dir_all(&dir).ok();
}

/// `-bits 32`: the noise image in 32-bit pixels, noisify's `-bits 32` pixel
/// for pixel, keeping the counts a 16-bit image clips at 65535.
#[test]
fn bits32_noise_image_equals_noisify() {
    let dir = scratch("bits32");
    let response = ["-seed", "9", "-gain", "40000", "-adc", "10"];
    let mut args = MODEL.to_vec();
    args.extend(response);
    args.extend(["-bits", "32", "-floatfile", "f.bin", "-noisefile", "n32.img"]);
    let text = String::from_utf8_lossy(&run(&dir, &args).stdout).into_owned();
    assert!(text.contains("as 4-byte integers"), "{text}");
    let mut args = vec!["noisify", "-floatfile", "f.bin", "-pixel", "0.1", "-bits", "32"];
    args.extend(response);
    args.extend(["-calibration", "0", "-nopgm", "-intfile", "i.img", "-noisefile", "m32.img"]);
    run(&dir, &args);
    let header =
        String::from_utf8_lossy(&fs::read(dir.join("n32.img")).unwrap()[..512]).into_owned();
    assert!(header.contains("TYPE=long_integer;"), "{header}");
    let (n, m) = (pixels(&dir.join("n32.img")), pixels(&dir.join("m32.img")));
    assert_eq!(n.len(), 4 * 96 * 96);
    assert_eq!(n, m, "the in-run 32-bit image differs from noisify's");
    let max = n.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).max();
    assert!(max.unwrap() > 65535, "nothing above 16 bits: {max:?}");
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn response_options_that_need_another_are_refused() {
    let dir = scratch("refused");
    for (extra, want) in [
        (&["-psf_fwhm", "100"][..], "give -psf gauss|fiber"),
        (&["-psf_radius", "3"][..], "give -psf gauss|fiber"),
        (&["-calib_seed", "3"][..], "give -calibration > 0"),
        (&["-psf", "airy"][..], "-psf"),
        (&["-gain", "0"][..], "-gain"),
    ] {
        let mut args = MODEL.to_vec();
        args.extend(extra);
        let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "{extra:?} wrote files");
    }
    fs::remove_dir_all(&dir).ok();
}

/// `-noise_rng parallel`: the noise image (plain Poisson, and with the
/// detector response) is the same for 1 and 2 threads, recorded in the SMV
/// header, and not the `c` stream's; the default is the `c` stream.
#[test]
fn parallel_noise_stream_is_the_same_for_any_thread_count() {
    let dir = scratch("noise-rng");
    let noise = |name: &str, extra: &[&str]| {
        let mut args = MODEL.to_vec();
        args.extend_from_slice(&["-seed", "5", "-nopgm", "-floatfile", "f.bin"]);
        args.extend_from_slice(&["-noisefile", name]);
        args.extend_from_slice(extra);
        run(&dir, &args);
        fs::read(dir.join(name)).unwrap()
    };
    for response in [&[][..], &["-readout_noise", "3", "-gain", "1.2", "-flicker", "0.01"][..]] {
        let with = |threads: &'static str, rng: &'static str| {
            [response, &["-threads", threads, "-noise_rng", rng]].concat()
        };
        let one = noise("p1.img", &with("1", "parallel"));
        let two = noise("p2.img", &with("2", "parallel"));
        assert!(one == two, "{response:?}: the parallel stream depends on the thread count");
        let header = String::from_utf8_lossy(&one[..512]).into_owned();
        assert!(header.contains("NOISE_RNG=parallel philox4x32-10 v3;"), "{header}");
        assert!(header.contains("NOISE_SEED=5;"), "{header}");
        let c = noise("c.img", &with("2", "c"));
        assert!(c != one, "{response:?}: the two streams give one image");
        assert!(!String::from_utf8_lossy(&c[..512]).contains("NOISE_RNG"));
        assert!(noise("d.img", response) == c, "{response:?}: the default is not the c stream");
    }
}

/// `noisify -noise_rng parallel` on a render's float image equals the render's
/// own response from the parallel stream (the same seeds and options, the
/// PSF included), pixel for pixel, for 1 and 3 threads, and records the
/// stream in its header.
#[test]
fn noisify_parallel_stream_equals_the_in_run_response() {
    let dir = scratch("noisify-parallel");
    let mut args = MODEL.to_vec();
    args.extend(RESPONSE);
    args.extend(["-readout_noise", "3", "-noise_rng", "parallel"]);
    args.extend(["-floatfile", "f.bin", "-noisefile", "n.img"]);
    run(&dir, &args);
    let want = pixels(&dir.join("n.img"));
    for threads in ["1", "3"] {
        let mut args = vec!["noisify", "-floatfile", "f.bin", "-pixel", "0.1", "-readout", "3"];
        args.extend(RESPONSE);
        args.extend([
            "-noise_rng",
            "parallel",
            "-nopgm",
            "-intfile",
            "i.img",
            "-noisefile",
            "m.img",
        ]);
        nanobragg_on_threads(&dir, &args, threads);
        let file = fs::read(dir.join("m.img")).unwrap();
        let header = String::from_utf8_lossy(&file[..512]).into_owned();
        assert!(header.contains("NOISE_RNG=parallel philox4x32-10 v3;"), "{header}");
        assert!(header.contains("NOISE_SEED=5;"), "{header}");
        assert!(file[512..] == want[..], "{threads} threads: noisify's parallel stream differs");
    }
    refuses_unknown_stream(&dir, &["noisify", "-floatfile", "f.bin"]);
    fs::remove_dir_all(&dir).ok();
}

/// `nonbragg -noise_rng parallel`: the noise image is the parallel stream's
/// Poisson image of the run's own float image (the core's function on the
/// file it wrote), the same for 1 and 2 threads, recorded in the header;
/// an unknown stream is refused before the work.
#[test]
fn nonbragg_parallel_stream_is_the_float_images_noise() {
    use nanobragg_core::noise::noise_image_parallel;
    use nanobragg_core::noise_stream::PixelStream;
    let dir = scratch("nonbragg-parallel");
    let stol = dir.join("water.stol");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden-nonbragg/inputs");
    fs::copy(golden.join("water.stol"), &stol).unwrap();
    let args = [
        "nonbragg",
        "-stol",
        "water.stol",
        "-lambda",
        "1",
        "-distance",
        "100",
        "-detpixels",
        "96",
        "-pixel",
        "0.1",
        "-flux",
        "1e12",
        "-exposure",
        "0.5",
        "-beamsize",
        "0.1",
        "-seed",
        "7",
        "-floatfile",
        "f.bin",
        "-noisefile",
        "n.img",
        "-nopgm",
        "-noise_rng",
        "parallel",
    ];
    let mut images = Vec::new();
    for threads in ["1", "2"] {
        nanobragg_on_threads(&dir, &args, threads);
        images.push(fs::read(dir.join("n.img")).unwrap());
    }
    assert!(images[0] == images[1], "the noise image depends on the thread count");
    let header = String::from_utf8_lossy(&images[0][..512]).into_owned();
    assert!(header.contains("NOISE_RNG=parallel philox4x32-10 v3;"), "{header}");
    assert!(header.contains("NOISE_SEED=7;"), "{header}");
    let float: Vec<f32> = fs::read(dir.join("f.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let stream = PixelStream { seed: 7, first_pixel: 0 };
    let (want, _) = noise_image_parallel(&float, 96, 96, [0, 95, 0, 95], 40.0, stream, false);
    let got: Vec<u16> =
        images[0][512..].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    assert_eq!(got, want.pixels);
    assert!(want.photons > 1000.0, "{}", want.photons);
    refuses_unknown_stream(&dir, &["nonbragg", "-stol", "water.stol", "-detpixels", "8"]);
    fs::remove_dir_all(&dir).ok();
}
