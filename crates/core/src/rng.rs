//! The random number generators of nanoBragg.c, reproduced bit for bit.
//!
//! [`Ran1`] is the Park–Miller "minimal standard" linear congruential generator
//! with a Bays–Durham shuffle table (Numerical Recipes' `ran1`). [`NoiseRng`]
//! adds the Gaussian (`gaussdev`) and Poisson (`poidev`) deviates built on it.
//!
//! In the C program the shuffle table (`iy`, `iv`) and the cached values of
//! `gaussdev` and `poidev` are function-level statics shared by every caller in
//! the process, while `idum` (the seed word) is a separate variable per use
//! (misset, mosaic, noise). Here each piece of state lives in a struct; a caller
//! that needs to mimic the shared table across several seeds keeps one [`Ran1`]
//! and calls [`Ran1::reseed`] between uses. A non-positive seed word always
//! rebuilds the table, so the sharing only shows when a seed word is positive
//! (a negative user seed, since the C program stores minus the user's value).
//!
//! Arithmetic follows the C types exactly: where C keeps a `float` the value is
//! rounded to `f32` at the same point, and mixed `float`/`double` expressions
//! are evaluated in `f64` as C promotes them. Transcendentals call the same
//! system `libm` the C program links against.

use std::f64::consts::PI;

/// Multiplier of the Park–Miller generator (7^5).
pub const IA: i64 = 16807;
/// Modulus of the Park–Miller generator (2^31 - 1).
pub const IM: i64 = 2147483647;
/// Scale from an integer state to a deviate in (0, 1).
pub const AM: f64 = 1.0 / IM as f64;
/// Schrage's factorisation quotient: `IM / IA`.
pub const IQ: i64 = 127773;
/// Schrage's factorisation remainder: `IM % IA`.
pub const IR: i64 = 2836;
/// Length of the shuffle table.
pub const NTAB: usize = 32;
/// Divisor mapping a state to a shuffle-table slot.
pub const NDIV: i64 = 1 + (IM - 1) / NTAB as i64;
/// Distance of the largest deviate below 1.
pub const EPS: f64 = 1.2e-7;
/// Largest value returned by [`Ran1::ran1`] (before rounding to `f32`).
pub const RNMX: f64 = 1.0 - EPS;

/// State of nanoBragg.c's `ran1` uniform generator.
///
/// `idum` is the seed word the C program passes by pointer (`seed`,
/// `mosaic_seed`, `misset_seed`); `iy` and `iv` are the generator's static
/// shuffle table. The table is (re)built from `idum` whenever `idum <= 0` or
/// `iy == 0`, exactly as in C. Seed words are meaningful for `|idum| < 2^31`
/// (what `-atoi` can produce); outside that range the C program has undefined
/// behaviour and this port only guarantees not to panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran1 {
    /// The seed word, updated on every draw.
    pub idum: i64,
    /// The last value taken out of the shuffle table (0 = table not built yet).
    pub iy: i64,
    /// The shuffle table.
    pub iv: [i64; NTAB],
}

impl Ran1 {
    /// A generator with a fresh (unbuilt) table and seed word `idum`, held as
    /// the C program holds it: `-seed 1234` gives `idum = -1234`, and the default
    /// mosaic seed word is `-12345678`.
    pub fn new(idum: i64) -> Self {
        Self { idum, iy: 0, iv: [0; NTAB] }
    }

    /// Replace the seed word but keep the shuffle table, as happens in C when a
    /// different seed variable is passed to the same static generator.
    pub fn reseed(&mut self, idum: i64) {
        self.idum = idum;
    }

    /// One step of the Park–Miller recurrence on `idum` (Schrage's method).
    #[inline(always)]
    fn step(&mut self) {
        let k = self.idum / IQ;
        self.idum = IA
            .wrapping_mul(self.idum.wrapping_sub(k.wrapping_mul(IQ)))
            .wrapping_sub(IR.wrapping_mul(k));
        if self.idum < 0 {
            self.idum = self.idum.wrapping_add(IM);
        }
    }

