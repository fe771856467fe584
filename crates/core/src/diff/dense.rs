//! A dense forward-mode dual number for the render kernel: the value and `N`
//! derivative parts in a plain array. num-dual's `DualSVec64<N>` keeps its
//! derivatives in an `Option` of an nalgebra vector (a branch and a generic
//! matrix operation per arithmetic operation); here every operation is a
//! fixed-length loop the compiler unrolls and vectorises, and a division is
//! a true division. Operations are `#[inline]`, not `#[inline(always)]`:
//! forcing them into the kernel crashed LLVM (rustc 1.95, thin LTO).

use super::dual::{DiffReal, Seeded};
use super::param::{Deltas, Param};
use crate::real::{Num, Real};
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// Deltas seeding `params[i]` along direction `i` of `R`.
pub(crate) fn seeded<R: Seeded>(params: &[Param]) -> Deltas<R> {
    let mut deltas = Deltas::<R>::zero();
    for (i, &p) in params.iter().enumerate() {
        deltas.set(p, R::seed(0.0, i));
    }
    deltas
}

macro_rules! dense_dual {
    ($(#[$doc:meta])* $t:ident, $s:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $t<const N: usize> {
            /// The value.
            pub re: $s,
            /// The derivative along each direction.
            pub eps: [$s; N],
        }

        impl<const N: usize> $t<N> {
            /// `f(x)` from `f(re)` and `f'(re)`.
            #[inline]
            fn chain(self, f: $s, df: $s) -> Self {
                $t { re: f, eps: self.eps.map(|e| e * df) }
            }
            /// The derivative parts scaled by `k`, with value `re`.
            #[inline]
            fn scaled(self, re: $s, k: $s) -> Self {
                self.chain(re, k)
            }
        }

        impl<const N: usize> PartialEq for $t<N> {
            /// Compares the values (as comparisons in the kernel do).
            #[inline]
            fn eq(&self, o: &Self) -> bool {
                self.re == o.re
            }
        }

        impl<const N: usize> PartialOrd for $t<N> {
            #[inline]
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                self.re.partial_cmp(&o.re)
            }
        }

        impl<const N: usize> Add for $t<N> {
            type Output = Self;
            #[inline]
            fn add(self, o: Self) -> Self {
                $t { re: self.re + o.re, eps: std::array::from_fn(|i| self.eps[i] + o.eps[i]) }
            }
        }
        impl<const N: usize> Sub for $t<N> {
            type Output = Self;
            #[inline]
            fn sub(self, o: Self) -> Self {
                $t { re: self.re - o.re, eps: std::array::from_fn(|i| self.eps[i] - o.eps[i]) }
            }
        }
        impl<const N: usize> Mul for $t<N> {
            type Output = Self;
            // the product rule adds
            #[allow(clippy::suspicious_arithmetic_impl)]
            #[inline]
            fn mul(self, o: Self) -> Self {
                $t {
                    re: self.re * o.re,
                    eps: std::array::from_fn(|i| self.eps[i] * o.re + self.re * o.eps[i]),
                }
            }
        }
        impl<const N: usize> Mul<$s> for $t<N> {
            type Output = Self;
            #[inline]
            fn mul(self, k: $s) -> Self {
                self.scaled(self.re * k, k)
            }
        }
        impl<const N: usize> Div for $t<N> {
            type Output = Self;
            #[allow(clippy::suspicious_arithmetic_impl)]
            #[inline]
            fn div(self, o: Self) -> Self {
                let re = self.re / o.re;
                let inv = 1.0 / o.re;
                $t { re, eps: std::array::from_fn(|i| (self.eps[i] - re * o.eps[i]) * inv) }
            }
        }
        impl<const N: usize> Neg for $t<N> {
            type Output = Self;
            #[inline]
            fn neg(self) -> Self {
                $t { re: -self.re, eps: self.eps.map(|e| -e) }
            }
        }
        impl<const N: usize> AddAssign for $t<N> {
            #[inline]
            fn add_assign(&mut self, o: Self) {
                *self = *self + o;
            }
        }
        impl<const N: usize> SubAssign for $t<N> {
            #[inline]
            fn sub_assign(&mut self, o: Self) {
                *self = *self - o;
            }
        }
        impl<const N: usize> MulAssign for $t<N> {
            #[inline]
            fn mul_assign(&mut self, o: Self) {
                *self = *self * o;
            }
        }
        impl<const N: usize> DivAssign for $t<N> {
            #[inline]
            fn div_assign(&mut self, o: Self) {
                *self = *self / o;
            }
        }

        impl<const N: usize> Num for $t<N> {
            type Scalar = Self;
            type Mask = bool;
            const LANES: usize = 1;
            #[inline]
            fn splat(x: Self) -> Self {
                x
            }
            #[inline]
            fn from_fn(mut f: impl FnMut(usize) -> Self) -> Self {
                f(0)
            }
            #[inline]
            fn lane(self, _i: usize) -> Self {
                self
            }
            #[inline]
            fn c(x: f64) -> Self {
                $t { re: x as $s, eps: [0.0; N] }
            }
            #[inline]
            fn sin(self) -> Self {
                let (s, c) = self.re.sin_cos();
                self.chain(s, c)
            }
            #[inline]
            fn cos(self) -> Self {
                let (s, c) = self.re.sin_cos();
                self.chain(c, -s)
            }
            #[inline]
            fn tan(self) -> Self {
                let t = self.re.tan();
                self.chain(t, 1.0 + t * t)
            }
            #[inline]
            fn exp(self) -> Self {
                let e = self.re.exp();
                self.chain(e, e)
            }
            #[inline]
            fn ln(self) -> Self {
                self.chain(self.re.ln(), 1.0 / self.re)
            }
            #[inline]
            fn atan2(self, x: Self) -> Self {
                let d = 1.0 / (x.re * x.re + self.re * self.re);
                $t {
                    re: self.re.atan2(x.re),
                    eps: std::array::from_fn(|i| (x.re * self.eps[i] - self.re * x.eps[i]) * d),
                }
            }
            #[inline]
            fn sqrt(self) -> Self {
                let r = self.re.sqrt();
                self.chain(r, 0.5 / r)
            }
            #[inline]
            fn abs(self) -> Self {
                if self.re < 0.0 {
                    -self
                } else {
                    self
                }
            }
            #[inline]
            fn floor(self) -> Self {
                $t { re: self.re.floor(), eps: [0.0; N] }
            }
            #[inline]
            fn ceil(self) -> Self {
                $t { re: self.re.ceil(), eps: [0.0; N] }
            }
            #[inline]
            fn round(self) -> Self {
                $t { re: self.re.round_ties_even(), eps: [0.0; N] }
            }
            #[inline]
            fn mul_add(self, a: Self, b: Self) -> Self {
                self * a + b
            }
            #[inline]
            fn cmp_eq(self, o: Self) -> bool {
                self.re == o.re
            }
            #[inline]
            fn cmp_ne(self, o: Self) -> bool {
                self.re != o.re
            }
            #[inline]
            fn cmp_lt(self, o: Self) -> bool {
                self.re < o.re
            }
            #[inline]
            fn cmp_le(self, o: Self) -> bool {
                self.re <= o.re
            }
            #[inline]
            fn cmp_gt(self, o: Self) -> bool {
                self.re > o.re
            }
            #[inline]
            fn cmp_ge(self, o: Self) -> bool {
                self.re >= o.re
            }
            #[inline]
            fn select(m: bool, t: Self, f: Self) -> Self {
                if m {
                    t
                } else {
                    f
                }
            }
            #[inline]
            fn negate_if_odd(self, k: Self) -> Self {
                if (k.re as i64) & 1 != 0 {
                    -self
                } else {
                    self
                }
            }
            #[inline]
            fn mul_pow2(self, n: Self) -> Self {
                self * (<$s as Num>::mul_pow2(1.0, n.re))
            }
            #[inline(always)]
            fn write_part(self, o: usize, out: &mut [f32]) {
                out[0] = self.part_lane(o, 0);
            }
            #[inline(always)]
            fn part_lane(self, o: usize, _i: usize) -> f32 {
                (if o == 0 { self.re } else { self.eps[o - 1] }) as f32
            }
        }

        impl<const N: usize> Real for $t<N> {
            const MANTISSA_DIGITS: u32 = <$s>::MANTISSA_DIGITS;
            #[inline]
            fn val(self) -> f64 {
                self.re as f64
            }
        }

        impl<const N: usize> DiffReal for $t<N> {
            #[inline]
            fn is_const_zero(self) -> bool {
                self.re == 0.0 && self.eps.iter().all(|&e| e == 0.0)
            }
        }

        impl<const N: usize> Seeded for $t<N> {
            const DIRECTIONS: usize = N;
            #[inline]
            fn seed(value: f64, dir: usize) -> Self {
                let mut x = Self::c(value);
                x.eps[dir] = 1.0;
                x
            }
            #[inline]
            fn derivative(self, dir: usize) -> f64 {
                self.eps[dir] as f64
            }
        }
    };
}

