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

/// What a row contributes to [`ImageStats`]: sums over its rendered pixels
/// and its largest value. The CPU render gathers these as it writes each row
/// (the row is still in cache); [`stats_from_rows`] combines them in row
/// order, so the statistics do not depend on the number of threads or on
/// whether the render or [`image_stats`] gathered them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RowStats {
    /// Sum of the rendered pixels.
    pub sum: f64,
    /// Sum of their squares.
    pub sumsqr: f64,
    /// Number of rendered pixels.
    pub n: usize,
    /// The largest rendered value if positive, else 0 (NaN never counts).
    pub max: f32,
    /// Fast index of the first pixel holding `max` (when `max > 0`).
    pub max_f: usize,
}

/// The part `[lo, hi)` of `0..n` that the inclusive ROI bounds `lo..=hi` cover.
pub(crate) fn roi_span(lo: i64, hi: i64, n: usize) -> (usize, usize) {
    let a = lo.clamp(0, n as i64) as usize;
    (a, hi.saturating_add(1).clamp(a as i64, n as i64) as usize)
}

/// The largest of `xs` if positive, else 0. `>` is false for NaN: NaN
/// pixels never become the maximum, as in C. Eight running maxima (the
/// result does not depend on the order), so that it vectorises.
#[inline(always)]
fn positive_max(xs: &[f32]) -> f32 {
    let mut m = [0.0f32; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for i in 0..8 {
            if c[i] > m[i] {
                m[i] = c[i];
            }
        }
    }
    m.iter().chain(chunks.remainder()).fold(0.0f32, |b, &v| if v > b { v } else { b })
}

/// Pixel `i` of a row goes to partial sum `i % PARTIALS`: sixteen
/// independent chains of additions (four AVX2 vectors), so that the sums run
/// at the adder's throughput rather than waiting on its latency.
const PARTIALS: usize = 16;

/// The partial sums of a row, added pairwise:
/// `((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) + ...`.
fn combine(p: &[f64; PARTIALS]) -> f64 {
    let mut v = *p;
    let mut n = PARTIALS;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            v[i] = v[2 * i] + v[2 * i + 1];
        }
    }
    v[0]
}

/// The partial sums of `row` and of its squares (see [`PARTIALS`]) and its
/// [`positive_max`]. With AVX2 the partials are four vectors: the same
/// additions in the same order, so the same sums.
fn unmasked_sums(row: &[f32]) -> ([f64; PARTIALS], [f64; PARTIALS], f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { unmasked_sums_avx2(row) };
    }
    unmasked_sums_any(row)
}

