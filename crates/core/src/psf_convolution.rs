//! The point-spread function as a true convolution: the PSF of the
//! `parallel` noise stream.
//!
//! noisify.c ([`crate::psf::apply_psf`]) gives every pixel a radius of its
//! own, chosen from its value, so its blur is not a convolution and costs
//! each pixel its kernel's area. Here one kernel, of the radius noisify.c
//! gives its kernel table (from the image's maximum, or the radius the user
//! gives), spreads every pixel. The photons the kernel's disc leaves out
//! (1 − Σ weights of each pixel's signal) are added back evenly over the
//! panel, as noisify.c adds back what its radii leave out; light spread past
//! the panel's edges is lost, as there.
//!
//! Two ways give the same image (to f64 rounding, far below 1e-6 of the
//! image's maximum): a direct sum over the kernel's taps for small kernels,
//! and the product of 2-D real FFTs (realfft) for large ones, whose cost
//! does not grow with the kernel. [`Method::for_kernel`] picks the cheaper.

use crate::psf::{auto_table_radius, pixel_weight, PsfApplied, PsfShape};
use rayon::prelude::*;
use realfft::num_complex::Complex;
use realfft::RealFftPlanner;

/// How a panel is convolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The sum over the kernel's taps at every pixel.
    Direct,
    /// The product of 2-D FFTs.
    Fft,
}

impl Method {
    /// The cheaper way to convolve a `width` × `height` panel with `kernel`:
    /// the direct sum costs a multiply-add per tap and pixel, the FFTs about
    /// 6 log₂(size) per padded pixel (two forward transforms and one inverse,
    /// the kernel's included). An operation count, not a timing: the
    /// crossover has not been measured.
    pub fn for_kernel(kernel: &PsfKernel, width: usize, height: usize) -> Method {
        let direct = kernel.taps() as f64 * (width * height) as f64;
        let (p, q) = fft_size(width, height, kernel.radius);
        let fft = 6.0 * (p * q) as f64 * ((p * q) as f64).log2();
        if direct <= fft {
            Method::Direct
        } else {
            Method::Fft
        }
    }
}

/// The PSF's weights over a disc of pixels: `weights[(dy + radius) * size +
/// dx + radius]` is the share of a pixel's photons that lands `(dx, dy)`
/// pixels away (0 outside the disc).
#[derive(Debug, Clone, PartialEq)]
pub struct PsfKernel {
    /// The disc's radius in pixels.
    pub radius: usize,
    /// `(2 radius + 1)²` weights, row by row.
    pub weights: Vec<f64>,
}

impl PsfKernel {
    /// The kernel of `shape` and FWHM `fwhm_pixels` on the disc of `radius`
    /// pixels (noisify.c's kernel table).
    pub fn new(shape: PsfShape, fwhm_pixels: f64, radius: usize) -> PsfKernel {
        let size = 2 * radius + 1;
        let r = radius as i64;
        let mut weights = vec![0.0; size * size];
        weights.par_chunks_mut(size).enumerate().for_each(|(row, out)| {
            let dy = row as i64 - r;
            for (col, w) in out.iter_mut().enumerate() {
                let dx = col as i64 - r;
                if dx * dx + dy * dy <= r * r {
                    *w = pixel_weight(shape, dx as f64, dy as f64, fwhm_pixels);
                }
            }
        });
        PsfKernel { radius, weights }
    }

    fn size(&self) -> usize {
        2 * self.radius + 1
    }

    /// The weights that are not zero.
    pub fn taps(&self) -> usize {
        self.weights.iter().filter(|&&w| w != 0.0).count()
    }

    /// The share of a pixel's photons that falls outside the disc.
    pub fn missing(&self) -> f64 {
        1.0 - self.weights.iter().sum::<f64>()
    }
}

