//! The detector's point-spread function, as noisify.c applies it.
//!
//! Each pixel's signal is spread over its neighbours with the PSF integrated
//! over every neighbouring pixel's area, out to a radius beyond which the
//! photons lost would be below a tenth of the pixel's Poisson noise; the
//! photons beyond the radius are added back evenly over the whole image.
//! Two shapes: a Gaussian (given by its full width at half maximum) and the
//! "fiber" PSF of a fibre-optic taper, `g / (2π (g² + r²)^{3/2})`, whose
//! width parameter `g` is `0.652383013252053 × FWHM`.

/// The shape of the point-spread function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsfShape {
    /// A 2-D Gaussian.
    Gauss,
    /// `g / (2π (g² + r²)^{3/2})`: the PSF of a fibre-optic taper.
    Fiber,
}

/// `g` of the fiber PSF for a full width at half maximum of 1:
/// `FWHM = 2 sqrt(2^{2/3} - 1) g`.
const FIBER_G_PER_FWHM: f64 = 0.652383013252053;

/// A pixel's signal is spread out to where the photons left beyond the
/// radius drop below its Poisson noise divided by this.
const PHOTON_LOSS_FACTOR: f64 = 10.0;

/// What [`apply_psf`] did, for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct PsfApplied {
    /// The blurred image.
    pub image: Vec<f32>,
    /// With an automatic radius: the image's maximum, from which the kernel's
    /// radius was chosen.
    pub max_input: Option<f64>,
    /// The automatic kernel radius in pixels, before it is limited to the
    /// image's width (`None`: given by the user, or no photons).
    pub auto_radius: Option<i32>,
    /// Photons beyond each pixel's radius, added back evenly (`None`: no
    /// photons, so nothing was spread and the image is all zero).
    pub lost_photons: Option<f64>,
    /// The width was not positive: nothing was done (the image is the input).
    pub zero_width: bool,
}

/// The unit-volume Gaussian of FWHM 1 integrated from the origin to `(x, y)`:
/// `erf(2√ln2 x) erf(2√ln2 y) / 4`, evaluated in the reference's order.
fn gauss_integral(x: f64, y: f64) -> f64 {
    let ln2 = 2f64.ln();
    let ln16 = 16f64.ln();
    0.125 * (erf(2.0 * x * ln2.sqrt()) * erf(y * ln16.sqrt()) * (ln16 / ln2).sqrt())
}

/// The fiber PSF of width `g` integrated from the origin to `(x, y)`.
fn fiber_integral(x: f64, y: f64, g: f64) -> f64 {
    ((x * y) / (g * (g * g + x * x + y * y).sqrt())).atan() / 2.0 / std::f64::consts::PI
}

/// The PSF integrated over the unit pixel centred `(dx, dy)` pixels from the
/// source (`fwhm_pixels`: the FWHM in pixels).
pub fn pixel_weight(shape: PsfShape, dx: f64, dy: f64, fwhm_pixels: f64) -> f64 {
    match shape {
        PsfShape::Gauss => {
            let (x, y, h) = (dx / fwhm_pixels, dy / fwhm_pixels, 1.0 / fwhm_pixels / 2.0);
            gauss_integral(x + h, y + h)
                - gauss_integral(x + h, y - h)
                - gauss_integral(x - h, y + h)
                + gauss_integral(x - h, y - h)
        }
        PsfShape::Fiber => {
            let g = FIBER_G_PER_FWHM * fwhm_pixels;
            let i = |a, b| fiber_integral(a, b, g);
            i(dx + 0.5, dy + 0.5) - i(dx + 0.5, dy - 0.5) - i(dx - 0.5, dy + 0.5)
                + i(dx - 0.5, dy - 0.5)
        }
    }
}

/// The radius (pixels) beyond which the photons of a pixel holding `v` are
/// below its noise over [`PHOTON_LOSS_FACTOR`] (callers limit it to the
/// image). Where the noise exceeds the signal (`v` < 0.01 for the
/// Gaussian) the reference's formula has no value; the radius is then 1.
/// `table`: the kernel table's radius, which the reference writes with
/// `ln 4 · 2` for `ln 16` (the same number up to rounding).
fn auto_radius(shape: PsfShape, v: f64, fwhm_pixels: f64, table: bool) -> i32 {
    let lost = v.sqrt() / PHOTON_LOSS_FACTOR;
    let r = match shape {
        PsfShape::Gauss if table => {
            1.0 + ((-(lost / v).ln() / 4f64.ln() / 2.0).sqrt() * fwhm_pixels).ceil()
        }
        PsfShape::Gauss => 1.0 + ((-(lost / v).ln() / 16f64.ln()).sqrt() * fwhm_pixels).ceil(),
        PsfShape::Fiber => 1.0 + (FIBER_G_PER_FWHM * fwhm_pixels * (v / lost)).ceil(),
    };
    if r.is_nan() {
        1
    } else {
        r.clamp(1.0, i32::MAX as f64) as i32
    }
}

