//! Binary PGM (`P5`) preview images and the conversions of the float image to
//! 8-bit (PGM) and 16-bit (SMV) integer pixels, with the original program's rounding.

use crate::atomic::Pending;
use crate::{cfmt, IoError};
use std::io::Write;

/// Region of interest `[xmin, xmax, ymin, ymax]` (fast and slow pixel indices, inclusive).
pub type Roi = [i64; 4];

/// Applies `convert` (to a run of pixels at a time) to every pixel inside
/// `roi`; pixels outside are `T::default()`.
fn map_roi<T: Copy + Default + Send>(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: Roi,
    convert: impl Fn(&[f32], &mut [T]) + Sync,
) -> Vec<T> {
    assert_eq!(
        float_image.len(),
        fpixels * spixels,
        "float image length does not match fpixels*spixels"
    );
    let mut out = vec![T::default(); fpixels * spixels];
    map_roi_rows(float_image, fpixels, roi, 0, &mut out, convert, |_, _| {});
    out
}

/// [`map_roi`] of the whole rows from slow index `first_row` into `out`
/// (whose length is a multiple of `fpixels`), rows in parallel; `visit` is
/// shown each row's pixels inside the ROI (with the row's slow index) right
/// after they are converted, while they are in cache.
fn map_roi_rows<T: Copy + Default + Send>(
    float_image: &[f32],
    fpixels: usize,
    roi: Roi,
    first_row: usize,
    out: &mut [T],
    convert: impl Fn(&[f32], &mut [T]) + Sync,
    visit: impl Fn(usize, &[f32]) + Sync,
) {
    use rayon::prelude::*;
    if fpixels == 0 {
        return;
    }
    let src = &float_image[first_row * fpixels..first_row * fpixels + out.len()];
    // the ROI's columns as a range of each row (empty when it misses the image)
    let f0 = roi[0].clamp(0, fpixels as i64) as usize;
    let f1 = (roi[1].saturating_add(1)).clamp(f0 as i64, fpixels as i64) as usize;
    // a few rows per task: enough work to pay for the scheduling
    let rows_per_task = (16 * 1024 / fpixels).max(1);
    out.par_chunks_mut(rows_per_task * fpixels)
        .zip(src.par_chunks(rows_per_task * fpixels))
        .enumerate()
        .for_each(|(t, (dst, src))| {
            for (r, (d, v)) in dst.chunks_mut(fpixels).zip(src.chunks(fpixels)).enumerate() {
                let s = (first_row + t * rows_per_task + r) as i64;
                if s < roi[2] || s > roi[3] {
                    d.fill(T::default());
                    continue;
                }
                d[..f0].fill(T::default());
                d[f1..].fill(T::default());
                convert(&v[f0..f1], &mut d[f0..f1]);
                visit(s as usize, &v[f0..f1]);
            }
        });
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
    map_roi(float_image, fpixels, spixels, roi, |src, dst| pgm_run(src, dst, pgm_scale))
}

/// Converts a run of pixels; compiled for AVX2 as well where the CPU has it
/// (the loops vectorise), with the same results.
macro_rules! run_converter {
    ($name:ident, $any:ident, $avx2:ident, $t:ty, $pixel:ident, $($arg:ident),*) => {
        fn $name(src: &[f32], dst: &mut [$t], $($arg: f64),*) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2.
                return unsafe { $avx2(src, dst, $($arg),*) };
            }
            $any(src, dst, $($arg),*)
        }

        #[inline(always)]
        fn $any(src: &[f32], dst: &mut [$t], $($arg: f64),*) {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = $pixel(v, $($arg),*);
            }
        }

        // SAFETY (for callers): only where the CPU has AVX2 (checked above).
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2(src: &[f32], dst: &mut [$t], $($arg: f64),*) {
            $any(src, dst, $($arg),*)
        }
    };
}

run_converter!(pgm_run, pgm_run_any, pgm_run_avx2, u8, pgm_pixel, scale);
run_converter!(int_run, int_run_any, int_run_avx2, u16, int_pixel, scale, adc);

/// One PGM pixel (see [`pgm_bytes`]).
#[inline(always)]
#[allow(clippy::manual_clamp)] // clamp would keep NaN
fn pgm_pixel(v: f32, scale: f64) -> u8 {
    // `max` also turns NaN into 0 (C: undefined; we give 0)
    let test = (v as f64 * scale).max(0.0).min(255.0);
    // SAFETY: test is in [0, 255], so the truncation fits
    unsafe { test.to_int_unchecked::<i32>() as u8 }
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
    map_roi(float_image, fpixels, spixels, roi, |src, dst| int_run(src, dst, scale, adc))
}

