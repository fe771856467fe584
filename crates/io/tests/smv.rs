//! SMV writer and reader: header layout, long headers, byte order, and error cases.

use std::path::{Path, PathBuf};

use nanobragg_io::atomic::Pending;
use nanobragg_io::smv::{
    read_smv, read_smv_header, smv_bytes, smv_header_text, write_smv, SmvHeader, SmvHeaderFields,
    SmvImage, SmvPixels,
};
use nanobragg_io::IoError;

fn fields() -> SmvHeaderFields {
    SmvHeaderFields {
        fpixels: 4,
        spixels: 3,
        pixel_size_mm: 0.1,
        distance_mm: 100.0,
        wavelength_a: 1.0,
        beam_center_x_mm: 0.2,
        beam_center_y_mm: 0.15,
        adxv_center_x_mm: 0.2,
        adxv_center_y_mm: 0.15,
        mosflm_center_x_mm: 0.1,
        mosflm_center_y_mm: 0.15,
        denzo_x_beam_mm: 0.15,
        denzo_y_beam_mm: 0.2,
        dials_origin_mm: [-0.2, 0.15, -100.0],
        xds_orgx: 2.5,
        xds_orgy: 2.0,
        close_distance_mm: 100.0,
        phi_deg: 0.0,
        osc_start_deg: 0.0,
        osc_range_deg: 0.0,
        twotheta_deg: 0.0,
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nanobragg-io-smv-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn parse(bytes: &[u8]) -> Result<SmvImage, IoError> {
    SmvImage::parse(bytes, Path::new("test.img"))
}

#[test]
fn header_layout() {
    let h = smv_header_text(&fields());
    assert_eq!(h.len(), 512);
    let text = h.trim_end_matches(' ');
    let expected =
        "{\nHEADER_BYTES=512;\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE=unsigned_short;\n\
SIZE1=4;\nSIZE2=3;\nPIXEL_SIZE=0.1;\nDISTANCE=100;\nWAVELENGTH=1;\n\
BEAM_CENTER_X=0.2;\nBEAM_CENTER_Y=0.15;\nADXV_CENTER_X=0.2;\nADXV_CENTER_Y=0.15;\n\
MOSFLM_CENTER_X=0.1;\nMOSFLM_CENTER_Y=0.15;\nDENZO_X_BEAM=0.15;\nDENZO_Y_BEAM=0.2;\n\
DIALS_ORIGIN=-0.2,0.15,-100\nXDS_ORGX=2.5;\nXDS_ORGY=2;\nCLOSE_DISTANCE=100;\n\
PHI=0;\nOSC_START=0;\nOSC_RANGE=0;\nTWOTHETA=0;\nDETECTOR_SN=000;\nBEAMLINE=fake;\n}\u{c}";
    assert_eq!(text, expected);
}

#[test]
fn long_header_grows_to_next_block() {
    let mut f = fields();
    // long %g renderings push the text beyond 512 bytes
    let long = -1.234_567_8e-100;
    f.pixel_size_mm = long;
    f.distance_mm = long;
    f.wavelength_a = long;
    f.beam_center_x_mm = long;
    f.beam_center_y_mm = long;
    f.adxv_center_x_mm = long;
    f.adxv_center_y_mm = long;
    f.mosflm_center_x_mm = long;
    f.mosflm_center_y_mm = long;
    f.denzo_x_beam_mm = long;
    f.denzo_y_beam_mm = long;
    f.dials_origin_mm = [long; 3];
    f.xds_orgx = long;
    f.xds_orgy = long;
    f.close_distance_mm = long;
    f.phi_deg = long;
    f.osc_start_deg = long;
    f.osc_range_deg = long;
    f.twotheta_deg = long;
    let h = smv_header_text(&f);
    assert_eq!(h.len(), 1024);
    assert!(h.starts_with("{\nHEADER_BYTES=1024;\n"));
    assert!(h.trim_end_matches(' ').ends_with("}\u{c}"));
    let pixels: Vec<u16> = (0..12).collect();
    let img = parse(&smv_bytes(&f, &pixels)).unwrap();
    assert_eq!(img.header_bytes, 1024);
    assert_eq!(img.data, pixels);
    assert_eq!(img.value_of("TWOTHETA"), Some(-1.23457e-100));
}

#[test]
fn write_and_read_back() {
    let dir = scratch("rw");
    let p = dir.join("x.img");
    let pixels: Vec<u16> = vec![0, 1, 2, 3, 256, 65535, 40, 41, 42, 43, 44, 45];
    let mut file = Pending::create(&p).unwrap();
    write_smv(&mut file, &SmvHeader::from(&fields()), SmvPixels::U16(&pixels)).unwrap();
    file.commit().unwrap();
    let raw = std::fs::read(&p).unwrap();
    assert_eq!(raw.len(), 512 + 24);
    assert_eq!(&raw[512 + 8..512 + 12], &[0, 1, 255, 255]);
    let img = read_smv(&p).unwrap();
    assert_eq!((img.width, img.height, img.header_bytes), (4, 3, 512));
    assert_eq!(img.data, pixels);
    assert_eq!(img.header, smv_header_text(&fields()));
    assert_eq!(img.value_of("DIALS_ORIGIN"), Some(-0.2));
    assert_eq!(img.value_of("XDS_ORGY"), Some(2.0));
    // wrong pixel count is refused and leaves nothing behind
    let q = dir.join("bad.img");
    let mut file = Pending::create(&q).unwrap();
    let err = write_smv(&mut file, &SmvHeader::from(&fields()), SmvPixels::U16(&pixels[..5]))
        .unwrap_err();
    assert!(matches!(err, IoError::InvalidInput { .. }));
    drop(file);
    assert!(!q.exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A minimal valid SMV file with the given header text, padded to 512, and pixels.
fn smv_with(header: &str, pixel_bytes: &[u8]) -> Vec<u8> {
    let mut b = header.as_bytes().to_vec();
    b.resize(512, b' ');
    b.extend_from_slice(pixel_bytes);
    b
}

#[test]
fn big_endian_pixels_are_swapped() {
    let pixels = [0x01u8, 0x02, 0x03, 0x04];
    let le = smv_with(
        "{\nHEADER_BYTES=512;\nBYTE_ORDER=little_endian;\nSIZE1=2;\nSIZE2=1;\n}\u{c}",
        &pixels,
    );
    assert_eq!(parse(&le).unwrap().data, [0x0201, 0x0403]);
    let be = smv_with(
        "{\nHEADER_BYTES=512;\nBYTE_ORDER=big_endian;\nSIZE1=2;\nSIZE2=1;\n}\u{c}",
        &pixels,
    );
    assert_eq!(parse(&be).unwrap().data, [0x0102, 0x0304]);
    // the last occurrence counts
    let both = smv_with(
        "{\nHEADER_BYTES=512;\nBYTE_ORDER=big_endian;\nSIZE1=2;\nSIZE2=1;\nBYTE_ORDER=little_endian;\n}\u{c}",
        &pixels,
    );
    assert_eq!(parse(&both).unwrap().data, [0x0201, 0x0403]);
}

#[test]
fn c_reader_quirks() {
    // spaces in the value, fractional HEADER_BYTES truncated, header smaller than 512,
    // DETECTOR_DIMENSIONS when SIZE1 is 0, extra bytes at the end ignored
    let mut b = b"{\nHEADER_BYTES=  256.7;\nSIZE1=0;\nDETECTOR_DIMENSIONS=2;\n}\x0c".to_vec();
    b.resize(256, b' ');
    b.extend_from_slice(&[1, 0, 2, 0, 3, 0, 4, 0]);
    b.resize(600, 0);
    let img = parse(&b).unwrap();
    assert_eq!((img.header_bytes, img.width, img.height), (256, 2, 2));
    assert_eq!(img.data, [1, 2, 3, 4]);
    // the header text stops at the first NUL byte
    let mut b = smv_with("{\nHEADER_BYTES=512;\nSIZE1=1;\nSIZE2=1;\n", &[7, 0]);
    b[100] = 0;
    b[200..210].copy_from_slice(b"SIZE1=999;");
    assert_eq!(parse(&b).unwrap().width, 1);
}

#[test]
fn reader_errors() {
    let good_header = "{\nHEADER_BYTES=512;\nSIZE1=4;\nSIZE2=4;\n}\u{c}";
    let full = smv_with(good_header, &[0u8; 32]);
    assert!(parse(&full).is_ok());

    // truncated pixel data
    let err = parse(&full[..full.len() - 1]).unwrap_err();
    assert!(matches!(err, IoError::Truncated { expected: 544, actual: 543, .. }), "{err}");
    assert!(err.to_string().contains("test.img"), "{err}");
    // for its header alone (-img), short pixel data is reported, not refused
    let dir = std::env::temp_dir().join(format!("nanobragg-io-short-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short.img");
    std::fs::write(&path, &full[..full.len() - 5]).unwrap();
    let (img, short) = read_smv_header(&path).unwrap();
    assert_eq!((img.width, img.height, img.data.len()), (4, 4, 0));
    assert_eq!(short, Some((544, 539)));
    std::fs::write(&path, &full).unwrap();
    let (img, short) = read_smv_header(&path).unwrap();
    assert_eq!((img.data.len(), short), (16, None));
    assert!(read_smv_header(&dir.join("none.img")).is_err());
    std::fs::remove_dir_all(&dir).ok();

    // shorter than 512 bytes
    let err = parse(&full[..300]).unwrap_err();
    assert!(matches!(err, IoError::TooShort { len: 300, .. }), "{err}");

    // garbled start
    let mut garbled = full.clone();
    garbled[3] = b'X';
    assert!(matches!(parse(&garbled), Err(IoError::NotSmv { .. })));
    let mut garbled = full.clone();
    garbled[0] = 0;
    assert!(matches!(parse(&garbled), Err(IoError::NotSmv { .. })));

    let bad_header = |header: &str| match parse(&smv_with(header, &[0u8; 32])) {
        Err(IoError::BadHeader { reason, .. }) => reason,
        other => panic!("expected BadHeader for {header:?}, got {other:?}"),
    };
    // HEADER_BYTES non-numeric, zero, negative, too large; missing (HEADER_BYTE only)
    assert!(bad_header("{\nHEADER_BYTES=abc;\nSIZE1=4;\nSIZE2=4;\n").contains("HEADER_BYTES"));
    assert!(bad_header("{\nHEADER_BYTES=0;\nSIZE1=4;\nSIZE2=4;\n").contains("HEADER_BYTES"));
    assert!(bad_header("{\nHEADER_BYTES=-512;\nSIZE1=4;\nSIZE2=4;\n").contains("HEADER_BYTES"));
    assert!(bad_header("{\nHEADER_BYTES=1e9;\nSIZE1=4;\nSIZE2=4;\n").contains("larger"));
    assert!(bad_header("{\nHEADER_BYTE=512;\nSIZE1=4;\nSIZE2=4;\n").contains("no HEADER_BYTES"));
    // sizes missing or not positive
    assert!(bad_header("{\nHEADER_BYTES=512;\nSIZE2=4;\n").contains("SIZE1"));
    assert!(bad_header("{\nHEADER_BYTES=512;\nSIZE1=4;\n").contains("SIZE2"));
    assert!(bad_header("{\nHEADER_BYTES=512;\nSIZE1=-4;\nSIZE2=4;\n").contains("SIZE1"));
    assert!(bad_header("{\nHEADER_BYTES=512;\nSIZE1=4;\nSIZE2=0;\n").contains("SIZE2"));

    // missing file
    let missing = std::env::temp_dir().join("nanobragg-io-definitely-missing.img");
    let err = read_smv(&missing).unwrap_err();
    assert!(matches!(err, IoError::NotFound { .. }));
    assert!(err.to_string().contains("nanobragg-io-definitely-missing.img"));
}
