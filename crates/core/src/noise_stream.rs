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
//! The parallel stream's deviates (version 3):
//! - Poisson counts below a mean of 10 by inversion of one 32-bit uniform:
//!   pixel p takes word ⌊(p mod 64)/16⌋ of the *shared* block
//!   16·⌊p/64⌋ + (p mod 16), so that one block serves four pixels and 16
//!   blocks are one vector of each word. (A uniform of 32 bits moves the
//!   cumulative probabilities it is compared with by at most 2⁻³³.)
//! - Poisson counts from a mean of 10 by Hörmann's transformed rejection
//!   with squeeze (PTRS, 1993), from the pixel's own blocks 0, 1, ... (two
//!   uniforms of 53 bits a block).
//! - Normal deviates by Box–Muller, both of its pair used: pixel p takes
//!   the cosine (p mod 32 < 16) or the sine of the shared block
//!   16·⌊p/32⌋ + (p mod 16), whose words give two uniforms of 53 bits.
//!
//! A shared block's counter has [`SHARED`] in its last word, a pixel's own
//! block the purpose alone, so the two never meet.

use crate::philox::{philox4x32_10, philox4x32_10_x16, X16};
use crate::real::plain::{exp_neg, ln_unit, sincos_turns, sincos_turns_lanes};

/// The flag in the last counter word of the shared blocks.
pub const SHARED: u32 = 1 << 31;

/// Pixels whose first Poisson uniform comes from one group of 16 shared
/// blocks (four words each).
const POISSON_GROUP: usize = 4 * X16;

/// Pixels whose normal deviates come from one group of 16 shared blocks
/// (a cosine and a sine each).
const GAUSS_GROUP: usize = 2 * X16;

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
            NoiseStream::Parallel => "parallel philox4x32-10 v3",
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

/// The own draws of one pixel for one purpose: blocks 0, 1, ... of the
/// counter (pixel, block, purpose), two uniforms a block (PTRS's tries).
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
        let counter = [pixel as u32, (pixel >> 32) as u32, 0, purpose as u32];
        PixelDraws { key: key_of(seed), counter, buf: [0; 4], next: 4 }
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

/// The Philox key of a seed.
#[inline(always)]
fn key_of(seed: i64) -> [u32; 2] {
    [seed as u32, (seed as u64 >> 32) as u32]
}

/// The counter of shared block `n` for `purpose`.
#[inline(always)]
fn shared_counter(n: u64, purpose: Purpose) -> [u32; 4] {
    [n as u32, (n >> 32) as u32, 0, purpose as u32 | SHARED]
}

/// The 16 shared blocks 16·`group` + lane for `purpose`: `w[word][lane]`.
#[inline(always)]
fn shared_blocks(key: [u32; 2], group: u64, purpose: Purpose) -> [[u32; X16]; 4] {
    blocks_x16(key, group * X16 as u64, purpose as u32 | SHARED)
}

/// Block 0 of the own draws of pixels `at`, ..., `at` + 15: `w[word][lane]`.
#[inline(always)]
fn own_blocks(key: [u32; 2], at: u64, purpose: Purpose) -> [[u32; X16]; 4] {
    blocks_x16(key, at, purpose as u32)
}

/// The blocks of counters (`n` + lane, 0, `last`) for the 16 lanes.
#[inline(always)]
fn blocks_x16(key: [u32; 2], n: u64, last: u32) -> [[u32; X16]; 4] {
    let n: [u64; X16] = std::array::from_fn(|l| n + l as u64);
    let counters = [
        std::array::from_fn(|l| n[l] as u32),
        std::array::from_fn(|l| (n[l] >> 32) as u32),
        [0; X16],
        [last; X16],
    ];
    philox4x32_10_x16(&counters, key)
}

/// The uniform deviate in (0, 1) of one word: (w + ½)/2³², exactly.
#[inline(always)]
fn uniform32(w: u32) -> f64 {
    (f64::from(w) + 0.5) * (1.0 / 4_294_967_296.0)
}

/// The standard normal deviate of pixel `pixel` for `purpose` under
/// `seed`: the cosine or the sine of Box–Muller on its shared block (see
/// the module's notes). [`gauss_row`] gives the same deviates in lanes.
pub fn pixel_gauss(seed: i64, pixel: u64, purpose: Purpose) -> f64 {
    let at = (pixel % GAUSS_GROUP as u64) as usize;
    let n = pixel / GAUSS_GROUP as u64 * X16 as u64 + (at % X16) as u64;
    let b = philox4x32_10(shared_counter(n, purpose), key_of(seed));
    let r = (-2.0 * ln_unit(uniform_of(b[0], b[1]))).sqrt();
    let (sin, cos) = sincos_turns(uniform_of(b[2], b[3]));
    r * if at < X16 { cos } else { sin }
}