#[inline(always)]
fn unmasked_sums_any(row: &[f32]) -> ([f64; PARTIALS], [f64; PARTIALS], f32) {
    let (mut sum, mut sumsqr) = ([0.0f64; PARTIALS], [0.0f64; PARTIALS]);
    let mut blocks = row.chunks_exact(PARTIALS);
    for b in &mut blocks {
        for i in 0..PARTIALS {
            let v = b[i] as f64;
            sum[i] += v;
            sumsqr[i] += v * v;
        }
    }
    for (i, &v) in blocks.remainder().iter().enumerate() {
        sum[i] += v as f64;
        sumsqr[i] += v as f64 * v as f64;
    }
    (sum, sumsqr, positive_max(row))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn unmasked_sums_avx2(row: &[f32]) -> ([f64; PARTIALS], [f64; PARTIALS], f32) {
    use std::arch::x86_64::*;
    let (mut s, mut q) = ([_mm256_setzero_pd(); 4], [_mm256_setzero_pd(); 4]);
    let mut blocks = row.chunks_exact(PARTIALS);
    for b in &mut blocks {
        for ((s, q), c) in s.iter_mut().zip(&mut q).zip(b.chunks_exact(4)) {
            // SAFETY: c holds 4 floats; unaligned load.
            let v = _mm256_cvtps_pd(unsafe { _mm_loadu_ps(c.as_ptr()) });
            *s = _mm256_add_pd(*s, v);
            // a separate product and sum (no fused multiply-add), as the scalar code
            *q = _mm256_add_pd(*q, _mm256_mul_pd(v, v));
        }
    }
    let (mut sum, mut sumsqr) = ([0.0f64; PARTIALS], [0.0f64; PARTIALS]);
    for ((s, q), (sum, sumsqr)) in
        s.iter().zip(&q).zip(sum.chunks_exact_mut(4).zip(sumsqr.chunks_exact_mut(4)))
    {
        // SAFETY: 4 doubles each; unaligned stores.
        unsafe {
            _mm256_storeu_pd(sum.as_mut_ptr(), *s);
            _mm256_storeu_pd(sumsqr.as_mut_ptr(), *q);
        }
    }
    for (i, &v) in blocks.remainder().iter().enumerate() {
        sum[i] += v as f64;
        sumsqr[i] += v as f64 * v as f64;
    }
    (sum, sumsqr, positive_max(row))
}

/// The index of the first `x` in `xs`, checked 16 at a time (the test of a
/// block vectorises; only the block holding it is searched one by one).
fn first_index_of(xs: &[f32], x: f32) -> Option<usize> {
    let mut base = 0;
    for c in xs.chunks(16) {
        if c.iter().fold(false, |any, &v| any | (v == x)) {
            return c.iter().position(|&v| v == x).map(|i| base + i);
        }
        base += c.len();
    }
    None
}

/// [`RowStats`] of row `s` (`row` holds its `fpixels` values): the pixels
/// inside `roi` and, with a `mask` (the whole image's), where it is nonzero.
pub fn row_stats(row: &[f32], s: usize, roi: [i64; 4], mask: Option<&[u16]>) -> RowStats {
    let fpixels = row.len();
    if (s as i64) < roi[2] || (s as i64) > roi[3] {
        return RowStats::default();
    }
    let (f0, f1) = roi_span(roi[0], roi[1], fpixels);
    let row = &row[f0..f1];
    // interleaved partial sums (see PARTIALS): a fixed order
    let (mut sum, mut sumsqr) = ([0.0f64; PARTIALS], [0.0f64; PARTIALS]);
    let mut max = 0.0f32;
    let n;
    let mut first = None;
    match mask {
        None => {
            (sum, sumsqr, max) = unmasked_sums(row);
            n = row.len();
        }
        Some(m) => {
            let m = &m[s * fpixels + f0..s * fpixels + f1];
            let mut count = 0;
            for (i, (&v, &keep)) in row.iter().zip(m).enumerate() {
                if keep != 0 {
                    let v64 = v as f64;
                    sum[i % PARTIALS] += v64;
                    sumsqr[i % PARTIALS] += v64 * v64;
                    if v > max {
                        max = v;
                        first = Some(i);
                    }
                    count += 1;
                }
            }
            n = count;
        }
    }
    let max_f = match first {
        Some(i) => f0 + i,
        None if max > 0.0 => f0 + first_index_of(row, max).unwrap_or(0),
        None => 0,
    };
    RowStats { sum: combine(&sum), sumsqr: combine(&sumsqr), n, max, max_f }
}

/// Compute max, mean, RMS and RMSD the way nanoBragg.c does: max/mean/rms over
/// rendered pixels (inside `roi` and, with a `mask`, where it is nonzero), rmsd
/// over every pixel of the ROI (masked pixels included, as in C), with its
/// (n-1) denominators. Rows in parallel; the result does not depend on the
/// number of threads (see [`RowStats`]).
pub fn image_stats(
    image: &[f32],
    fpixels: usize,
    roi: [i64; 4],
    mask: Option<&[u16]>,
) -> ImageStats {
    use rayon::prelude::*;
    if fpixels == 0 {
        return stats_from_rows(image, 0, roi, &[]);
    }
    let rows: Vec<RowStats> = image
        .par_chunks(fpixels)
        .enumerate()
        .map(|(s, row)| row_stats(row, s, roi, mask))
        .collect();
    stats_from_rows(image, fpixels, roi, &rows)
}

/// [`image_stats`] from the rows' [`RowStats`] (one per row of `image`),
/// combined in row order, and one parallel pass over `image` for the RMSD.
///
/// Equal maxima: nanoBragg.c updates its shared maximum from OpenMP threads
/// without a reduction, so the pixel it reports among equal maxima is the one
/// its threads reach first. We pin that down as the reference build ran it,
/// two threads over equal halves of the rows: the pixel with the smallest
/// offset from the start of its half wins.
pub fn stats_from_rows(
    image: &[f32],
    fpixels: usize,
    roi: [i64; 4],
    rows: &[RowStats],
) -> ImageStats {
    let mut stats = stats_but_rmsd(fpixels, rows);
    stats.rmsd = rmsd(image, fpixels, rows.len(), roi, stats.mean);
    stats
}

/// The RMSD about `mean` over every pixel of the ROI of a `spixels`-row
/// image: one parallel pass of [`row_deviation`]s, combined in row order.
pub fn rmsd(image: &[f32], fpixels: usize, spixels: usize, roi: [i64; 4], mean: f64) -> f64 {
    use rayon::prelude::*;
    let (f0, f1) = roi_span(roi[0], roi[1], fpixels);
    let devs: Vec<f64> = roi_rows(roi, spixels)
        .into_par_iter()
        .map(|s| row_deviation(&image[s * fpixels + f0..s * fpixels + f1], mean))
        .collect();
    rmsd_from_deviations(&devs, fpixels, spixels, roi)
}

/// [`stats_from_rows`] without its pass over the image: every field but
/// `rmsd`, which is 0 (see [`row_deviation`] and [`rmsd_from_deviations`]
/// for a caller that reads the image anyway).
pub fn stats_but_rmsd(fpixels: usize, rows: &[RowStats]) -> ImageStats {
    let spixels = rows.len();
    let half = spixels.div_ceil(2).max(1);
    let rank = |f: usize, s: usize| ((s % half) * fpixels + f, s / half);
    let (mut sum, mut sumsqr, mut n) = (0.0f64, 0.0f64, 0usize);
    let (mut max_i, mut best) = (0.0f32, None::<((usize, usize), usize, usize)>);
    for (s, r) in rows.iter().enumerate() {
        sum += r.sum;
        sumsqr += r.sumsqr;
        n += r.n;
        if r.max > 0.0 && r.max >= max_i {
            let cand = (rank(r.max_f, s), r.max_f, s);
            if r.max > max_i || best.is_none_or(|b| cand.0 < b.0) {
                max_i = r.max;
                best = Some(cand);
            }
        }
    }
    let (max_f, max_s) = best.map_or((0, 0), |(_, f, s)| (f, s));
    let nd = n.max(1);
    let mean = sum / nd as f64;
    let nr = if nd <= 1 { 2 } else { nd };
    let rms = (sumsqr / (nr - 1) as f64).sqrt();
    ImageStats { max_i: max_i as f64, max_f, max_s, mean, rms, rmsd: 0.0, count: n }
}

/// A row's part of the RMSD: the sum of `(v - mean)²` over its pixels inside
/// the ROI (`row`), in interleaved partial sums (see [`PARTIALS`]).
pub fn row_deviation(row: &[f32], mean: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return combine(&unsafe { deviations_avx2(row, mean) });
    }
    combine(&deviations_any(row, mean))
}

