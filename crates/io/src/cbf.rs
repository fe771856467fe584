//! miniCBF images: one panel of signed 32-bit pixels, byte_offset
//! compressed, after a Pilatus-style header (what Pilatus detectors write,
//! and what DIALS, XDS, fabio and CBFlib read).
//!
//! The header values come from [`MxImage`]; numbers are written with Rust's
//! shortest round-trip formatting, so a reader gets the exact `f64` back.

use crate::atomic::Pending;
use crate::mx::MxImage;
use crate::IoError;

/// The four bytes that open a CBF binary section.
pub const BINARY_START: [u8; 4] = [0x0c, 0x1a, 0x04, 0xd5];

/// Zero bytes written after the compressed data (as Pilatus detectors do,
/// so that a reader may read ahead).
const PADDING: usize = 4095;

/// byte_offset compression of `pixels` (CBFlib's `x-CBF_BYTE_OFFSET`):
/// each value as its difference from the previous one (the first from 0),
/// in one byte when it fits in −127..=127, else the byte 0x80 and 16 bits
/// when it fits in −32767..=32767, else 0x80 0x8000 and 32 bits, else (a
/// jump of more than 2³¹ − 1 between 32-bit values) 0x80 0x8000 0x80000000
/// and 64 bits; little-endian throughout.
pub fn byte_offset(pixels: &[i32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pixels.len() + pixels.len() / 8 + 16);
    let mut prev = 0i64;
    for &p in pixels {
        let delta = i64::from(p) - prev;
        prev = i64::from(p);
        if (-127..=127).contains(&delta) {
            out.push(delta as i8 as u8);
            continue;
        }
        out.push(0x80);
        if (-32767..=32767).contains(&delta) {
            out.extend_from_slice(&(delta as i16).to_le_bytes());
            continue;
        }
        out.extend_from_slice(&0x8000u16.to_le_bytes());
        if (-2147483647..=2147483647).contains(&delta) {
            out.extend_from_slice(&(delta as i32).to_le_bytes());
            continue;
        }
        out.extend_from_slice(&0x8000_0000u32.to_le_bytes());
        out.extend_from_slice(&delta.to_le_bytes());
    }
    out
}

/// The Pilatus-style header lines (`# Key value`) of `img`.
pub fn header_contents(img: &MxImage) -> String {
    let p = &img.panels[0];
    let material = match img.sensor_material.as_str() {
        "Si" => "Silicon",
        "CdTe" => "CdTe",
        "GaAs" => "GaAs",
        other => other,
    };
    // Pilatus stamps carry milliseconds and no zone; ours is UTC to the second
    let stamp = img.start_time.trim_end_matches('Z');
    let lines = [
        "# Detector: nanobragg simulated detector, S/N 0".to_string(),
        format!("# {stamp}.000"),
        format!("# Pixel_size {} m x {} m", p.pixel_size_m, p.pixel_size_m),
        format!("# {material} sensor, thickness {} m", img.sensor_thickness_m),
        format!("# Exposure_time {} s", img.exposure_s),
        format!("# Exposure_period {} s", img.exposure_s),
        "# Tau = 0 s".to_string(),
        format!("# Count_cutoff {} counts", img.saturation_value),
        format!("# Wavelength {} A", img.wavelength_a),
        format!("# Detector_distance {} m", img.distance_m),
        format!("# Beam_xy ({}, {}) pixels", img.beam_centre_px[0], img.beam_centre_px[1]),
        format!("# Start_angle {} deg.", img.phi_start_deg),
        format!("# Angle_increment {} deg.", img.phi_range_deg),
        format!("# Phi {} deg.", img.phi_start_deg),
        "# Oscillation_axis PHI".to_string(),
        "# N_oscillations 1".to_string(),
    ];
    let mut s = String::new();
    for l in lines {
        s.push_str(&l);
        s.push_str("\r\n");
    }
    s
}

