//! The scalar type the physics is written over.
//!
//! Every kernel function is generic over [`Real`], so the same source is
//! instantiated for `f64` (parity), `f32` (speed) and dual numbers
//! (derivatives). Comparisons and rounding look only at the value part.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// A real number type the physics kernels can run on.
pub trait Real:
    Copy
    + Debug
    + Send
    + Sync
    + PartialEq
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + 'static
{
    /// Lift a constant.
    fn c(x: f64) -> Self;
    /// The value part as f64 (drops derivative parts).
    fn val(self) -> f64;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Tangent.
    fn tan(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Exponential.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Four-quadrant arctangent of self/x.
    fn atan2(self, x: Self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Zero.
    #[inline(always)]
    fn zero() -> Self {
        Self::c(0.0)
    }
    /// One.
    #[inline(always)]
    fn one() -> Self {
        Self::c(1.0)
    }
}

macro_rules! impl_real_float {
    ($t:ty) => {
        impl Real for $t {
            #[inline(always)]
            fn c(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn val(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn atan2(self, x: Self) -> Self {
                <$t>::atan2(self, x)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
        }
    };
}

impl_real_float!(f64);
impl_real_float!(f32);