#[inline(always)]
fn deviations_any(row: &[f32], mean: f64) -> [f64; PARTIALS] {
    let mut d = [0.0f64; PARTIALS];
    let mut blocks = row.chunks_exact(PARTIALS);
    for b in &mut blocks {
        for i in 0..PARTIALS {
            let t = b[i] as f64 - mean;
            d[i] += t * t;
        }
    }
    for (i, &v) in blocks.remainder().iter().enumerate() {
        let t = v as f64 - mean;
        d[i] += t * t;
    }
    d
}

/// [`deviations_any`] in four AVX2 vectors (the same operations in the same order).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn deviations_avx2(row: &[f32], mean: f64) -> [f64; PARTIALS] {
    use std::arch::x86_64::*;
    let m = _mm256_set1_pd(mean);
    let mut acc = [_mm256_setzero_pd(); 4];
    let mut blocks = row.chunks_exact(PARTIALS);
    for b in &mut blocks {
        for (acc, c) in acc.iter_mut().zip(b.chunks_exact(4)) {
            // SAFETY: c holds 4 floats; unaligned load.
            let t = _mm256_sub_pd(_mm256_cvtps_pd(unsafe { _mm_loadu_ps(c.as_ptr()) }), m);
            *acc = _mm256_add_pd(*acc, _mm256_mul_pd(t, t));
        }
    }
    let mut d = [0.0f64; PARTIALS];
    for (acc, d) in acc.iter().zip(d.chunks_exact_mut(4)) {
        // SAFETY: 4 doubles; unaligned store.
        unsafe { _mm256_storeu_pd(d.as_mut_ptr(), *acc) };
    }
    for (i, &v) in blocks.remainder().iter().enumerate() {
        let t = v as f64 - mean;
        d[i] += t * t;
    }
    d
}

