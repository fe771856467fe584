//! The random streams the detector's noise is drawn from.
//!
//! - [`NoiseStream::C`]: nanoBragg.c's one serial `ran1` stream
//!   ([`crate::rng::NoiseRng`]), bit for bit the C programs' images: the
//!   default of the drop-in command lines.
//! - [`NoiseStream::Parallel`]: Philox4x32-10 ([`crate::philox`]) keyed by
//!   the seed and counted by the pixel's index in the written image and the
//!   draw's purpose ([`Purpose`]). A pixel's draws depend on nothing else, so
//!   the image is the same for any thread count and any split into tiles or
//!   panels, and rows are drawn in parallel.
//!
//! The parallel stream's deviates: a uniform in (0, 1) from 53 bits of a
//! block; Gaussians by Box–Muller (one per two uniforms); Poisson counts by
//! inversion below a mean of 10 and by Hörmann's transformed rejection with
//! squeeze (PTRS, 1993) above it.

use crate::philox::{philox4x32_10, philox4x32_10_lanes};

/// Pixels whose first blocks are drawn together ([`poisson_counts`],
/// [`gauss_row`]): two AVX-512 vectors of 32-bit words.
const LANES: usize = 32;

/// Which stream the noise is drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoiseStream {
    /// nanoBragg.c's serial `ran1` stream.
    #[default]
    C,
    /// Philox4x32-10, one counter per pixel.
    Parallel,
}

impl NoiseStream {
    /// The stream of a `-noise_rng` value.
    pub fn parse(name: &str) -> Option<NoiseStream> {
        match name {
            "c" => Some(NoiseStream::C),
            "parallel" => Some(NoiseStream::Parallel),
            _ => None,
        }
    }

    /// The `-noise_rng` value.
    pub fn name(self) -> &'static str {
        match self {
            NoiseStream::C => "c",
            NoiseStream::Parallel => "parallel",
        }
    }

    /// The stream and its generator's version, as the outputs record it: a
    /// change to the parallel stream's draws changes its version.
    pub fn label(self) -> &'static str {
        match self {
            NoiseStream::C => "c ran1",
            NoiseStream::Parallel => "parallel philox4x32-10 v2",
        }
    }
}

/// Where an image's draws come from in the `parallel` stream: the seed,
/// and the index its first pixel has in the written image (0 for the whole
/// image; a dataset's panel k starts after the pixels of panels 0..k).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelStream {
    /// The noise seed (`-seed`).
    pub seed: i64,
    /// The index of the image's first pixel.
    pub first_pixel: u64,
}

/// What a pixel's draws are for: each purpose counts its own blocks, so a
/// response term given or not changes no other term's draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The photon count.
    Poisson = 0,
    /// The source's flicker.
    Flicker = 1,
    /// The calibration error (keyed by the calibration seed).
    Calibration = 2,
    /// The read-out noise.
    Readout = 3,
}

/// The draws of one pixel for one purpose: blocks 0, 1, ... of the counter
/// (pixel, block, purpose), two uniforms a block.
#[derive(Debug, Clone)]
pub struct PixelDraws {
    key: [u32; 2],
    counter: [u32; 4],
    buf: [u32; 4],
    next: usize,
}

impl PixelDraws {
    /// The draws of pixel `pixel` (its index in the written image) for
    /// `purpose` under `seed`.
    #[inline]
    pub fn new(seed: i64, pixel: u64, purpose: Purpose) -> Self {
        let key = [seed as u32, (seed as u64 >> 32) as u32];
        let counter = [pixel as u32, (pixel >> 32) as u32, 0, purpose as u32];
        PixelDraws { key, counter, buf: [0; 4], next: 4 }
    }

    /// [`PixelDraws::new`] whose block 0 is `block` (drawn already, in a
    /// row's lanes): the same draws.
    #[inline]
    pub fn starting_with(seed: i64, pixel: u64, purpose: Purpose, block: [u32; 4]) -> Self {
        let mut d = PixelDraws::new(seed, pixel, purpose);
        d.buf = block;
        d.counter[2] = 1;
        d.next = 0;
        d
    }

