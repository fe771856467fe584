//! Fast elementary functions, written once against [`Num`] so that every
//! number type (scalar or SIMD) runs the same branch-free code.
//!
//! Polynomials are evaluated with [`Num::mul_add`]; the coefficients are
//! near-minimax fits (Chebyshev interpolation in 50-digit arithmetic) and the
//! degree follows the lane precision ([`Real::MANTISSA_DIGITS`]). Measured
//! worst errors (against 50-digit references, over dense grids):
//!
//! | function | f64 lanes | f32 lanes |
//! |---|---|---|
//! | [`sinpi_small`], \|x\| ≤ 1/2 | 3e-16 relative | 1.4e-7 relative |
//! | [`cospi_small`], \|x\| ≤ 1/2 | 3e-16 relative | 1.4e-7 relative |
//! | [`sinpi`], [`cospi`] | as above, plus nothing: the reduction `x - round(x)` is exact | |
//! | [`sin_cos`] | 3e-16 · max(1, \|x\|) absolute | 1.2e-7 · max(1, \|x\|) absolute |
//! | [`exp`] | 3e-16 relative (0 below e^-708) | 2e-7 relative (0 below e^-87) |

use super::{Num, Real};

/// sin(πx)/x as a polynomial in x² on \[0, 1/4\], f64 precision (degree 8).
const SINPI_F64: [f64; 9] = [
    std::f64::consts::PI,
    -5.167712780049969,
    2.5501640398773007,
    -0.5992645293189447,
    0.0821458865731029,
    -0.007370430505916944,
    0.0004662998161898394,
    -2.1903497074626018e-05,
    7.697826768224191e-07,
];

/// sin(πx)/x as a polynomial in x² on \[0, 1/4\], f32 precision (degree 4).
const SINPI_F32: [f64; 5] =
    [3.14159264008, -5.16771007667, 2.55007738653, -0.598290411283, 0.077655912276];

/// exp(r) on \[-ln2/2, ln2/2\], f64 precision (degree 11).
const EXP_F64: [f64; 12] = [
    1.0,
    1.0,
    0.5000000000000019,
    0.1666666666666668,
    0.0416666666664881,
    0.008333333333319601,
    0.0013888888952314775,
    0.00019841269890047113,
    2.4801485482328494e-05,
    2.755724091857897e-06,
    2.763263963904103e-07,
    2.5110037605963777e-08,
];

/// exp(r) on \[-ln2/2, ln2/2\], f32 precision (degree 6).
const EXP_F32: [f64; 7] = [
    1.0,
    1.000000037716214,
    0.5000000047117757,
    0.16666415514653277,
    0.04166635289677516,
    0.008375126398153335,
    0.0013941108433972674,
];

#[inline(always)]
fn wide<V: Num>() -> bool {
    V::Scalar::MANTISSA_DIGITS > 24
}

/// Horner evaluation of `c[0] + c[1] u + c[2] u² + ...`.
#[inline(always)]
fn horner<V: Num>(u: V, c: &[f64]) -> V {
    let mut p = V::c(c[c.len() - 1]);
    for &k in c[..c.len() - 1].iter().rev() {
        p = p.mul_add(u, V::c(k));
    }
    p
}

/// sin(πx) for |x| ≤ 1/2 (no range reduction; odd, exact at 0).
#[inline(always)]
pub fn sinpi_small<V: Num>(x: V) -> V {
    let u = x * x;
    let p = if wide::<V>() { horner(u, &SINPI_F64) } else { horner(u, &SINPI_F32) };
    x * p
}

/// cos(πx) for |x| ≤ 1/2, as sin(π(1/2 − |x|)) (accurate relative to the
/// result also near x = ±1/2).
#[inline(always)]
pub fn cospi_small<V: Num>(x: V) -> V {
    sinpi_small(V::c(0.5) - x.abs())
}

/// sin(πx) for any x below 2^51 (f64) or 2^22 (f32) in magnitude.
#[inline(always)]
pub fn sinpi<V: Num>(x: V) -> V {
    let n = x.round();
    sinpi_small(x - n).negate_if_odd(n)
}

/// cos(πx) for any x below 2^51 (f64) or 2^22 (f32) in magnitude.
#[inline(always)]
pub fn cospi<V: Num>(x: V) -> V {
    let n = x.round();
    cospi_small(x - n).negate_if_odd(n)
}

