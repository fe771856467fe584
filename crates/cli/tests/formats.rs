//! `-cbffile` and `-nxmxfile`: int32 images without the 16-bit clip, header
//! values, per-shot files under `-batch`, and outputs refused up front. The
//! readers crystallography uses (h5py, nxmx, fabio, pycbf) are run on these
//! files in tests/python/test_formats.py.

mod common;

use common::{nanobragg, parse_smv, scratch};
use std::path::Path;

const N: usize = 32;

/// A strong crystal: its brightest pixels pass 65535 photons.
const MODEL: [&str; 20] = [
    "-default_F",
    "1000",
    "-cell",
    "30",
    "30",
    "30",
    "90",
    "90",
    "90",
    "-N",
    "10",
    "-lambda",
    "1.5",
    "-distance",
    "60",
    "-detpixels",
    "32",
    "-pixel",
    "0.3",
    "-nopgm",
];

/// The pixels of a miniCBF file: its header text and its byte_offset data
/// decoded (the decoder written here from the format's description).
fn read_cbf(bytes: &[u8]) -> (String, Vec<i32>) {
    let start = bytes.windows(4).position(|w| w == [0x0c, 0x1a, 0x04, 0xd5]).expect("binary");
    let text = String::from_utf8(bytes[..start].to_vec()).unwrap();
    let field = |key: &str| -> usize {
        let line =
            text.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("{key}"));
        line.trim().parse().unwrap()
    };
    let n = field("X-Binary-Number-of-Elements:");
    assert_eq!(
        field("X-Binary-Size-Fastest-Dimension:") * field("X-Binary-Size-Second-Dimension:"),
        n
    );
    let mut b = &bytes[start + 4..start + 4 + field("X-Binary-Size:")];
    let mut read = |k: usize| -> i64 {
        let (head, rest) = b.split_at(k);
        b = rest;
        match k {
            1 => i64::from(head[0] as i8),
            2 => i64::from(i16::from_le_bytes([head[0], head[1]])),
            4 => i64::from(i32::from_le_bytes(head.try_into().unwrap())),
            _ => i64::from_le_bytes(head.try_into().unwrap()),
        }
    };
    let (mut v, mut out) = (0i64, Vec::with_capacity(n));
    for _ in 0..n {
        let mut d = read(1);
        if d == -128 {
            d = read(2);
            if d == -32768 {
                d = read(4);
                if d == i64::from(i32::MIN) {
                    d = read(8);
                }
            }
        }
        v += d;
        out.push(i32::try_from(v).unwrap());
    }
    (text, out)
}

fn header_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("{key} in\n{text}"))
}