/// The Poisson count of pixel `pixel` under `seed` whose mean is `mean`
/// (0 for a mean that is not positive, NaN included): inversion of its
/// shared word below a mean of 10, PTRS on its own draws above (see the
/// module's notes). [`poisson_counts`] gives the same counts in lanes.
pub fn pixel_poisson(seed: i64, pixel: u64, mean: f64) -> f64 {
    if mean.is_nan() || mean <= 0.0 {
        return 0.0;
    }
    if mean < INVERSION_BELOW {
        let at = (pixel % POISSON_GROUP as u64) as usize;
        let n = pixel / POISSON_GROUP as u64 * X16 as u64 + (at % X16) as u64;
        let b = philox4x32_10(shared_counter(n, Purpose::Poisson), key_of(seed));
        let u = uniform32(b[at / X16]);
        if below_line(u, mean) {
            return 0.0;
        }
        return inversion(u, mean, exp_neg(mean));
    }
    PixelDraws::new(seed, pixel, Purpose::Poisson).ptrs(mean)
}

/// Standard normal deviates of pixels `first`, `first + 1`, ... for
/// `purpose` under `seed`, into `out`: [`pixel_gauss`] of each, a group of
/// 32 pixels (16 blocks) at a time. Compiled for AVX-512 and AVX2 too,
/// chosen at run time; every version gives the same deviates.
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
    let key = key_of(seed);
    for_each_group(first, out.len(), GAUSS_GROUP, |done, group, start, take| {
        let w = shared_blocks(key, group, purpose);
        let (mut u, mut v) = ([0.0f64; X16], [0.0f64; X16]);
        for l in 0..X16 {
            u[l] = uniform_of(w[0][l], w[1][l]);
            v[l] = uniform_of(w[2][l], w[3][l]);
        }
        let mut r = [0.0f64; X16];
        for l in 0..X16 {
            r[l] = (-2.0 * ln_unit(u[l])).sqrt();
        }
        let (sin, cos) = sincos_turns_lanes(&v);
        let mut g = [0.0f64; GAUSS_GROUP];
        for l in 0..X16 {
            g[l] = r[l] * cos[l];
            g[X16 + l] = r[l] * sin[l];
        }
        out[done..done + take].copy_from_slice(&g[start..start + take]);
    });
}

/// Walks pixels `first`, ..., `first + len − 1` by the groups of `size`
/// pixels they fall in: `each(done, group, start, run)` for the `run`
/// pixels from the group's pixel `start`, which are the walk's pixels
/// `done`, `done + 1`, ...
#[inline(always)]
fn for_each_group(
    first: u64,
    len: usize,
    size: usize,
    mut each: impl FnMut(usize, u64, usize, usize),
) {
    let mut done = 0;
    while done < len {
        let p = first + done as u64;
        let (group, start) = (p / size as u64, (p % size as u64) as usize);
        let run = (size - start).min(len - done);
        each(done, group, start, run);
        done += run;
    }
}

/// The mean below which Poisson counts are drawn by inversion.
const INVERSION_BELOW: f64 = 10.0;

/// Whether the uniform `u` gives a count of 0 for a `mean` below
/// [`INVERSION_BELOW`] without e^−mean: u ≤ 1 − mean ≤ e^−mean. Most pixels
/// of a diffraction image stop here.
#[inline(always)]
fn below_line(u: f64, mean: f64) -> bool {
    u <= 1.0 - mean
}

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

/// The `Poisson` counts of pixels `first`, `first + 1`, ... under `seed`,
/// whose means are `means`, into `out`: [`pixel_poisson`] of each, a group
/// of 64 pixels (16 shared blocks) at a time. The blocks, the uniforms,
/// e^−mean, the inversions and PTRS's first tries are drawn in SIMD lanes;
/// the tries its squeeze rejects go on one pixel at a time. Compiled for AVX-512 and AVX2 too,
/// chosen at run time; every version gives the same counts.
///
/// # Panics
/// If `out` is shorter than `means`.
pub fn poisson_counts<M: Copy + Into<f64>>(seed: i64, first: u64, means: &[M], out: &mut [f64]) {
    assert!(out.len() >= means.len(), "{} counts for {} means", out.len(), means.len());
    poisson_runs(seed, first, means, |at, counts| {
        out[at..at + counts.len()].copy_from_slice(counts);
    });
}

