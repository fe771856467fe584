//! The `parallel` noise stream's statistics, with stated tolerances (fixed
//! seeds: each test gives the same numbers on every run, and a wrong
//! sampler fails them by far):
//!
//! - Poisson counts against the pmf, χ² over bins of expected count ≥ 20
//!   and Kolmogorov–Smirnov over the cdf, for means 0.01 to 1e6: χ² below
//!   its 1e-6 quantile (dof + 7·√(2·dof) + 25), √n·D below 1.95 (the
//!   continuous 0.1 % point, conservative for a discrete law);
//! - read-out noise: mean and variance of the ADU;
//! - no correlation between neighbouring pixels, nor between seeds
//!   (|r| < 5/√n);
//! - the same image for 1, 2 and 3 threads and for the image split into
//!   panels in another way.

use nanobragg_core::geometry::PanelLayout;
use nanobragg_core::noise::noise_image_parallel;
use nanobragg_core::noise_stream::{pixel_gauss, pixel_poisson, PixelDraws, PixelStream, Purpose};

/// The whole image's stream of `seed`.
fn at(seed: i64) -> PixelStream {
    PixelStream { seed, first_pixel: 0 }
}
use nanobragg_core::response::{noisy_image_parallel, Bits, Response};

/// ln k!, exactly enough for the pmf (summed logarithms).
fn ln_factorials(up_to: usize) -> Vec<f64> {
    let mut out = vec![0.0; up_to + 1];
    for k in 1..=up_to {
        out[k] = out[k - 1] + (k as f64).ln();
    }
    out
}

/// (χ², degrees of freedom, √n·D) of `n` counts of mean `mean`.
fn poisson_fit(mean: f64, n: usize, seed: i64) -> (f64, usize, f64) {
    let sd = mean.sqrt();
    let lo = (mean - 10.0 * sd - 10.0).max(0.0).floor() as usize;
    let hi = (mean + 10.0 * sd + 20.0).ceil() as usize;
    let lnf = ln_factorials(hi);
    let pmf: Vec<f64> = (lo..=hi).map(|k| (-mean + k as f64 * mean.ln() - lnf[k]).exp()).collect();
    let mut seen = vec![0u64; hi - lo + 1];
    for i in 0..n {
        let k = pixel_poisson(seed, i as u64, mean) as usize;
        assert!((lo..=hi).contains(&k), "mean {mean}: a count of {k}, 10 σ out");
        seen[k - lo] += 1;
    }
    // bins of at least 20 expected counts, the tails merged in
    let (mut chi2, mut bins) = (0.0, 0usize);
    let (mut e, mut o) = (0.0, 0.0);
    for (p, &s) in pmf.iter().zip(&seen) {
        e += p * n as f64;
        o += s as f64;
        if e >= 20.0 {
            chi2 += (o - e) * (o - e) / e;
            bins += 1;
            (e, o) = (0.0, 0.0);
        }
    }
    if e > 0.0 {
        chi2 += (o - e) * (o - e) / e.max(1e-300);
    }
    // the cdf's largest gap
    let (mut cdf, mut ecdf, mut d) = (0.0f64, 0.0f64, 0.0f64);
    for (p, &s) in pmf.iter().zip(&seen) {
        cdf += p;
        ecdf += s as f64 / n as f64;
        d = d.max((cdf - ecdf).abs());
    }
    (chi2, bins.saturating_sub(1).max(1), d * (n as f64).sqrt())
}

#[test]
fn poisson_counts_follow_the_pmf() {
    let n = 200_000;
    for (mean, seed) in [(0.01, 1), (0.5, 2), (3.0, 3), (12.0, 4), (50.0, 5), (1e3, 6), (1e6, 7)] {
        let (chi2, dof, ks) = poisson_fit(mean, n, seed);
        let limit = dof as f64 + 7.0 * (2.0 * dof as f64).sqrt() + 25.0;
        eprintln!("mean {mean}: χ² {chi2:.1} on {dof} dof (limit {limit:.1}), √n·D {ks:.3}");
        assert!(chi2 < limit, "mean {mean}: χ² {chi2} on {dof} dof");
        assert!(ks < 1.95, "mean {mean}: √n·D = {ks}");
    }
}

/// A wrong count (each count one too many above the switch to PTRS) is
/// caught: the test above can fail.
#[test]
fn the_fit_tells_a_shifted_law_apart() {
    let (mean, n) = (50.0f64, 200_000);
    let sd = mean.sqrt();
    let hi = (mean + 10.0 * sd + 20.0) as usize;
    let lnf = ln_factorials(hi);
    let pmf = |k: usize| (-mean + k as f64 * mean.ln() - lnf[k]).exp();
    // the χ² of counts one too many
    let mut seen = vec![0u64; hi + 2];
    for i in 0..n {
        let k = pixel_poisson(9, i as u64, mean) as usize + 1;
        seen[k.min(hi + 1)] += 1;
    }
    let chi2: f64 = (0..=hi)
        .filter(|&k| pmf(k) * n as f64 >= 20.0)
        .map(|k| {
            let e = pmf(k) * n as f64;
            (seen[k] as f64 - e).powi(2) / e
        })
        .sum();
    assert!(chi2 > 1000.0, "a shifted law gives χ² {chi2}");
}

fn response(readout: f64) -> Response {
    Response {
        gain: 2.0,
        adc_offset: 1000.0,
        readout_noise: readout,
        flicker_noise: 0.0,
        calibration_noise: 0.0,
        psf: None,
        bits: Bits::U32,
    }
}