    /// A uniform deviate in (0, 1): 53 bits, never 0 or 1.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        if self.next == 4 {
            self.buf = philox4x32_10(self.counter, self.key);
            self.counter[2] = self.counter[2].wrapping_add(1);
            self.next = 0;
        }
        let (hi, lo) = (self.buf[self.next], self.buf[self.next + 1]);
        self.next += 2;
        uniform_of(hi, lo)
    }

    /// A standard normal deviate (Box–Muller).
    #[inline]
    pub fn gauss(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        box_muller(u, v)
    }

    /// A Poisson count of mean `mean` (0 for a mean that is not positive).
    #[inline]
    pub fn poisson(&mut self, mean: f64) -> f64 {
        // (NaN too)
        if mean.is_nan() || mean <= 0.0 {
            return 0.0;
        }
        if mean < INVERSION_BELOW {
            let u = self.uniform();
            return inversion(u, mean, exp_neg(mean));
        }
        self.ptrs(mean)
    }

    /// Hörmann's PTRS for a mean of 10 or more.
    fn ptrs(&mut self, mean: f64) -> f64 {
        let log_mean = mean.ln();
        let c = PtrsConstants::of(mean);
        loop {
            let u = self.uniform() - 0.5;
            let v = self.uniform();
            let (k, squeezed) = c.try_draw(mean, u, v);
            if squeezed {
                return k;
            }
            let us = 0.5 - u.abs();
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            let accept = (v * c.inv_alpha / (c.a / (us * us) + c.b)).ln();
            if accept <= -mean + k * log_mean - ln_factorial(k) {
                return k;
            }
        }
    }
}

/// The constants of Hörmann's PTRS for one mean.
#[derive(Clone, Copy)]
struct PtrsConstants {
    a: f64,
    b: f64,
    inv_alpha: f64,
    v_r: f64,
}

impl PtrsConstants {
    #[inline(always)]
    fn of(mean: f64) -> Self {
        let b = 0.931 + 2.53 * mean.sqrt();
        let a = -0.059 + 0.02483 * b;
        let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
        let v_r = 0.9277 - 3.6224 / (b - 2.0);
        PtrsConstants { a, b, inv_alpha, v_r }
    }

    /// The candidate count of one try (`u` − ½ and `v` its uniforms), and
    /// whether the squeeze accepts it at once (most tries).
    #[inline(always)]
    fn try_draw(self, mean: f64, u: f64, v: f64) -> (f64, bool) {
        let us = 0.5 - u.abs();
        let k = ((2.0 * self.a / us + self.b) * u + mean + 0.43).floor();
        (k, us >= 0.07 && v <= self.v_r)
    }
}

