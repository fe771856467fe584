//! Image statistics as nanoBragg.c reports them.

/// Statistics over the rendered (in-ROI, unmasked) pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageStats {
    /// Largest pixel value (first in raster order on ties).
    pub max_i: f64,
    /// Fast index of the maximum.
    pub max_f: usize,
    /// Slow index of the maximum.
    pub max_s: usize,
    /// Mean over rendered pixels.
    pub mean: f64,
    /// Root mean square over rendered pixels.
    pub rms: f64,
    /// Root mean square deviation from the mean over the ROI.
    pub rmsd: f64,
    /// Number of rendered pixels.
    pub count: usize,
}

/// Compute max, mean, RMS and RMSD the way nanoBragg.c does: max/mean/rms over
/// rendered pixels (`rendered(f, s)`), rmsd over every pixel of the ROI
/// (masked pixels included, as in C), with its (n-1) denominators.
pub fn image_stats(
    image: &[f32],
    fpixels: usize,
    roi: [i64; 4],
    rendered: impl Fn(usize, usize) -> bool,
) -> ImageStats {
    let spixels = image.len().checked_div(fpixels).unwrap_or(0);
    let in_roi = |f: usize, s: usize| {
        let (fi, si) = (f as i64, s as i64);
        !(fi < roi[0] || fi > roi[1] || si < roi[2] || si > roi[3])
    };
    let (mut max_i, mut max_f, mut max_s) = (0.0f64, 0usize, 0usize);
    let (mut sum, mut sumsqr, mut n) = (0.0f64, 0.0f64, 0usize);
    let mut ties = 0usize;
    for s in 0..spixels {
        for f in 0..fpixels {
            if !rendered(f, s) {
                continue;
            }
            let v = image[s * fpixels + f] as f64;
            if v > max_i {
                max_i = v;
                max_f = f;
                max_s = s;
                ties = 1;
            } else if v == max_i {
                ties += 1;
            }
            sum += v;
            sumsqr += v * v;
            n += 1;
        }
    }
    // Equal maxima: nanoBragg.c updates its shared maximum from OpenMP
    // threads without a reduction, so the pixel it reports among equal maxima
    // is the one its threads reach first. We pin that down as the reference
    // build ran it, two threads over equal halves of the rows: the pixel with
    // the smallest offset from the start of its half wins.
    if n > 0 && ties > 1 {
        let half = spixels.div_ceil(2).max(1);
        let rank = |f: usize, s: usize| ((s % half) * fpixels + f, s / half);
        let mut best = rank(max_f, max_s);
        for s in 0..spixels {
            for f in 0..fpixels {
                if rendered(f, s) && image[s * fpixels + f] as f64 == max_i && rank(f, s) < best {
                    best = rank(f, s);
                    max_f = f;
                    max_s = s;
                }
            }
        }
    }
    let count = n;
    let nd = if n == 0 { 1 } else { n };
    let mean = sum / nd as f64;
    let nr = if nd <= 1 { 2 } else { nd };
    let rms = (sumsqr / (nr - 1) as f64).sqrt();
    let (mut dev, mut m) = (0.0f64, 0usize);
    for s in 0..spixels {
        for f in 0..fpixels {
            if !in_roi(f, s) {
                continue;
            }
            let t = image[s * fpixels + f] as f64 - mean;
            dev += t * t;
            m += 1;
        }
    }
    let m = if m <= 1 { 2 } else { m };
    let rmsd = (dev / (m - 1) as f64).sqrt();
    ImageStats { max_i, max_f, max_s, mean, rms, rmsd, count }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_small_image() {
        let img = [1.0f32, 3.0, 3.0, 1.0];
        let s = image_stats(&img, 2, [0, 2, 0, 2], |_, _| true);
        assert_eq!(s.max_i, 3.0);
        // tie between (1,0) and (0,1): (0,1) starts the second half of the rows
        assert_eq!((s.max_f, s.max_s), (0, 1));
        assert_eq!(s.mean, 2.0);
        assert!((s.rms - (20.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert!((s.rmsd - (4.0f64 / 3.0).sqrt()).abs() < 1e-15);
    }
}
