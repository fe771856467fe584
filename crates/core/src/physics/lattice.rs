//! Lattice (shape) transforms of a finite crystal.
//!
//! [`sincg`] and [`sinc3`] are the C program's formulas (used by the exact
//! render path); [`Grating`] and [`sinc3_fast`] are the fast path's forms of
//! the same functions, built for accuracy in f32 as well as speed.

use crate::real::dual;
use crate::real::fast::{cospi, cospi_small, sinpi, sinpi_small};
use crate::real::{Num, Real, Smooth};
use std::f64::consts::PI;

/// Fourier transform of a grating of `n` slits (`sincg` in nanoBragg.c):
/// `sin(n x) / sin(x)`, with the limit `n` at `x == 0`.
#[inline(always)]
pub fn sincg<R: Num>(x: R, n: R) -> R {
    sincg_by(x, n, false)
}

/// [`sincg`] with the sines of [`sine`].
#[inline(always)]
fn sincg_by<R: Num>(x: R, n: R, in_dual: bool) -> R {
    R::select(x.cmp_eq(R::zero()), n, sine(x * n, in_dual) / sine(x, in_dual))
}

/// The index the square lattice factor `sincg(πh, N)` takes: `h` for a
/// whole `N` (nanoBragg.c's formula, whose magnitude is periodic in `h`), the
/// fractional part `h − round(h)` when `reduce` (a fractional `N`, or one that
/// carries a derivative). C's `sin(πNh)/sin(πh)` with a fractional `N` is not
/// periodic and has a pole at every whole `h ≠ 0`; reduced, the factor is the
/// continuous extension of the whole-`N` spots (same magnitude at whole `N`,
/// the image uses its square), so spots grow smoothly with `N` and the
/// derivative by `N` is that of the spot shape.
#[inline(always)]
pub fn grating_index<R: Num>(h: R, reduce: bool) -> R {
    if reduce {
        h - h.round()
    } else {
        h
    }
}

/// [`sincg`]`(π h, n)` with whole numbers taken out of the arguments first:
/// `sin(nπh) / sin(πh)` as `±sin(π(r + n f)) / ±sin(π f)` with
/// `f = h − round(h)` and `r = n·round(h) − round(n·round(h))` (exact in
/// floating point), so the sines never see a large argument. The same
/// function (and derivatives, `n` may carry one) accurate in single
/// precision, where `π h` itself loses the digits that matter near whole h.
#[inline(always)]
pub fn sincg_pi_reduced<R: Num>(h: R, n: R) -> R {
    sincg_pi_reduced_by(h, n, false)
}

/// [`sincg_pi_reduced`] with the sines of [`sine`].
#[inline(always)]
fn sincg_pi_reduced_by<R: Num>(h: R, n: R, in_dual: bool) -> R {
    let pi = R::c(PI);
    let h0 = h.round();
    let f = h - h0;
    let m = n * h0;
    let m0 = m.round();
    let num = sine(pi * ((m - m0) + n * f), in_dual).negate_if_odd(m0);
    let den = sine(pi * f, in_dual).negate_if_odd(h0);
    // at whole h: the limit ±n (sign (−1)^((n−1)h) for whole n)
    R::select(f.cmp_eq(R::zero()), n.negate_if_odd(m0 - h0), num / den)
}

/// The exact kernel's square-lattice factor along one axis, `sincg(πh, N)`:
/// a fractional `N`, or one that carries a derivative (`reduce`), gives the
/// continuous spot shape (see [`grating_index`]); otherwise f64 takes the C
/// program's formula and below f64 (f32 duals) whole h, k, l come out first
/// (the same function). On dual numbers the derivatives come from
/// [`ExactGrating`]'s slopes.
#[inline(always)]
pub fn exact_grating<V: Num>(h: V, n: V, reduce: bool) -> V {
    V::apply([h, n], &ExactGrating { reduce, in_dual: false })
}

/// The exact kernel's round-spot shape, `sinc3(π√u)` of the scaled squared
/// radius `u` in hkl space; on dual numbers with [`RoundSpot`]'s slope.
#[inline(always)]
pub fn round_spot<V: Num>(u: V) -> V {
    V::apply([u], &RoundSpot { in_dual: false })
}

/// [`exact_grating`] as a function of (h, N) with its partial derivatives.
///
/// The quotient rule on `sin(Nθ)/sin θ` (θ = πf, `f = h − round(h)`) takes
/// the difference of two products that agree to `(Nθ)²` near a Bragg peak
/// and divides it by `sin²θ`: its error grows as `ε/θ`, and at the direct
/// beam (h, k, l all about 0) the slopes are rounding noise of any size.
/// The slope by h there is the Taylor series of the factor differentiated,
/// `N Σ 2k Q_k(N²) θ^(2k−1)` through θ⁷, below `|Nθ|` = 1/8 (7/8 in f32),
/// where both are within about 1e-13 (1e-6) of the slope. The slope by N,
/// `θ cos(Nθ)/sin θ`, does not cancel. The value is the formula's (C's for
/// plain numbers); on a dual `W` (second derivatives) it comes through
/// [`Num::apply`] again, so that its own parts take these slopes.
#[derive(Debug, Clone, Copy)]
pub struct ExactGrating {
    /// Whether the index is reduced to its fractional part (see [`exact_grating`]).
    reduce: bool,
    /// The value for a dual number: with the sines the duals take.
    in_dual: bool,
}

