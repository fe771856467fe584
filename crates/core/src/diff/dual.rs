//! [`Real`] and [`DiffReal`] for num-dual's dual numbers (the trait itself
//! lives beside [`Real`], as setup uses it).
//!
//! Comparisons, `floor`, `ceil` and `round` act on the value part (the
//! derivative of a step is taken as 0 everywhere); every other function
//! carries its exact derivative. `mul_add` is the plain multiply and add.

pub use crate::real::DiffReal;
use crate::real::{Num, Real};
use num_dual::{Dual64, DualNum, DualSVec32, DualSVec64, HyperDual64};

/// `2^n` for whole `n` in f64's normal range.
#[inline(always)]
fn pow2(n: f64) -> f64 {
    f64::from_bits(((n as i64 + 1023) as u64) << 52)
}

macro_rules! impl_real_dual {
    ([$($gen:tt)*], $t:ty, $s:ty, |$z:ident| $is_zero:expr, |$x:ident, $o:ident| $part:expr) => {
        impl<$($gen)*> Num for $t {
            type Scalar = Self;
            type Mask = bool;
            const LANES: usize = 1;
            #[inline(always)]
            fn splat(x: Self) -> Self {
                x
            }
            #[inline(always)]
            fn from_fn(mut f: impl FnMut(usize) -> Self) -> Self {
                f(0)
            }
            #[inline(always)]
            fn lane(self, _i: usize) -> Self {
                self
            }
            #[inline(always)]
            fn c(x: f64) -> Self {
                <$t>::from(x as $s)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                DualNum::sin(&self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                DualNum::cos(&self)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                DualNum::tan(&self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                DualNum::exp(&self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                DualNum::ln(&self)
            }
            #[inline(always)]
            fn atan2(self, x: Self) -> Self {
                DualNum::atan2(&self, x)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                DualNum::sqrt(&self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                if self.re < 0.0 {
                    -self
                } else {
                    self
                }
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::from(self.re.floor())
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::from(self.re.ceil())
            }
            #[inline(always)]
            fn round(self) -> Self {
                <$t>::from(self.re.round_ties_even())
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                self * a + b
            }
            #[inline(always)]
            fn cmp_eq(self, o: Self) -> bool {
                self.re == o.re
            }
            #[inline(always)]
            fn cmp_ne(self, o: Self) -> bool {
                self.re != o.re
            }
            #[inline(always)]
            fn cmp_lt(self, o: Self) -> bool {
                self.re < o.re
            }
            #[inline(always)]
            fn cmp_le(self, o: Self) -> bool {
                self.re <= o.re
            }
            #[inline(always)]
            fn cmp_gt(self, o: Self) -> bool {
                self.re > o.re
            }
            #[inline(always)]
            fn cmp_ge(self, o: Self) -> bool {
                self.re >= o.re
            }
            #[inline(always)]
            fn select(m: bool, t: Self, f: Self) -> Self {
                if m {
                    t
                } else {
                    f
                }
            }
            #[inline(always)]
            fn negate_if_odd(self, k: Self) -> Self {
                if (k.re as i64) & 1 != 0 {
                    -self
                } else {
                    self
                }
            }
            #[inline(always)]
            fn mul_pow2(self, n: Self) -> Self {
                self * (pow2(n.re as f64) as $s)
            }
            #[inline(always)]
            fn write_part(self, o: usize, out: &mut [f32]) {
                out[0] = self.part_lane(o, 0);
            }
            #[inline(always)]
            fn part_lane(self, o: usize, _i: usize) -> f32 {
                let $x = self;
                let $o = o;
                ($part) as f32
            }
        }

        impl<$($gen)*> Real for $t {
            const MANTISSA_DIGITS: u32 = <$s>::MANTISSA_DIGITS;
            #[inline(always)]
            fn val(self) -> f64 {
                self.re as f64
            }
        }

        impl<$($gen)*> DiffReal for $t {
            #[inline(always)]
            fn is_const_zero(self) -> bool {
                let $z = self;
                $is_zero
            }
        }
    };
}

impl_real_dual!(
    [const N: usize],
    DualSVec64<N>,
    f64,
    |x| x.re == 0.0 && x.eps.0.is_none_or(|m| m.iter().all(|&d| d == 0.0)),
    |x, o| if o == 0 { x.re } else { x.eps.0.map_or(0.0, |m| m[o - 1]) }
);
impl_real_dual!(
    [const N: usize],
    DualSVec32<N>,
    f32,
    |x| x.re == 0.0 && x.eps.0.is_none_or(|m| m.iter().all(|&d| d == 0.0)),
    |x, o| if o == 0 { x.re } else { x.eps.0.map_or(0.0, |m| m[o - 1]) }
);
impl_real_dual!([], Dual64, f64, |x| x.re == 0.0 && x.eps == 0.0, |x, o| if o == 0 {
    x.re
} else {
    x.eps
});
// parts: the value, d/da, d/db, d²/da db
impl_real_dual!(
    [],
    HyperDual64,
    f64,
    |x| x.re == 0.0 && x.eps1 == 0.0 && x.eps2 == 0.0 && x.eps1eps2 == 0.0,
    |x, o| [x.re, x.eps1, x.eps2, x.eps1eps2][o]
);

/// A number whose derivative parts can be seeded and read back by direction.
pub trait Seeded: DiffReal {
    /// Number of derivative directions carried.
    const DIRECTIONS: usize;
    /// `value` with derivative 1 along direction `dir` (< [`Seeded::DIRECTIONS`]).
    fn seed(value: f64, dir: usize) -> Self;
    /// The derivative part along direction `dir`.
    fn derivative(self, dir: usize) -> f64;
}

impl<const N: usize> Seeded for DualSVec64<N> {
    const DIRECTIONS: usize = N;
    #[inline]
    fn seed(value: f64, dir: usize) -> Self {
        DualSVec64::<N>::from_re(value).derivative(dir)
    }
    #[inline(always)]
    fn derivative(self, dir: usize) -> f64 {
        self.eps.0.map_or(0.0, |m| m[dir])
    }
}

impl<const N: usize> Seeded for DualSVec32<N> {
    const DIRECTIONS: usize = N;
    #[inline]
    fn seed(value: f64, dir: usize) -> Self {
        DualSVec32::<N>::from_re(value as f32).derivative(dir)
    }
    #[inline(always)]
    fn derivative(self, dir: usize) -> f64 {
        self.eps.0.map_or(0.0, |m| m[dir] as f64)
    }
}

impl Seeded for Dual64 {
    const DIRECTIONS: usize = 1;
    #[inline]
    fn seed(value: f64, _dir: usize) -> Self {
        Dual64::new(value, 1.0)
    }
    #[inline(always)]
    fn derivative(self, _dir: usize) -> f64 {
        self.eps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d<T: Seeded>(x: T, i: usize) -> f64 {
        Seeded::derivative(x, i)
    }

    #[test]
    fn dual_functions_carry_derivatives() {
        let x = <DualSVec64<2>>::seed(0.3, 0);
        let y = <DualSVec64<2>>::seed(1.7, 1);
        let f = x.sin() * y.exp() + x.atan2(y) + (x * y).sqrt();
        let (xv, yv) = (0.3f64, 1.7f64);
        let dfdx = xv.cos() * yv.exp() + yv / (xv * xv + yv * yv) + 0.5 * yv / (xv * yv).sqrt();
        let dfdy = xv.sin() * yv.exp() - xv / (xv * xv + yv * yv) + 0.5 * xv / (xv * yv).sqrt();
        assert!((d(f, 0) - dfdx).abs() < 1e-14);
        assert!((d(f, 1) - dfdy).abs() < 1e-14);
        // steps act on the value, with derivative 0
        let g = (x * <DualSVec64<2>>::c(10.0)).floor();
        assert_eq!((g.val(), d(g, 0)), (3.0, 0.0));
        assert_eq!(d(x.mul_pow2(<DualSVec64<2>>::c(3.0)), 0), 8.0);
        assert_eq!(d((-x).abs(), 0), 1.0);
        assert_eq!(d(x.negate_if_odd(<DualSVec64<2>>::c(3.0)), 0), -1.0);
        assert!(x.cmp_lt(y) && !x.cmp_eq(y));
        // a zero value with a derivative is not a constant zero
        assert!(!<DualSVec64<2>>::seed(0.0, 1).is_const_zero());
        assert!(<DualSVec64<2>>::c(0.0).is_const_zero());
        assert!(!Dual64::seed(0.0, 0).is_const_zero());
        assert!(HyperDual64::c(0.0).is_const_zero());
        assert_eq!(d(<DualSVec64<2>>::seed(0.0, 1).constant(), 1), 0.0);
    }
}
