//! The area detector's response, as noisify.c models it: photons per pixel
//! become integer pixel values through source flicker, a per-pixel
//! calibration error, photon counting (Poisson), an optional point-spread
//! function, the gain, read-out noise and the ADC offset, clipped to the
//! integer type of the image.
//!
//! The random numbers reproduce the reference's, including its sharing: the
//! main and the calibration seed words draw from one shuffle table and one
//! cached Gaussian spare, so the calibration error depends on the flicker
//! draws (see [`SharedSeeds`]).

use crate::geometry::PanelLayout;
use crate::noise_stream::PixelStream;
use crate::psf::{apply_psf, PsfApplied, PsfShape};
use crate::rng::NoiseRng;

/// Integer width of the output images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bits {
    /// `unsigned short` pixels (clipped at 65535).
    U16,
    /// `unsigned int` pixels (clipped at 2147483647).
    U32,
}

/// The detector's response: everything between photons and pixel values.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// ADU per photon.
    pub gain: f64,
    /// ADU added to every pixel.
    pub adc_offset: f64,
    /// Gaussian read-out noise, ADU rms (0: none).
    pub readout_noise: f64,
    /// Fractional rms of the source's intensity per pixel (0: none).
    pub flicker_noise: f64,
    /// Fractional rms of the per-pixel calibration error (0: none).
    pub calibration_noise: f64,
    /// The point-spread function: shape, FWHM in pixels, radius (0: automatic).
    pub psf: Option<(PsfShape, f64, i32)>,
    /// Integer width of the noise image.
    pub bits: Bits,
}

/// The two seed words of the response on one generator: `main` draws the
/// flicker, Poisson and read-out deviates, `calibration` the calibration
/// error. As in the reference they share the uniform generator's shuffle
/// table and the Gaussian's cached spare: switching words keeps both.
#[derive(Debug, Clone)]
pub struct SharedSeeds {
    rng: NoiseRng,
    /// The calibration seed word while the main one is in `rng`.
    calibration: i64,
}

impl SharedSeeds {
    /// Seed words as the reference holds them (minus the user's `-seed`,
    /// `-calib_seed`).
    pub fn new(main: i64, calibration: i64) -> Self {
        SharedSeeds { rng: NoiseRng::new(main), calibration }
    }

    fn calibration_gauss(&mut self) -> f32 {
        std::mem::swap(&mut self.rng.ran.idum, &mut self.calibration);
        let g = self.rng.gaussdev();
        std::mem::swap(&mut self.rng.ran.idum, &mut self.calibration);
        g
    }
}

/// A photon count in ADU, clipped at 2³¹ − 1 (32-bit) and 65535 (16-bit),
/// and converted the way the reference's x86-64 build converts a double
/// to an unsigned integer: truncation toward zero, a negative value wrapping
/// (−2.9 → 65534, −0.5 → 0).
/// NaN becomes 0. `(16-bit, 32-bit)`.
pub fn adu_pixels(adu: f64) -> (u16, u32) {
    // comparisons, not f64::min: NaN must stay NaN (and become 0) as in C
    let adu = if adu > 2147483647.0 { 2147483647.0 } else { adu };
    let p32 = adu as i64 as u32;
    let p16 = if adu > 65535.0 { 65535.0 } else { adu } as i32 as u16;
    (p16, p32)
}

/// The noise image and the totals the reference reports.
#[derive(Debug, Clone, PartialEq)]
pub struct NoisyImage {
    /// 16-bit pixels.
    pub pixels16: Vec<u16>,
    /// 32-bit pixels.
    pub pixels32: Vec<u32>,
    /// Photons counted before the PSF (`Some` only with a PSF).
    pub photons_before_psf: Option<f64>,
    /// The PSF's report on each tile (empty without a PSF); each report's
    /// `image` is empty, its pixels being in the counts.
    pub psf: Vec<PsfApplied>,
    /// Photons after the PSF (the total the reference reports).
    pub photons: f64,
    /// Pixels clipped at the image type's maximum.
    pub overloads: u64,
}

