//! The number types the physics is written over.
//!
//! Every kernel function is generic over [`Num`], so the same source is
//! instantiated for scalar `f64` (parity with nanoBragg.c), scalar `f32`,
//! SIMD vectors of either (one lane per pixel, see `render::simd`) and the
//! dual numbers of [`dual`] over any of these (derivatives). A [`Num`] is a bundle of `LANES` values:
//! comparisons return a [`Mask`] and branches that differ between lanes are
//! written as [`Num::select`]. [`Real`] is the scalar case (`LANES == 1`,
//! masks are `bool`), with ordinary comparisons and [`Real::val`].
//!
//! Two families of functions are provided:
//! - the *reference* functions of [`Num`] (`sin`, `exp`, `atan2`, ...) have
//!   libm accuracy (for SIMD vectors they call libm lane by lane); the exact
//!   render path uses them, so the f64 instance reproduces the C program;
//! - the *fast* functions of [`fast`] are branch-free polynomials written
//!   once against [`Num`] (so they vectorise), with the accuracy stated there.

pub mod dual;
pub mod fast;
pub mod plain;

use std::fmt::Debug;
use std::ops::{
    Add, AddAssign, BitAnd, BitOr, Div, DivAssign, Mul, MulAssign, Neg, Not, Sub, SubAssign,
};

/// Per-lane booleans: the result of comparing two [`Num`]s.
pub trait Mask:
    Copy
    + Debug
    + Send
    + Sync
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + Not<Output = Self>
    + 'static
{
    /// Number of lanes.
    const LANES: usize;
    /// The same boolean in every lane.
    fn splat(b: bool) -> Self;
    /// Whether any lane is set.
    fn any(self) -> bool;
    /// Whether every lane is set.
    fn all(self) -> bool;
    /// Lane `i` as bit `i`.
    fn bits(self) -> u32;
    /// Bit `i` as lane `i` (bits beyond the lane count are ignored).
    fn from_bits(bits: u32) -> Self;
}

impl Mask for bool {
    const LANES: usize = 1;
    #[inline(always)]
    fn splat(b: bool) -> Self {
        b
    }
    #[inline(always)]
    fn any(self) -> bool {
        self
    }
    #[inline(always)]
    fn all(self) -> bool {
        self
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self as u32
    }
    #[inline(always)]
    fn from_bits(bits: u32) -> Self {
        bits & 1 != 0
    }
}