    /// Uniform deviate in (0, 1): port of nanoBragg.c's `ran1`.
    ///
    /// On the first call (or whenever `idum <= 0`) the seed word is replaced by
    /// its negation (or by 1 if that is not positive, so any positive word on a
    /// fresh table acts as 1), the recurrence is warmed up for 8 steps and the
    /// next 32 states fill the shuffle table.
    pub fn ran1(&mut self) -> f32 {
        if self.idum <= 0 || self.iy == 0 {
            let neg = self.idum.wrapping_neg();
            self.idum = if neg < 1 { 1 } else { neg };
            for j in (0..NTAB + 8).rev() {
                self.step();
                if j < NTAB {
                    self.iv[j] = self.idum;
                }
            }
            self.iy = self.iv[0];
        }
        self.step();
        // For seed words in the documented range `iy` lies in [1, IM) and the
        // slot is in range; the clamp only keeps out-of-range words from panicking.
        let j = (self.iy / NDIV).clamp(0, NTAB as i64 - 1) as usize;
        self.iy = self.iv[j];
        self.iv[j] = self.idum;
        let temp = (AM * self.iy as f64) as f32;
        if temp as f64 > RNMX {
            RNMX as f32
        } else {
            temp
        }
    }
}

/// Natural log of the gamma function: port of nanoBragg.c's `gammln`
/// (Lanczos series, evaluated in `f64`, argument and result in `f32`).
#[allow(clippy::excessive_precision)]
pub fn gammln(xx: f32) -> f32 {
    const COF: [f64; 6] = [
        76.18009172947146,
        -86.50532032941677,
        24.01409824083091,
        -1.231739572450155,
        0.1208650973866179e-2,
        -0.5395239384953e-5,
    ];
    let x = xx as f64;
    let mut y = x;
    let mut tmp = x + 5.5;
    tmp -= (x + 0.5) * tmp.ln();
    let mut ser = 1.000000000190015;
    for c in COF {
        y += 1.0;
        ser += c / y;
    }
    (-tmp + (2.5066282746310005 * ser / x).ln()) as f32
}

/// The noise generators of nanoBragg.c: a [`Ran1`] plus the cached state of
/// `gaussdev` (the spare deviate) and `poidev` (constants for the last mean).
///
/// In C these caches are statics that live for the whole process; a fresh
/// `NoiseRng` matches a process that has not called `gaussdev`/`poidev` yet.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseRng {
    /// The uniform generator underneath.
    pub ran: Ran1,
    /// `gaussdev`: whether a spare deviate is waiting in `gset`.
    iset: bool,
    /// `gaussdev`: the spare deviate.
    gset: f32,
    /// `poidev`: `sqrt(2 xm)` for the rejection method.
    sq: f32,
    /// `poidev`: `ln(xm)`.
    alxm: f32,
    /// `poidev`: `exp(-xm)` (direct method) or `xm ln(xm) - lnΓ(xm+1)` (rejection).
    g: f32,
    /// `poidev`: the mean the cached constants belong to (-1 = none yet).
    oldm: f32,
}

impl NoiseRng {
    /// Fresh generators seeded with the seed word `idum` (C convention: minus
    /// the user's `-seed`).
    pub fn new(idum: i64) -> Self {
        Self::from_ran1(Ran1::new(idum))
    }

    /// Fresh `gaussdev`/`poidev` caches on top of an existing uniform generator
    /// (to carry a shuffle table over from earlier uses, see [`Ran1::reseed`]).
    pub fn from_ran1(ran: Ran1) -> Self {
        Self { ran, iset: false, gset: 0.0, sq: 0.0, alxm: 0.0, g: 0.0, oldm: -1.0 }
    }

    /// Uniform deviate in (0, 1) from the underlying [`Ran1`].
    #[inline]
    pub fn ran1(&mut self) -> f32 {
        self.ran.ran1()
    }