/// Why a miniCBF header cannot hold this geometry, if it cannot.
///
/// A Pilatus header gives the distance, beam centre and pixel size and
/// nothing of the detector's orientation: readers (dxtbx's
/// `FormatCBFMiniPilatus`, XDS) take the detector square to the beam, its
/// fast axis along +x and slow along −y of the imgCIF frame (the X-rays
/// travelling along −z), and the rotation axis along +x. dxtbx ignores
/// `Detector_2theta`. So the detector's normal `fast × slow` must be the
/// beam's direction of travel `beam`, the fast axis horizontal (across
/// [`crate::mx::LAB_UP`], the vertical of the NXmx frame too), and for a
/// rotation image (`rotates`) the axis `spindle` must be `fast`; vectors
/// in nanoBragg's laboratory frame, unit.
pub fn unheld_geometry(
    fast: [f64; 3],
    slow: [f64; 3],
    beam: [f64; 3],
    spindle: [f64; 3],
    rotates: bool,
) -> Option<String> {
    use crate::mx::{cross, dot};
    let angle = |a: [f64; 3], b: [f64; 3]| {
        let c = dot(a, b);
        let s = dot(cross(a, b), cross(a, b)).sqrt();
        s.atan2(c).to_degrees()
    };
    // (1e-6 rad: a hundredth of a pixel at the edge of a 10⁴-pixel panel)
    const TOLERANCE_DEG: f64 = 1e-6 * 57.295_779_513_082_32;
    let normal = cross(fast, slow);
    let tilt = angle(normal, beam);
    if tilt > 90.0 {
        let tilted = match 180.0 - tilt {
            t if t <= TOLERANCE_DEG => String::new(),
            t => format!(" and tilted {} deg from square to the beam", round6(t)),
        };
        return Some(format!(
            "the image is mirrored{tilted}: its slow axis runs against the one miniCBF readers take (fast × slow along the beam), as in the ADXV convention"
        ));
    }
    if tilt > TOLERANCE_DEG {
        return Some(format!(
            "the detector is tilted {} deg from square to the beam (two-theta, tilts or the file's panel); miniCBF readers take it square (dxtbx ignores Detector_2theta)",
            round6(tilt)
        ));
    }
    let skew = 90.0 - angle(fast, slow);
    if skew.abs() > TOLERANCE_DEG {
        return Some(format!(
            "the fast and slow axes are {} deg from perpendicular; miniCBF readers take them perpendicular",
            round6(skew.abs())
        ));
    }
    // (fast along the horizontal either way: the frame a reader gives the
    // image is then ours or ours turned 180° about the beam)
    let up = crate::mx::LAB_UP;
    let turned = dot(fast, up).abs().min(1.0).asin().to_degrees();
    if turned > TOLERANCE_DEG {
        return Some(format!(
            "the detector is turned {} deg about the beam (its fast axis off the horizontal); miniCBF readers take fast horizontal and slow vertical",
            round6(turned)
        ));
    }
    let off = angle(spindle, fast);
    if rotates && off > TOLERANCE_DEG {
        return Some(format!(
            "the rotation axis is {} deg from the detector's fast axis; miniCBF readers take the axis along fast",
            round6(off)
        ));
    }
    None
}

/// `x` to six decimals, for a message.
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The bytes of a whole miniCBF file of `img`, which must have one panel
/// whose pixel count matches its size, in a geometry its header holds
/// (else the reason; see [`unheld_geometry`]).
pub fn cbf_bytes(img: &MxImage) -> Result<Vec<u8>, String> {
    let [p] = img.panels.as_slice() else {
        return Err(format!("CBF holds one panel; this image has {}", img.panels.len()));
    };
    let rotates = img.phi_range_deg != 0.0;
    if let Some(why) = unheld_geometry(p.fast, p.slow, img.beam, img.spindle, rotates) {
        return Err(format!("{why}: write NXmx, which holds any geometry"));
    }
    if p.pixels.len() != p.fpixels * p.spixels {
        return Err(format!("{} pixels for a {} x {} panel", p.pixels.len(), p.fpixels, p.spixels));
    }
    let data = byte_offset(p.pixels);
    let mut s = String::new();
    s.push_str("###CBF: VERSION 1.5, written by nanobragg\r\n\r\n");
    s.push_str("data_nanobragg\r\n\r\n");
    s.push_str("_array_data.header_convention \"PILATUS_1.2\"\r\n");
    s.push_str("_array_data.header_contents\r\n;\r\n");
    s.push_str(&header_contents(img));
    s.push_str(";\r\n\r\n");
    s.push_str("_array_data.data\r\n;\r\n");
    s.push_str("--CIF-BINARY-FORMAT-SECTION--\r\n");
    s.push_str("Content-Type: application/octet-stream;\r\n");
    s.push_str("     conversions=\"x-CBF_BYTE_OFFSET\"\r\n");
    s.push_str("Content-Transfer-Encoding: BINARY\r\n");
    s.push_str(&format!("X-Binary-Size: {}\r\n", data.len()));
    s.push_str("X-Binary-ID: 1\r\n");
    s.push_str("X-Binary-Element-Type: \"signed 32-bit integer\"\r\n");
    s.push_str("X-Binary-Element-Byte-Order: LITTLE_ENDIAN\r\n");
    s.push_str(&format!("X-Binary-Number-of-Elements: {}\r\n", p.pixels.len()));
    s.push_str(&format!("X-Binary-Size-Fastest-Dimension: {}\r\n", p.fpixels));
    s.push_str(&format!("X-Binary-Size-Second-Dimension: {}\r\n", p.spixels));
    s.push_str(&format!("X-Binary-Size-Padding: {PADDING}\r\n\r\n"));
    let mut out = Vec::with_capacity(s.len() + data.len() + PADDING + 64);
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(&BINARY_START);
    out.extend_from_slice(&data);
    out.resize(out.len() + PADDING, 0);
    out.extend_from_slice(b"\r\n--CIF-BINARY-FORMAT-SECTION----\r\n;\r\n\r\n");
    Ok(out)
}

