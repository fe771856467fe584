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

/// Rows per block of the parallel passes. Blocks are fixed by the image size,
/// never by the thread count, and their partial sums are combined in row
/// order, so the statistics are the same for any number of threads.
const BLOCK_ROWS: usize = 8;

/// Partial statistics of a block of rows.
#[derive(Clone, Copy)]
struct Part {
    max_i: f64,
    /// Tie-break rank and position of the maximum (`None` while it is 0).
    best: Option<((usize, usize), usize, usize)>,
    sum: f64,
    sumsqr: f64,
    n: usize,
}

impl Part {
    const EMPTY: Part = Part { max_i: 0.0, best: None, sum: 0.0, sumsqr: 0.0, n: 0 };

    /// Take the larger maximum (the smaller rank on equal ones); add the sums.
    fn merge(mut self, o: Part) -> Part {
        if o.max_i > self.max_i || (o.max_i == self.max_i && rank_lt(o.best, self.best)) {
            self.max_i = o.max_i;
            self.best = o.best;
        }
        self.sum += o.sum;
        self.sumsqr += o.sumsqr;
        self.n += o.n;
        self
    }
}

fn rank_lt(
    a: Option<((usize, usize), usize, usize)>,
    b: Option<((usize, usize), usize, usize)>,
) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.0 < b.0,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Compute max, mean, RMS and RMSD the way nanoBragg.c does: max/mean/rms over
/// rendered pixels (inside `roi` and, with a `mask`, where it is nonzero), rmsd
/// over every pixel of the ROI (masked pixels included, as in C), with its
/// (n-1) denominators.
///
/// Equal maxima: nanoBragg.c updates its shared maximum from OpenMP threads
/// without a reduction, so the pixel it reports among equal maxima is the one
/// its threads reach first. We pin that down as the reference build ran it,
/// two threads over equal halves of the rows: the pixel with the smallest
/// offset from the start of its half wins.
///
/// Rows are processed in parallel blocks (see [`BLOCK_ROWS`]) and summed in
/// four interleaved partial sums per row; the result does not depend on the
/// number of threads.
pub fn image_stats(
    image: &[f32],
    fpixels: usize,
    roi: [i64; 4],
    mask: Option<&[u16]>,
) -> ImageStats {
    use rayon::prelude::*;
    if fpixels == 0 || image.is_empty() {
        return finish(Part::EMPTY, (0.0, 0), 0.0);
    }
    let spixels = image.len() / fpixels;
    let f0 = roi[0].clamp(0, fpixels as i64) as usize;
    let f1 = roi[1].saturating_add(1).clamp(f0 as i64, fpixels as i64) as usize;
    let s0 = roi[2].clamp(0, spixels as i64) as usize;
    let s1 = roi[3].saturating_add(1).clamp(s0 as i64, spixels as i64) as usize;
    let half = spixels.div_ceil(2).max(1);
    let rank = |f: usize, s: usize| ((s % half) * fpixels + f, s / half);
    // the blocks of ROI rows, fixed by the image alone
    let blocks: Vec<usize> = (s0..s1).step_by(BLOCK_ROWS).collect();
    let rows_of = |b: usize| b..(b + BLOCK_ROWS).min(s1);
    let parts: Vec<Part> = blocks
        .par_iter()
        .map(|&b| {
            let mut p = Part::EMPTY;
            for s in rows_of(b) {
                let row = &image[s * fpixels + f0..s * fpixels + f1];
                let (mut sum, mut sumsqr) = ([0.0f64; 4], [0.0f64; 4]);
                let mut row_max = 0.0f32;
                let mut n = 0;
                match mask {
                    None => {
                        let mut quads = row.chunks_exact(4);
                        for q in &mut quads {
                            for i in 0..4 {
                                let v = q[i] as f64;
                                sum[i] += v;
                                sumsqr[i] += v * v;
                            }
                        }
                        for &v in quads.remainder() {
                            sum[0] += v as f64;
                            sumsqr[0] += v as f64 * v as f64;
                        }
                        // NaN pixels never become the maximum (`>` is false), as in C
                        row_max = row.iter().fold(0.0f32, |m, &v| if v > m { v } else { m });
                        n = row.len();
                    }
                    Some(m) => {
                        let m = &m[s * fpixels + f0..s * fpixels + f1];
                        for (i, (&v, &keep)) in row.iter().zip(m).enumerate() {
                            if keep != 0 {
                                let v64 = v as f64;
                                sum[i % 4] += v64;
                                sumsqr[i % 4] += v64 * v64;
                                if v > row_max {
                                    row_max = v;
                                }
                                n += 1;
                            }
                        }
                    }
                }
                p.sum += (sum[0] + sum[1]) + (sum[2] + sum[3]);
                p.sumsqr += (sumsqr[0] + sumsqr[1]) + (sumsqr[2] + sumsqr[3]);
                p.n += n;
                let rm = row_max as f64;
                if rm > 0.0 && rm >= p.max_i {
                    // the first such pixel of the row has the row's smallest rank
                    let f = (0..row.len())
                        .find(|&i| {
                            row[i] == row_max && mask.is_none_or(|m| m[s * fpixels + f0 + i] != 0)
                        })
                        .map_or(0, |i| f0 + i);
                    let best = Some((rank(f, s), f, s));
                    if rm > p.max_i || rank_lt(best, p.best) {
                        p.max_i = rm;
                        p.best = best;
                    }
                }
            }
            p
        })
        .collect();
    let all = parts.into_iter().fold(Part::EMPTY, Part::merge);
    let mean = all.sum / all.n.max(1) as f64;
    let devs: Vec<(f64, usize)> = blocks
        .par_iter()
        .map(|&b| {
            let mut dev = 0.0f64;
            for s in rows_of(b) {
                let row = &image[s * fpixels + f0..s * fpixels + f1];
                let mut d = [0.0f64; 4];
                let mut quads = row.chunks_exact(4);
                for q in &mut quads {
                    for i in 0..4 {
                        let t = q[i] as f64 - mean;
                        d[i] += t * t;
                    }
                }
                for &v in quads.remainder() {
                    let t = v as f64 - mean;
                    d[0] += t * t;
                }
                dev += (d[0] + d[1]) + (d[2] + d[3]);
            }
            (dev, rows_of(b).len() * (f1 - f0))
        })
        .collect();
    let dev = devs.into_iter().fold((0.0, 0), |(d, m), (d2, m2)| (d + d2, m + m2));
    finish(all, dev, mean)
}