/// A bundle of `LANES` real numbers the physics kernels can run on.
///
/// Arithmetic is lane by lane and IEEE (no implicit fusing), so a vector
/// computes in every lane exactly what the scalar type computes.
pub trait Num:
    Copy
    + Debug
    + Send
    + Sync
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
    /// The type of one lane.
    type Scalar: Real;
    /// Result of lane-wise comparisons.
    type Mask: Mask;
    /// Number of lanes.
    const LANES: usize;
    /// Parts per lane: 1 for a plain number; dual numbers add their
    /// derivative parts (see [`Num::write_part`]).
    const PARTS: usize = 1;
    /// Machine numbers or vectors one value is made of: 1, twice its
    /// halves' for [`X2`].
    const VECTORS: usize = 1;

    /// The same value in every lane.
    fn splat(x: Self::Scalar) -> Self;
    /// Lane `i` set to `f(i)`.
    fn from_fn(f: impl FnMut(usize) -> Self::Scalar) -> Self;
    /// The value of lane `i`.
    fn lane(self, i: usize) -> Self::Scalar;
    /// Lift a constant (rounded to the lane type).
    fn c(x: f64) -> Self;
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

    /// Sine (libm accuracy).
    fn sin(self) -> Self;
    /// Cosine (libm accuracy).
    fn cos(self) -> Self;
    /// Tangent (libm accuracy).
    fn tan(self) -> Self;
    /// Exponential (libm accuracy).
    fn exp(self) -> Self;
    /// Natural logarithm (libm accuracy).
    fn ln(self) -> Self;
    /// Four-quadrant arctangent of self/x (libm accuracy).
    fn atan2(self, x: Self) -> Self;
    /// Square root (correctly rounded).
    fn sqrt(self) -> Self;
    /// `(√self, 1/√self)` for a positive, normal `self`: the fast kernels'
    /// distance and its reciprocal. A correctly rounded square root and one
    /// division unless the type has a form within about an ulp that needs
    /// no divider (AVX-512's f64 lanes).
    #[inline(always)]
    fn sqrt_recip(self) -> (Self, Self) {
        let r = self.sqrt();
        (r, Self::one() / r)
    }
    /// Absolute value.
    fn abs(self) -> Self;
    /// Largest integer not above.
    fn floor(self) -> Self;
    /// Smallest integer not below.
    fn ceil(self) -> Self;
    /// Nearest integer, ties to even.
    fn round(self) -> Self;
    /// `self * a + b`, fused (one rounding) where the type has hardware FMA,
    /// otherwise a plain multiply and add. Exact (C-order) code never calls it.
    fn mul_add(self, a: Self, b: Self) -> Self;

    /// Lane-wise `==`.
    fn cmp_eq(self, o: Self) -> Self::Mask;
    /// Lane-wise `!=` (true for NaN).
    fn cmp_ne(self, o: Self) -> Self::Mask;
    /// Lane-wise `<`.
    fn cmp_lt(self, o: Self) -> Self::Mask;
    /// Lane-wise `<=`.
    fn cmp_le(self, o: Self) -> Self::Mask;
    /// Lane-wise `>`.
    fn cmp_gt(self, o: Self) -> Self::Mask;
    /// Lane-wise `>=`.
    fn cmp_ge(self, o: Self) -> Self::Mask;
    /// `t` where `m` is set, else `f`.
    fn select(m: Self::Mask, t: Self, f: Self) -> Self;
    /// `-self` in the lanes where the integer `k` is odd. `k` must hold whole
    /// numbers below 2^51 (f64 lanes) or 2^22 (f32 lanes) in magnitude.
    fn negate_if_odd(self, k: Self) -> Self;
    /// `self * 2^n` for whole `n` with `2^n` a normal number of the lane type.
    fn mul_pow2(self, n: Self) -> Self;
    /// Lane `i`: `table[(o₀·s₀ + o₁)·s₁ + o₂]`, rounded to the lane type,
    /// where `m` is set, else `otherwise`'s lane; `[o₀, o₁, o₂]` are
    /// `offsets`' lanes and `[s₀, s₁]` the `strides`. In the lanes of `m`
    /// the offsets must be whole and non-negative. A lane whose index falls
    /// outside `table` reads `otherwise`. The vector types read all lanes
    /// with one masked gather (see [`gather_lanes`] for the others).
    #[inline(always)]
    fn gather(
        table: &[f64],
        offsets: [Self; 3],
        strides: [usize; 2],
        m: Self::Mask,
        otherwise: Self,
    ) -> Self {
        gather_lanes(table, offsets, strides, m, otherwise)
    }
    /// `f(x)`: `f`'s value; on dual numbers the derivative parts come from
    /// `f`'s own partial derivatives at the values (the chain rule), not
    /// from differentiating the formula of its value step by step.
    #[inline(always)]
    fn apply<const K: usize, F: Smooth<K>>(x: [Self; K], f: &F) -> Self {
        f.eval(x, false).0
    }
    /// Store the lanes, rounded to f32, into `out[..LANES]`.
    #[inline(always)]
    fn write_f32(self, out: &mut [f32]) {
        for (i, o) in out[..Self::LANES].iter_mut().enumerate() {
            *o = self.lane(i).val() as f32;
        }
    }
    /// Store part `o` of the lanes, rounded to f32, into `out[..LANES]`:
    /// part 0 is the value; dual numbers add their derivative parts.
    #[inline(always)]
    fn write_part(self, o: usize, out: &mut [f32]) {
        debug_assert_eq!(o, 0, "a plain number has one part");
        self.write_f32(out);
    }
    /// Part `o` (see [`Num::write_part`]) of lane `i`, rounded to f32.
    #[inline(always)]
    fn part_lane(self, o: usize, i: usize) -> f32 {
        debug_assert_eq!(o, 0, "a plain number has one part");
        self.lane(i).val() as f32
    }
    /// Part `o` (see [`Num::write_part`]) of lane `i`, as f64.
    #[inline(always)]
    fn part_f64(self, o: usize, i: usize) -> f64 {
        debug_assert_eq!(o, 0, "a plain number has one part");
        self.lane(i).val()
    }
}