/// Writes `img` as miniCBF into `file` (committed by the caller).
pub fn write_cbf(file: &mut Pending, img: &MxImage) -> Result<(), IoError> {
    let bytes = cbf_bytes(img)
        .map_err(|reason| IoError::InvalidInput { path: file.target().to_path_buf(), reason })?;
    file.write(|w| std::io::Write::write_all(w, &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mx::Panel;

    /// byte_offset decoding, written from the format's description.
    fn decode(mut b: &[u8], n: usize) -> Vec<i32> {
        let mut out = Vec::with_capacity(n);
        let mut v = 0i64;
        fn take(k: usize, b: &mut &[u8]) -> i64 {
            let (head, rest) = b.split_at(k);
            *b = rest;
            let mut full = [0u8; 8];
            full[..k].copy_from_slice(head);
            // sign-extend from k bytes
            (i64::from_le_bytes(full) << (64 - 8 * k)) >> (64 - 8 * k)
        }
        while out.len() < n {
            let mut d = take(1, &mut b);
            if d == -128 {
                d = take(2, &mut b);
                if d == -32768 {
                    d = take(4, &mut b);
                    if d == i64::from(i32::MIN) {
                        d = take(8, &mut b);
                    }
                }
            }
            v += d;
            out.push(v as i32);
        }
        assert!(b.is_empty(), "{} bytes left over", b.len());
        out
    }

    #[test]
    fn byte_offset_round_trip_at_every_escape() {
        let pixels = [
            0,
            127,
            0,
            -127,
            1,
            128,
            -32767 + 128,
            0,
            32767,
            -1,
            32768 - 1,
            70000,
            -70000,
            i32::MAX,
            i32::MIN,
            i32::MAX,
            5,
            5,
            -2147483647,
        ];
        let enc = byte_offset(&pixels);
        assert_eq!(decode(&enc, pixels.len()), pixels);
        // the sizes the escapes give: 1, 1, 1, 1, 1, 3, ...
        assert_eq!(&byte_offset(&[127, 128])[..], &[127, 1]);
        assert_eq!(&byte_offset(&[-127])[..], &[0x81]);
        assert_eq!(&byte_offset(&[128])[..], &[0x80, 0x80, 0x00]);
        assert_eq!(&byte_offset(&[-32767])[..], &[0x80, 0x01, 0x80]);
        assert_eq!(&byte_offset(&[32768])[..], &[0x80, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00]);
        assert_eq!(byte_offset(&[i32::MIN, i32::MAX]).len(), 15 + 15);
    }

    #[test]
    fn byte_offset_round_trip_random() {
        // a xorshift stream over every magnitude
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let pixels: Vec<i32> = (0..5000)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x as i32) >> (i % 32)
            })
            .collect();
        assert_eq!(decode(&byte_offset(&pixels), pixels.len()), pixels);
    }

    fn image(pixels: &[i32]) -> MxImage<'_> {
        MxImage {
            panels: vec![Panel {
                origin_m: [0.1, 0.0257, -0.0251],
                fast: [0.0, 0.0, 1.0],
                slow: [0.0, -1.0, 0.0],
                pixel_size_m: 172e-6,
                fpixels: 4,
                spixels: 3,
                pixels,
            }],
            beam: [1.0, 0.0, 0.0],
            polar: [0.0, 0.0, 1.0],
            spindle: [0.0, 0.0, 1.0],
            wavelength_a: 1.2345,
            spectrum_a: vec![(1.2345, 1.0)],
            kahn_factor: 0.0,
            total_flux: 1e12,
            distance_m: 0.1,
            beam_centre_px: [150.25, 146.5],
            exposure_s: 0.5,
            phi_start_deg: 10.0,
            phi_range_deg: 0.25,
            saturation_value: i32::MAX,
            underload_value: -1,
            sensor_material: "Si".into(),
            sensor_thickness_m: 450e-6,
            start_time: "2026-11-25T12:00:00Z".into(),
            end_time: "2026-11-25T12:00:01Z".into(),
            masked: vec![],
            crystal_a: None,
            noise_rng: None,
        }
    }

    #[test]
    fn file_layout() {
        let pixels: Vec<i32> = (0..12).map(|i| i * 1000 - 3).collect();
        let bytes = cbf_bytes(&image(&pixels)).unwrap();
        let start = bytes.windows(4).position(|w| w == BINARY_START).unwrap();
        let text = std::str::from_utf8(&bytes[..start]).unwrap();
        for line in [
            "# Pixel_size 0.000172 m x 0.000172 m\r\n",
            "# Silicon sensor, thickness 0.00045 m\r\n",
            "# Exposure_time 0.5 s\r\n",
            "# Wavelength 1.2345 A\r\n",
            "# Detector_distance 0.1 m\r\n",
            "# Beam_xy (150.25, 146.5) pixels\r\n",
            "# Start_angle 10 deg.\r\n",
            "# Angle_increment 0.25 deg.\r\n",
            "# Count_cutoff 2147483647 counts\r\n",
            "# 2026-11-25T12:00:00.000\r\n",
            "X-Binary-Number-of-Elements: 12\r\n",
            "X-Binary-Size-Fastest-Dimension: 4\r\n",
            "X-Binary-Size-Second-Dimension: 3\r\n",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        let size: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("X-Binary-Size: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let data = &bytes[start + 4..start + 4 + size];
        assert_eq!(decode(data, 12), pixels);
        assert!(bytes[start + 4 + size..].starts_with(&[0; PADDING]));
        assert!(bytes.ends_with(b"--CIF-BINARY-FORMAT-SECTION----\r\n;\r\n\r\n"));
    }

    #[test]
    fn refuses_what_it_cannot_hold() {
        let pixels = [0; 12];
        let mut img = image(&pixels);
        img.panels.push(img.panels[0]);
        assert!(cbf_bytes(&img).unwrap_err().contains("one panel"));
        let short = [0; 5];
        assert!(cbf_bytes(&image(&short)).unwrap_err().contains("5 pixels for a 4 x 3"));
    }

    #[test]
    fn refuses_geometry_its_header_cannot_hold() {
        let pixels = [0; 12];
        // MOSFLM's frame: beam +x, fast +z along the spindle, slow -y
        assert!(cbf_bytes(&image(&pixels)).is_ok());
        let (c, s) = (10f64.to_radians().cos(), 10f64.to_radians().sin());
        type Change = fn(&mut MxImage, f64, f64);
        let cases: [(&str, Change); 5] = [
            ("mirrored", |i, _, _| i.panels[0].slow = [0.0, 1.0, 0.0]),
            // two-theta 10° about the spindle: slow swings towards the beam
            ("tilted 10 deg", |i, c, s| i.panels[0].slow = [s, -c, 0.0]),
            // turned 10° in the plane of the detector
            ("turned 10 deg about the beam", |i, c, s| {
                i.panels[0].fast = [0.0, s, c];
                i.panels[0].slow = [0.0, -c, s];
            }),
            ("rotation axis is 180 deg", |i, _, _| i.spindle = [0.0, 0.0, -1.0]),
            // slow 10° off perpendicular, in the plane square to the beam
            ("10 deg from perpendicular", |i, c, s| i.panels[0].slow = [0.0, -c, s]),
        ];
        for (want, change) in cases {
            let mut img = image(&pixels);
            change(&mut img, c, s);
            let e = cbf_bytes(&img).unwrap_err();
            assert!(e.contains(want) && e.contains("write NXmx"), "{want}: {e}");
            // a still too: its pixels are placed by the same header
            img.phi_range_deg = 0.0;
            if !want.starts_with("rotation axis") {
                assert!(cbf_bytes(&img).unwrap_err().contains(want), "still: {want}");
            }
        }
        // turned 180° (the XDS and DIALS conventions' axes): fast horizontal
        let mut img = image(&pixels);
        img.panels[0].fast = [0.0, 0.0, -1.0];
        img.panels[0].slow = [0.0, 1.0, 0.0];
        img.spindle = [0.0, 0.0, -1.0];
        assert!(cbf_bytes(&img).is_ok());
    }
}
