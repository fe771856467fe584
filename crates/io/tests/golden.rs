//! Comparisons with the reference C program's outputs in the golden data set.
//!
//! The data set is the repository's vendored `tests/golden` (or `$NANOBRAGG_GOLDEN`);
//! it must be present.

use std::io::Read;
use std::path::{Path, PathBuf};

use nanobragg_io::pgm::{int_image, pgm_bytes, pgm_header};
use nanobragg_io::smv::{read_smv, smv_header_text, SmvHeaderFields, SmvImage};

fn golden_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("NANOBRAGG_GOLDEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden"));
    assert!(dir.join("cases.toml").is_file(), "golden data not found at {}", dir.display());
    Some(dir)
}

/// Decompresses `out/<case>/<name>.zst`, at most `limit` bytes.
fn golden_output(dir: &Path, case: &str, name: &str, limit: Option<u64>) -> Vec<u8> {
    let path = dir.join("out").join(case).join(format!("{name}.zst"));
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let decoder = ruzstd::decoding::StreamingDecoder::new(std::io::BufReader::new(file))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    match limit {
        Some(n) => decoder.take(n).read_to_end(&mut out),
        None => { decoder }.read_to_end(&mut out),
    }
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    out
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The header fields of a parsed SMV image. `DISTANCE` is looked up as `\nDISTANCE`
/// because the plain key also matches `CLOSE_DISTANCE`.
fn fields_of(img: &SmvImage) -> SmvHeaderFields {
    let v = |key: &str| img.value_of(key).unwrap_or_else(|| panic!("{key} missing"));
    let dials: Vec<f64> = {
        let start = img.header.find("DIALS_ORIGIN=").unwrap() + "DIALS_ORIGIN=".len();
        let line = img.header[start..].lines().next().unwrap();
        line.split(',').map(nanobragg_io::smv::atof).collect()
    };
    SmvHeaderFields {
        fpixels: img.width,
        spixels: img.height,
        pixel_size_mm: v("PIXEL_SIZE"),
        distance_mm: v("\nDISTANCE"),
        wavelength_a: v("WAVELENGTH"),
        beam_center_x_mm: v("BEAM_CENTER_X"),
        beam_center_y_mm: v("BEAM_CENTER_Y"),
        adxv_center_x_mm: v("ADXV_CENTER_X"),
        adxv_center_y_mm: v("ADXV_CENTER_Y"),
        mosflm_center_x_mm: v("MOSFLM_CENTER_X"),
        mosflm_center_y_mm: v("MOSFLM_CENTER_Y"),
        denzo_x_beam_mm: v("DENZO_X_BEAM"),
        denzo_y_beam_mm: v("DENZO_Y_BEAM"),
        dials_origin_mm: [dials[0], dials[1], dials[2]],
        xds_orgx: v("XDS_ORGX"),
        xds_orgy: v("XDS_ORGY"),
        close_distance_mm: v("CLOSE_DISTANCE"),
        phi_deg: v("PHI"),
        osc_start_deg: v("OSC_START"),
        osc_range_deg: v("OSC_RANGE"),
        twotheta_deg: v("TWOTHETA"),
    }
}

/// Every golden SMV output: the regenerated header equals the C program's bytes
/// (for the one longer than 512 bytes, up to the deliberate HEADER_BYTES fix).
#[test]
fn smv_headers_regenerate_byte_identical() {
    let Some(dir) = golden_dir() else { return };
    let mut checked = 0;
    let mut long_headers = 0;
    for entry in std::fs::read_dir(dir.join("out")).unwrap() {
        let case_dir = entry.unwrap().path();
        let case = case_dir.file_name().unwrap().to_string_lossy().into_owned();
        for name in ["int.img", "noise.img"] {
            if !case_dir.join(format!("{name}.zst")).exists() {
                continue;
            }
            let head = golden_output(&dir, &case, name, Some(2048));
            // only the header was decompressed: build the image from its text
            let text_end = head.iter().position(|&b| b == 0x0c).unwrap() + 1;
            let c_text = std::str::from_utf8(&head[..text_end]).unwrap();
            let parsed = SmvImage {
                header: c_text.to_string(),
                header_bytes: 512,
                width: nanobragg_io::smv::header_value(c_text, "SIZE1").unwrap() as usize,
                height: nanobragg_io::smv::header_value(c_text, "SIZE2").unwrap() as usize,
                data: Vec::new(),
            };
            let ours = smv_header_text(&fields_of(&parsed));
            if text_end <= 512 {
                assert_eq!(ours.as_bytes(), &head[..512], "{case}/{name}");
            } else {
                long_headers += 1;
                let fixed = c_text.replace("HEADER_BYTES=512;", "HEADER_BYTES=1024;");
                assert_eq!(ours.len(), 1024, "{case}/{name}");
                assert_eq!(&ours[..fixed.len()], fixed, "{case}/{name}");
                assert!(ours[fixed.len()..].bytes().all(|b| b == b' '));
            }
            checked += 1;
        }
    }
    eprintln!("{checked} golden SMV headers checked, {long_headers} longer than 512 bytes");
    assert!(checked >= 5, "only {checked} golden SMV files found");
    assert!(long_headers >= 1, "the 514-byte comprehensive header was not seen");
}

#[test]
fn comprehensive_header_is_514_bytes_in_c_and_1024_here() {
    let Some(dir) = golden_dir() else { return };
    let head = golden_output(&dir, "comprehensive", "int.img", Some(1024));
    let text_end = head.iter().position(|&b| b == 0x0c).unwrap() + 1;
    assert_eq!(text_end, 514);
    let c_text = std::str::from_utf8(&head[..text_end]).unwrap();
    let parsed = SmvImage {
        header: c_text.to_string(),
        header_bytes: 512,
        width: 512,
        height: 512,
        data: Vec::new(),
    };
    let ours = smv_header_text(&fields_of(&parsed));
    assert_eq!(ours.len(), 1024);
    assert!(ours.starts_with("{\nHEADER_BYTES=1024;\nDIM=2;\n"));
    assert_eq!(ours.trim_end_matches(' ').len(), 515);
}

/// Full image of polar-0p95-int: reader, int_image and pgm_bytes reproduce the C files.
#[test]
fn polar_int_and_pgm_images() {
    let Some(dir) = golden_dir() else { return };
    let case = "polar-0p95-int";
    let float_image = floats(&golden_output(&dir, case, "float.bin", None));
    let int_raw = golden_output(&dir, case, "int.img", None);
    let pgm_raw = golden_output(&dir, case, "image.pgm", None);
    let (nf, ns) = (256usize, 256usize);
    assert_eq!(float_image.len(), nf * ns);
    let roi = [0, nf as i64 - 1, 0, ns as i64 - 1];

    // reader on the golden SMV file
    let img = SmvImage::parse(&int_raw, Path::new("int.img")).unwrap();
    assert_eq!((img.width, img.height, img.header_bytes), (nf, ns, 512));
    assert_eq!(img.value_of("PIXEL_SIZE"), Some(0.1));
    assert_eq!(img.value_of("\nDISTANCE"), Some(60.0));
    assert_eq!(img.value_of("WAVELENGTH"), Some(1.0));
    // header regenerates byte-identically
    assert_eq!(smv_header_text(&fields_of(&img)).as_bytes(), &int_raw[..512]);

    // intfile_scale = 55000 / max_I, default ADC offset 40
    let max_i = float_image.iter().fold(0.0f64, |m, &v| m.max(v as f64));
    let scale = 55000.0 / max_i;
    assert_eq!(nanobragg_io::cfmt::g(scale), "138.614");
    let ints = int_image(&float_image, nf, ns, roi, scale, 40.0);
    assert_eq!(ints, img.data);

    // pgm_scale = 250 / (5 rmsd), rmsd about the mean over the image
    let n = float_image.len() as f64;
    let avg = float_image.iter().map(|&v| v as f64).sum::<f64>() / n;
    let sumsqr: f64 = float_image.iter().map(|&v| (v as f64 - avg) * (v as f64 - avg)).sum();
    let rmsd = (sumsqr / (n - 1.0)).sqrt();
    let pgm_scale = 250.0 / (5.0 * rmsd);
    let header = pgm_header(nf, ns, pgm_scale);
    assert_eq!(header, "P5\n256 256\n# pixels scaled by 2.50931\n255\n");
    assert_eq!(&pgm_raw[..header.len()], header.as_bytes());
    let bytes = pgm_bytes(&float_image, nf, ns, roi, pgm_scale);
    assert_eq!(&pgm_raw[header.len()..], &bytes[..]);

    // a smaller ROI zeroes the outside
    let part = int_image(&float_image, nf, ns, [10, 20, 30, 40], scale, 40.0);
    for (idx, (&p, &full)) in part.iter().zip(&ints).enumerate() {
        let (f, s) = (idx % nf, idx / nf);
        let inside = (10..=20).contains(&f) && (30..=40).contains(&s);
        assert_eq!(p, if inside { full } else { 0 });
    }
}

#[test]
fn edited_input_headers() {
    let Some(dir) = golden_dir() else { return };
    let img = read_smv(&dir.join("inputs/header_edit.img")).unwrap();
    assert_eq!((img.width, img.height, img.header_bytes), (128, 128, 512));
    assert_eq!(img.data.len(), 128 * 128);
    assert_eq!(img.value_of("PIXEL_SIZE"), Some(0.12));
    assert_eq!(img.value_of("DISTANCE"), Some(85.0));
    assert_eq!(img.value_of("CLOSE_DISTANCE"), Some(85.0));
    assert_eq!(img.value_of("WAVELENGTH"), Some(1.3));
    assert_eq!(img.value_of("BEAM_CENTER_X"), Some(5.3));
    assert_eq!(img.value_of("BEAM_CENTER_Y"), Some(8.9));
    assert_eq!(img.value_of("ORGX"), Some(65.5));
    assert_eq!(img.value_of("PHI"), Some(12.0));
    assert_eq!(img.value_of("OSC_RANGE"), Some(2.0));
    assert_eq!(img.value_of("TWOTHETA"), Some(5.0));
    assert_eq!(img.value_of("NO_SUCH_KEY"), None);
    let raw = std::fs::read(dir.join("inputs/header_edit.img")).unwrap();
    assert_eq!(img.data[0], u16::from_le_bytes([raw[512], raw[513]]));
    assert_eq!(img.data[16383], u16::from_le_bytes([raw[33278], raw[33279]]));

    let mask = read_smv(&dir.join("inputs/mask_edit.img")).unwrap();
    assert_eq!((mask.width, mask.height), (128, 128));
    assert_eq!(mask.value_of("PIXEL_SIZE"), Some(0.1));
    assert_eq!(mask.value_of("DISTANCE"), Some(90.0));
    assert_eq!(mask.value_of("WAVELENGTH"), Some(1.1));
    assert_eq!(mask.value_of("BEAM_CENTER_X"), Some(6.0));
    assert_eq!(mask.value_of("BEAM_CENTER_Y"), Some(5.0));
    let zeros = mask.data.iter().filter(|&&v| v == 0).count();
    assert!(zeros > 0 && zeros < mask.data.len(), "{zeros} zero pixels");
}