/// Spreads the `width` × `height` panel `image` by the PSF of `shape`
/// (FWHM `fwhm_pixels`; `radius` pixels, or 0 for the radius noisify.c's
/// kernel table takes from the image's maximum), with the cheaper
/// [`Method`]. A width that is not positive leaves the image as it is.
///
/// # Panics
/// If `image` holds fewer than `width * height` values.
pub fn spread(
    image: &[f32],
    width: usize,
    height: usize,
    shape: PsfShape,
    fwhm_pixels: f64,
    radius: i32,
) -> PsfApplied {
    let pixels = width * height;
    assert!(image.len() >= pixels, "psf: {} values for {pixels} pixels", image.len());
    let image = &image[..pixels];
    let mut applied = PsfApplied {
        image: Vec::new(),
        max_input: None,
        auto_radius: None,
        lost_photons: None,
        zero_width: false,
    };
    if fwhm_pixels.is_nan() || fwhm_pixels <= 0.0 {
        applied.image = image.to_vec();
        applied.zero_width = true;
        return applied;
    }
    let mut r = radius.max(0);
    if radius <= 0 {
        let max = image.iter().fold(0.0f64, |m, &v| m.max(f64::from(v)));
        applied.max_input = Some(max);
        if max <= 0.0 {
            applied.image = vec![0.0; pixels];
            return applied;
        }
        r = auto_table_radius(shape, max, fwhm_pixels);
        applied.auto_radius = Some(r);
    }
    let kernel = PsfKernel::new(shape, fwhm_pixels, r.min(width.max(height) as i32) as usize);
    let mut out =
        convolve(image, width, height, &kernel, Method::for_kernel(&kernel, width, height));
    // (only photons add back: noisify.c spreads no negative pixels)
    let photons: f64 = image.iter().map(|&v| f64::from(v.max(0.0))).sum();
    let lost = photons * kernel.missing().max(0.0);
    let share = lost / pixels as f64;
    out.par_iter_mut().for_each(|o| *o = (f64::from(*o) + share) as f32);
    applied.image = out;
    applied.lost_photons = Some(lost);
    applied
}

/// `image` (`width` × `height`, row by row) convolved with `kernel` by
/// `method`, zero beyond the panel's edges: pixel (x, y) gets
/// Σ weight(dx, dy) · image(x − dx, y − dy). Pixels that are not positive
/// spread nothing, as in noisify.c. Rows in parallel (rayon's current pool).
///
/// # Panics
/// If `image` holds fewer than `width * height` values.
pub fn convolve(
    image: &[f32],
    width: usize,
    height: usize,
    kernel: &PsfKernel,
    method: Method,
) -> Vec<f32> {
    assert!(image.len() >= width * height, "convolve: image too small");
    if width == 0 || height == 0 {
        return Vec::new();
    }
    match method {
        Method::Direct => convolve_direct(image, width, height, kernel),
        Method::Fft => convolve_fft(image, width, height, kernel),
    }
}

fn convolve_direct(image: &[f32], width: usize, height: usize, kernel: &PsfKernel) -> Vec<f32> {
    let (r, size) = (kernel.radius as i64, kernel.size());
    let mut out = vec![0f32; width * height];
    out.par_chunks_mut(width).enumerate().for_each_init(
        || (vec![0f64; width], vec![0f64; width]),
        |(sum, source), (y, row)| {
            sum.fill(0.0);
            for dy in -r..=r {
                let sy = y as i64 - dy;
                if sy < 0 || sy >= height as i64 {
                    continue;
                }
                let src = &image[sy as usize * width..][..width];
                for (s, &v) in source.iter_mut().zip(src) {
                    *s = f64::from(v.max(0.0));
                }
                let weights = &kernel.weights[(dy + r) as usize * size..][..size];
                for (col, &w) in weights.iter().enumerate() {
                    if w == 0.0 {
                        continue;
                    }
                    // out[x] += w · source[x − dx] over the x that have a source
                    let dx = col as i64 - r;
                    let lo = dx.max(0) as usize;
                    let hi = (width as i64 + dx.min(0)).max(0) as usize;
                    if lo >= hi {
                        continue;
                    }
                    let from = (lo as i64 - dx) as usize;
                    for (o, &s) in sum[lo..hi].iter_mut().zip(&source[from..]) {
                        *o += w * s;
                    }
                }
            }
            for (o, &s) in row.iter_mut().zip(sum.iter()) {
                *o = s as f32;
            }
        },
    );
    out
}

/// The padded size of the FFTs: at least the panel plus the radius on each
/// axis (the circular convolution then wraps only into zeros), with no
/// prime factor above 5.
fn fft_size(width: usize, height: usize, radius: usize) -> (usize, usize) {
    (smooth_at_least(width + radius), smooth_at_least(height + radius))
}

/// The least even number ≥ `n` whose prime factors are 2, 3 and 5.
fn smooth_at_least(n: usize) -> usize {
    let mut m = n.max(2);
    loop {
        let mut k = m;
        for p in [2, 3, 5] {
            while k.is_multiple_of(p) {
                k /= p;
            }
        }
        if k == 1 && m.is_multiple_of(2) {
            return m;
        }
        m += 1;
    }
}