/// Mean and variance.
fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    (mean, v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n)
}

/// ADU = 2·Poisson(100) + 1000 + N(0, 7²), truncated: mean 1199.5 (the
/// truncation takes 0.5), variance 4·100 + 49 = 449; with 200 000 pixels
/// the standard errors are 0.05 and 1.4; tolerances 0.2 and 6.
#[test]
fn readout_noise_has_its_mean_and_variance() {
    let (w, h) = (500, 400);
    let photons = vec![100f32; w * h];
    let img = noisy_image_parallel(&photons, &PanelLayout::whole(w, h), &response(7.0), at(11), 12);
    let adu: Vec<f64> = img.pixels32.iter().map(|&p| f64::from(p)).collect();
    let (mean, var) = moments(&adu);
    eprintln!("read-out: mean {mean:.3}, variance {var:.2}");
    assert!((mean - 1199.5).abs() < 0.2, "mean {mean}");
    assert!((var - 449.0).abs() < 6.0, "variance {var}");
}

/// Pearson's r of two series.
fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let (ma, va) = moments(a);
    let (mb, vb) = moments(b);
    let cov = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum::<f64>() / a.len() as f64;
    cov / (va * vb).sqrt()
}

#[test]
fn neighbours_and_seeds_are_uncorrelated() {
    let n = 200_000;
    let limit = 5.0 / (n as f64).sqrt();
    // PTRS (mean 50, the pixels' own blocks) and inversion (mean 3, words of
    // shared blocks: neighbours and pixels 16 apart share a block)
    for mean in [50.0, 3.0] {
        let count = |seed: i64, i: usize| pixel_poisson(seed, i as u64, mean);
        let even: Vec<f64> = (0..n).map(|i| count(3, 2 * i)).collect();
        let odd: Vec<f64> = (0..n).map(|i| count(3, 2 * i + 1)).collect();
        let word_apart: Vec<f64> = (0..n).map(|i| count(3, 2 * i + 16)).collect();
        let other_seed: Vec<f64> = (0..n).map(|i| count(4, 2 * i)).collect();
        for (what, r) in [
            ("neighbours", correlation(&even, &odd)),
            ("16 apart", correlation(&even, &word_apart)),
            ("seeds 3 and 4", correlation(&even, &other_seed)),
        ] {
            eprintln!("mean {mean}, {what}: r = {r:.2e} (limit {limit:.2e})");
            assert!(r.abs() < limit, "mean {mean}, {what}: r = {r}");
        }
    }
    // normal deviates: neighbours, and a block's cosine against its sine
    // (pixels 16 apart)
    let g = |i: usize| pixel_gauss(8, i as u64, Purpose::Readout);
    let base: Vec<f64> = (0..n).map(|i| g(32 * (i / 16) + i % 16)).collect();
    let next: Vec<f64> = (0..n).map(|i| g(32 * (i / 16) + i % 16 + 1)).collect();
    let sine: Vec<f64> = (0..n).map(|i| g(32 * (i / 16) + i % 16 + 16)).collect();
    for (what, a, b) in [("normal neighbours", &base, &next), ("cosine and sine", &base, &sine)] {
        let r = correlation(a, b);
        eprintln!("{what}: r = {r:.2e} (limit {limit:.2e})");
        assert!(r.abs() < limit, "{what}: r = {r}");
    }
    // and their squares (Box–Muller's pair shares its radius): the
    // correlation of r²cos² and r²sin² is 0 for independent normals
    let sq = |v: &[f64]| v.iter().map(|x| x * x).collect::<Vec<_>>();
    let r = correlation(&sq(&base), &sq(&sine));
    assert!(r.abs() < limit, "squares of cosine and sine: r = {r}");
    // the uniforms of one pixel's successive blocks too
    let mut d = PixelDraws::new(5, 0, Purpose::Readout);
    let u: Vec<f64> = (0..2 * n).map(|_| d.uniform()).collect();
    let r = correlation(&u[..n], &u[1..=n]);
    assert!(r.abs() < limit, "successive uniforms: r = {r}");
}

/// The image for 1, 2 and 3 threads, and with the image cut into other
/// panels (no PSF: the panels change nothing then), is the same.
#[test]
fn the_image_depends_on_neither_threads_nor_tiles() {
    let (w, h) = (97, 61);
    let photons: Vec<f32> = (0..w * h).map(|i| (i % 251) as f32 * 0.37).collect();
    let r = Response { flicker_noise: 0.02, calibration_noise: 0.03, ..response(3.0) };
    let whole = PanelLayout::whole(w, h);
    let stacked = PanelLayout {
        width: w,
        height: h,
        origins: vec![[0, 0], [0, 20], [0, 45]],
        sizes: vec![[w, 20], [w, 25], [w, 16]],
    };
    let mut images = Vec::new();
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        for tiles in [&whole, &stacked] {
            let img = pool.install(|| noisy_image_parallel(&photons, tiles, &r, at(21), 22));
            let plain = pool.install(|| {
                noise_image_parallel(&photons, w, h, [0, w as i64, 0, h as i64], 40.0, at(21), true)
            });
            images.push((img.pixels32, img.photons, plain.0.pixels, plain.1, plain.0.photons));
        }
    }
    assert!(images.iter().all(|i| *i == images[0]), "an image differs");
    // and the noise differs from pixel to pixel
    let distinct: std::collections::HashSet<_> = images[0].2.iter().collect();
    assert!(distinct.len() > 50);
}