/// [`poisson_counts`] handed to `take` a run at a time: `take(at, counts)`
/// gets the counts of `means[at..at + counts.len()]`, runs in order, up to
/// 64 at a time. `take` is compiled into each SIMD version, so what it does
/// with the counts (a conversion to pixels, say) is vectorised with them.
pub fn poisson_runs<M, F>(seed: i64, first: u64, means: &[M], take: F)
where
    M: Copy + Into<f64>,
    F: FnMut(usize, &[f64]),
{
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { poisson_runs_avx512(seed, first, means, take) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { poisson_runs_avx2(seed, first, means, take) };
        }
    }
    poisson_runs_any(seed, first, means, take)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn poisson_runs_avx512<M: Copy + Into<f64>, F: FnMut(usize, &[f64])>(
    seed: i64,
    first: u64,
    means: &[M],
    take: F,
) {
    poisson_runs_any(seed, first, means, take)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn poisson_runs_avx2<M: Copy + Into<f64>, F: FnMut(usize, &[f64])>(
    seed: i64,
    first: u64,
    means: &[M],
    take: F,
) {
    poisson_runs_any(seed, first, means, take)
}

#[inline(always)]
fn poisson_runs_any<M, F>(seed: i64, first: u64, means: &[M], mut take: F)
where
    M: Copy + Into<f64>,
    F: FnMut(usize, &[f64]),
{
    let key = key_of(seed);
    for_each_group(first, means.len(), POISSON_GROUP, |done, group, start, run| {
        let mut mean = [0.0f64; POISSON_GROUP];
        for (v, &x) in mean[start..start + run].iter_mut().zip(&means[done..done + run]) {
            *v = x.into();
        }
        let counts = poisson_group(seed, key, group, &mean);
        take(done, &counts[start..start + run]);
    });
}

/// The counts of the 64 pixels of `group` whose means are `mean` (0 where
/// a mean is 0 or not given).
#[inline(always)]
fn poisson_group(
    seed: i64,
    key: [u32; 2],
    group: u64,
    mean: &[f64; POISSON_GROUP],
) -> [f64; POISSON_GROUP] {
    const N: usize = POISSON_GROUP;
    let mut count = [0.0f64; N];
    // (a mean that is not positive, NaN included, counts 0)
    let small: [bool; N] = std::array::from_fn(|i| mean[i] > 0.0 && mean[i] < INVERSION_BELOW);
    if small.iter().any(|&s| s) {
        // the shared words in pixel order: word w of lane l is pixel 16w + l
        let w = shared_blocks(key, group, Purpose::Poisson);
        let mut u = [0.0f64; N];
        for i in 0..N {
            u[i] = uniform32(w[i / X16][i % X16]);
        }
        // e^−mean only for the vectors of 8 lanes that need it: a dim
        // pixel's count is 0 at once where u ≤ 1 − mean
        let past: [bool; N] = std::array::from_fn(|i| small[i] & !below_line(u[i], mean[i]));
        let mut p0 = [1.0f64; N];
        for v in 0..N / 8 {
            if past[8 * v..8 * v + 8].iter().any(|&x| x) {
                for i in 8 * v..8 * v + 8 {
                    p0[i] = exp_neg(if small[i] { mean[i] } else { 0.0 });
                }
            }
        }
        // the inversions side by side, step for step as `inversion` takes
        // them (the same bits), until every lane has its k
        let mut going: [bool; N] = std::array::from_fn(|i| past[i] & (u[i] > p0[i]));
        let (mut p, mut cdf) = (p0, p0);
        while going.iter().any(|&g| g) {
            for i in 0..N {
                // (`&`, not `&&`: no branch, so that the loop runs in lanes)
                let k = count[i] + 1.0;
                let next = p[i] * (mean[i] / k);
                count[i] = if going[i] { k } else { count[i] };
                p[i] = if going[i] { next } else { p[i] };
                cdf[i] = if going[i] { cdf[i] + next } else { cdf[i] };
                going[i] = going[i] & (u[i] > cdf[i]) & (p[i] > 0.0);
            }
        }
    }
    // PTRS's first try in lanes, 16 pixels' own blocks at a time, where a
    // mean is large; its squeeze accepts most tries
    let first = group * N as u64;
    for c in 0..N / X16 {
        let lanes = c * X16..(c + 1) * X16;
        if !mean[lanes.clone()].iter().any(|&x| x >= INVERSION_BELOW) {
            continue;
        }
        let w = own_blocks(key, first + (c * X16) as u64, Purpose::Poisson);
        let mut accepted = [false; X16];
        for l in 0..X16 {
            let x = mean[c * X16 + l];
            let large = x >= INVERSION_BELOW;
            let ptrs = PtrsConstants::of(if large { x } else { INVERSION_BELOW });
            let u = uniform_of(w[0][l], w[1][l]) - 0.5;
            let (k, squeezed) = ptrs.try_draw(x, u, uniform_of(w[2][l], w[3][l]));
            if large {
                count[c * X16 + l] = k;
            }
            accepted[l] = squeezed;
        }
        for l in 0..X16 {
            let (i, x) = (c * X16 + l, mean[c * X16 + l]);
            if x >= INVERSION_BELOW && !accepted[l] {
                let block = [w[0][l], w[1][l], w[2][l], w[3][l]];
                let mut own =
                    PixelDraws::starting_with(seed, first + i as u64, Purpose::Poisson, block);
                count[i] = own.ptrs(x);
            }
        }
    }
    count
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
        // (rows that start and end inside a group of 64 pixels, too)
        for (first, len) in [(5_000_000_000, 1000), (5_000_000_003, 999), (61, 37), (7, 3)] {
            let mut out = vec![-1.0; len];
            poisson_counts(-77, first, &means[..len], &mut out);
            for (i, (&m, &c)) in means.iter().zip(&out).enumerate() {
                let own = pixel_poisson(-77, first + i as u64, m);
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
    fn gauss_row_is_the_pixels_own() {
        for (first, len) in [(77, 100), (64, 31), (5, 2)] {
            let mut out = vec![0.0; len];
            gauss_row(-9, first, Purpose::Readout, &mut out);
            for (i, &g) in out.iter().enumerate() {
                let own = pixel_gauss(-9, first + i as u64, Purpose::Readout);
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