fn run_ok(dir: &Path, args: &[&str]) -> String {
    let out = nanobragg(dir, args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn cbf_holds_the_noise_image_unclipped() {
    let dir = scratch("formats", "noise");
    let mut args = MODEL.to_vec();
    args.extend(["-seed", "3", "-noisefile", "n.img", "-cbffile", "o.cbf", "-exposure", "0.25"]);
    let stdout = run_ok(&dir, &args);
    assert!(stdout.contains("writing o.cbf as miniCBF with 4-byte integers"), "{stdout}");
    let noise = parse_smv(&std::fs::read(dir.join("n.img")).unwrap(), N * N).unwrap();
    let (text, pixels) = read_cbf(&std::fs::read(dir.join("o.cbf")).unwrap());
    let mut clipped = 0;
    for (&p, &n) in pixels.iter().zip(&noise.pixels) {
        if n < 65535 {
            assert_eq!(p, i32::from(n));
        } else {
            assert!(p >= 65535, "{p}");
            clipped += usize::from(p > 65535);
        }
    }
    assert!(clipped > 0, "the model has no pixel above 65535");
    // the header's values: those of the SMV header, in metres
    assert_eq!(header_value(&text, "# Pixel_size "), "0.0003 m x 0.0003 m");
    assert_eq!(header_value(&text, "# Wavelength "), "1.5 A");
    assert_eq!(header_value(&text, "# Detector_distance "), "0.06 m");
    assert_eq!(header_value(&text, "# Exposure_time "), "0.25 s");
    assert_eq!(header_value(&text, "# Count_cutoff "), "2147483647 counts");
    // the beam centre in pixels from the corner, as the SMV's in mm (%g) / pixel size
    let smv_mm = |k: &str| noise.field(k).unwrap().parse::<f64>().unwrap();
    let xy = header_value(&text, "# Beam_xy (").trim_end_matches(") pixels");
    let (x, y) = xy.split_once(", ").unwrap();
    let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
    assert!((x - smv_mm("ADXV_CENTER_X") / 0.3).abs() < 1e-4, "{xy}");
    assert!((y - (N as f64 * 0.3 - smv_mm("ADXV_CENTER_Y")) / 0.3).abs() < 1e-4, "{xy}");
}

#[test]
fn nonoise_gives_the_int_image_unclipped() {
    let dir = scratch("formats", "nonoise");
    let mut args = MODEL.to_vec();
    args.extend(["-nonoise", "-intfile", "i.img", "-cbffile", "o.cbf", "-scale", "2"]);
    run_ok(&dir, &args);
    let int = parse_smv(&std::fs::read(dir.join("i.img")).unwrap(), N * N).unwrap();
    let (_, pixels) = read_cbf(&std::fs::read(dir.join("o.cbf")).unwrap());
    let floats = common::float_file(&dir.join("floatimage.bin"));
    for ((&p, &i), &f) in pixels.iter().zip(&int.pixels).zip(&floats) {
        if i < 65535 {
            assert_eq!(p, i32::from(i));
        } else {
            // 2 x photons + 40, rounded
            assert!((f64::from(p) - (2.0 * f + 40.0)).abs() <= 0.5 + 1e-6 * f, "{p} {f}");
        }
    }
    assert!(pixels.iter().any(|&p| p > 65535));
}

#[test]
fn nxmx_frames_are_the_same_under_every_compression() {
    let dir = scratch("formats", "nxmx");
    let mut plain = None;
    for (name, compression) in [("o.nxs", "none"), ("d.nxs", "deflate"), ("b.nxs", "bslz4")] {
        let mut args = MODEL.to_vec();
        args.extend(["-nxmxfile", name, "-nonoise", "-nxmx_compression", compression]);
        let out = nanobragg(&dir, &args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert!(bytes.starts_with(b"\x89HDF\r\n\x1a\n"), "not an HDF5 file");
        let img = nanobragg_io::read_image::read_image(&dir.join(name), 0).unwrap();
        assert_eq!((img.fpixels, img.spixels, img.frames), (N, N, 1));
        assert!(img.pixels.iter().any(|&p| p > 0.0));
        match &plain {
            None => {
                assert!(bytes.len() > 4 * N * N);
                plain = Some((img.pixels, bytes.len()));
            }
            Some((pixels, len)) => {
                assert_eq!(&img.pixels, pixels, "{compression}");
                assert!(bytes.len() < *len, "{compression}: {} bytes, {len} plain", bytes.len());
            }
        }
    }
    let mut args = MODEL.to_vec();
    args.extend(["-nxmxfile", "x.nxs", "-nxmx_compression", "zip"]);
    let out = nanobragg(&dir, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("-nxmx_compression"), "{err}");
}

#[test]
fn unwritable_outputs_are_refused_before_the_render() {
    let dir = scratch("formats", "refused");
    for flag in ["-cbffile", "-nxmxfile"] {
        let mut args = MODEL.to_vec();
        args.extend([flag, "missing/o.x"]);
        let out = nanobragg(&dir, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}");
        assert!(err.contains(flag), "{err}");
        assert!(!dir.join("floatimage.bin").exists(), "{flag}: an output was written");
    }
}

#[test]
fn batch_writes_one_cbf_per_shot() {
    let dir = scratch("formats", "batch");
    std::fs::write(dir.join("shots.txt"), "0 0 0\n10 20 30\n").unwrap();
    let mut args = MODEL.to_vec();
    args.extend(["-batch", "shots.txt", "-cbffile", "s.cbf", "-seed", "9"]);
    let stdout = run_ok(&dir, &args);
    assert!(stdout.contains("noise seed: 9"), "{stdout}");
    let one = read_cbf(&std::fs::read(dir.join("s_00001.cbf")).unwrap()).1;
    let two = read_cbf(&std::fs::read(dir.join("s_00002.cbf")).unwrap()).1;
    assert_eq!(one.len(), N * N);
    assert_ne!(one, two);
    assert!(!dir.join("s.cbf").exists());
}

/// miniCBF holds no detector orientation: a geometry its readers would
/// misread is refused (before anything is written), pointing to NXmx.
#[test]
fn cbf_refuses_geometry_its_header_cannot_hold() {
    let dir = scratch("formats", "cbf-geometry");
    let run = |extra: &[&str]| {
        let mut args = MODEL.to_vec();
        args.extend(["-nonoise", "-cbffile", "g.cbf"]);
        args.extend(extra);
        nanobragg(&dir, &args)
    };
    for (extra, why) in [
        (&["-twotheta", "10"][..], "tilted 10 deg"),
        (&["-adxv"][..], "mirrored"),
        (&["-detector_rotx", "5"][..], "turned 5 deg about the beam"),
        (
            &["-phi", "0", "-osc", "1", "-spindle_axis", "0", "1", "0"][..],
            "rotation axis is 90 deg",
        ),
    ] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why) && err.contains("-nxmxfile"),
            "{extra:?}: {err}"
        );
        assert!(!dir.join("g.cbf").exists(), "{extra:?}: a file was written");
    }
    // (nanoBragg's DIALS convention turns about the vertical: a still only)
    for convention in [
        &["-mosflm", "-osc", "0.5"][..],
        &["-xds", "-osc", "0.5"],
        &["-denzo", "-osc", "0.5"],
        &["-dials"],
    ] {
        let out = run(convention);
        assert!(out.status.success(), "{convention:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = run(&["-dials", "-osc", "0.5"]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("rotation axis is 90 deg")
    );
}