/// The RMSD from the [`row_deviation`]s of the ROI's rows, in row order
/// (nanoBragg.c's n − 1 denominator over every pixel of the ROI).
pub fn rmsd_from_deviations(devs: &[f64], fpixels: usize, spixels: usize, roi: [i64; 4]) -> f64 {
    let ((f0, f1), (s0, s1)) =
        (roi_span(roi[0], roi[1], fpixels), roi_span(roi[2], roi[3], spixels));
    let dev: f64 = devs.iter().fold(0.0, |a, &d| a + d);
    let m = (s1 - s0) * (f1 - f0);
    let m = if m <= 1 { 2 } else { m };
    (dev / (m - 1) as f64).sqrt()
}

/// The rows `s0..s1` of a `spixels`-row image inside the ROI.
pub fn roi_rows(roi: [i64; 4], spixels: usize) -> std::ops::Range<usize> {
    let (s0, s1) = roi_span(roi[2], roi[3], spixels);
    s0..s1
}

/// The pixels `f0..f1` of each row of an `fpixels`-wide image inside the
/// ROI.
pub fn roi_columns(roi: [i64; 4], fpixels: usize) -> std::ops::Range<usize> {
    let (f0, f1) = roi_span(roi[0], roi[1], fpixels);
    f0..f1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_sums_are_the_scalar_sums() {
        // values over many magnitudes, so that the order of additions shows
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let row: Vec<f32> = (0..4099)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let m = (x >> 11) as f64 / (1u64 << 53) as f64;
                (m * 10f64.powi((x % 13) as i32 - 6)) as f32
            })
            .collect();
        let mean = 0.37;
        for len in [0, 1, 3, 4, 7, 15, 16, 17, 64, 1001, 4099] {
            let r = &row[..len];
            let want = unmasked_sums_any(r);
            assert_eq!(unmasked_sums(r), want, "{len}");
            let dev = deviations_any(r, mean);
            assert_eq!(row_deviation(r, mean).to_bits(), combine(&dev).to_bits());
            // pixel i in partial i % 16, each partial summed in pixel order
            for (p, &dev_p) in dev.iter().enumerate() {
                let (mut s, mut q, mut d) = (0.0f64, 0.0f64, 0.0f64);
                for &v in r.iter().skip(p).step_by(PARTIALS) {
                    s += v as f64;
                    q += v as f64 * v as f64;
                    d += (v as f64 - mean) * (v as f64 - mean);
                }
                assert_eq!(
                    [s, q, d].map(f64::to_bits),
                    [want.0[p], want.1[p], dev_p].map(f64::to_bits)
                );
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was detected just above; the function reads only `r`.
                let got = unsafe { unmasked_sums_avx2(r) };
                let bits = |v: ([f64; PARTIALS], [f64; PARTIALS], f32)| {
                    (v.0.map(f64::to_bits), v.1.map(f64::to_bits), v.2.to_bits())
                };
                assert_eq!(bits(got), bits(want), "{len}");
                // SAFETY: AVX2 was detected above; the function reads only `r`.
                let got = unsafe { deviations_avx2(r, mean) };
                assert_eq!(got.map(f64::to_bits), dev.map(f64::to_bits), "{len}");
            }
        }
    }

    #[test]
    fn row_maximum_and_its_first_position() {
        // 37 values: a remainder after the blocks of 8 and of 16
        let mut row: Vec<f32> = (0..37).map(|i| (i % 7) as f32 - 3.0).collect();
        assert_eq!(positive_max(&row), 3.0);
        assert_eq!(first_index_of(&row, 3.0), Some(6));
        row[20] = f32::NAN;
        row[33] = 9.5;
        row[35] = 9.5;
        assert_eq!(positive_max(&row), 9.5);
        assert_eq!(first_index_of(&row, 9.5), Some(33));
        assert_eq!(first_index_of(&row, 42.0), None);
        // nothing positive: 0, as the C program's running maximum starts
        assert_eq!(positive_max(&[-1.0, f32::NAN, -0.5]), 0.0);
        let sequential = |xs: &[f32]| xs.iter().fold(0.0f32, |m, &v| if v > m { v } else { m });
        let wavy: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.37).sin() * i as f32).collect();
        assert_eq!(positive_max(&wavy), sequential(&wavy));
    }

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