/// [`int_image`] in 32 bits (the int32 images of NXmx and CBF output): the
/// same scale, offset and rounding, clipped to `[0, 2³¹ − 1]` instead of
/// `[0, 65535]`, so that it equals [`int_image`] wherever that is not
/// clipped at 65535. Above 2²⁴ (where `f32` holds no fraction) the rounding
/// is done in `f64`.
///
/// Panics if `float_image.len() != fpixels * spixels`.
pub fn int_image_i32(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: Roi,
    scale: f64,
    adc: f64,
) -> Vec<i32> {
    map_roi(float_image, fpixels, spixels, roi, |src, dst| {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = int32_pixel(v, scale, adc);
        }
    })
}

/// One [`int_image_i32`] pixel.
fn int32_pixel(v: f32, scale: f64, adc: f64) -> i32 {
    // `max` turns NaN into 0; `as` saturates at i32::MAX
    let test = (v as f64 * scale + adc).max(0.0) + 0.5;
    if test < 16_777_216.0 {
        test as f32 as i32
    } else {
        test as i32
    }
}

/// [`int_image`]'s pixels of the whole rows from slow index `first_row`, into
/// `out` (a multiple of `fpixels` long): one block of [`crate::smv::SmvPixels::Rows`].
pub fn int_rows(
    float_image: &[f32],
    fpixels: usize,
    roi: Roi,
    scale: f64,
    adc: f64,
    first_row: usize,
    out: &mut [u16],
) {
    int_rows_visiting(float_image, fpixels, roi, scale, adc, first_row, out, |_, _| {});
}

/// [`int_rows`], showing `visit` each converted row's pixels inside the ROI
/// with its slow index (so that another pass over the float image, such as
/// the RMSD's, can ride along while the row is in cache).
#[allow(clippy::too_many_arguments)]
pub fn int_rows_visiting(
    float_image: &[f32],
    fpixels: usize,
    roi: Roi,
    scale: f64,
    adc: f64,
    first_row: usize,
    out: &mut [u16],
    visit: impl Fn(usize, &[f32]) + Sync,
) {
    map_roi_rows(
        float_image,
        fpixels,
        roi,
        first_row,
        out,
        |src, dst| int_run(src, dst, scale, adc),
        visit,
    );
}

/// One `-intfile` pixel (see [`int_image`]).
#[inline(always)]
#[allow(clippy::manual_clamp)] // clamp would keep NaN
fn int_pixel(v: f32, scale: f64, adc: f64) -> u16 {
    // clipped to [0, 65535]; `max` also turns NaN into 0 (as C's cast gives)
    let test = (v as f64 * scale + adc).max(0.0).min(65535.0);
    // floorf of a non-negative f32 then truncation: the truncation alone;
    // SAFETY: the value is in [0.5, 65535.5], so it fits
    unsafe { ((test + 0.5) as f32).to_int_unchecked::<i32>() as u16 }
}

/// The PGM header text: `P5\n<f> <s>\n# pixels scaled by <%lg of scale>\n255\n`.
pub fn pgm_header(fpixels: usize, spixels: usize, pgm_scale: f64) -> String {
    format!("P5\n{fpixels} {spixels}\n# pixels scaled by {}\n255\n", cfmt::g(pgm_scale))
}

/// Writes a binary PGM image into `file`: [`pgm_header`] followed by `bytes`, one per
/// pixel, fast index fastest. `bytes.len()` must equal `fpixels * spixels`.
pub fn write_pgm(
    file: &mut Pending,
    fpixels: usize,
    spixels: usize,
    pgm_scale: f64,
    bytes: &[u8],
) -> Result<(), IoError> {
    if Some(bytes.len()) != fpixels.checked_mul(spixels) {
        return Err(IoError::InvalidInput {
            path: file.target().to_path_buf(),
            reason: format!("PGM of {fpixels}x{spixels} pixels given {} bytes", bytes.len()),
        });
    }
    let header = pgm_header(fpixels, spixels, pgm_scale);
    file.write(|w| {
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

    #[test]
    fn int32_conversion_is_the_int_image_unclipped() {
        let img = [0.0, 1.0, 2.49, 1000.0, 65494.9, 1e5, 1e9, f32::NAN, -50.0, 3e9];
        let narrow = int_image(&img, 5, 2, [0, 4, 0, 1], 1.0, 40.0);
        let wide = int_image_i32(&img, 5, 2, [0, 4, 0, 1], 1.0, 40.0);
        for (&n, &w) in narrow.iter().zip(&wide) {
            if n < 65535 {
                assert_eq!(w, i32::from(n));
            }
        }
        assert_eq!(wide, [40, 41, 42, 1040, 65535, 100040, 1000000040, 0, 0, i32::MAX]);
        // outside the ROI: 0
        assert_eq!(int_image_i32(&img, 5, 2, [1, 4, 0, 1], 1.0, 40.0)[0], 0);
        assert_eq!(int_image_i32(&img, 5, 2, [0, 4, 0, 0], 1.0, 40.0)[5], 0);
    }
}