impl Smooth<2> for ExactGrating {
    #[inline(always)]
    fn eval<W: Num>(&self, [h, n]: [W; 2], slopes: bool) -> (W, [W; 2]) {
        if !slopes {
            return (exact_grating_value(h, n, self.reduce, self.in_dual), [W::zero(); 2]);
        }
        let value = W::apply([h, n], &ExactGrating { in_dual: true, ..*self });
        let pi = W::c(PI);
        let single = <W::Scalar as Real>::MANTISSA_DIGITS < 53;
        let h0 = h.round();
        let theta = pi * (h - h0);
        let nt = n * theta;
        let ((s, c), (sn, cn)) = (dual::sin_cos(theta), dual::sin_cos(nt));
        let quotient = (n * cn * s - sn * c) / (s * s);
        let m = n * n;
        let t2 = theta * theta;
        // (no mul_add in the exact kernel: see Num::mul_add)
        let g = &GRATING_SLOPE;
        let (q1, q2) = (slope_coefficient(&g[0], m), slope_coefficient(&g[1], m));
        let (q3, q4) = (slope_coefficient(&g[2], m), slope_coefficient(&g[3], m));
        let series = nt * (((q4 * t2 + q3) * t2 + q2) * t2 + q1);
        let limit = W::c(if single { 0.875 } else { 0.125 });
        let slope = pi * W::select(nt.abs().cmp_lt(limit), series, quotient);
        if self.reduce {
            let by_n = W::select(theta.cmp_eq(W::zero()), W::one(), theta * cn / s);
            (value, [slope, by_n])
        } else {
            // a whole N: sincg(πh, N) = (−1)^((N−1)·round(h)) sincg(πf, N)
            (value, [slope.negate_if_odd((n - W::one()) * h0), W::zero()])
        }
    }
}

/// The sine of `x`: libm's, or `in_dual` the one a dual number takes of
/// its value ([`dual::sin_cos`], the fast polynomials on SIMD lanes). A
/// flag, not a function passed in: a function value is called through
/// `Fn::call` or a closure, which are not always inlined, and one called
/// from a `#[target_feature]` row function is compiled without its vector
/// instructions (every SIMD operation an out-of-line call: a moving N made
/// the contracted `Jᵀv` 3.5 times slower).
#[inline(always)]
fn sine<R: Num>(x: R, in_dual: bool) -> R {
    if in_dual {
        dual::sin_cos(x).0
    } else {
        x.sin()
    }
}

/// The sine and cosine of `x` ([`sine`]).
#[inline(always)]
fn sine_cosine<R: Num>(x: R, in_dual: bool) -> (R, R) {
    if in_dual {
        dual::sin_cos(x)
    } else {
        (x.sin(), x.cos())
    }
}

/// `Σ k_j m^j` (Horner, from the highest power): a coefficient of
/// [`GRATING_SLOPE`] at `m = N²` (no closure, for the reason of [`sine`]).
#[inline(always)]
fn slope_coefficient<W: Num>(k: &[f64; 5], m: W) -> W {
    let mut acc = W::zero();
    for j in (0..5).rev() {
        acc = acc * m + W::c(k[j]);
    }
    acc
}

/// The value of [`exact_grating`] with the sines of [`sine`].
#[inline(always)]
fn exact_grating_value<W: Num>(h: W, n: W, reduce: bool, in_dual: bool) -> W {
    let pi = W::c(PI);
    if reduce {
        sincg_by(pi * grating_index(h, true), n, in_dual)
    } else if <W::Scalar as Real>::MANTISSA_DIGITS < 53 {
        sincg_pi_reduced_by(h, n, in_dual)
    } else {
        sincg_by(pi * h, n, in_dual)
    }
}

/// `2k Q_k(m)` (ascending powers of `m = N²`), k = 1 to 4: `sin(Nθ)/sin θ =
/// N Σ_k Q_k(N²) θ^(2k)`, the product of the sine's series and `θ/sin θ`'s.
const GRATING_SLOPE: [[f64; 5]; 4] = [
    [2.0 / 6.0, -2.0 / 6.0, 0.0, 0.0, 0.0],
    [4.0 * 7.0 / 360.0, -4.0 / 36.0, 4.0 / 120.0, 0.0, 0.0],
    [6.0 * 31.0 / 15_120.0, -6.0 * 7.0 / 2160.0, 6.0 / 720.0, -6.0 / 5040.0, 0.0],
    [
        8.0 * 127.0 / 604_800.0,
        -8.0 * 31.0 / 90_720.0,
        8.0 * 7.0 / 43_200.0,
        -8.0 / 30_240.0,
        8.0 / 362_880.0,
    ],
];

/// [`round_spot`] as a function of `u` with its derivative. The
/// step-by-step derivative fails at the peak twice: √u's slope is infinite
/// at u = 0, and `sin x / x − cos x` cancels as x → 0. For dual numbers the
/// value and the slope are the Taylor series in `x² = π²u` below x = 1 (no
/// square root), the closed forms above. Plain numbers keep C's formula,
/// whose value is rounding noise within x ≈ 1e-7 of the peak (0 instead of
/// 1); a dual's value differs from it there. On a dual `W` the value comes
/// through [`Num::apply`] again, so that its own parts take the slope.
#[derive(Debug, Clone, Copy)]
pub struct RoundSpot {
    /// The value for a dual number: with the sines the duals take.
    in_dual: bool,
}