dense_dual!(
    /// Value and `N` derivatives in f64.
    Dense64,
    f64
);
dense_dual!(
    /// Value and `N` derivatives in f32.
    Dense32,
    f32
);

impl<const N: usize> Dense64<N> {
    /// Rounded to single precision.
    pub fn to_f32(self) -> Dense32<N> {
        Dense32 { re: self.re as f32, eps: self.eps.map(|e| e as f32) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_dual::DualSVec64;

    #[test]
    fn dense_duals_match_num_dual() {
        fn f<R: Real>(x: R, y: R) -> R {
            (x.sin() * y.exp() + x.atan2(y) + (x * y).sqrt()) / (y.cos() - x.tan()) + (x / y).ln()
                - x.mul_pow2(R::c(3.0)).abs().negate_if_odd(R::c(3.0))
        }
        let (a, b) = (Dense64::<2>::seed(0.3, 0), Dense64::<2>::seed(1.7, 1));
        let (p, q) = (DualSVec64::<2>::seed(0.3, 0), DualSVec64::<2>::seed(1.7, 1));
        let (u, v) = (f(a, b), f(p, q));
        assert!((u.val() - v.val()).abs() < 1e-15);
        for i in 0..2 {
            let (du, dv) = (u.derivative(i), Seeded::derivative(v, i));
            assert!((du - dv).abs() < 1e-13 * dv.abs(), "{i}: {du} vs {dv}");
            let d32 = f(a.to_f32(), b.to_f32()).derivative(i);
            assert!((d32 - dv).abs() < 1e-5 * dv.abs(), "{i}: {d32} vs {dv}");
        }
        assert_eq!(f(a, b).val(), f(0.3f64, 1.7f64));
        assert_eq!(a.floor().derivative(0), 0.0);
        assert!(
            !Dense64::<2>::seed(0.0, 1).is_const_zero() && Dense64::<2>::c(0.0).is_const_zero()
        );
    }
}
