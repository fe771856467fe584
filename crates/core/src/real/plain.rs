//! Elementary functions of f64 in plain multiplies and adds: no fused
//! multiply-add and no libm, written as loops over lanes without branches.
//! They give the same bits at every SIMD level and on every machine, so a
//! noise draw or a structure factor never depends on where it was computed.

use std::f64::consts::PI;

/// e^−x for 0 ≤ x < 700 in plain multiplies and adds (no fused
/// multiply-add, no libm): the same bits at every SIMD level and on every
/// machine, so a pixel's count never depends on where it was drawn.
/// Relative error below 4e-16.
#[inline(always)]
pub fn exp_neg(x: f64) -> f64 {
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

/// ln x for 0 < x ≤ 1 (normal numbers) in plain multiplies and adds:
/// x = 2ᵉ·m with √½ ≤ m < √2, ln m = 2 atanh((m − 1)/(m + 1)) by its series
/// (to s¹⁹: remainder below 3e-17). Relative error below 1e-15 (absolute
/// 2e-16 near 1).
#[inline(always)]
pub fn ln_unit(x: f64) -> f64 {
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

/// Adding and subtracting 1.5·2⁵² rounds an f64 below 2⁵¹ to a whole
/// number; the sum's low bits hold that number in two's complement.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// `(sin 2πx, cos 2πx)` to within a few units of the last place, for
/// |x| < 2⁴⁹: the phase reduced to an eighth of a turn, then Taylor series.
/// Several times faster than the library's `sin_cos` of an angle in
/// radians, which must first reduce arbitrarily large arguments.
#[inline(always)]
pub fn sincos_turns(x: f64) -> (f64, f64) {
    let (s, c) = sincos_turns_lanes(&[x; 1]);
    (s[0], c[0])
}

/// [`sincos_turns`] of every lane, written as loops over the lanes with no
/// branch so that the compiler vectorises them.
#[inline(always)]
pub fn sincos_turns_lanes<const N: usize>(x: &[f64; N]) -> ([f64; N], [f64; N]) {
    // quarter turns, rounded: the remainder is within an eighth of a turn
    let mut shifted = [0.0; N];
    for l in 0..N {
        shifted[l] = 4.0 * x[l] + ROUND;
    }
    let (mut s, mut c) = ([0.0; N], [0.0; N]);
    for l in 0..N {
        let theta = (x[l] - 0.25 * (shifted[l] - ROUND)) * (2.0 * PI);
        let t2 = theta * theta;
        s[l] = theta
            * (1.0
                + t2 * (-1.0 / 6.0
                    + t2 * (1.0 / 120.0
                        + t2 * (-1.0 / 5040.0
                            + t2 * (1.0 / 362880.0
                                + t2 * (-1.0 / 39916800.0
                                    + t2 * (1.0 / 6227020800.0
                                        + t2 * (-1.0 / 1307674368000.0))))))));
        c[l] = 1.0
            + t2 * (-0.5
                + t2 * (1.0 / 24.0
                    + t2 * (-1.0 / 720.0
                        + t2 * (1.0 / 40320.0
                            + t2 * (-1.0 / 3628800.0
                                + t2 * (1.0 / 479001600.0
                                    + t2 * (-1.0 / 87178291200.0
                                        + t2 * (1.0 / 20922789888000.0))))))));
    }
    // a quarter turn q on: (s, c) → (c, −s) → (−s, −c) → (−c, s), by
    // masks on the bits
    let (mut sin, mut cos) = ([0.0; N], [0.0; N]);
    for l in 0..N {
        let q = shifted[l].to_bits();
        let swap = 0u64.wrapping_sub(q & 1);
        let (sb, cb) = (s[l].to_bits(), c[l].to_bits());
        let (sn, cn) = ((sb & !swap) | (cb & swap), (cb & !swap) | (sb & swap));
        sin[l] = f64::from_bits(sn ^ ((q & 2) << 62));
        cos[l] = f64::from_bits(cn ^ ((q.wrapping_add(1) & 2) << 62));
    }
    (sin, cos)
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

    #[test]
    fn ln_unit_is_libm_to_the_last_bits() {
        let mut worst = 0.0f64;
        for i in 1..=400_000u64 {
            let u = ((i * 0x9e37_79b9) as u32 as f64 + 0.5) / 4_294_967_296.0;
            for x in [u, u * 1e-9, i as f64 / 400_000.0] {
                let want = x.ln();
                worst = worst.max((ln_unit(x) - want).abs() / want.abs().max(1.0));
            }
        }
        assert!(worst < 1e-15, "ln {worst}");
        assert_eq!(ln_unit(1.0), 0.0);
    }

    #[test]
    fn sincos_turns_is_the_library_sin_cos() {
        let mut worst: f64 = 0.0;
        for i in -20000..=20000 {
            let x = i as f64 * 0.000731 + 1e-3 * (i as f64).sin();
            let (s, c) = sincos_turns(x);
            // (reduced to a turn first, exactly, so that rounding 2πx does
            // not make the reference the less accurate of the two)
            let (ws, wc) = (2.0 * PI * (x - x.round())).sin_cos();
            worst = worst.max((s - ws).abs()).max((c - wc).abs());
        }
        assert!(worst < 2e-16 * 4.0, "worst {worst:e}");
        assert_eq!(sincos_turns(0.25), (1.0, 0.0));
        assert_eq!(sincos_turns(-0.5), (0.0, -1.0));
    }
}