/// [`Num::gather`] lane by lane: what every type computes.
#[inline(always)]
pub fn gather_lanes<V: Num>(
    table: &[f64],
    offsets: [V; 3],
    [s0, s1]: [usize; 2],
    m: V::Mask,
    otherwise: V,
) -> V {
    let m = m.bits();
    V::from_fn(|i| {
        let [a, b, c] = offsets.map(|o| o.lane(i).val() as usize);
        let at = a.checked_mul(s0).and_then(|x| x.checked_add(b)?.checked_mul(s1)?.checked_add(c));
        match at.and_then(|j| table.get(j)) {
            Some(&x) if m >> i & 1 != 0 => V::Scalar::c(x),
            _ => otherwise.lane(i),
        }
    })
}

/// A function of `K` numbers that states its partial derivatives, for
/// [`Num::apply`]. Where the derivative of a formula taken step by step
/// loses its digits (a quotient whose numerator and denominator both vanish
/// at a limit, as `sin(Nθ)/sin θ` at θ = 0), the function gives a better
/// one (a series there), and dual numbers take it.
pub trait Smooth<const K: usize> {
    /// The value at `x` and, when `slopes`, the partial derivatives by each
    /// argument (otherwise unspecified and unread). `W` is the value type
    /// of the numbers [`Num::apply`] was called with.
    fn eval<W: Num>(&self, x: [W; K], slopes: bool) -> (W, [W; K]);
}

/// A scalar real number type (one lane, `bool` masks).
pub trait Real: Num<Scalar = Self, Mask = bool> + PartialEq + PartialOrd + 'static {
    /// Significand bits of the value part (53 for f64, 24 for f32); the fast
    /// functions pick their polynomial degree from it.
    const MANTISSA_DIGITS: u32 = 53;
    /// The value part as f64 (drops derivative parts).
    fn val(self) -> f64;
}

macro_rules! impl_real_float {
    ($t:ty, $bits:ty) => {
        impl Num for $t {
            type Scalar = $t;
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
                x as $t
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
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline(always)]
            fn round(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                // Fused where FMA is in the target's baseline (aarch64, or
                // x86-64 built with +fma): one instruction, as the SIMD
                // lanes do. Elsewhere it would be a libm call, so the plain
                // (twice-rounded) form.
                #[cfg(any(target_arch = "aarch64", target_feature = "fma"))]
                {
                    <$t>::mul_add(self, a, b)
                }
                #[cfg(not(any(target_arch = "aarch64", target_feature = "fma")))]
                {
                    self * a + b
                }
            }
            #[inline(always)]
            fn cmp_eq(self, o: Self) -> bool {
                self == o
            }
            #[inline(always)]
            fn cmp_ne(self, o: Self) -> bool {
                self != o
            }
            #[inline(always)]
            fn cmp_lt(self, o: Self) -> bool {
                self < o
            }
            #[inline(always)]
            fn cmp_le(self, o: Self) -> bool {
                self <= o
            }
            #[inline(always)]
            fn cmp_gt(self, o: Self) -> bool {
                self > o
            }
            #[inline(always)]
            fn cmp_ge(self, o: Self) -> bool {
                self >= o
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
                if (k as i64) & 1 != 0 {
                    -self
                } else {
                    self
                }
            }
            #[inline(always)]
            fn mul_pow2(self, n: Self) -> Self {
                let e = (n as i64 + (<$t>::MAX_EXP as i64 - 1)) as $bits;
                self * <$t>::from_bits(e << (<$t>::MANTISSA_DIGITS - 1))
            }
        }

        impl Real for $t {
            const MANTISSA_DIGITS: u32 = <$t>::MANTISSA_DIGITS;
            #[inline(always)]
            fn val(self) -> f64 {
                self as f64
            }
        }
    };
}