/// (sin x, cos x) in radians, reduced by multiples of π (the reduction
/// x/π is rounded once, so the absolute error grows with |x|).
#[inline(always)]
pub fn sin_cos<V: Num>(x: V) -> (V, V) {
    let t = x * V::c(std::f64::consts::FRAC_1_PI);
    let n = t.round();
    let f = t - n;
    (sinpi_small(f).negate_if_odd(n), cospi_small(f).negate_if_odd(n))
}

/// e^x; results below the smallest normal number are flushed to 0, above
/// the largest finite number give +inf, NaN gives NaN.
#[inline(always)]
pub fn exp<V: Num>(x: V) -> V {
    // Cody-Waite split of ln 2 (the high parts have trailing zero bits, so
    // n * LN2_HI is exact for every n in range).
    let (lo, hi, ln2_hi, ln2_lo, poly): (f64, f64, f64, f64, &[f64]) = if wide::<V>() {
        (-708.39, 709.0, 6.931_471_803_691_238e-1, 1.908_214_929_270_587_7e-10, &EXP_F64)
    } else {
        (-87.33, 88.0, 0.693_145_751_953_125, 1.428_606_765_330_187e-6, &EXP_F32)
    };
    let under = x.cmp_lt(V::c(lo));
    let over = x.cmp_gt(V::c(hi));
    let xc = V::select(under | over, V::zero(), x);
    let n = (xc * V::c(std::f64::consts::LOG2_E)).round();
    let r = n.mul_add(V::c(-ln2_hi), xc);
    let r = n.mul_add(V::c(-ln2_lo), r);
    let e = horner(r, poly).mul_pow2(n);
    V::select(under, V::zero(), V::select(over, V::c(f64::INFINITY), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        if b == 0.0 {
            a.abs()
        } else {
            ((a - b) / b).abs()
        }
    }

    #[test]
    fn sinpi_cospi_accuracy() {
        let mut worst64: f64 = 0.0;
        let mut worst32: f64 = 0.0;
        for i in 0..=20_000 {
            let x = -0.5 + i as f64 / 20_000.0;
            let s = (std::f64::consts::PI * x).sin();
            worst64 = worst64.max(rel(sinpi_small(x), s));
            worst32 = worst32.max(rel(
                sinpi_small(x as f32) as f64,
                (x as f32 as f64 * std::f64::consts::PI).sin(),
            ));
            // the reference cos(pi x) is only accurate to ~1e-16 absolute
            let c = (std::f64::consts::PI * x).cos();
            worst64 = worst64.max((cospi_small(x) - c).abs());
        }
        assert!(worst64 < 1e-15, "{worst64}");
        assert!(worst32 < 3e-7, "{worst32}");
        // reduction: sin(pi (n + f)) = (-1)^n sin(pi f)
        for &(x, want) in
            &[(2.25f64, 0.5f64.sqrt()), (-3.5, 1.0), (7.0, 0.0), (101.75, -(0.5f64.sqrt()))]
        {
            assert!((sinpi(x) - want).abs() < 1e-15, "{x}: {}", sinpi(x));
        }
        assert!((cospi(3.0f64) + 1.0).abs() < 1e-16);
        let (s, c) = sin_cos(10.0f64);
        assert!((s - 10f64.sin()).abs() < 1e-14 && (c - 10f64.cos()).abs() < 1e-14);
    }

    #[test]
    fn exp_accuracy() {
        let mut worst64: f64 = 0.0;
        let mut worst32: f64 = 0.0;
        for i in 0..=20_000 {
            let x = -80.0 + i as f64 * 0.008;
            worst64 = worst64.max(rel(exp(x), x.exp()));
            worst32 = worst32.max(rel(exp(x as f32) as f64, (x as f32 as f64).exp()));
        }
        assert!(worst64 < 5e-16, "{worst64}");
        assert!(worst32 < 3e-7, "{worst32}");
        assert_eq!(exp(-1000.0f64), 0.0);
        assert_eq!(exp(1000.0f64), f64::INFINITY);
        assert!(exp(f64::NAN).is_nan());
        assert_eq!(exp(0.0f64), 1.0);
        assert_eq!(exp(-200.0f32), 0.0);
    }
}