/// The statistics from the combined partial sums, with C's denominators.
fn finish(all: Part, (dev, m): (f64, usize), mean: f64) -> ImageStats {
    let n = all.n;
    let (max_f, max_s) = all.best.map_or((0, 0), |(_, f, s)| (f, s));
    let nd = n.max(1);
    let nr = if nd <= 1 { 2 } else { nd };
    let rms = (all.sumsqr / (nr - 1) as f64).sqrt();
    let m = if m <= 1 { 2 } else { m };
    let rmsd = (dev / (m - 1) as f64).sqrt();
    ImageStats { max_i: all.max_i, max_f, max_s, mean, rms, rmsd, count: n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_small_image() {
        let img = [1.0f32, 3.0, 3.0, 1.0];
        let s = image_stats(&img, 2, [0, 2, 0, 2], None);
        assert_eq!(s.max_i, 3.0);
        // tie between (1,0) and (0,1): (0,1) starts the second half of the rows
        assert_eq!((s.max_f, s.max_s), (0, 1));
        assert_eq!(s.mean, 2.0);
        assert!((s.rms - (20.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert!((s.rmsd - (4.0f64 / 3.0).sqrt()).abs() < 1e-15);
    }

    /// The statistics of a plain raster-order walk, as nanoBragg.c's loops.
    fn reference(img: &[f32], fp: usize, roi: [i64; 4], mask: Option<&[u16]>) -> ImageStats {
        let sp = img.len() / fp;
        let half = sp.div_ceil(2);
        let in_roi = |f: usize, s: usize| {
            (roi[0]..=roi[1]).contains(&(f as i64)) && (roi[2]..=roi[3]).contains(&(s as i64))
        };
        let (mut max_i, mut pos, mut best) = (0.0f64, (0, 0), (usize::MAX, 0));
        let (mut sum, mut sq, mut n) = (0.0, 0.0, 0);
        for s in 0..sp {
            for f in 0..fp {
                let v = img[s * fp + f] as f64;
                if !in_roi(f, s) || mask.is_some_and(|m| m[s * fp + f] == 0) {
                    continue;
                }
                let r = ((s % half) * fp + f, s / half);
                if v > max_i || (v == max_i && v > 0.0 && r < best) {
                    (max_i, pos, best) = (v, (f, s), r);
                }
                sum += v;
                sq += v * v;
                n += 1;
            }
        }
        let mean = sum / n as f64;
        let (mut dev, mut m) = (0.0, 0);
        for s in 0..sp {
            for f in 0..fp {
                if in_roi(f, s) {
                    dev += (img[s * fp + f] as f64 - mean).powi(2);
                    m += 1;
                }
            }
        }
        let rmsd = (dev / (m - 1) as f64).sqrt();
        let rms = (sq / (n - 1) as f64).sqrt();
        ImageStats { max_i, max_f: pos.0, max_s: pos.1, mean, rms, rmsd, count: n }
    }

    #[test]
    fn blocks_and_threads_do_not_change_the_statistics() {
        // 37 x 53 pixels (blocks do not divide the rows), values with many
        // ties at the maximum spread over both halves, a mask of every 7th
        let (fp, sp) = (37usize, 53usize);
        let mut x = 12345u64;
        let img: Vec<f32> = (0..fp * sp)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 33) % 50) as f32 * 0.25
            })
            .collect();
        let mask: Vec<u16> = (0..fp * sp).map(|i| (i % 7 != 3) as u16).collect();
        for (roi, mask) in [
            ([0, 1000, 0, 1000], None),
            ([0, 1000, 0, 1000], Some(&mask[..])),
            ([3, 30, 5, 44], Some(&mask[..])),
            ([-4, 20, 9, 80], None),
        ] {
            let want = reference(&img, fp, roi, mask);
            let one = image_stats(&img, fp, roi, mask);
            for threads in [1, 2, 3, 8] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let got = pool.install(|| image_stats(&img, fp, roi, mask));
                let key = |s: &ImageStats| (s.max_i, s.max_f, s.max_s, s.count);
                assert_eq!(key(&got), key(&want), "{roi:?}");
                for (a, b) in [(got.mean, want.mean), (got.rms, want.rms), (got.rmsd, want.rmsd)] {
                    assert!((a - b).abs() <= 1e-13 * b.abs(), "{a} vs {b}");
                }
                assert_eq!(got, one, "{threads} threads");
            }
        }
    }
}