impl_real_float!(f64, u64);
impl_real_float!(f32, u32);

/// Two numbers side by side, `2 × V::LANES` lanes (the low half first).
///
/// Rendering two SIMD vectors per call gives the CPU two independent
/// dependency chains through the long polynomial and division latencies.
#[derive(Debug, Clone, Copy)]
pub struct X2<V>(pub V, pub V);

macro_rules! x2_binop {
    ($tr:ident, $f:ident, $tra:ident, $fa:ident) => {
        impl<V: $tr<Output = V>> $tr for X2<V> {
            type Output = Self;
            #[inline(always)]
            fn $f(self, o: Self) -> Self {
                X2(self.0.$f(o.0), self.1.$f(o.1))
            }
        }
        impl<V: $tr<Output = V> + Copy> $tra for X2<V> {
            #[inline(always)]
            fn $fa(&mut self, o: Self) {
                *self = X2(self.0.$f(o.0), self.1.$f(o.1));
            }
        }
    };
}

x2_binop!(Add, add, AddAssign, add_assign);
x2_binop!(Sub, sub, SubAssign, sub_assign);
x2_binop!(Mul, mul, MulAssign, mul_assign);
x2_binop!(Div, div, DivAssign, div_assign);

impl<V: Neg<Output = V>> Neg for X2<V> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        X2(-self.0, -self.1)
    }
}

impl<M: BitAnd<Output = M>> BitAnd for X2<M> {
    type Output = Self;
    #[inline(always)]
    fn bitand(self, o: Self) -> Self {
        X2(self.0 & o.0, self.1 & o.1)
    }
}

impl<M: BitOr<Output = M>> BitOr for X2<M> {
    type Output = Self;
    #[inline(always)]
    fn bitor(self, o: Self) -> Self {
        X2(self.0 | o.0, self.1 | o.1)
    }
}

impl<M: Not<Output = M>> Not for X2<M> {
    type Output = Self;
    #[inline(always)]
    fn not(self) -> Self {
        X2(!self.0, !self.1)
    }
}

impl<M: Mask> Mask for X2<M> {
    const LANES: usize = 2 * M::LANES;
    #[inline(always)]
    fn splat(b: bool) -> Self {
        X2(M::splat(b), M::splat(b))
    }
    #[inline(always)]
    fn any(self) -> bool {
        (self.0 | self.1).any()
    }
    #[inline(always)]
    fn all(self) -> bool {
        (self.0 & self.1).all()
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        self.0.bits() | self.1.bits() << M::LANES
    }
    #[inline(always)]
    fn from_bits(bits: u32) -> Self {
        X2(M::from_bits(bits), M::from_bits(bits >> M::LANES))
    }
}

macro_rules! x2_unary {
    ($($f:ident),*) => {
        $(
            #[inline(always)]
            fn $f(self) -> Self {
                X2(self.0.$f(), self.1.$f())
            }
        )*
    };
}

macro_rules! x2_cmp {
    ($($f:ident),*) => {
        $(
            #[inline(always)]
            fn $f(self, o: Self) -> Self::Mask {
                X2(self.0.$f(o.0), self.1.$f(o.1))
            }
        )*
    };
}

impl<V: Num> Num for X2<V> {
    type Scalar = V::Scalar;
    type Mask = X2<V::Mask>;
    const LANES: usize = 2 * V::LANES;
    const VECTORS: usize = 2 * V::VECTORS;