    /// Normal deviate with zero mean and unit variance: port of nanoBragg.c's
    /// `gaussdev` (polar Box–Muller; every other call returns the cached spare).
    pub fn gaussdev(&mut self) -> f32 {
        if self.iset {
            self.iset = false;
            return self.gset;
        }
        let (v1, v2, rsq) = loop {
            let v1 = (2.0 * self.ran1() as f64 - 1.0) as f32;
            let v2 = (2.0 * self.ran1() as f64 - 1.0) as f32;
            let rsq = v1 * v1 + v2 * v2;
            if !(rsq >= 1.0 || rsq == 0.0) {
                break (v1, v2, rsq);
            }
        };
        let fac = (-2.0 * (rsq as f64).ln() / rsq as f64).sqrt() as f32;
        self.gset = v1 * fac;
        self.iset = true;
        v2 * fac
    }

    /// Poisson deviate with mean `xm`: port of nanoBragg.c's `poidev`.
    ///
    /// Means above 1e6 use a Gaussian approximation, means below 12 multiply
    /// uniform deviates until the product drops below `exp(-xm)`, and the rest
    /// use rejection from a Lorentzian. The per-mean constants are cached and
    /// recomputed only when `xm` differs from the previous call's (any branch).
    // The loops end exactly when C's `while` condition is false, NaN included,
    // hence the negated comparisons.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn poidev(&mut self, xm: f32) -> f32 {
        if xm > 1.0e6 {
            return (xm as f64 + (xm as f64).sqrt() * self.gaussdev() as f64) as f32;
        }
        if xm < 12.0 {
            if xm != self.oldm {
                self.oldm = xm;
                self.g = ((-xm) as f64).exp() as f32;
            }
            let mut em: f32 = -1.0;
            let mut t: f32 = 1.0;
            loop {
                em += 1.0;
                t *= self.ran1();
                if !(t > self.g) {
                    break;
                }
            }
            em
        } else {
            if xm != self.oldm {
                self.oldm = xm;
                self.sq = (2.0 * xm as f64).sqrt() as f32;
                self.alxm = (xm as f64).ln() as f32;
                self.g = xm * self.alxm - gammln((xm as f64 + 1.0) as f32);
            }
            loop {
                let (y, em) = loop {
                    let y = (PI * self.ran1() as f64).tan() as f32;
                    let em = self.sq * y + xm;
                    if !(em < 0.0) {
                        break (y, em);
                    }
                };
                let em = (em as f64).floor() as f32;
                let expo = em * self.alxm - gammln((em as f64 + 1.0) as f32) - self.g;
                let t = (0.9 * (1.0 + (y * y) as f64) * (expo as f64).exp()) as f32;
                if !(self.ran1() > t) {
                    return em;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a over the little-endian bytes of each word, as the reference harness hashed.
    fn fnv(words: impl Iterator<Item = u32>) -> u64 {
        let mut h: u64 = 1469598103934665603;
        for w in words {
            for b in (w as u64).to_le_bytes() {
                h ^= b as u64;
                h = h.wrapping_mul(1099511628211);
            }
        }
        h
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn ran1_default_mosaic_seed() {
        let mut r = Ran1::new(-12345678);
        let got: Vec<f32> = (0..20).map(|_| r.ran1()).collect();
        let want: [u32; 20] = [
            0x3f4417e0, 0x3cc021e6, 0x3f16f853, 0x3f08fc6b, 0x3f7b7385, 0x3f316981, 0x3ea802de,
            0x3e975e59, 0x3f599438, 0x3f179e78, 0x3f0ee1c8, 0x3f08f0ee, 0x3f0a86ce, 0x3f1846de,
            0x3ed2021b, 0x3f6db899, 0x3e24e2a7, 0x3f6dc0db, 0x3f73baf8, 0x3f05ad21,
        ];
        assert_eq!(bits(&got), want);
        assert_eq!(r.idum, 1473579805);
        let h = fnv((0..1_000_000).map(|_| r.ran1().to_bits()));
        assert_eq!(h, 0x47af489cd7e930fd);
        assert_eq!(r.idum, 1297570536);
    }

    #[test]
    fn ran1_non_negative_seed_on_fresh_table_acts_as_one() {
        for seed in [0, 5, -1] {
            let mut r = Ran1::new(seed);
            let got: Vec<f32> = (0..3).map(|_| r.ran1()).collect();
            assert_eq!(bits(&got), [0x3ed4fdde, 0x3dbc5817, 0x3f41a41e], "seed {seed}");
            assert_eq!(r.idum, 1551901393);
            let h = fnv((0..1_000_000).map(|_| r.ran1().to_bits()));
            assert_eq!(h, 0xe3ed6da0e2f0d514);
            assert_eq!(r.idum, 876605846);
        }
    }

    #[test]
    fn ran1_reseed_keeps_table_for_positive_words() {
        let head = [0x3f2977cf, 0x3e0a26a4, 0x3d28145d, 0x3f70ac9b, 0x3ed272ff];
        // Positive seed word: the table built from -1234 stays in use.
        let mut r = Ran1::new(-1234);
        let a: Vec<f32> = (0..5).map(|_| r.ran1()).collect();
        assert_eq!(bits(&a), head);
        r.reseed(77);
        let b: Vec<f32> = (0..10).map(|_| r.ran1()).collect();
        assert_eq!(
            bits(&b),
            [
                0x3ef82759, 0x3e2e0582, 0x3ea66c60, 0x3e89d3bc, 0x3f0d68d7, 0x3f4c13d0, 0x3f78be8e,
                0x3e80e751, 0x3cbd0c91, 0x3f53f28b
            ]
        );
        assert_eq!(r.idum, 2085964656);
        // Negative seed word: the table is rebuilt.
        let mut r = Ran1::new(-1234);
        let a: Vec<f32> = (0..5).map(|_| r.ran1()).collect();
        assert_eq!(bits(&a), head);
        r.reseed(-99);
        let b: Vec<f32> = (0..10).map(|_| r.ran1()).collect();
        assert_eq!(
            bits(&b),
            [
                0x3f5f4260, 0x3e87f8b2, 0x3eea4b53, 0x3e29ee88, 0x3ee9e833, 0x3f150cdf, 0x3f7d9150,
                0x3e802d1d, 0x3f0b1aee, 0x3e9e0c4f
            ]
        );
        assert_eq!(r.idum, 439652522);
        assert_eq!(r, {
            let mut fresh = Ran1::new(-99);
            for _ in 0..10 {
                fresh.ran1();
            }
            fresh
        });
    }

    #[test]
    fn ran1_extreme_words_do_not_panic() {
        for seed in [i64::MIN, i64::MAX, -(1 << 40), 1 << 40] {
            let mut r = Ran1::new(seed);
            for _ in 0..1000 {
                let x = r.ran1();
                assert!(x.is_finite());
            }
        }
    }

    #[test]
    fn gammln_matches_c() {
        let xs = [0.5f32, 1.0, 1.5, 2.0, 7.25, 13.0, 50.5, 123.456, 1e6, 3e7];
        let want: [u32; 10] = [
            0x3f128682, 0x00000000, 0xbdf75cae, 0xa6000000, 0x40e1ab81, 0x419fe5d1, 0x431284ee,
            0x43eacd83, 0x4b438c91, 0x4de7fb5b,
        ];
        let got: Vec<u32> = xs.iter().map(|&x| gammln(x).to_bits()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn gaussdev_matches_c() {
        let mut g = NoiseRng::new(-1234);
        let got: Vec<f32> = (0..20).map(|_| g.gaussdev()).collect();
        let want: [u32; 20] = [
            0xbf5dce95, 0x3ec4d366, 0xbee36ca5, 0xc025092c, 0xbf0178ee, 0xbf7440fa, 0x3ec3fee9,
            0xbfd7e778, 0x3e57a94d, 0xbfd344c4, 0xbe8b34e0, 0x3f8b031e, 0xbb8f9bf1, 0x3ff8d520,
            0xbffeb708, 0xbf686e51, 0x3ea6acef, 0xc0078dc0, 0x3efc8377, 0xbf3c8a56,
        ];
        assert_eq!(bits(&got), want);
        let h = fnv((0..1_000_000).map(|_| g.gaussdev().to_bits()));
        assert_eq!(h, 0x5a715ddc3a4f760b);
        assert_eq!(g.ran.idum, 1990477456);
    }

    #[test]
    fn poidev_matches_c_per_mean() {
        let cases: [(f32, [u32; 20], i64); 4] = [
            (
                0.5,
                [
                    0x3f800000, 0x00000000, 0x3f800000, 0x00000000, 0x00000000, 0x00000000,
                    0x00000000, 0x00000000, 0x40000000, 0x00000000, 0x3f800000, 0x3f800000,
                    0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x3f800000,
                    0x00000000, 0x00000000,
                ],
                906929402,
            ),
            (
                5.0,
                [
                    0x40000000, 0x40a00000, 0x41100000, 0x40a00000, 0x40e00000, 0x40e00000,
                    0x40e00000, 0x40400000, 0x41000000, 0x40e00000, 0x41000000, 0x40c00000,
                    0x40400000, 0x40800000, 0x40a00000, 0x40800000, 0x40a00000, 0x40800000,
                    0x40c00000, 0x3f800000,
                ],
                1428286532,
            ),
            (
                50.0,
                [
                    0x425c0000, 0x42740000, 0x42700000, 0x42340000, 0x425c0000, 0x42640000,
                    0x42440000, 0x421c0000, 0x42540000, 0x42340000, 0x42400000, 0x42280000,
                    0x423c0000, 0x425c0000, 0x42480000, 0x42300000, 0x425c0000, 0x42400000,
                    0x424c0000, 0x420c0000,
                ],
                1807696652,
            ),
            (
                2e6,
                [
                    0x49f3fdb5, 0x49f434fd, 0x49f4105f, 0x49f3b20a, 0x49f40da6, 0x49f3f9d5,
                    0x49f434eb, 0x49f3d975, 0x49f42d4f, 0x49f3db0e, 0x49f417fc, 0x49f453ff,
                    0x49f423ce, 0x49f479ea, 0x49f3cc0e, 0x49f3fbe0, 0x49f43263, 0x49f3c665,
                    0x49f439cc, 0x49f40374,
                ],
                1474568345,
            ),
        ];
        for (xm, want, idum) in cases {
            let mut p = NoiseRng::new(-1234);
            let got: Vec<f32> = (0..20).map(|_| p.poidev(xm)).collect();
            assert_eq!(bits(&got), want, "xm = {xm}");
            assert_eq!(p.ran.idum, idum, "xm = {xm}");
        }
    }

    /// Means switching between all three branches (cache invalidation, the
    /// 12 and 1e6 boundaries) over a long run, hashed like the C harness did.
    #[test]
    fn poidev_matches_c_mixed_means() {
        fn mean(i: u32) -> f32 {
            match (i % 5, i % 3) {
                (0, 0) => return 5.0,
                (0, _) => return 500.0,
                _ => {}
            }
            match i % 7 {
                0 => 0.0,
                1 => (i % 13) as f32 * 0.93,
                2 => 12.0,
                3 => 11.99 + (i % 3) as f32 * 0.01,
                4 => (i % 1000) as f32 * 37.1,
                5 => {
                    if i % 2 == 1 {
                        1e6
                    } else {
                        1.0000001e6
                    }
                }
                _ => 2.5e6 + (i % 17) as f32,
            }
        }
        for (seed, hash, idum, total) in [
            (-1234, 0x953faf4171afe284u64, 1770286904, 120657429507.5),
            (-98765, 0xab7f08c54650ca21, 655353027, 120657428482.9375),
        ] {
            let mut p = NoiseRng::new(seed);
            let mut sum = 0.0f64;
            let h = fnv((0..300_000).map(|i| {
                let r = p.poidev(mean(i));
                sum += r as f64;
                r.to_bits()
            }));
            assert_eq!(h, hash, "seed {seed}");
            assert_eq!(p.ran.idum, idum);
            assert_eq!(sum, total);
        }
    }

    #[test]
    fn poidev_degenerate_means() {
        let mut p = NoiseRng::new(-5);
        // Non-positive means: exp(-xm) >= 1, so the first product already stops.
        assert_eq!(p.poidev(0.0), 0.0);
        assert_eq!(p.poidev(-3.0), 0.0);
        // NaN falls through to the rejection branch and comes back as NaN.
        assert!(p.poidev(f32::NAN).is_nan());
    }
}
