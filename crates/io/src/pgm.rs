//! Binary PGM (`P5`) preview images and the conversions of the float image to
//! 8-bit (PGM) and 16-bit (SMV) integer pixels, with the original program's rounding.

use std::io::Write;
use std::path::Path;

use crate::atomic::write_atomic;
use crate::{cfmt, IoError};

/// Region of interest `[xmin, xmax, ymin, ymax]` (fast and slow pixel indices, inclusive).
pub type Roi = [i64; 4];

fn in_roi(roi: &Roi, fpixel: usize, spixel: usize) -> bool {
    let (f, s) = (fpixel as i64, spixel as i64);
    f >= roi[0] && f <= roi[1] && s >= roi[2] && s <= roi[3]
}

/// Applies `convert` to every pixel inside `roi`; pixels outside are `T::default()`.
fn map_roi<T: Copy + Default>(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: Roi,
    convert: impl Fn(f32) -> T,
) -> Vec<T> {
    assert_eq!(
        float_image.len(),
        fpixels * spixels,
        "float image length does not match fpixels*spixels"
    );
    let mut out = vec![T::default(); fpixels * spixels];
    for spixel in 0..spixels {
        for fpixel in 0..fpixels {
            if in_roi(&roi, fpixel, spixel) {
                let idx = spixel * fpixels + fpixel;
                out[idx] = convert(float_image[idx]);
            }
        }
    }
    out
}

/// The PGM pixel bytes of the original program: inside `roi`, `value * pgm_scale` in
/// double precision, clipped at 255 and truncated toward zero; negative and NaN
/// results (undefined behaviour in C) give 0. Pixels outside `roi` are 0.
///
/// Panics if `float_image.len() != fpixels * spixels`.
pub fn pgm_bytes(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: Roi,
    pgm_scale: f64,
) -> Vec<u8> {
    map_roi(float_image, fpixels, spixels, roi, |v| {
        let mut test = v as f64 * pgm_scale;
        if test > 255.0 {
            test = 255.0;
        }
        // `as u8` truncates toward zero and saturates negatives and NaN to 0
        test as u8
    })
}

/// The 16-bit SMV pixels of the original program's `-intfile`: inside `roi`,
/// `test = value * scale + adc` in double precision, clipped to `[0, 65535]`, then
/// `test + 0.5` is converted to `f32` (the C code rounds with `floorf`), floored and
/// converted to `u16`. NaN gives 0. Pixels outside `roi` are 0.
///
/// Panics if `float_image.len() != fpixels * spixels`.
pub fn int_image(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: Roi,
    scale: f64,
    adc: f64,
) -> Vec<u16> {
    map_roi(float_image, fpixels, spixels, roi, |v| {
        // clamp keeps NaN, which the final conversion turns into 0
        let test = (v as f64 * scale + adc).clamp(0.0, 65535.0);
        // floorf of a non-negative f32 then truncation: the cast alone truncates
        ((test + 0.5) as f32) as u16
    })
}

/// The PGM header text: `P5\n<f> <s>\n# pixels scaled by <%lg of scale>\n255\n`.
pub fn pgm_header(fpixels: usize, spixels: usize, pgm_scale: f64) -> String {
    format!("P5\n{fpixels} {spixels}\n# pixels scaled by {}\n255\n", cfmt::g(pgm_scale))
}

/// Writes a binary PGM file (atomically): [`pgm_header`] followed by `bytes`, one per
/// pixel, fast index fastest. `bytes.len()` must equal `fpixels * spixels`.
pub fn write_pgm(
    path: &Path,
    fpixels: usize,
    spixels: usize,
    pgm_scale: f64,
    bytes: &[u8],
) -> Result<(), IoError> {
    if Some(bytes.len()) != fpixels.checked_mul(spixels) {
        return Err(IoError::InvalidInput {
            path: path.to_path_buf(),
            reason: format!("PGM of {fpixels}x{spixels} pixels given {} bytes", bytes.len()),
        });
    }
    let header = pgm_header(fpixels, spixels, pgm_scale);
    write_atomic(path, |w| {
        w.write_all(header.as_bytes())?;
        w.write_all(bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Roi = [0, i64::MAX, 0, i64::MAX];

    #[test]
    fn pgm_conversion() {
        let img = [0.0f32, 1.0, 2.99, 300.0, -0.5, -3.0, f32::NAN, 254.9];
        let b = pgm_bytes(&img, 4, 2, FULL, 1.0);
        assert_eq!(b, [0, 1, 2, 255, 0, 0, 0, 254]);
        let b = pgm_bytes(&img, 4, 2, [1, 2, 1, 1], 1.0);
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 0, 0]);
        let b = pgm_bytes(&img, 4, 2, [1, 2, 0, 0], 1.0);
        assert_eq!(b, [0, 1, 2, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn int_conversion() {
        let img = [0.0f32, 1.0, 1e9, -1e9, f32::NAN, 0.25];
        let v = int_image(&img, 3, 2, FULL, 1.0, 40.0);
        assert_eq!(v, [40, 41, 65535, 0, 0, 40]);
        // ties of test+0.5 round up through floorf
        let v = int_image(&[0.5f32], 1, 1, FULL, 1.0, 0.0);
        assert_eq!(v, [1]);
        // test + 0.5 is rounded to f32 before flooring: 100.9999999 becomes 101
        let v = int_image(&[1.0f32], 1, 1, FULL, 100.4999999, 0.0);
        assert_eq!(v, [101]);
        let v = int_image(&[65534.99f32], 1, 1, FULL, 1.0, 0.0);
        assert_eq!(v, [65535]);
        let v = int_image(&img, 3, 2, [1, 1, 0, 1], 1.0, 40.0);
        assert_eq!(v, [0, 41, 0, 0, 0, 0]);
    }

    #[test]
    fn header_text() {
        assert_eq!(
            pgm_header(256, 128, 2.5093142),
            "P5\n256 128\n# pixels scaled by 2.50931\n255\n"
        );
    }
}