/// The 2-D spectrum of a `p` × `q` real grid: the rows' real FFTs
/// (`p / 2 + 1` values each), then each of those columns' FFT, stored
/// column by column (`q` values each). `fill(row, values)` writes grid row
/// `row` (rows past `rows` are zero).
fn spectrum(
    p: usize,
    q: usize,
    rows: usize,
    planner: &mut RealFftPlanner<f64>,
    columns: &std::sync::Arc<dyn rustfft::Fft<f64>>,
    fill: impl Fn(usize, &mut [f64]) + Sync,
) -> Vec<Complex<f64>> {
    let c = p / 2 + 1;
    let forward = planner.plan_fft_forward(p);
    let mut by_row = vec![Complex::new(0.0, 0.0); q * c];
    by_row[..rows * c].par_chunks_mut(c).enumerate().for_each_init(
        || (forward.make_input_vec(), forward.make_scratch_vec()),
        |(input, scratch), (row, out)| {
            input.fill(0.0);
            fill(row, input);
            forward.process_with_scratch(input, out, scratch).expect("row FFT sizes");
        },
    );
    let mut by_column = transpose(&by_row, q, c);
    fft_columns(&mut by_column, q, columns);
    by_column
}

/// The `rows` × `cols` matrix `a` (row by row), transposed.
fn transpose(a: &[Complex<f64>], rows: usize, cols: usize) -> Vec<Complex<f64>> {
    let mut t = vec![Complex::new(0.0, 0.0); rows * cols];
    t.par_chunks_mut(rows).enumerate().for_each(|(col, out)| {
        for (row, o) in out.iter_mut().enumerate() {
            *o = a[row * cols + col];
        }
    });
    t
}

/// Every `len`-long run of `data` transformed in place by `fft`.
fn fft_columns(data: &mut [Complex<f64>], len: usize, fft: &std::sync::Arc<dyn rustfft::Fft<f64>>) {
    data.par_chunks_mut(len).for_each_init(
        || vec![Complex::new(0.0, 0.0); fft.get_inplace_scratch_len()],
        |scratch, column| fft.process_with_scratch(column, scratch),
    );
}