/// The radius noisify.c gives its kernel table for an image whose
/// maximum is `max` (callers limit it to the image).
pub(crate) fn auto_table_radius(shape: PsfShape, max: f64, fwhm_pixels: f64) -> i32 {
    auto_radius(shape, max, fwhm_pixels, true)
}

/// Photons of a pixel holding `v` that fall beyond `radius` pixels.
fn lost_beyond(shape: PsfShape, v: f64, radius: i32, fwhm_pixels: f64) -> f64 {
    let r = radius as f64;
    match shape {
        PsfShape::Gauss => v * (-16f64.ln() * (r / fwhm_pixels).powi(2)).exp(),
        PsfShape::Fiber => {
            let g = FIBER_G_PER_FWHM * fwhm_pixels;
            v * g / (g * g + r * r).sqrt()
        }
    }
}

/// Blurs `image` (`xpixels` wide, `ypixels` rows) with the PSF: port of
/// noisify.c's `apply_psf`.
///
/// `radius`: the kernel radius in pixels for every pixel, or 0 for one per
/// pixel from its value (the kernel table's from the image maximum). Sums
/// are kept in `f32` as in the reference, and its edge rule is kept: a
/// neighbour at column `xpixels` (one past the edge) lands in column 0 of the
/// next row, while rows outside the image are skipped.
///
/// A width that is not positive (NaN included) leaves the image as it is.
///
/// # Panics
/// If `image` holds fewer than `xpixels * ypixels` values, or `radius` < 0.
pub fn apply_psf(
    image: &[f32],
    xpixels: usize,
    ypixels: usize,
    shape: PsfShape,
    fwhm_pixels: f64,
    radius: i32,
) -> PsfApplied {
    let pixels = xpixels * ypixels;
    assert!(image.len() >= pixels && radius >= 0, "apply_psf: image too small or radius < 0");
    if fwhm_pixels.is_nan() || fwhm_pixels <= 0.0 {
        let image = image[..pixels].to_vec();
        return PsfApplied {
            image,
            max_input: None,
            auto_radius: None,
            lost_photons: None,
            zero_width: true,
        };
    }
    let mut out = vec![0f32; pixels];
    let max_width = xpixels.max(ypixels).min(i32::MAX as usize) as i32;
    let (mut max_input, mut auto) = (None, None);
    let mut kernel_radius = radius;
    if radius == 0 {
        let max = image[..pixels].iter().fold(0.0f64, |m, &v| m.max(v as f64));
        max_input = Some(max);
        if max <= 0.0 {
            return PsfApplied {
                image: out,
                max_input,
                auto_radius: None,
                lost_photons: None,
                zero_width: false,
            };
        }
        kernel_radius = auto_radius(shape, max, fwhm_pixels, true);
        auto = Some(kernel_radius);
    }
    let kernel_radius = kernel_radius.min(max_width);
    let size = 2 * kernel_radius as usize + 1;
    let mut kernel = vec![0.0f64; size * size];
    let r2 = kernel_radius as i64 * kernel_radius as i64;
    for dy in -kernel_radius..=kernel_radius {
        for dx in -kernel_radius..=kernel_radius {
            if (dx as i64).pow(2) + (dy as i64).pow(2) <= r2 {
                let k = (dy + kernel_radius) as usize * size + (dx + kernel_radius) as usize;
                kernel[k] = pixel_weight(shape, dx as f64, dy as f64, fwhm_pixels);
            }
        }
    }
    let mut lost_total = 0.0f64;
    for (i, &v) in image[..pixels].iter().enumerate() {
        if v <= 0.0 {
            continue;
        }
        let (x0, y0) = ((i % xpixels) as i64, (i / xpixels) as i64);
        let r = if radius != 0 {
            radius.min(max_width)
        } else {
            auto_radius(shape, v as f64, fwhm_pixels, false).min(kernel_radius)
        };
        lost_total += lost_beyond(shape, v as f64, r, fwhm_pixels);
        let r2 = r as i64 * r as i64;
        for dx in -r..=r {
            for dy in -r..=r {
                let k = (dy + kernel_radius) as usize * size + (dx + kernel_radius) as usize;
                let w = kernel[k];
                if w == 0.0 || (dx as i64).pow(2) + (dy as i64).pow(2) > r2 {
                    continue;
                }
                let (x, y) = (x0 + dx as i64, y0 + dy as i64);
                if x < 0 || x > xpixels as i64 || y < 0 || y > ypixels as i64 {
                    continue;
                }
                let j = (y * xpixels as i64 + x) as usize;
                // the reference also admits j == pixels, one past its array
                if j < pixels {
                    out[j] = (out[j] as f64 + v as f64 * w) as f32;
                }
            }
        }
    }
    let share = lost_total / pixels as f64;
    for o in &mut out {
        *o = (*o as f64 + share) as f32;
    }
    PsfApplied {
        image: out,
        max_input,
        auto_radius: auto,
        lost_photons: Some(lost_total),
        zero_width: false,
    }
}

