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

/// Pixels whose first blocks are drawn together ([`first_blocks`]): two
/// AVX-512 vectors of 32-bit words.
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
            NoiseStream::Parallel => "parallel philox4x32-10 v1",
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

    /// [`PixelDraws::new`] whose block 0 is `block` (drawn already, by
    /// [`first_blocks`]): the same draws.
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
        let bits = ((u64::from(hi) << 32) | u64::from(lo)) >> 11;
        (bits as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal deviate (Box–Muller).
    #[inline]
    pub fn gauss(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// A Poisson count of mean `mean` (0 for a mean that is not positive).
    #[inline]
    pub fn poisson(&mut self, mean: f64) -> f64 {
        // (NaN too)
        if mean.is_nan() || mean <= 0.0 {
            return 0.0;
        }
        if mean < 10.0 {
            // inversion: the first k whose cumulative probability passes u
            let u = self.uniform();
            let (mut k, mut p) = (0.0, (-mean).exp());
            let mut cdf = p;
            while u > cdf && p > 0.0 {
                k += 1.0;
                p *= mean / k;
                cdf += p;
            }
            return k;
        }
        self.ptrs(mean)
    }

    /// Hörmann's PTRS for a mean of 10 or more.
    fn ptrs(&mut self, mean: f64) -> f64 {
        let log_mean = mean.ln();
        let b = 0.931 + 2.53 * mean.sqrt();
        let a = -0.059 + 0.02483 * b;
        let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
        let v_r = 0.9277 - 3.6224 / (b - 2.0);
        loop {
            let u = self.uniform() - 0.5;
            let v = self.uniform();
            let us = 0.5 - u.abs();
            let k = ((2.0 * a / us + b) * u + mean + 0.43).floor();
            if us >= 0.07 && v <= v_r {
                return k;
            }
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            let accept = (v * inv_alpha / (a / (us * us) + b)).ln();
            if accept <= -mean + k * log_mean - ln_factorial(k) {
                return k;
            }
        }
    }
}

/// Block 0 of the draws of pixels `first`, `first + 1`, ... for
/// `purpose` under `seed`, one per entry of `out`, [`LANES`] pixels at a
/// time (nearly every pixel's draws are its first block's): compiled for
/// AVX-512 and AVX2 too, chosen at run time. Every version gives the same
/// words (integer arithmetic).
pub fn first_blocks(seed: i64, first: u64, purpose: Purpose, out: &mut [[u32; 4]]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { first_blocks_avx512(seed, first, purpose, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { first_blocks_avx2(seed, first, purpose, out) };
        }
    }
    first_blocks_any(seed, first, purpose, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn first_blocks_avx512(seed: i64, first: u64, purpose: Purpose, out: &mut [[u32; 4]]) {
    first_blocks_any(seed, first, purpose, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn first_blocks_avx2(seed: i64, first: u64, purpose: Purpose, out: &mut [[u32; 4]]) {
    first_blocks_any(seed, first, purpose, out)
}

#[inline(always)]
fn first_blocks_any(seed: i64, first: u64, purpose: Purpose, out: &mut [[u32; 4]]) {
    let key = [seed as u32, (seed as u64 >> 32) as u32];
    for (chunk, at) in out.chunks_mut(LANES).zip((first..).step_by(LANES)) {
        let pixel: [u64; LANES] = std::array::from_fn(|i| at + i as u64);
        let counters = [
            pixel.map(|p| p as u32),
            pixel.map(|p| (p >> 32) as u32),
            [0; LANES],
            [purpose as u32; LANES],
        ];
        let blocks = philox4x32_10_lanes(counters, key);
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = [blocks[0][i], blocks[1][i], blocks[2][i], blocks[3][i]];
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
    fn first_blocks_are_the_pixels_own_draws() {
        let mut blocks = vec![[0u32; 4]; 21];
        first_blocks(-42, 1000, Purpose::Flicker, &mut blocks);
        for (i, b) in blocks.iter().enumerate() {
            let pixel = 1000 + i as u64;
            let mut fresh = PixelDraws::new(-42, pixel, Purpose::Flicker);
            let mut given = PixelDraws::starting_with(-42, pixel, Purpose::Flicker, *b);
            for _ in 0..5 {
                assert_eq!(fresh.uniform(), given.uniform(), "pixel {pixel}");
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