    #[inline(always)]
    fn splat(x: Self::Scalar) -> Self {
        X2(V::splat(x), V::splat(x))
    }
    #[inline(always)]
    fn from_fn(mut f: impl FnMut(usize) -> Self::Scalar) -> Self {
        let lo = V::from_fn(&mut f);
        X2(lo, V::from_fn(|i| f(i + V::LANES)))
    }
    #[inline(always)]
    fn lane(self, i: usize) -> Self::Scalar {
        if i < V::LANES {
            self.0.lane(i)
        } else {
            self.1.lane(i - V::LANES)
        }
    }
    #[inline(always)]
    fn c(x: f64) -> Self {
        X2(V::c(x), V::c(x))
    }
    x2_unary!(sin, cos, tan, exp, ln, sqrt, abs, floor, ceil, round);
    #[inline(always)]
    fn sqrt_recip(self) -> (Self, Self) {
        let ((r0, i0), (r1, i1)) = (self.0.sqrt_recip(), self.1.sqrt_recip());
        (X2(r0, r1), X2(i0, i1))
    }
    #[inline(always)]
    fn atan2(self, x: Self) -> Self {
        X2(self.0.atan2(x.0), self.1.atan2(x.1))
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        X2(self.0.mul_add(a.0, b.0), self.1.mul_add(a.1, b.1))
    }
    x2_cmp!(cmp_eq, cmp_ne, cmp_lt, cmp_le, cmp_gt, cmp_ge);
    #[inline(always)]
    fn select(m: Self::Mask, t: Self, f: Self) -> Self {
        X2(V::select(m.0, t.0, f.0), V::select(m.1, t.1, f.1))
    }
    #[inline(always)]
    fn negate_if_odd(self, k: Self) -> Self {
        X2(self.0.negate_if_odd(k.0), self.1.negate_if_odd(k.1))
    }
    #[inline(always)]
    fn mul_pow2(self, n: Self) -> Self {
        X2(self.0.mul_pow2(n.0), self.1.mul_pow2(n.1))
    }
    #[inline(always)]
    fn apply<const K: usize, F: Smooth<K>>(x: [Self; K], f: &F) -> Self {
        X2(V::apply(x.map(|a| a.0), f), V::apply(x.map(|a| a.1), f))
    }
    #[inline(always)]
    fn gather(
        table: &[f64],
        offsets: [Self; 3],
        strides: [usize; 2],
        m: Self::Mask,
        otherwise: Self,
    ) -> Self {
        X2(
            V::gather(table, offsets.map(|o| o.0), strides, m.0, otherwise.0),
            V::gather(table, offsets.map(|o| o.1), strides, m.1, otherwise.1),
        )
    }
    #[inline(always)]
    fn write_f32(self, out: &mut [f32]) {
        self.0.write_f32(&mut out[..V::LANES]);
        self.1.write_f32(&mut out[V::LANES..2 * V::LANES]);
    }
}

/// A [`Real`] that can say whether it is an exact constant zero.
///
/// Setup skips a rotation by a zero angle, as nanoBragg.c does; an angle whose
/// value is 0 but which carries a derivative must still be applied.
pub trait DiffReal: Real {
    /// The value and every derivative part are zero.
    fn is_const_zero(self) -> bool;
    /// The value part kept, derivative parts dropped.
    #[inline(always)]
    fn constant(self) -> Self {
        Self::c(self.val())
    }
}

impl DiffReal for f64 {
    #[inline(always)]
    fn is_const_zero(self) -> bool {
        self == 0.0
    }
}

impl DiffReal for f32 {
    #[inline(always)]
    fn is_const_zero(self) -> bool {
        self == 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_helpers() {
        assert_eq!(3.0f64.negate_if_odd(5.0), -3.0);
        assert_eq!(3.0f64.negate_if_odd(-4.0), 3.0);
        assert_eq!(3.0f32.negate_if_odd(-7.0), -3.0);
        assert_eq!(1.5f64.mul_pow2(-3.0), 1.5 / 8.0);
        assert_eq!(1.5f32.mul_pow2(10.0), 1536.0);
        assert_eq!(Num::round(2.5f64), 2.0);
        assert_eq!(<f64 as Num>::select(true, 1.0, 2.0), 1.0);
        assert!(!<bool as Mask>::from_bits(0b10));
        let x = X2(1.0f64, -2.5);
        assert_eq!(X2::<f64>::LANES, 2);
        assert_eq!(x.abs().lane(1), 2.5);
        assert_eq!(x.cmp_lt(X2(0.0, 0.0)).bits(), 0b10);
        assert!(X2::<bool>::from_bits(0b10).1);
        let y = X2::<f64>::from_fn(|i| i as f64);
        assert_eq!((y.0, y.1), (0.0, 1.0));
    }
}