/// The error function of the C library the reference links against (Rust's
/// standard library has none; any other implementation could differ in the
/// last bit, and with it a rounded pixel).
fn erf(x: f64) -> f64 {
    extern "C" {
        fn erf(x: f64) -> f64;
    }
    // SAFETY: libm's erf is a pure function of one double, defined for
    // every input (NaN and infinities included).
    unsafe { erf(x) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both kernels integrate to 1 over the plane (summed over a wide
    /// square of pixels, the fiber's slow tail added analytically).
    #[test]
    fn kernels_integrate_to_one() {
        let w = 2.5;
        let r = 60;
        let mut sums = [0.0f64; 2];
        for (s, shape) in [PsfShape::Gauss, PsfShape::Fiber].into_iter().enumerate() {
            for dy in -r..=r {
                for dx in -r..=r {
                    sums[s] += pixel_weight(shape, dx as f64, dy as f64, w);
                }
            }
        }
        assert!((sums[0] - 1.0).abs() < 1e-12, "gauss {}", sums[0]);
        // the fiber PSF outside the square of half-width R holds about g/R
        // in the far field (between the inscribed and circumscribed circles)
        let g = FIBER_G_PER_FWHM * w;
        let outside = 1.0 - sums[1];
        let (lo, hi) = (g / ((r as f64 + 0.5) * 2f64.sqrt()), g / (r as f64 + 0.5));
        assert!(outside > lo && outside < hi, "fiber outside {outside}, expected in ({lo}, {hi})");
    }

    /// The Gaussian's pixel weight against a brute-force integral of the
    /// normalised Gaussian over the pixel.
    #[test]
    fn gauss_weight_matches_numerical_integral() {
        let w = 1.7;
        let s = w / (8.0 * 2f64.ln()).sqrt();
        for (dx, dy) in [(0.0, 0.0), (1.0, 0.0), (2.0, -1.0), (3.0, 3.0)] {
            let n = 400;
            let mut sum = 0.0;
            for j in 0..n {
                for i in 0..n {
                    let x = dx - 0.5 + (i as f64 + 0.5) / n as f64;
                    let y = dy - 0.5 + (j as f64 + 0.5) / n as f64;
                    sum += (-(x * x + y * y) / (2.0 * s * s)).exp();
                }
            }
            let numeric = sum / (n * n) as f64 / (2.0 * std::f64::consts::PI * s * s);
            let analytic = pixel_weight(PsfShape::Gauss, dx, dy, w);
            assert!(
                (numeric - analytic).abs() < 1e-4 * analytic,
                "{dx},{dy}: {numeric} {analytic}"
            );
        }
    }

    /// Photons are conserved: what the kernels spread plus what is added
    /// back equals the input where no kernel reaches past the image (the
    /// fiber's automatic radius would: its tail is long): to the f32 sums for
    /// the Gaussian, to 1 % for the fiber, whose lost fraction is that of a
    /// disc while the kernel covers whole pixels.
    #[test]
    fn photons_conserved_away_from_edges() {
        let (nx, ny) = (64usize, 64usize);
        let mut img = vec![0f32; nx * ny];
        img[32 * nx + 32] = 1000.0;
        img[20 * nx + 40] = 50.0;
        for (shape, radii, tol) in
            [(PsfShape::Gauss, [0, 4], 1e-4), (PsfShape::Fiber, [4, 9], 1e-2)]
        {
            for radius in radii {
                let out = apply_psf(&img, nx, ny, shape, 2.0, radius);
                let total: f64 = out.image.iter().map(|&v| v as f64).sum();
                assert!((total - 1050.0).abs() < tol * 1050.0, "{shape:?} r={radius}: {total}");
            }
        }
    }

    /// A radius the user gives is used for every pixel; no photons at all
    /// leave the image empty.
    #[test]
    fn radius_and_empty_image() {
        let img = vec![0f32; 16];
        let out = apply_psf(&img, 4, 4, PsfShape::Gauss, 1.0, 0);
        assert_eq!((out.max_input, out.lost_photons), (Some(0.0), None));
        assert!(out.image.iter().all(|&v| v == 0.0));
        let mut img = vec![0f32; 81];
        img[40] = 100.0;
        let out = apply_psf(&img, 9, 9, PsfShape::Gauss, 1.0, 1);
        // a radius of 1 reaches the four edge neighbours, not the corners
        let above_floor = out.image.iter().filter(|&&v| v > out.image[0]).count();
        assert_eq!(above_floor, 5);
        assert_eq!(out.auto_radius, None);
    }
}