/// The detector's image of `photons` (per pixel, `xpixels` wide): port of
/// the noise half of noisify.c's `main`.
///
/// Per pixel in order: flicker and calibration factors, then a Poisson
/// count; the PSF acts on the counts; then gain, read-out noise and offset
/// per pixel, continuing the main seed's stream.
pub fn noisy_image(
    photons: &[f32],
    xpixels: usize,
    ypixels: usize,
    response: &Response,
    seeds: &mut SharedSeeds,
) -> NoisyImage {
    noisy_image_tiled(photons, &PanelLayout::whole(xpixels, ypixels), response, seeds)
}

/// [`noisy_image`] of an image made of the panels of `tiles` (a multi-panel
/// detector's layout): the PSF spreads each panel's counts within that panel
/// only, as light does not cross from one panel to another. The random draws
/// go over the whole image in raster order, as for one panel.
pub fn noisy_image_tiled(
    photons: &[f32],
    tiles: &PanelLayout,
    response: &Response,
    seeds: &mut SharedSeeds,
) -> NoisyImage {
    let r = response;
    let mut counts: Vec<f32> = Vec::with_capacity(photons.len());
    let mut sum = 0.0f64;
    for &p in photons {
        let mut mean = p as f64;
        if r.flicker_noise > 0.0 {
            mean *= 1.0 + r.flicker_noise * seeds.rng.gaussdev() as f64;
        }
        if r.calibration_noise > 0.0 {
            mean *= 1.0 + r.calibration_noise * seeds.calibration_gauss() as f64;
        }
        let c = seeds.rng.poidev(mean as f32);
        sum += c as f64;
        counts.push(c);
    }
    let psf = spread_within_tiles(&mut counts, tiles, r, false);
    let photons_before_psf = r.psf.map(|_| sum);
    let (mut pixels16, mut pixels32) = (Vec::with_capacity(counts.len()), Vec::new());
    pixels32.reserve(counts.len());
    let mut total = 0.0f64;
    let mut overloads = 0u64;
    for &c in &counts {
        total += c as f64;
        let (p16, p32, over) = adu_of(c, r, || f64::from(seeds.rng.gaussdev()));
        overloads += u64::from(over);
        pixels16.push(p16);
        pixels32.push(p32);
    }
    NoisyImage { pixels16, pixels32, photons_before_psf, psf, photons: total, overloads }
}

/// Spreads `counts` by the PSF of `r` (if any) within each panel of
/// `tiles`, as light does not cross from one panel to another: each
/// panel's report (empty without a PSF). `convolution`: the PSF as one
/// kernel for every pixel ([`crate::psf_convolution`], the `parallel`
/// stream's), else noisify.c's per-pixel radii.
fn spread_within_tiles(
    counts: &mut [f32],
    tiles: &PanelLayout,
    r: &Response,
    convolution: bool,
) -> Vec<PsfApplied> {
    let Some((shape, fwhm_pixels, radius)) = r.psf else { return Vec::new() };
    let mut psf = Vec::with_capacity(tiles.sizes.len());
    for (k, &[f, s]) in tiles.sizes.iter().enumerate() {
        let tile = tiles.get(k, counts);
        let mut applied = match convolution {
            true => crate::psf_convolution::spread(&tile, f, s, shape, fwhm_pixels, radius),
            false => apply_psf(&tile, f, s, shape, fwhm_pixels, radius),
        };
        tiles.put(k, &std::mem::take(&mut applied.image), counts);
        psf.push(applied);
    }
    psf
}

/// A count `c` in ADU: the gain, the offset and (with read-out noise) a
/// Gaussian deviate of `readout`, then the image's integer types and
/// whether the value passes the type's maximum.
#[inline]
fn adu_of(c: f32, r: &Response, readout: impl FnOnce() -> f64) -> (u16, u32, bool) {
    let mut adu = c as f64 * r.gain + r.adc_offset;
    if r.readout_noise > 0.0 {
        adu += r.readout_noise * readout();
    }
    let over = match r.bits {
        Bits::U32 => adu > 2147483647.0,
        Bits::U16 => adu > 65535.0,
    };
    let (p16, p32) = adu_pixels(adu);
    (p16, p32, over)
}