impl Smooth<1> for RoundSpot {
    #[inline(always)]
    fn eval<W: Num>(&self, [u]: [W; 1], slopes: bool) -> (W, [W; 1]) {
        let pi = W::c(PI);
        let x2 = pi * pi * u;
        let near = x2.cmp_lt(W::one());
        let n = SINC3_SERIES.len();
        if !slopes {
            if !self.in_dual {
                return (sinc3(pi * u.sqrt()), [W::zero()]);
            }
            let mut series = W::c(SINC3_SERIES[n - 1]);
            for &k in SINC3_SERIES[..n - 1].iter().rev() {
                series = series * x2 + W::c(k);
            }
            let closed = sinc3_by(pi * u.sqrt(), true);
            return (W::select(near, series, closed), [W::zero()]);
        }
        let value = W::apply([u], &RoundSpot { in_dual: true });
        // Σ k s_k x^(2k−2), k = 1 ..
        let mut slope = W::c((n - 1) as f64 * SINC3_SERIES[n - 1]);
        for k in (1..n - 1).rev() {
            slope = slope * x2 + W::c(k as f64 * SINC3_SERIES[k]);
        }
        let x = pi * u.sqrt();
        let (s, c) = dual::sin_cos(x);
        let three = W::c(3.0);
        // d/du = (d/dx)·π²/(2x)
        let closed = three * ((x2 - three) * s + three * x * c) / (W::c(2.0) * x2 * x2 * x);
        (value, [pi * pi * W::select(near, slope, closed)])
    }
}

/// Fourier transform of a sphere (`sinc3` in nanoBragg.c):
/// `3 (sin x / x - cos x) / x²`, with the limit 1 at `x == 0`.
#[inline(always)]
pub fn sinc3<R: Num>(x: R) -> R {
    sinc3_by(x, false)
}

/// [`sinc3`] with the sine and cosine of [`sine_cosine`].
#[inline(always)]
fn sinc3_by<R: Num>(x: R, in_dual: bool) -> R {
    let (s, c) = sine_cosine(x, in_dual);
    R::select(x.cmp_eq(R::zero()), R::one(), R::c(3.0) * (s / x - c) / (x * x))
}

/// `sinc3(π r)` without cancellation near `r = 0` (Taylor series below
/// `π r = 1`, the closed form above), with the fast trigonometric functions.
#[inline(always)]
pub fn sinc3_fast<V: Num>(r: V) -> V {
    let x = r * V::c(std::f64::consts::PI);
    let x2 = x * x;
    // 3 (sin x / x - cos x) / x^2 = sum_k 3 (-1)^(k+1) 2k / (2k+1)! x^(2k-2)
    let mut series = V::c(SINC3_SERIES[SINC3_SERIES.len() - 1]);
    for &c in SINC3_SERIES[..SINC3_SERIES.len() - 1].iter().rev() {
        series = series.mul_add(x2, V::c(c));
    }
    let closed = V::c(3.0) * (sinpi(r) / x - cospi(r)) / x2;
    V::select(x.abs().cmp_lt(V::one()), series, closed)
}

/// Taylor coefficients of sinc3 in x² (enough for 1e-16 below |x| = 1).
const SINC3_SERIES: [f64; 9] = [
    1.0,
    -1.0 / 10.0,
    1.0 / 280.0,
    -1.0 / 15_120.0,
    1.0 / 1_330_560.0,
    -1.0 / 172_972_800.0,
    1.0 / 31_135_104_000.0,
    -1.0 / 7_410_154_752_000.0,
    1.0 / 2_252_687_044_608_000.0,
];

/// `sincg(π h, N)` for one `N` (the fast path's form of [`sincg`]), exact to
/// rounding also in f32.
///
/// Three forms, chosen once per `N`:
/// - **polynomial** (whole `N` up to [`Grating::POLY_MAX_N`] for f64 lanes,
///   8 for f32): `sin(Nθ)/sin θ = U_{N−1}(cos θ)` (Chebyshev polynomial of
///   the second kind) `= cos^p θ · P(sin²θ)` with `p = (N−1) mod 2` and
///   integer coefficients formed here. `sin θ` is taken of the fractional
///   part of `h` (`θ = πf`, `f = h − round(h)`), so near the Bragg peaks
///   (small `f`) the value keeps full relative precision; no division, no
///   special case at `f = 0`. The evaluation error is below
///   `ε · Σ|P_k| · deg P` relative to `N` (≤ 1e-13 for f64, ≤ 2e-5 for f32
///   lanes, which sets the limits).
/// - **reduced** (larger whole `N`): with `h = n + f`: `|sin(πh)| =
///   |sin(πf)|`, `sin(Nπh) = ±sin(Nπf)`, and `Nf` is reduced once more
///   before the polynomial, so both sines are taken of arguments in
///   \[-π/2, π/2\] that carry the full precision of `f`. Signs are kept:
///   the value is `(-1)^((N-1)n + m) sin(πg) / sin(πf)` with `Nf = m + g`, and
///   the limit `±N` where `f = 0`.
/// - **general** (fractional `N`, possible only through the library):
///   `sin(πNf) / sin(πf)` of the fractional part `f` (see [`grating_index`]).
#[derive(Debug, Clone, Copy)]
pub struct Grating<S> {
    n: S,
    form: GratingForm,
    even: bool,
    /// Coefficients of P (ascending powers of sin²θ, zero-padded), polynomial form.
    poly: [S; POLY_LEN],
    /// Coefficients of P up to the last nonzero one ([`Grating::poly_terms`]).
    terms: usize,
}