/// The uniform deviate in (0, 1) of the words `hi`, `lo`: their top 53
/// bits plus ½, over 2⁵³. The bits become a double exactly (the top 52
/// through 2⁵²'s exponent, no integer conversion), which SIMD lanes do at
/// every level.
#[inline(always)]
fn uniform_of(hi: u32, lo: u32) -> f64 {
    let bits = ((u64::from(hi) << 32) | u64::from(lo)) >> 11;
    let half = f64::from_bits((bits >> 1) | 0x4330_0000_0000_0000) - 4_503_599_627_370_496.0;
    let whole = half * 2.0 + if bits & 1 != 0 { 1.0 } else { 0.0 };
    (whole + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// The Box–Muller normal deviate √(−2 ln u) cos 2πv, in plain arithmetic
/// ([`ln_unit`], [`cos_turns`]): the same bits at every SIMD level.
#[inline(always)]
fn box_muller(u: f64, v: f64) -> f64 {
    (-2.0 * ln_unit(u)).sqrt() * cos_turns(v)
}

/// ln x for 0 < x ≤ 1 (normal numbers) in plain multiplies and adds:
/// x = 2ᵉ·m with √½ ≤ m < √2, ln m = 2 atanh((m − 1)/(m + 1)) by its series
/// (to s¹⁹: remainder below 3e-17). Relative error below 1e-15 (absolute
/// 2e-16 near 1).
#[inline(always)]
fn ln_unit(x: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let bits = x.to_bits();
    let biased = (bits >> 52) & 0x7ff;
    let mantissa = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    let high = mantissa > std::f64::consts::SQRT_2;
    let m = if high { mantissa * 0.5 } else { mantissa };
    // the exponent as a double, exactly (through 2⁵²'s exponent)
    let e = f64::from_bits(0x4330_0000_0000_0000 | biased) - 4_503_599_627_370_496.0 - 1023.0
        + if high { 1.0 } else { 0.0 };
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    let mut series = 1.0 / 19.0;
    for d in [17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0, 1.0] {
        series = series * z + 1.0 / d;
    }
    e * LN2_HI + (e * LN2_LO + 2.0 * s * series)
}

/// cos 2πv for 0 ≤ v ≤ 1 in plain multiplies and adds: folded exactly
/// onto [0, ⅛] turn, where the cosine or sine series (to x¹⁶, x¹⁷) is
/// below 1e-17 from its sum. Absolute error below 5e-16.
#[inline(always)]
fn cos_turns(v: f64) -> f64 {
    // (every subtraction below is exact: Sterbenz)
    let t = if v > 0.5 { 1.0 - v } else { v };
    let flip = t > 0.25;
    let t = if flip { 0.5 - t } else { t };
    let sine = t > 0.125;
    let x = std::f64::consts::TAU * if sine { 0.25 - t } else { t };
    let x2 = x * x;
    let (mut c, mut sn) = (1.0 / 20_922_789_888_000.0, 1.0 / 355_687_428_096_000.0);
    for (dc, ds) in [
        (-87_178_291_200.0, -1_307_674_368_000.0),
        (479_001_600.0, 6_227_020_800.0),
        (-3_628_800.0, -39_916_800.0),
        (40_320.0, 362_880.0),
        (-720.0, -5_040.0),
        (24.0, 120.0),
        (-2.0, -6.0),
        (1.0, 1.0),
    ] {
        c = c * x2 + 1.0 / dc;
        sn = sn * x2 + 1.0 / ds;
    }
    let value = if sine { sn * x } else { c };
    if flip {
        -value
    } else {
        value
    }
}

/// Standard normal deviates of pixels `first`, `first + 1`, ... for
/// `purpose` under `seed`, into `out`: [`PixelDraws::gauss`] of each
/// pixel's draws (its block 0), [`LANES`] pixels at a time. Compiled for
/// AVX-512 and AVX2 too, chosen at run time; every version gives the same
/// deviates.
pub fn gauss_row(seed: i64, first: u64, purpose: Purpose, out: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { gauss_row_avx512(seed, first, purpose, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { gauss_row_avx2(seed, first, purpose, out) };
        }
    }
    gauss_row_any(seed, first, purpose, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gauss_row_avx512(seed: i64, first: u64, purpose: Purpose, out: &mut [f64]) {
    gauss_row_any(seed, first, purpose, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gauss_row_avx2(seed: i64, first: u64, purpose: Purpose, out: &mut [f64]) {
    gauss_row_any(seed, first, purpose, out)
}

#[inline(always)]
fn gauss_row_any(seed: i64, first: u64, purpose: Purpose, out: &mut [f64]) {
    for (at, o) in (first..).step_by(LANES).zip(out.chunks_mut(LANES)) {
        let w = lane_blocks(seed, at, purpose);
        let mut g = [0.0f64; LANES];
        for (i, g) in g.iter_mut().enumerate() {
            *g = box_muller(uniform_of(w[0][i], w[1][i]), uniform_of(w[2][i], w[3][i]));
        }
        o.copy_from_slice(&g[..o.len()]);
    }
}

/// Block 0 of pixels `at`, `at + 1`, ..., `at + LANES − 1`: `w[word][lane]`.
#[inline(always)]
fn lane_blocks(seed: i64, at: u64, purpose: Purpose) -> [[u32; LANES]; 4] {
    let key = [seed as u32, (seed as u64 >> 32) as u32];
    let pixel: [u64; LANES] = std::array::from_fn(|i| at + i as u64);
    let counters = [
        pixel.map(|p| p as u32),
        pixel.map(|p| (p >> 32) as u32),
        [0; LANES],
        [purpose as u32; LANES],
    ];
    philox4x32_10_lanes(counters, key)
}

/// The mean below which Poisson counts are drawn by inversion.
const INVERSION_BELOW: f64 = 10.0;

/// The Poisson count of mean `mean` (0 < mean < [`INVERSION_BELOW`]) for
/// the uniform `u` by inversion: the first k whose cumulative probability
/// passes `u`, from P(0) = `p0` = e^−mean.
#[inline]
fn inversion(u: f64, mean: f64, p0: f64) -> f64 {
    let (mut k, mut p, mut cdf) = (0.0, p0, p0);
    while u > cdf && p > 0.0 {
        k += 1.0;
        p *= mean / k;
        cdf += p;
    }
    k
}

/// e^−x for 0 ≤ x < 700 in plain multiplies and adds (no fused
/// multiply-add, no libm): the same bits at every SIMD level and on every
/// machine, so a pixel's count never depends on where it was drawn.
/// Relative error below 4e-16.
#[inline(always)]
pub(crate) fn exp_neg(x: f64) -> f64 {
    // round-to-nearest n = −x/ln 2 through the 1.5·2⁵² shifter, whose low
    // bits then hold n; ln 2 split so that n·LN2_HI is exact
    const SHIFTER: f64 = 6_755_399_441_055_744.0;
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let t = -x * std::f64::consts::LOG2_E + SHIFTER;
    let n = t - SHIFTER;
    let r = (-x - n * LN2_HI) - n * LN2_LO;
    // e^r for |r| ≤ ln 2 / 2: Taylor to r¹³ (remainder below 2e-17)
    let mut p = 1.0 / 6_227_020_800.0;
    for d in [
        479_001_600.0,
        39_916_800.0,
        3_628_800.0,
        362_880.0,
        40_320.0,
        5_040.0,
        720.0,
        120.0,
        24.0,
        6.0,
        2.0,
        1.0,
        1.0,
    ] {
        p = p * r + 1.0 / d;
    }
    let n_bits = t.to_bits().wrapping_sub(SHIFTER.to_bits());
    p * f64::from_bits(n_bits.wrapping_add(1023) << 52)
}

/// The `Poisson` counts of pixels `first`, `first + 1`, ... under `seed`,
/// whose means are `means`, into `out`: the counts of
/// [`PixelDraws::poisson`], [`LANES`] pixels at a time. The blocks, the
/// uniforms, e^−mean and the zero counts (nearly every pixel of a
/// diffraction image) are drawn in SIMD lanes; the other counts go on from
/// the same draws one pixel at a time. Compiled for AVX-512 and AVX2 too,
/// chosen at run time; every version gives the same counts.
///
/// # Panics
/// If `out` is shorter than `means`.
pub fn poisson_counts<M: Copy + Into<f64>>(seed: i64, first: u64, means: &[M], out: &mut [f64]) {
    assert!(out.len() >= means.len(), "{} counts for {} means", out.len(), means.len());
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { poisson_counts_avx512(seed, first, means, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { poisson_counts_avx2(seed, first, means, out) };
        }
    }
    poisson_counts_any(seed, first, means, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn poisson_counts_avx512<M: Copy + Into<f64>>(
    seed: i64,
    first: u64,
    means: &[M],
    out: &mut [f64],
) {
    poisson_counts_any(seed, first, means, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn poisson_counts_avx2<M: Copy + Into<f64>>(
    seed: i64,
    first: u64,
    means: &[M],
    out: &mut [f64],
) {
    poisson_counts_any(seed, first, means, out)
}

#[inline(always)]
fn poisson_counts_any<M: Copy + Into<f64>>(seed: i64, first: u64, means: &[M], out: &mut [f64]) {
    for (at, (m, o)) in (first..).step_by(LANES).zip(means.chunks(LANES).zip(out.chunks_mut(LANES)))
    {
        let w = lane_blocks(seed, at, Purpose::Poisson);
        let mut mean = [0.0f64; LANES];
        for (v, &x) in mean.iter_mut().zip(m) {
            *v = x.into();
        }
        // the uniform of words 0 and 1 (53 bits, exactly: the top 52
        // through 2⁵²'s exponent), e^−mean, and which counts are 0
        // and for a larger mean, PTRS's first try (words 2 and 3 its second
        // uniform), which its squeeze accepts most of the time
        let (mut u, mut p0, mut done) = ([0.0f64; LANES], [0.0f64; LANES], [0.0f64; LANES]);
        let mut count = [0.0f64; LANES];
        for i in 0..LANES {
            u[i] = uniform_of(w[0][i], w[1][i]);
            let x = mean[i];
            let small = x > 0.0 && x < INVERSION_BELOW;
            p0[i] = exp_neg(if small { x } else { 0.0 });
            // (a mean that is not positive, NaN included, counts 0)
            let positive = x > 0.0;
            done[i] = if !positive || (small && u[i] <= p0[i]) { 1.0 } else { 0.0 };
        }
        // (a diffraction image's pixels are mostly dim: PTRS's divisions
        // only where a lane needs them)
        if mean.iter().any(|&x| x >= INVERSION_BELOW) {
            for i in 0..LANES {
                let x = mean[i];
                let large = x >= INVERSION_BELOW;
                let c = PtrsConstants::of(if large { x } else { INVERSION_BELOW });
                let (k, squeezed) = c.try_draw(x, u[i] - 0.5, uniform_of(w[2][i], w[3][i]));
                count[i] = if large { k } else { 0.0 };
                if large && squeezed {
                    done[i] = 1.0;
                }
            }
        }
        // the inversions past k = 0 side by side, step for step as
        // `inversion` takes them (the same bits), until every lane has its k
        let inverting: [bool; LANES] =
            std::array::from_fn(|i| done[i] == 0.0 && mean[i] < INVERSION_BELOW);
        if inverting.iter().any(|&x| x) {
            let (mut p, mut cdf, mut going) = (p0, p0, inverting);
            while going.iter().any(|&x| x) {
                for i in 0..LANES {
                    // (`&`, not `&&`: no branch, so that the loop runs in lanes)
                    going[i] = going[i] & (u[i] > cdf[i]) & (p[i] > 0.0);
                    let k = count[i] + 1.0;
                    let next = p[i] * (mean[i] / k);
                    count[i] = if going[i] { k } else { count[i] };
                    p[i] = if going[i] { next } else { p[i] };
                    cdf[i] = if going[i] { cdf[i] + next } else { cdf[i] };
                }
            }
            for i in 0..LANES {
                done[i] = if inverting[i] { 1.0 } else { done[i] };
            }
        }
        for (i, c) in o.iter_mut().enumerate().take(m.len()) {
            *c = if done[i] != 0.0 {
                count[i]
            } else {
                let block = [w[0][i], w[1][i], w[2][i], w[3][i]];
                let pixel = at + i as u64;
                PixelDraws::starting_with(seed, pixel, Purpose::Poisson, block).ptrs(mean[i])
            };
        }
    }
}

/// ln k! for a whole number k ≥ 0: from the factorials below 20, Stirling's
/// series above (four terms: error below 1e-14).
fn ln_factorial(k: f64) -> f64 {
    const EXACT: usize = 20;
    if k < EXACT as f64 {
        let mut f = 1.0f64;
        for i in 2..=k as usize {
            f *= i as f64;
        }
        return f.ln();
    }
    let x = k + 1.0;
    let x2 = x * x;
    let half_ln_tau = 0.5 * std::f64::consts::TAU.ln();
    let series = 1.0 / (12.0 * x) - 1.0 / (360.0 * x * x2) + 1.0 / (1260.0 * x * x2 * x2)
        - 1.0 / (1680.0 * x * x2 * x2 * x2);
    (x - 0.5) * x.ln() - x + half_ln_tau + series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_is_libm_to_the_last_bits() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = i as f64 * 5e-5 + f64::from(i % 7) * 1e-9;
            let want = (-x).exp();
            worst = worst.max(((exp_neg(x) - want) / want).abs());
        }
        assert!(worst < 4e-16, "{worst}");
        assert_eq!(exp_neg(0.0), 1.0);
    }

    /// The row's lanes give each pixel's own count, on every branch: not
    /// positive, NaN, inversion at 0 and above, PTRS, and a row that ends
    /// inside a chunk of lanes.
    #[test]
    fn row_counts_are_the_pixels_own() {
        let means: Vec<f64> = (0..1000)
            .map(|i| match i % 9 {
                0 => 0.0,
                1 => -3.0,
                2 => f64::NAN,
                3 => 1e-3 * i as f64,
                4 => 0.7,
                5 => 9.999,
                6 => 10.0,
                7 => 250.0 + i as f64,
                _ => 3e6,
            })
            .collect();
        for len in [1000, 999, 37] {
            let mut out = vec![-1.0; len];
            poisson_counts(-77, 5_000_000_000, &means[..len], &mut out);
            for (i, (&m, &c)) in means.iter().zip(&out).enumerate() {
                let own =
                    PixelDraws::new(-77, 5_000_000_000 + i as u64, Purpose::Poisson).poisson(m);
                assert_eq!(c, own, "pixel {i}, mean {m}");
            }
        }
        let f32_means: Vec<f32> = means.iter().map(|&m| m as f32).collect();
        let (mut a, mut b) = (vec![0.0; 1000], vec![0.0; 1000]);
        poisson_counts(5, 0, &f32_means, &mut a);
        let widened: Vec<f64> = f32_means.iter().map(|&m| f64::from(m)).collect();
        poisson_counts(5, 0, &widened, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().filter(|&&c| c > 0.0).count() > 300);
    }

    #[test]
    fn plain_ln_and_cos_are_libm_to_the_last_bits() {
        let (mut worst_ln, mut worst_cos) = (0.0f64, 0.0f64);
        for i in 1..=400_000u64 {
            let u = uniform_of((i * 0x9e37_79b9) as u32, (i * 0x85eb_ca6b) as u32);
            for x in [u, u * 1e-9, i as f64 / 400_000.0] {
                let want = x.ln();
                worst_ln = worst_ln.max((ln_unit(x) - want).abs() / want.abs().max(1.0));
            }
            worst_cos = worst_cos.max((cos_turns(u) - (std::f64::consts::TAU * u).cos()).abs());
        }
        assert!(worst_ln < 1e-15, "ln {worst_ln}");
        assert!(worst_cos < 1e-15, "cos {worst_cos}");
        assert_eq!((ln_unit(1.0), cos_turns(0.0), cos_turns(0.5)), (0.0, 1.0, -1.0));
    }

    #[test]
    fn gauss_row_is_the_pixels_own() {
        for len in [100, 31] {
            let mut out = vec![0.0; len];
            gauss_row(-9, 77, Purpose::Readout, &mut out);
            for (i, &g) in out.iter().enumerate() {
                let own = PixelDraws::new(-9, 77 + i as u64, Purpose::Readout).gauss();
                assert_eq!(g, own, "pixel {i}");
            }
        }
    }

    #[test]
    fn ln_factorial_is_exact_enough() {
        let mut exact = 0.0f64;
        for k in 1..200u32 {
            exact += f64::from(k).ln();
            let got = ln_factorial(f64::from(k));
            assert!((got - exact).abs() < 1e-13 * exact.max(1.0), "{k}: {got} vs {exact}");
        }
    }

    #[test]
    fn uniforms_are_open_and_draws_are_the_pixels_own() {
        let mut d = PixelDraws::new(7, 12345, Purpose::Poisson);
        let first: Vec<f64> = (0..6).map(|_| d.uniform()).collect();
        assert!(first.iter().all(|&u| u > 0.0 && u < 1.0));
        // the same pixel again: the same draws; another pixel, purpose or seed: others
        let mut again = PixelDraws::new(7, 12345, Purpose::Poisson);
        assert!(first.iter().all(|&u| u == again.uniform()));
        for mut other in [
            PixelDraws::new(7, 12346, Purpose::Poisson),
            PixelDraws::new(7, 12345, Purpose::Readout),
            PixelDraws::new(8, 12345, Purpose::Poisson),
        ] {
            assert!(first[0] != other.uniform());
        }
    }
}
