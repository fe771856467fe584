//! The Poisson noise image nanoBragg.c writes at the end of a run.

use crate::noise_stream::PixelStream;
use crate::rng::NoiseRng;

/// A noise image and the totals the C program reports for it.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseImage {
    /// 16-bit pixels in raster order (fast index fastest); 0 outside the ROI.
    pub pixels: Vec<u16>,
    /// Sum of the Poisson deviates before the ADC offset ("photons on noise image").
    pub photons: f64,
    /// Number of pixels clipped to 65535.
    pub overloads: u64,
}

/// Draw the noise image from the expected photon counts `float_image`
/// (`spixels` rows of `fpixels`), as the loop at the end of nanoBragg.c's
/// `main` does.
///
/// Pixels are visited in raster order; only those with
/// `roi[0] <= fast <= roi[1]` and `roi[2] <= slow <= roi[3]` draw a deviate,
/// so the random sequence depends on the ROI exactly as in C. Each deviate is
/// added to `photons`, offset by `adc_offset`, clipped at 65535 (counting an
/// overload), and stored truncated toward zero. A value below zero (possible
/// only with a negative offset) is stored the way the C program's x86-64 build
/// converts it, through a 32-bit integer keeping the low 16 bits (-3.7 → 65533).
///
/// # Panics
/// If `float_image` has fewer than `fpixels * spixels` values.
pub fn noise_image(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: [i64; 4],
    adc_offset: f64,
    rng: &mut NoiseRng,
) -> NoiseImage {
    noise_image_wide(float_image, fpixels, spixels, roi, adc_offset, rng, false).0
}

/// [`noise_image`], and with `wide` the same draws as 32-bit pixels: offset
/// by `adc_offset` without the 65535 clip, truncated toward zero and clipped
/// to the `i32` range (the int32 images of NXmx and CBF output). The second
/// value is empty without `wide`.
///
/// # Panics
/// If `float_image` has fewer than `fpixels * spixels` values.
pub fn noise_image_wide(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: [i64; 4],
    adc_offset: f64,
    rng: &mut NoiseRng,
    wide: bool,
) -> (NoiseImage, Vec<i32>) {
    let n = fpixels * spixels;
    assert!(float_image.len() >= n, "float image has {} pixels, need {n}", float_image.len());
    let [xmin, xmax, ymin, ymax] = roi;
    let mut pixels = vec![0u16; n];
    let mut pixels32 = if wide { vec![0i32; n] } else { Vec::new() };
    let mut photons = 0.0f64;
    let mut overloads = 0u64;
    for slow in 0..spixels {
        let s = slow as i64;
        if s < ymin || s > ymax {
            continue;
        }
        for fast in 0..fpixels {
            let f = fast as i64;
            if f < xmin || f > xmax {
                continue;
            }
            let idx = slow * fpixels + fast;
            let count = rng.poidev(float_image[idx]) as f64;
            photons += count;
            let (p16, p32, over) = noise_pixel(count + adc_offset);
            if wide {
                pixels32[idx] = p32;
            }
            overloads += u64::from(over);
            pixels[idx] = p16;
        }
    }
    (NoiseImage { pixels, photons, overloads }, pixels32)
}

/// A noise pixel of `adu` (count plus offset) as C stores it: 16 bits
/// clipped at 65535 (whether it was clipped), a negative value through a
/// 32-bit integer's low 16 bits; and the 32-bit pixel, truncated toward
/// zero and saturated at the i32 range.
///
/// (Written as `as i32` would be, saturating with NaN at 0, but through a
/// clamp and an unchecked conversion, so that a row of them vectorises.)
#[inline(always)]
fn noise_pixel(adu: f64) -> (u16, i32, bool) {
    let over = adu > 65535.0;
    let a = if adu.is_nan() { 0.0 } else { adu.clamp(i32::MIN as f64, i32::MAX as f64) };
    let a16 = if over { 65535.0 } else { a };
    // SAFETY: a and a16 are whole-range values of i32 (clamped, not NaN),
    // so their truncations fit in an i32.
    let (p16, p32) = unsafe { (a16.to_int_unchecked::<i32>() as u16, a.to_int_unchecked::<i32>()) };
    (p16, p32, over)
}