/// Coefficients of the polynomial form (degree 4 in sin²θ covers N ≤ 9).
const POLY_LEN: usize = 5;

/// Which form a [`Grating`] evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GratingForm {
    /// `cos^p θ · P(sin²θ)`.
    Polynomial,
    /// `± sin(πg) / sin(πf)` from the fractional parts.
    Reduced,
    /// `sin(πNf) / sin(πf)`, `f = h − round(h)`.
    General,
}

impl<S: Real> Grating<S> {
    /// Largest `N` taking the polynomial form with f64 lanes.
    pub const POLY_MAX_N: usize = 9;

    /// Prepare for `N` unit cells.
    pub fn new(n: f64) -> Self {
        let whole = n.fract() == 0.0 && n.abs() < 1e15;
        let even = whole && n % 2.0 == 0.0;
        let max_n = if S::MANTISSA_DIGITS > 24 { Self::POLY_MAX_N } else { 8 };
        let mut g = Grating {
            n: S::c(n),
            form: if whole { GratingForm::Reduced } else { GratingForm::General },
            even,
            poly: [S::zero(); POLY_LEN],
            terms: 1,
        };
        if whole && n >= 1.0 && n <= max_n as f64 {
            let p = chebyshev_u_in_sin2(n as usize - 1);
            for (dst, &c) in g.poly.iter_mut().zip(&p) {
                *dst = S::c(c);
            }
            g.form = GratingForm::Polynomial;
            g.terms = g.poly.iter().rposition(|&c| c != S::zero()).map_or(1, |i| i + 1);
        }
        g
    }

    /// The form this grating evaluates.
    pub fn form(&self) -> GratingForm {
        self.form
    }

    /// Whether `N` is even (the polynomial form then has a factor cos θ).
    pub fn is_even(&self) -> bool {
        self.even
    }

    /// `sincg(πh, N)` in the polynomial form (only for [`GratingForm::Polynomial`]).
    #[inline(always)]
    pub fn poly<V: Num<Scalar = S>>(&self, h: V) -> V {
        if self.even {
            self.poly_with::<V, true>(h)
        } else {
            self.poly_with::<V, false>(h)
        }
    }

    /// [`Grating::poly`] for a known parity of `N` (`EVEN` must match).
    #[inline(always)]
    pub fn poly_with<V: Num<Scalar = S>, const EVEN: bool>(&self, h: V) -> V {
        self.poly_len::<V, EVEN, POLY_LEN>(h)
    }

    /// Coefficients of P up to the last nonzero one (1 to 5).
    pub fn poly_terms(&self) -> usize {
        self.terms
    }

    /// [`Grating::poly_with`] from the first `LEN` coefficients of P (at
    /// least [`Grating::poly_terms`]). The same value: Horner's steps over
    /// the zero padding give exactly 0, then the first nonzero coefficient.
    #[inline(always)]
    pub fn poly_len<V: Num<Scalar = S>, const EVEN: bool, const LEN: usize>(&self, h: V) -> V {
        debug_assert!(LEN >= self.poly_terms() && LEN <= POLY_LEN);
        let hn = h.round();
        let f = h - hn;
        let s = sinpi_small(f);
        let x = s * s;
        // fixed degree: no loop left after inlining
        let mut p = V::splat(self.poly[LEN - 1]);
        for &c in self.poly[..LEN - 1].iter().rev() {
            p = p.mul_add(x, V::splat(c));
        }
        if EVEN {
            // cos(πh) = (-1)^n cos(πf)
            p * cospi_small(f).negate_if_odd(hn)
        } else {
            p
        }
    }

    /// [`Grating::poly`] and its derivative by `h` (only for
    /// [`GratingForm::Polynomial`]): with θ = πf, f = h − round(h) and
    /// x = sin²θ, the factor is P(x) for odd N and (−1)^round(h) cos θ P(x)
    /// for even N, and dx/dh = 2π sin θ cos θ. No sine of Nπh and no
    /// division: the derivative renderer's square spots where N is fixed.
    /// Only P's coefficients up to the last nonzero one are evaluated (N 5,
    /// say, needs 3 of the 5).
    #[inline(always)]
    pub fn poly_and_slope<V: Num<Scalar = S>>(&self, h: V) -> (V, V) {
        match self.terms {
            1 => self.poly_and_slope_len::<V, 1>(h),
            2 => self.poly_and_slope_len::<V, 2>(h),
            3 => self.poly_and_slope_len::<V, 3>(h),
            4 => self.poly_and_slope_len::<V, 4>(h),
            _ => self.poly_and_slope_len::<V, POLY_LEN>(h),
        }
    }

    /// [`Grating::poly_and_slope`] from the first `LEN` coefficients of P
    /// (at least [`Grating::poly_terms`]; the same numbers, as for
    /// [`Grating::poly_len`]).
    #[inline(always)]
    fn poly_and_slope_len<V: Num<Scalar = S>, const LEN: usize>(&self, h: V) -> (V, V) {
        if self.even {
            self.poly_and_slope_with::<V, true, LEN>(h)
        } else {
            self.poly_and_slope_with::<V, false, LEN>(h)
        }
    }

