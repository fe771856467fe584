//! Raw `f32` images: little-endian IEEE-754 single precision values, fast index
//! varying fastest, no header (the `-floatfile` format; written by
//! [`crate::image_writer`]).

use std::path::Path;

use crate::IoError;

/// Serialises `values` as little-endian `f32` bytes.
pub fn float_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Reads a raw little-endian `f32` image.
///
/// With `expected_len = Some(n)` the file must hold exactly `n` values; otherwise its
/// length must be a multiple of 4. A mismatch is an [`IoError::LengthMismatch`].
pub fn read_float_image(path: &Path, expected_len: Option<usize>) -> Result<Vec<f32>, IoError> {
    let bytes = crate::read_all(path)?;
    let actual = bytes.len() as u64;
    match expected_len {
        Some(n) if (n as u64).checked_mul(4) != Some(actual) => {
            return Err(IoError::LengthMismatch {
                path: path.to_path_buf(),
                what: format!("raw float image of {n} 4-byte floats"),
                expected: (n as u64).saturating_mul(4),
                actual,
            });
        }
        None if actual / 4 * 4 != actual => {
            return Err(IoError::LengthMismatch {
                path: path.to_path_buf(),
                what: "raw float image (length must be a multiple of 4 bytes)".to_string(),
                expected: actual / 4 * 4,
                actual,
            });
        }
        _ => {}
    }
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_length_checks() {
        let dir = std::env::temp_dir().join(format!("nanobragg-io-float-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.bin");
        let v = [0.0f32, -1.5, f32::MAX, f32::MIN_POSITIVE, 3.25e-3];
        crate::atomic::write_bytes_atomic(&p, &float_bytes(&v)).unwrap();
        assert_eq!(std::fs::read(&p).unwrap().len(), 20);
        assert_eq!(std::fs::read(&p).unwrap()[4..8], (-1.5f32).to_le_bytes());
        assert_eq!(read_float_image(&p, Some(5)).unwrap(), v);
        assert_eq!(read_float_image(&p, None).unwrap(), v);
        let err = read_float_image(&p, Some(6)).unwrap_err();
        assert!(matches!(err, IoError::LengthMismatch { expected: 24, actual: 20, .. }));
        assert!(err.to_string().contains("f.bin"));
        std::fs::write(&p, [0u8; 7]).unwrap();
        assert!(matches!(read_float_image(&p, None), Err(IoError::LengthMismatch { .. })));
        let missing = dir.join("missing.bin");
        assert!(matches!(read_float_image(&missing, None), Err(IoError::NotFound { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