/// [`noise_image_wide`] from the `parallel` stream
/// ([`crate::noise_stream`]): pixel i's count from the draws of pixel
/// `stream.first_pixel` + i under `stream.seed`, rows drawn in parallel
/// (rayon's current pool). The image depends on neither the thread count
/// nor the order of the rows.
///
/// # Panics
/// If `float_image` has fewer than `fpixels * spixels` values.
pub fn noise_image_parallel(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: [i64; 4],
    adc_offset: f64,
    stream: PixelStream,
    wide: bool,
) -> (NoiseImage, Vec<i32>) {
    use rayon::prelude::*;
    let n = fpixels * spixels;
    assert!(float_image.len() >= n, "float image has {} pixels, need {n}", float_image.len());
    let mut pixels = vec![0u16; n];
    let mut pixels32 = if wide { vec![0i32; n] } else { Vec::new() };
    let width = fpixels.max(1);
    // (a row without 32-bit pixels gets an empty slice)
    let rows32: Vec<&mut [i32]> = match wide {
        true => pixels32.chunks_mut(width).collect(),
        false => (0..spixels).map(|_| &mut [][..]).collect(),
    };
    let (photons, overloads) = pixels
        .par_chunks_mut(width)
        .zip(rows32)
        .enumerate()
        .map(|(slow, (row, row32))| {
            let image = ParallelNoise { float_image, fpixels, roi, adc_offset, stream };
            image.row(slow, row, row32)
        })
        .reduce(|| (0.0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    (NoiseImage { pixels, photons, overloads }, pixels32)
}

/// The 16-bit pixels of rows `first_row`, `first_row + 1`, ... of
/// [`noise_image_parallel`]'s image into `block` (whole rows of `fpixels`),
/// rows in parallel, and their photons and overloads: the noise image
/// written straight into its file, never held whole.
///
/// # Panics
/// If `block` is not whole rows, or reaches past row `spixels` or past the
/// end of `float_image`.
#[allow(clippy::too_many_arguments)]
pub fn noise_rows_parallel(
    float_image: &[f32],
    fpixels: usize,
    spixels: usize,
    roi: [i64; 4],
    adc_offset: f64,
    stream: PixelStream,
    first_row: usize,
    block: &mut [u16],
) -> (f64, u64) {
    use rayon::prelude::*;
    let width = fpixels.max(1);
    assert!(
        block.len().is_multiple_of(width),
        "a block of {} pixels for rows of {width}",
        block.len()
    );
    let rows = block.len() / width;
    assert!(first_row + rows <= spixels, "rows {first_row}..{} of {spixels}", first_row + rows);
    assert!(float_image.len() >= (first_row + rows) * fpixels, "float image too short");
    let image = ParallelNoise { float_image, fpixels, roi, adc_offset, stream };
    block
        .par_chunks_mut(width)
        .enumerate()
        .map(|(r, row)| image.row(first_row + r, row, &mut []))
        .reduce(|| (0.0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// What a row of the parallel noise image is drawn from.
#[derive(Clone, Copy)]
struct ParallelNoise<'a> {
    float_image: &'a [f32],
    fpixels: usize,
    roi: [i64; 4],
    adc_offset: f64,
    stream: PixelStream,
}

impl ParallelNoise<'_> {
    /// Row `slow` into `row` (and `row32` unless it is empty), 0 outside the
    /// ROI. Returns the row's photons and
    /// overloads.
    fn row(&self, slow: usize, row: &mut [u16], row32: &mut [i32]) -> (f64, u64) {
        use crate::noise_stream::poisson_runs;
        let [xmin, xmax, ymin, ymax] = self.roi;
        let (mut photons, mut overloads) = (0.0f64, 0u64);
        // the ROI's part of the row
        let lo = xmin.max(0) as usize;
        let hi = (xmax.min(self.fpixels as i64 - 1) + 1).max(0) as usize;
        let s = slow as i64;
        if s < ymin || s > ymax || lo >= hi {
            row.fill(0);
            row32.fill(0);
            return (photons, overloads);
        }
        row[..lo].fill(0);
        row[hi..].fill(0);
        if !row32.is_empty() {
            row32[..lo].fill(0);
            row32[hi..].fill(0);
        }
        let start = slow * self.fpixels;
        let means = &self.float_image[start + lo..start + hi];
        let first = self.stream.first_pixel + (start + lo) as u64;
        let (row, adc) = (&mut row[lo..hi], self.adc_offset);
        let row32 = if row32.is_empty() { row32 } else { &mut row32[lo..hi] };
        // eight sums side by side (no chain of dependent adds); the counts
        // are whole numbers, so their sum does not depend on the order
        // while it stays below 2⁵³
        let mut sums = [0.0f64; 8];
        let mut overs = [0u64; 8];
        // (loops of one output each, which vectorise)
        poisson_runs(self.stream.seed, first, means, |at, counts| {
            for (p, &count) in row[at..at + counts.len()].iter_mut().zip(counts) {
                *p = noise_pixel(count + adc).0;
            }
            if !row32.is_empty() {
                for (p, &count) in row32[at..at + counts.len()].iter_mut().zip(counts) {
                    *p = noise_pixel(count + adc).1;
                }
            }
            for eight in counts.chunks(8) {
                for (l, &count) in eight.iter().enumerate() {
                    sums[l] += count;
                    overs[l] += u64::from(noise_pixel(count + adc).2);
                }
            }
        });
        for l in 0..8 {
            photons += sums[l];
            overloads += overs[l];
        }
        (photons, overloads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small image mixing every `poidev` branch, an overload and a partial ROI,
    /// checked against the C program's noise loop run on the same input.
    fn test_image() -> Vec<f32> {
        let (f, s) = (7usize, 5usize);
        (0..f * s)
            .map(|i| match i % 6 {
                0 => 0.0,
                1 => 0.37 * i as f32,
                2 => 15.5 + i as f32,
                3 => 1234.5,
                4 => 70000.0,
                _ => 2.0e6,
            })
            .collect()
    }

    #[test]
    fn matches_c_full_frame() {
        let img = test_image();
        let mut rng = NoiseRng::new(-1234);
        let out = noise_image(&img, 7, 5, [0, 7, 0, 5], 40.0, &mut rng);
        let want: [u16; 35] = [
            40, 40, 60, 1330, 65535, 65535, 40, 43, 67, 1310, 65535, 65535, 40, 44, 66, 1268,
            65535, 65535, 40, 43, 70, 1300, 65535, 65535, 40, 50, 86, 1247, 65535, 65535, 40, 50,
            95, 1266, 65535,
        ];
        assert_eq!(out.pixels, want);
        assert_eq!(out.photons, 10429005.75);
        assert_eq!(out.overloads, 11);
    }

    #[test]
    fn matches_c_roi_and_negative_offset() {
        let img = test_image();
        let mut rng = NoiseRng::new(-777);
        let out = noise_image(&img, 7, 5, [1, 4, 2, 3], -3.7, &mut rng);
        let want: [u16; 35] = [
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1227, 65535, 65535, 65533, 0, 0, 0, 65535,
            65535, 65533, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(out.pixels, want);
        assert_eq!(out.photons, 4138518.75);
        assert_eq!(out.overloads, 4);
    }

    /// The vectorisable conversion is `as i32`'s saturating one.
    #[test]
    fn noise_pixel_is_the_saturating_conversion() {
        for adu in [
            0.0,
            0.7,
            -0.7,
            -3.7,
            65534.9,
            65535.0,
            65535.5,
            1e9,
            2147483647.5,
            3e9,
            -3e9,
            -1e12,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let over = adu > 65535.0;
            let want = ((if over { 65535.0 } else { adu }) as i32 as u16, adu as i32, over);
            assert_eq!(noise_pixel(adu), want, "{adu}");
        }
    }

    /// The rows written straight into a file, a block at a time, are the
    /// whole image's, with the ROI's zeros and the totals.
    #[test]
    fn rows_in_blocks_are_the_whole_image() {
        let (w, h) = (131, 23);
        let img: Vec<f32> = (0..w * h).map(|i| [0.0, 0.02, 0.6, 7.0, 40.0, 9e4][i % 6]).collect();
        let stream = PixelStream { seed: 99, first_pixel: 1000 };
        let roi = [3, 120, 2, 20];
        let (whole, _) = noise_image_parallel(&img, w, h, roi, 10.0, stream, false);
        let mut rows = vec![7u16; w * h];
        let (mut photons, mut overloads) = (0.0, 0);
        for (b, block) in rows.chunks_mut(5 * w).enumerate() {
            let (p, o) = noise_rows_parallel(&img, w, h, roi, 10.0, stream, 5 * b, block);
            photons += p;
            overloads += o;
        }
        assert_eq!(rows, whole.pixels);
        assert_eq!((photons, overloads), (whole.photons, whole.overloads));
        assert!(whole.overloads > 0 && whole.pixels[0] == 0 && whole.pixels[2 * w + 3] >= 10);
    }

    #[test]
    fn wide_pixels_are_the_same_draws_unclipped() {
        let img = test_image();
        let narrow = noise_image(&img, 7, 5, [0, 7, 0, 5], 40.0, &mut NoiseRng::new(-1234));
        let (same, wide) =
            noise_image_wide(&img, 7, 5, [0, 7, 0, 5], 40.0, &mut NoiseRng::new(-1234), true);
        assert_eq!(same, narrow);
        for (&w, &n) in wide.iter().zip(&narrow.pixels) {
            if n < 65535 {
                assert_eq!(w, i32::from(n));
            } else {
                assert!(w >= 65535, "{w}");
            }
        }
        // the 2e6-photon pixels keep their count (Poisson sd ~1400)
        assert!((wide[5] as f64 - 2.0e6 - 40.0).abs() < 10_000.0, "{}", wide[5]);
        // a negative offset gives negative values, not 16-bit wraps
        let (_, wide) =
            noise_image_wide(&img, 7, 5, [1, 4, 2, 3], -3.7, &mut NoiseRng::new(-777), true);
        assert_eq!(wide[18], -3);
    }
}