fn convolve_fft(image: &[f32], width: usize, height: usize, kernel: &PsfKernel) -> Vec<f32> {
    let (p, q) = fft_size(width, height, kernel.radius);
    let (r, size) = (kernel.radius, kernel.size());
    let mut planner = RealFftPlanner::<f64>::new();
    let mut complex = rustfft::FftPlanner::<f64>::new();
    let (columns, columns_back) = (complex.plan_fft_forward(q), complex.plan_fft_inverse(q));
    let mut product = spectrum(p, q, height, &mut planner, &columns, |row, out| {
        for (o, &v) in out.iter_mut().zip(&image[row * width..][..width]) {
            *o = f64::from(v.max(0.0));
        }
    });
    // the kernel with its centre at (0, 0), wrapped around the grid's edges
    // (a kernel wider than the grid folds onto itself; the panel's pixels
    // still meet only the taps they should, the grid being the panel plus
    // the radius)
    let kernel_spectrum = spectrum(p, q, q, &mut planner, &columns, |row, out| {
        // every dy in −r..=r with dy ≡ row (mod q)
        let first = -(r as i64) + (row as i64 + r as i64).rem_euclid(q as i64);
        let mut dy = first;
        while dy <= r as i64 {
            let weights = &kernel.weights[(dy + r as i64) as usize * size..][..size];
            for (col, &w) in weights.iter().enumerate() {
                let dx = col as i64 - r as i64;
                out[dx.rem_euclid(p as i64) as usize] += w;
            }
            dy += q as i64;
        }
    });
    let scale = 1.0 / (p * q) as f64;
    product.par_iter_mut().zip(&kernel_spectrum).for_each(|(a, k)| *a *= k * scale);
    fft_columns(&mut product, q, &columns_back);
    let c = p / 2 + 1;
    let mut by_row = transpose(&product, c, q);
    let inverse = planner.plan_fft_inverse(p);
    let mut out = vec![0f32; width * height];
    out.par_chunks_mut(width).zip(by_row.par_chunks_mut(c)).for_each_init(
        || (inverse.make_output_vec(), inverse.make_scratch_vec()),
        |(real, scratch), (row, spectrum)| {
            // (a real row's transform has real ends; rounding leaves a trace)
            spectrum[0].im = 0.0;
            spectrum[c - 1].im = 0.0;
            inverse.process_with_scratch(spectrum, real, scratch).expect("row FFT sizes");
            for (o, &v) in row.iter_mut().zip(real.iter()) {
                *o = v as f32;
            }
        },
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic image with bright spots over a dim floor and some
    /// pixels at zero or below.
    fn test_image(width: usize, height: usize) -> Vec<f32> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        (0..width * height)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                match i % 97 {
                    0 => (u * 5e4) as f32,
                    1 => -3.0,
                    _ => (u * 20.0) as f32,
                }
            })
            .collect()
    }

    /// The FFTs give the direct sum within 1e-6 of the image's maximum,
    /// for both shapes, odd and even panels, and kernels larger than the
    /// panel's side.
    #[test]
    fn fft_is_the_direct_sum() {
        for (width, height, shape, fwhm, radius) in [
            (64, 48, PsfShape::Gauss, 2.0, 5),
            (61, 37, PsfShape::Fiber, 1.5, 12),
            (40, 33, PsfShape::Gauss, 6.0, 40),
            (17, 90, PsfShape::Fiber, 3.0, 25),
        ] {
            let image = test_image(width, height);
            let kernel = PsfKernel::new(shape, fwhm, radius);
            let direct = convolve(&image, width, height, &kernel, Method::Direct);
            let fft = convolve(&image, width, height, &kernel, Method::Fft);
            let max = image.iter().fold(0f32, |m, &v| m.max(v)) as f64;
            let worst = direct
                .iter()
                .zip(&fft)
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs())
                .fold(0.0, f64::max);
            assert!(worst <= 1e-6 * max, "{shape:?} {width}x{height} r={radius}: {worst} of {max}");
            // and it is no sum of zeros
            assert!(direct.iter().any(|&v| v > 1.0));
        }
    }

    /// One bright pixel away from the edges becomes the kernel itself, and
    /// the photons are conserved once the disc's missing share is added back.
    #[test]
    fn a_point_becomes_the_kernel() {
        let (w, h) = (41, 41);
        let mut image = vec![0f32; w * h];
        image[20 * w + 20] = 1000.0;
        for method in [Method::Direct, Method::Fft] {
            let kernel = PsfKernel::new(PsfShape::Gauss, 3.0, 9);
            let out = convolve(&image, w, h, &kernel, method);
            for dy in -9i64..=9 {
                for dx in -9i64..=9 {
                    let got = f64::from(out[((20 + dy) as usize) * w + (20 + dx) as usize]);
                    let want = 1000.0 * kernel.weights[((dy + 9) * 19 + dx + 9) as usize];
                    assert!((got - want).abs() < 1e-3, "{method:?} {dx},{dy}: {got} {want}");
                }
            }
        }
        let spread_out = spread(&image, w, h, PsfShape::Gauss, 3.0, 9);
        let total: f64 = spread_out.image.iter().map(|&v| f64::from(v)).sum();
        assert!((total - 1000.0).abs() < 1e-3, "{total}");
        assert!(spread_out.lost_photons.unwrap() > 0.0);
    }

    /// The automatic radius is noisify.c's table radius; an empty image
    /// stays empty; a width that is not positive does nothing.
    #[test]
    fn radius_and_degenerate_widths() {
        let image = test_image(30, 20);
        let out = spread(&image, 30, 20, PsfShape::Gauss, 2.0, 0);
        let max = image.iter().fold(0f32, |m, &v| m.max(v)) as f64;
        assert_eq!(out.max_input, Some(max));
        assert_eq!(out.auto_radius, Some(auto_table_radius(PsfShape::Gauss, max, 2.0)));
        let zero = spread(&vec![0f32; 600], 30, 20, PsfShape::Gauss, 2.0, 0);
        assert!(zero.image.iter().all(|&v| v == 0.0) && zero.lost_photons.is_none());
        let none = spread(&image, 30, 20, PsfShape::Fiber, 0.0, 3);
        assert!(none.zero_width && none.image == image);
    }

    #[test]
    fn fft_sizes_are_smooth_and_large_enough() {
        assert_eq!(smooth_at_least(4097), 4320);
        assert_eq!(smooth_at_least(7), 8);
        assert_eq!(smooth_at_least(1), 2);
        assert_eq!(fft_size(100, 10, 5), (108, 16));
    }
}