    /// [`Grating::poly_and_slope`] of three gratings of one parity (`EVEN`)
    /// from their first `LEN` coefficients, without a branch between them (the
    /// square lattice factors of a derivative render, whose slopes would
    /// otherwise be taken one after the other).
    #[inline(always)]
    pub fn poly_and_slope3<V: Num<Scalar = S>, const EVEN: bool, const LEN: usize>(
        g: &[Self; 3],
        h: [V; 3],
    ) -> [(V, V); 3] {
        [
            g[0].poly_and_slope_with::<V, EVEN, LEN>(h[0]),
            g[1].poly_and_slope_with::<V, EVEN, LEN>(h[1]),
            g[2].poly_and_slope_with::<V, EVEN, LEN>(h[2]),
        ]
    }

    /// [`Grating::poly_and_slope_len`] for a known parity (`EVEN` must match).
    #[inline(always)]
    fn poly_and_slope_with<V: Num<Scalar = S>, const EVEN: bool, const LEN: usize>(
        &self,
        h: V,
    ) -> (V, V) {
        debug_assert!(LEN >= self.poly_terms() && LEN <= POLY_LEN && EVEN == self.even);
        let hn = h.round();
        let f = h - hn;
        let (s, c) = (sinpi_small(f), cospi_small(f));
        let x = s * s;
        let mut p = V::splat(self.poly[LEN - 1]);
        let mut dp = V::zero();
        for &k in self.poly[..LEN - 1].iter().rev() {
            dp = dp.mul_add(x, p);
            p = p.mul_add(x, V::splat(k));
        }
        let pi = V::c(std::f64::consts::PI);
        let pi_s = pi * s;
        let dx = V::c(2.0) * pi_s * c;
        if EVEN {
            let value = (c * p).negate_if_odd(hn);
            let slope = (c * dp * dx - pi_s * p).negate_if_odd(hn);
            (value, slope)
        } else {
            (p, dp * dx)
        }
    }

    /// Numerator and denominator of `sincg(πh, N)` (denominator 1 in the
    /// polynomial form and where `f = 0`; the numerator carries the sign), so
    /// that several factors can share one division.
    #[inline(always)]
    pub fn parts<V: Num<Scalar = S>>(&self, h: V) -> (V, V) {
        let n = V::splat(self.n);
        match self.form {
            GratingForm::Polynomial => (self.poly(h), V::one()),
            GratingForm::Reduced => {
                let hn = h.round();
                let f = h - hn;
                let y = f * n;
                let m = y.round();
                let g = y - m;
                let at_peak = f.cmp_eq(V::zero());
                let num = V::select(at_peak, n, sinpi_small(g));
                let den = V::select(at_peak, V::one(), sinpi_small(f));
                let k = if self.even { m + hn } else { m };
                (num.negate_if_odd(k), den)
            }
            GratingForm::General => {
                let f = grating_index(h, true);
                let at_zero = f.cmp_eq(V::zero());
                (V::select(at_zero, n, sinpi(f * n)), V::select(at_zero, V::one(), sinpi(f)))
            }
        }
    }

    /// `sincg(πh, N)`.
    #[inline(always)]
    pub fn eval<V: Num<Scalar = S>>(&self, h: V) -> V {
        if self.form == GratingForm::Polynomial {
            return self.poly(h);
        }
        let (num, den) = self.parts(h);
        num / den
    }
}

/// `U_k(cos θ) = cos^(k mod 2) θ · P(sin²θ)`: the coefficients of `P`,
/// ascending (integers, exact in f64 for the degrees used here).
fn chebyshev_u_in_sin2(k: usize) -> Vec<f64> {
    // U_k in powers of c by U_{j+1} = 2c U_j - U_{j-1}
    let (mut a, mut b) = (vec![1.0f64], vec![0.0, 2.0]);
    let u = if k == 0 {
        a
    } else {
        for _ in 1..k {
            let mut c = vec![0.0; b.len() + 1];
            for (i, &x) in b.iter().enumerate() {
                c[i + 1] += 2.0 * x;
            }
            for (i, &x) in a.iter().enumerate() {
                c[i] -= x;
            }
            a = std::mem::replace(&mut b, c);
        }
        b
    };
    // U_k = c^p R(c²), then c² = 1 - x
    let p = k % 2;
    let r: Vec<f64> = u.iter().skip(p).step_by(2).copied().collect();
    let mut out = vec![0.0; r.len()];
    for (j, &rj) in r.iter().enumerate() {
        // (1 - x)^j
        let mut binom = 1.0;
        for (i, o) in out.iter_mut().enumerate().take(j + 1) {
            *o += rj * binom * if i % 2 == 0 { 1.0 } else { -1.0 };
            binom = binom * (j - i) as f64 / (i + 1) as f64;
        }
    }
    out
}