/// [`noisy_image_tiled`] from the `parallel` stream
/// ([`crate::noise_stream`]): pixel i's flicker, Poisson and read-out draws
/// from the draws of pixel `stream.first_pixel` + i under `stream.seed`, its
/// calibration error from those under `calibration_seed`; rows in parallel (rayon's current
/// pool). The image depends on neither the thread count nor the tiling
/// (the PSF still spreads light within each tile).
pub fn noisy_image_parallel(
    photons: &[f32],
    tiles: &PanelLayout,
    response: &Response,
    stream: PixelStream,
    calibration_seed: i64,
) -> NoisyImage {
    use crate::noise_stream::{gauss_row, poisson_counts, Purpose};
    let PixelStream { seed, first_pixel } = stream;
    use rayon::prelude::*;
    let r = response;
    let width = tiles.width.max(1);
    // a row's normal deviates of one purpose, into a buffer of the thread's
    let gauss_of = |g: &mut Vec<f64>, seed: i64, first: usize, len: usize, p| {
        g.resize(len, 0.0);
        gauss_row(seed, first_pixel + first as u64, p, g);
    };
    let mut counts = vec![0f32; photons.len()];
    let sum: f64 = counts
        .par_chunks_mut(width)
        .enumerate()
        .map_init(
            || (Vec::new(), Vec::new(), Vec::new(), Vec::new()),
            |(flicker, calibration, means, poisson), (row, out)| {
                let (first, len) = (row * width, out.len());
                means.clear();
                means.extend(photons[first..first + len].iter().map(|&p| f64::from(p)));
                if r.flicker_noise > 0.0 {
                    gauss_of(flicker, seed, first, len, Purpose::Flicker);
                    for (m, g) in means.iter_mut().zip(flicker.iter()) {
                        *m *= 1.0 + r.flicker_noise * g;
                    }
                }
                if r.calibration_noise > 0.0 {
                    gauss_of(calibration, calibration_seed, first, len, Purpose::Calibration);
                    for (m, g) in means.iter_mut().zip(calibration.iter()) {
                        *m *= 1.0 + r.calibration_noise * g;
                    }
                }
                poisson.resize(len, 0.0);
                poisson_counts(seed, first_pixel + first as u64, means, poisson);
                let mut sum = 0.0f64;
                for (c, &k) in out.iter_mut().zip(poisson.iter()) {
                    sum += k;
                    *c = k as f32;
                }
                sum
            },
        )
        .sum();
    let psf = spread_within_tiles(&mut counts, tiles, r, true);
    let photons_before_psf = r.psf.map(|_| sum);
    let n = counts.len();
    let (mut pixels16, mut pixels32) = (vec![0u16; n], vec![0u32; n]);
    let (total, overloads) = pixels16
        .par_chunks_mut(width)
        .zip(pixels32.par_chunks_mut(width))
        .enumerate()
        .map_init(Vec::new, |readout, (row, (out16, out32))| {
            let first = row * width;
            if r.readout_noise > 0.0 {
                gauss_of(readout, seed, first, out16.len(), Purpose::Readout);
            }
            let (mut total, mut overloads) = (0.0f64, 0u64);
            for (f, (p16, p32)) in out16.iter_mut().zip(out32.iter_mut()).enumerate() {
                let c = counts[first + f];
                total += f64::from(c);
                let over;
                (*p16, *p32, over) = adu_of(c, r, || readout[f]);
                overloads += u64::from(over);
            }
            (total, overloads)
        })
        .reduce(|| (0.0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    NoisyImage { pixels16, pixels32, photons_before_psf, psf, photons: total, overloads }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(readout: f64, calibration: f64) -> Response {
        Response {
            gain: 1.0,
            adc_offset: 0.0,
            readout_noise: readout,
            flicker_noise: 0.0,
            calibration_noise: calibration,
            psf: None,
            bits: Bits::U32,
        }
    }

    /// Mean and variance of `values`.
    fn moments(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
        let n = values.clone().count() as f64;
        let mean = values.clone().sum::<f64>() / n;
        (mean, values.map(|v| (v - mean).powi(2)).sum::<f64>() / n)
    }

    /// Read-out noise adds its variance to the Poisson variance: with
    /// 200 000 pixels of mean 100 and σ_read = 7 the variance is 149 (the
    /// sample variance's standard error is about 0.5; the tolerance is 2).
    #[test]
    fn readout_noise_has_requested_variance() {
        let img = vec![100f32; 200_000];
        let mut seeds = SharedSeeds::new(-5, -7);
        let mut r = plain(7.0, 0.0);
        r.adc_offset = 1000.0;
        let out = noisy_image(&img, 400, 500, &r, &mut seeds);
        let (mean, var) = moments(out.pixels32.iter().map(|&p| p as f64));
        // truncation toward zero lowers the mean by about 0.5
        assert!((mean - 1099.5).abs() < 0.2, "mean {mean}");
        assert!((var - (100.0 + 49.0)).abs() < 2.0, "variance {var}");
    }

    /// Calibration noise multiplies the mean: for a mean μ and fraction c
    /// the variance is μ + c²μ² (μ = 1000, c = 0.05: 3500; the tolerance is
    /// 3 % of it, several standard errors).
    #[test]
    fn calibration_noise_has_requested_variance() {
        let img = vec![1000f32; 200_000];
        let mut seeds = SharedSeeds::new(-11, -13);
        let out = noisy_image(&img, 400, 500, &plain(0.0, 0.05), &mut seeds);
        let (mean, var) = moments(out.pixels32.iter().map(|&p| p as f64));
        assert!((mean - 1000.0).abs() < 0.5, "mean {mean}");
        assert!((var - 3500.0).abs() < 0.03 * 3500.0, "variance {var}");
    }

    fn with_psf() -> Response {
        let mut r = plain(0.0, 0.02);
        r.psf = Some((crate::psf::PsfShape::Gauss, 2.0, 0));
        r
    }

    /// Two tiles side by side: a bright spot at the left tile's edge
    /// spreads into the right tile on one image, not across tiles.
    #[test]
    fn the_psf_keeps_to_its_tile() {
        let (w, h) = (16, 8);
        let mut img = vec![0f32; w * h];
        img[4 * w + 7] = 5000.0;
        let tiles = PanelLayout {
            width: w,
            height: h,
            origins: vec![[0, 0], [8, 0]],
            sizes: vec![[8, 8], [8, 8]],
        };
        let r = with_psf();
        let one = noisy_image(&img, w, h, &r, &mut SharedSeeds::new(-3, -4));
        let tiled = noisy_image_tiled(&img, &tiles, &r, &mut SharedSeeds::new(-3, -4));
        let right = |p: &[u32]| (0..h).map(|y| p[y * w + 8] as u64).sum::<u64>();
        assert!(right(&one.pixels32) > 100, "{}", right(&one.pixels32));
        assert_eq!(right(&tiled.pixels32), 0);
        assert_eq!(tiled.psf.len(), 2);
        // light spread past a tile's edge is lost, as past the image's
        assert!(tiled.photons < one.photons && tiled.photons > 0.5 * one.photons);
    }

    /// Tiles stacked along slow draw in the order of each tile alone: the
    /// tiled image is the tiles' images, one after the other, on one stream.
    #[test]
    fn stacked_tiles_are_their_own_images() {
        let (w, h) = (12, 10);
        let img: Vec<f32> = (0..w * h).map(|i| ((i * 37) % 101) as f32).collect();
        let tiles = PanelLayout {
            width: w,
            height: h,
            origins: vec![[0, 0], [0, 4]],
            sizes: vec![[w, 4], [w, 6]],
        };
        let r = with_psf();
        let tiled = noisy_image_tiled(&img, &tiles, &r, &mut SharedSeeds::new(-9, -2));
        let mut seeds = SharedSeeds::new(-9, -2);
        let a = noisy_image(&img[..4 * w], w, 4, &r, &mut seeds);
        let b = noisy_image(&img[4 * w..], w, 6, &r, &mut seeds);
        assert_eq!(tiled.pixels32, [a.pixels32, b.pixels32].concat());
        assert_ne!(
            tiled.pixels32,
            noisy_image(&img, w, h, &r, &mut SharedSeeds::new(-9, -2)).pixels32
        );
    }

    #[test]
    fn adu_conversion_wraps_and_clips_like_the_reference() {
        assert_eq!(adu_pixels(12.9), (12, 12));
        assert_eq!(adu_pixels(-2.9), (65534, u32::MAX - 1));
        assert_eq!(adu_pixels(-0.5), (0, 0));
        assert_eq!(adu_pixels(70000.0), (65535, 70000));
        assert_eq!(adu_pixels(1e12), (65535, 2147483647));
        assert_eq!(adu_pixels(f64::NAN), (0, 0));
    }
}