/// Ratio that makes a sphere's `sinc3` peak match a cube's volume
/// (nanoBragg.c's constant for `-round_xtal`).
pub const ROUND_XTAL_SCALE: f64 = 0.723601254558268;
/// Gaussian spot width constant of `-gauss_xtal`.
pub const GAUSS_XTAL_WIDTH: f64 = 0.63;
/// Squared radius at which `-tophat_spots` cuts the spot.
pub const TOPHAT_RADIUS_SQR: f64 = 0.3969;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::real::dual::{Dual, HyperDual64};

    /// The polynomial form's slope is the derivative of C's sin(Nπh)/sin(πh)
    /// (central differences of the sines), odd and even N, near and far from
    /// whole h.
    #[test]
    fn polynomial_slope_is_the_derivative_of_sincg() {
        for n in 2..=9 {
            let g = Grating::<f64>::new(n as f64);
            assert_eq!(g.form(), GratingForm::Polynomial);
            for k in 0..400 {
                let h = -3.7 + k as f64 * 0.0193 + 1e-3;
                let (v, slope) = g.poly_and_slope(h);
                // the coefficients in use alone give the same numbers
                let padded = g.poly_and_slope_len::<f64, POLY_LEN>(h);
                assert_eq!(padded.0.to_bits(), v.to_bits(), "N {n} h {h}");
                assert_eq!(padded.1.to_bits(), slope.to_bits(), "N {n} h {h}");
                // and three at once, as the derivative renderer takes them
                let three = [g; 3];
                let hs = [h, 0.3, h];
                let taken = match g.is_even() {
                    true => Grating::poly_and_slope3::<f64, true, POLY_LEN>(&three, hs),
                    false => Grating::poly_and_slope3::<f64, false, POLY_LEN>(&three, hs),
                };
                for (got, h) in taken.into_iter().zip(hs) {
                    let want = g.poly_and_slope(h);
                    assert_eq!(got.0.to_bits(), want.0.to_bits(), "N {n} h {h}");
                    assert_eq!(got.1.to_bits(), want.1.to_bits(), "N {n} h {h}");
                }
                let f = |h: f64| sincg(PI * h, n as f64);
                assert!((v - f(h)).abs() <= 1e-12 * n as f64, "N {n} h {h}: {v} vs {}", f(h));
                let e = 1e-6;
                let fd = (f(h + e) - f(h - e)) / (2.0 * e);
                let scale = (n * n) as f64;
                assert!((slope - fd).abs() <= 1e-6 * scale, "N {n} h {h}: {slope} vs {fd}");
            }
        }
    }

    #[test]
    fn sincg_limits() {
        assert_eq!(sincg(0.0, 7.0), 7.0);
        // near an integer multiple of pi the grating peaks at +-N
        let v: f64 = sincg(PI + 1e-9, 5.0);
        assert!((v - 5.0).abs() < 1e-6, "{v}");
        let v: f64 = sincg(1e-8, 5.0);
        assert!((v - 5.0).abs() < 1e-9);
        // zeros at x = k pi / N
        let z: f64 = sincg(PI / 5.0, 5.0);
        assert!(z.abs() < 1e-12);
    }

    #[test]
    fn reduced_sincg_is_sincg() {
        for &n in &[2.0, 5.0, 7.5] {
            for i in 0..400 {
                let h = -20.0 + i as f64 * 0.1037;
                if (h - h.round()).abs() < 1e-3 {
                    // there C's sin(πh) is rounding noise (the limit is checked below)
                    continue;
                }
                let (a, b): (f64, f64) = (sincg_pi_reduced(h, n), sincg(PI * h, n));
                assert!((a - b).abs() <= 1e-9 * n, "{h} {n}: {a} vs {b}");
            }
        }
        // at and next to whole h (whole n): the limit ±n, sign (−1)^((n−1)h)
        for &n in &[2.0f64, 5.0] {
            for h0 in [-3.0f64, 0.0, 3.0, 4.0] {
                let want = if ((n - 1.0) * h0).rem_euclid(2.0) == 0.0 { n } else { -n };
                assert_eq!(sincg_pi_reduced(h0, n), want, "{h0} {n}");
                let near: f64 = sincg_pi_reduced(h0 + 1e-9, n);
                assert!((near - want).abs() <= 1e-12 * n, "{h0} {n}: {near}");
            }
        }
    }

    #[test]
    fn grating_matches_sincg() {
        assert_eq!(chebyshev_u_in_sin2(4), vec![5.0, -20.0, 16.0]);
        assert_eq!(chebyshev_u_in_sin2(5), vec![6.0, -32.0, 32.0]);
        assert_eq!(Grating::<f64>::new(9.0).form(), GratingForm::Polynomial);
        assert_eq!(Grating::<f64>::new(10.0).form(), GratingForm::Reduced);
        assert_eq!(Grating::<f32>::new(9.0).form(), GratingForm::Reduced);
        assert_eq!(Grating::<f64>::new(2.5).form(), GratingForm::General);
        for &n in &[2.0, 3.0, 5.0, 6.0, 8.0, 9.0, 10.0, 13.0, 2.5] {
            let g = Grating::<f64>::new(n);
            let g32 = Grating::<f32>::new(n);
            let mut worst32: f64 = 0.0;
            for i in -20_000..=20_000 {
                let h = i as f64 * 0.00123 + 1e-7;
                let want = sincg(PI * grating_index(h, n.fract() != 0.0), n);
                // sincg itself loses digits near whole h (pi h is rounded)
                // (a fractional N also rounds N h in the fast form)
                let c = if n.fract() == 0.0 { 1e-14 } else { 1e-11 };
                let tol = c * n * (n + 1.0) * (1.0 + PI * h.abs()) / (PI * h).sin().abs();
                assert!((g.eval(h) - want).abs() <= tol, "N={n} h={h}: {} vs {want}", g.eval(h));
                let h32 = h as f32;
                let want32 = sincg(PI * grating_index(h32 as f64, n.fract() != 0.0), n);
                worst32 = worst32.max((g32.eval(h32) as f64 - want32).abs() / n);
            }
            // a fractional N rounds N h: f32 loses digits near whole h
            let bound32 = if n.fract() == 0.0 { 2e-6 } else { 1e-2 };
            assert!(worst32 < bound32, "N={n}: {worst32}");
            // limits at whole h: (-1)^((N-1) h) N
            if n.fract() == 0.0 {
                assert_eq!(g.eval(0.0), n);
                assert_eq!(g.eval(3.0), if n % 2.0 == 0.0 { -n } else { n });
                assert_eq!(g.eval(-4.0), n);
            }
        }
    }

    #[test]
    fn shortened_polynomials_are_bit_identical() {
        fn check<S: Real, const LEN: usize>(n: f64) {
            let g = Grating::<S>::new(n);
            assert!(g.poly_terms() <= LEN, "N={n}");
            for i in -3000..=3000 {
                let h = S::c(i as f64 * 0.00731 + 1e-5);
                let (a, b) = (g.poly_len::<S, false, LEN>(h), g.poly_with::<S, false>(h));
                assert_eq!(a.val().to_bits(), b.val().to_bits(), "N={n} h={}", h.val());
            }
        }
        // odd N: 1, 2, 3, 4, 5 coefficients
        assert_eq!([3.0, 5.0, 7.0, 9.0].map(|n| Grating::<f64>::new(n).poly_terms()), [2, 3, 4, 5]);
        check::<f64, 2>(3.0);
        check::<f64, 3>(5.0);
        check::<f64, 4>(7.0);
        check::<f64, 5>(9.0);
        check::<f32, 3>(5.0);
        check::<f32, 4>(7.0);
        check::<f64, 5>(5.0);
    }

    #[test]
    fn sinc3_fast_matches() {
        for i in 0..5000 {
            let r = i as f64 * 0.001;
            let want: f64 = sinc3(PI * r);
            let got = sinc3_fast(r);
            // the closed form (C's) loses digits as x -> 0
            let x = PI * r;
            let tol = 1e-15 + 1e-15 / (x * x);
            assert!((got - want).abs() < tol, "{r}: {got} vs {want}");
        }
        assert_eq!(sinc3_fast(0.0f64), 1.0);
        let x = PI * 1e-3;
        assert!((sinc3_fast(1e-3f32) as f64 - (1.0 - x * x / 10.0)).abs() < 1e-7);
    }

    /// The first and second derivatives of `sin(Nθ)/sin θ` by θ for whole
    /// N from the Dirichlet kernel, `Σ cos(kθ)` over k = N−1, N−3, ..., 1−N:
    /// `−Σ k sin(kθ)` and `−Σ k² cos(kθ)`, whose terms near θ = 0 have one
    /// sign (nothing cancels).
    fn dirichlet_slopes(n: f64, theta: f64) -> (f64, f64) {
        let ks = (0..n as i64).map(|j| n - 1.0 - 2.0 * j as f64);
        ks.fold((0.0, 0.0), |(d1, d2), k| {
            (d1 - k * (k * theta).sin(), d2 - k * k * (k * theta).cos())
        })
    }

    /// `sin(Nθ)/sin θ` from `sin x / x` (its series below 1e-3), which loses
    /// nothing as θ → 0, for central differences with a fractional N.
    fn stable_sincg(n: f64, theta: f64) -> f64 {
        let sinc = |x: f64| if x.abs() < 1e-3 { 1.0 - x * x / 6.0 } else { x.sin() / x };
        n * sinc(n * theta) / sinc(theta)
    }

    fn seeded<S: Real>(h: f64, n: f64) -> [Dual<S, 2>; 2] {
        let (one, zero) = (S::one(), S::zero());
        [Dual { re: S::c(h), eps: [one, zero] }, Dual { re: S::c(n), eps: [zero, one] }]
    }

    /// `(−1)^((N−1)·round(h))` for the index not reduced, else 1.
    fn sign(h: f64, n: f64, reduce: bool) -> f64 {
        if !reduce && ((n - 1.0) * h.round()) % 2.0 != 0.0 {
            -1.0
        } else {
            1.0
        }
    }

    /// The slopes of the exact factor by h (and by N where N may move)
    /// from a third of a cell down to 1e-15 off the Bragg condition and at
    /// it, where the quotient rule's slopes are rounding noise: against the
    /// Dirichlet sum (whole N) and central differences (every N), relative
    /// to πN², about the largest slope by h. The value is the plain number's.
    #[test]
    fn exact_grating_slopes_near_the_peaks() {
        let offsets = [0.0, 1e-15, 1e-12, 1e-9, 1e-6, 1e-4, 3e-3, 1e-2, 0.13, 0.37];
        let mut worst: f64 = 0.0;
        for &(n, reduce) in &[(5.0, false), (12.0, false), (40.0, false), (12.0, true), (7.5, true)]
        {
            let scale = PI * n * n;
            for h0 in [0.0, -3.0, 4.0] {
                for &d in &offsets {
                    for h in [h0 + d, h0 - d] {
                        let [x, nd] = seeded::<f64>(h, n);
                        let got = exact_grating(x, nd, reduce);
                        assert_eq!(got.re.to_bits(), exact_grating(h, n, reduce).to_bits());
                        let f = h - h.round();
                        let sign = sign(h, n, reduce);
                        if n.fract() == 0.0 {
                            let want = sign * PI * dirichlet_slopes(n, PI * f).0;
                            worst = worst.max((got.eps[0] - want).abs() / scale);
                        }
                        let e = 1e-6;
                        let by_h = (stable_sincg(n, PI * (f + e)) - stable_sincg(n, PI * (f - e)))
                            / (2.0 * e);
                        let err = (got.eps[0] - sign * by_h).abs();
                        assert!(err <= 1e-7 * scale, "N {n} h {h}: {} vs {by_h}", got.eps[0]);
                        if reduce {
                            let by_n = (stable_sincg(n + e, PI * f) - stable_sincg(n - e, PI * f))
                                / (2.0 * e);
                            let err = (got.eps[1] - by_n).abs();
                            assert!(err <= 1e-7 * n, "N {n} h {h}: {} vs {by_n}", got.eps[1]);
                        } else {
                            assert_eq!(got.eps[1], 0.0);
                        }
                    }
                }
            }
        }
        assert!(worst <= 2e-13, "{worst}");
    }

    /// [`exact_grating_slopes_near_the_peaks`] in f32 (the f32 Jacobian's
    /// duals), whole N.
    #[test]
    fn exact_grating_slopes_near_the_peaks_in_f32() {
        let mut worst: f64 = 0.0;
        for &n in &[5.0f64, 12.0, 40.0] {
            for h0 in [0.0, -3.0, 4.0] {
                for d in [0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 5e-3, 0.02, 0.3] {
                    let h = (h0 + d) as f32 as f64;
                    let [x, nd] = seeded::<f32>(h, n);
                    let got = exact_grating(x, nd, false);
                    let want = sign(h, n, false) * PI * dirichlet_slopes(n, PI * (h - h.round())).0;
                    worst = worst.max((got.eps[0] as f64 - want).abs() / (PI * n * n));
                }
            }
        }
        assert!(worst <= 3e-6, "{worst}");
    }

    /// Second derivatives (a dual of duals, as `diff::hessian`): the value's
    /// own parts take the slopes too, so the first derivative is the same
    /// in both directions and the second is the Dirichlet kernel's.
    #[test]
    fn exact_grating_second_derivatives() {
        let mut worst: [f64; 2] = [0.0; 2];
        for &n in &[5.0, 12.0, 40.0] {
            for h0 in [0.0, -3.0] {
                for d in [0.0, 1e-12, 1e-9, 1e-6, 1e-3, 0.05, 0.3] {
                    let h = h0 + d;
                    let x = crate::real::dual::hyper(h, 1.0, 1.0);
                    let got = exact_grating(x, HyperDual64::c(n), false);
                    let (d1, d2) = dirichlet_slopes(n, PI * (h - h.round()));
                    let sign = sign(h, n, false);
                    let scale = PI * n * n;
                    assert_eq!(got.re.eps[0].to_bits(), got.eps[0].re.to_bits(), "N {n} h {h}");
                    worst[0] = worst[0].max((got.re.eps[0] - sign * PI * d1).abs() / scale);
                    worst[1] = worst[1]
                        .max((got.eps[0].eps[0] - sign * PI * PI * d2).abs() / (scale * PI * n));
                }
            }
        }
        assert!(worst[0] <= 2e-13 && worst[1] <= 1e-10, "{worst:?}");
    }

    /// The round spot's slope by the squared radius u, at and near the peak
    /// (where √u's slope is infinite and sinc3's formula cancels) and beyond
    /// the series' range, against the series of [`sinc3_fast`] and its
    /// central differences, and the value against the series; second
    /// derivatives are finite at the peak.
    #[test]
    fn round_spot_slope_near_the_peak() {
        let at = |u: f64| round_spot(Dual::<f64, 1> { re: u, eps: [1.0] });
        let peak = at(0.0);
        assert_eq!(peak.re, 1.0);
        assert!((peak.eps[0] + PI * PI / 10.0).abs() < 1e-15, "{}", peak.eps[0]);
        let second = round_spot(crate::real::dual::hyper(0.0, 1.0, 1.0));
        let want = 2.0 * SINC3_SERIES[2] * PI.powi(4);
        assert!((second.eps[0].eps[0] - want).abs() < 1e-12, "{second:?}");
        assert_eq!(second.re.eps[0], peak.eps[0]);
        for u in [1e-30, 1e-12, 1e-6, 1e-3, 0.05, 0.1, 0.2, 0.5, 2.0, 7.0] {
            let got = at(u);
            let value = |u: f64| sinc3_fast(u.sqrt());
            let want = if u < 2e-3 {
                let x2 = PI * PI * u;
                let [_, s1, s2, s3, ..] = SINC3_SERIES;
                PI * PI * (s1 + x2 * (2.0 * s2 + x2 * 3.0 * s3))
            } else {
                let e = 1e-5;
                (value(u + e) - value(u - e)) / (2.0 * e)
            };
            assert!((got.eps[0] - want).abs() < 1e-9, "u {u}: {} vs {want}", got.eps[0]);
            assert!((got.re - value(u)).abs() < 1e-15, "u {u}: {} vs {}", got.re, value(u));
            // plain numbers: C's formula
            assert_eq!(round_spot(u).to_bits(), sinc3(PI * u.sqrt()).to_bits());
        }
    }

    #[test]
    fn sinc3_limits() {
        assert_eq!(sinc3(0.0), 1.0);
        // small-x expansion 1 - x^2/10
        let v: f64 = sinc3(1e-2);
        assert!((v - (1.0 - 1e-4 / 10.0)).abs() < 1e-9, "{v}");
        // first zero of the sphere transform: tan x = x at 4.4934
        let z: f64 = sinc3(4.493409457909064);
        assert!(z.abs() < 1e-12);
    }
}
