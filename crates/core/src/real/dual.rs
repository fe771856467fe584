//! The one forward-mode dual number: a value and `N` derivative parts, each
//! of any [`Num`] type.
//!
//! [`Dual`]`<V, N>` is a scalar dual when `V` is `f64` or `f32` (it is then a
//! [`Real`], and setup can run in it), a bundle of `V::LANES` pixel duals
//! when `V` is a SIMD vector (lane `i` is the scalar dual of pixel `f0 + i`;
//! comparisons and `select` act on the value lanes and every derivative part
//! follows the selected lane), and a second-order (hyper-dual) number when
//! `V` is itself a dual: `Dual<Dual<f64, 1>, 1>` carries d/da in its inner
//! and d/db in its outer parts, and d²/da db in the inner part of the outer
//! one.
//!
//! Comparisons, `floor`, `ceil` and `round` act on the value (the derivative
//! of a step is taken as 0 everywhere); every other function carries its
//! exact derivative. `mul_add` is the plain multiply and add (no fusing, as
//! the exact kernel computes).
//!
//! On one lane `sin`, `cos` and `exp` take libm's values. On SIMD bundles,
//! where libm per lane would cost most of a derivative render, they take the
//! branch-free polynomials of [`super::fast`] (sin/cos 3e-16·max(1, |x|)
//! absolute, exp 3e-16 relative in f64); the derivative parts follow from the
//! same values (d sin = cos, d exp = exp). `atan2`, `tan` and `ln` are libm
//! per lane on every type.

use super::{fast, DiffReal, Num, Real, Smooth};
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// A value and `N` derivative parts (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Dual<V, const N: usize> {
    /// The value.
    pub re: V,
    /// The derivative along each direction.
    pub eps: [V; N],
}

/// A dual over f64: the value and `N` derivatives of one pixel or leaf.
pub type Dense64<const N: usize> = Dual<f64, N>;
/// A dual over f32.
pub type Dense32<const N: usize> = Dual<f32, N>;
/// Second derivatives by two directions a and b: parts value, d/da, d/db,
/// d²/da db (see [`Num::write_part`]).
pub type HyperDual64 = Dual<Dual<f64, 1>, 1>;

impl<V: Num, const N: usize> Dual<V, N> {
    /// Derivative parts zero.
    #[inline(always)]
    pub fn constant(re: V) -> Self {
        Dual { re, eps: [V::zero(); N] }
    }

    /// `f(x)` from `f(re)` and `f'(re)`.
    #[inline(always)]
    fn chain(self, f: V, df: V) -> Self {
        let mut eps = self.eps;
        each_mut(&mut eps, |e| *e *= df);
        Dual { re: f, eps }
    }

    /// Sine and cosine of the value (see the module docs).
    #[inline(always)]
    fn value_sin_cos(self) -> (V, V) {
        sin_cos(self.re)
    }
}

/// The sine and cosine a dual number over `V` takes of its value: the fast
/// polynomials on SIMD lanes, libm's on one lane (see the module docs).
#[inline(always)]
pub fn sin_cos<V: Num>(x: V) -> (V, V) {
    if V::LANES > 1 {
        fast::sin_cos(x)
    } else {
        (x.sin(), x.cos())
    }
}

/// A hyper-dual number: `value` with derivative `da` along a and `db`
/// along b.
pub fn hyper(value: f64, da: f64, db: f64) -> HyperDual64 {
    Dual { re: Dual { re: value, eps: [da] }, eps: [Dual { re: db, eps: [0.0] }] }
}

impl<const N: usize> Dual<f64, N> {
    /// Rounded to single precision.
    pub fn to_f32(self) -> Dual<f32, N> {
        Dual { re: self.re as f32, eps: self.eps.map(|e| e as f32) }
    }
}

/// `f` on each part of `a`, without a loop where there is one part. The
/// operations are inlined (`#[inline(always)]`) into the row functions
/// before LLVM unrolls their loops, and a loop of one trip per operation
/// costs the loop passes there nonetheless: in a hyper-dual (duals of one
/// part, nested) row function, thousands of them took half the crate's
/// optimisation time. The numbers are those of the loop, which the other
/// sizes keep.
#[inline(always)]
fn each_mut<V, const N: usize>(a: &mut [V; N], mut f: impl FnMut(&mut V)) {
    match N {
        1 => f(&mut a[0]),
        _ => {
            for x in a.iter_mut() {
                f(x);
            }
        }
    }
}

/// `f` on each part of `a` with its index (see [`each_mut`]).
#[inline(always)]
fn each_indexed<V, const N: usize>(a: &mut [V; N], mut f: impl FnMut(usize, &mut V)) {
    match N {
        1 => f(0, &mut a[0]),
        _ => {
            for (j, x) in a.iter_mut().enumerate() {
                f(j, x);
            }
        }
    }
}

/// `f` on each part of `a` with the same part of `b` (see [`each_mut`]).
#[inline(always)]
fn each_zip<V, W: Copy, const N: usize>(a: &mut [V; N], b: &[W; N], mut f: impl FnMut(&mut V, W)) {
    match N {
        1 => f(&mut a[0], b[0]),
        _ => {
            for (x, &y) in a.iter_mut().zip(b.iter()) {
                f(x, y);
            }
        }
    }
}

impl<V: Num, const N: usize> Add for Dual<V, N> {
    type Output = Self;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        let mut eps = self.eps;
        each_zip(&mut eps, &o.eps, |e, d| *e += d);
        Dual { re: self.re + o.re, eps }
    }
}

impl<V: Num, const N: usize> Sub for Dual<V, N> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        let mut eps = self.eps;
        each_zip(&mut eps, &o.eps, |e, d| *e -= d);
        Dual { re: self.re - o.re, eps }
    }
}

impl<V: Num, const N: usize> Mul for Dual<V, N> {
    type Output = Self;
    // the product rule adds
    #[allow(clippy::suspicious_arithmetic_impl)]
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        let mut eps = self.eps;
        each_zip(&mut eps, &o.eps, |e, d| *e = *e * o.re + self.re * d);
        Dual { re: self.re * o.re, eps }
    }
}

impl<V: Num, const N: usize> Div for Dual<V, N> {
    type Output = Self;
    #[allow(clippy::suspicious_arithmetic_impl)]
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        let re = self.re / o.re;
        let inv = V::one() / o.re;
        let mut eps = self.eps;
        each_zip(&mut eps, &o.eps, |e, d| *e = (*e - re * d) * inv);
        Dual { re, eps }
    }
}

impl<V: Num, const N: usize> Neg for Dual<V, N> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        let mut eps = self.eps;
        each_mut(&mut eps, |e| *e = -*e);
        Dual { re: -self.re, eps }
    }
}

macro_rules! assign_ops {
    ($($tr:ident $f:ident $op:tt),*) => {$(
        impl<V: Num, const N: usize> $tr for Dual<V, N> {
            #[inline(always)]
            fn $f(&mut self, o: Self) {
                *self = *self $op o;
            }
        }
    )*};
}
assign_ops!(AddAssign add_assign +, SubAssign sub_assign -, MulAssign mul_assign *, DivAssign div_assign /);

impl<V: Num, const N: usize> Num for Dual<V, N> {
    type Scalar = Dual<V::Scalar, N>;
    type Mask = V::Mask;
    const LANES: usize = V::LANES;
    const PARTS: usize = V::PARTS * (N + 1);

    #[inline(always)]
    fn splat(x: Self::Scalar) -> Self {
        let mut eps = [V::zero(); N];
        each_zip(&mut eps, &x.eps, |e, d| *e = V::splat(d));
        Dual { re: V::splat(x.re), eps }
    }
    #[inline(always)]
    fn from_fn(mut f: impl FnMut(usize) -> Self::Scalar) -> Self {
        let mut xs = [Self::Scalar::zero(); 16];
        match V::LANES {
            1 => xs[0] = f(0),
            _ => {
                for (i, x) in xs.iter_mut().enumerate().take(V::LANES) {
                    *x = f(i);
                }
            }
        }
        let mut eps = [V::zero(); N];
        each_indexed(&mut eps, |j, e| *e = V::from_fn(|i| xs[i].eps[j]));
        Dual { re: V::from_fn(|i| xs[i].re), eps }
    }
    #[inline(always)]
    fn lane(self, i: usize) -> Self::Scalar {
        let mut eps = [<V::Scalar as Num>::zero(); N];
        each_zip(&mut eps, &self.eps, |e, v| *e = v.lane(i));
        Dual { re: self.re.lane(i), eps }
    }
    #[inline(always)]
    fn c(x: f64) -> Self {
        Self::constant(V::c(x))
    }
    #[inline(always)]
    fn sin(self) -> Self {
        let (s, c) = self.value_sin_cos();
        self.chain(s, c)
    }
    #[inline(always)]
    fn cos(self) -> Self {
        let (s, c) = self.value_sin_cos();
        self.chain(c, -s)
    }
    #[inline(always)]
    fn tan(self) -> Self {
        let t = self.re.tan();
        self.chain(t, V::one() + t * t)
    }
    #[inline(always)]
    fn exp(self) -> Self {
        let e = if V::LANES > 1 { fast::exp(self.re) } else { self.re.exp() };
        self.chain(e, e)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        self.chain(self.re.ln(), V::one() / self.re)
    }
    #[inline(always)]
    fn atan2(self, x: Self) -> Self {
        let d = V::one() / (x.re * x.re + self.re * self.re);
        let mut eps = self.eps;
        each_zip(&mut eps, &x.eps, |e, b| *e = (x.re * *e - self.re * b) * d);
        Dual { re: self.re.atan2(x.re), eps }
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        let r = self.re.sqrt();
        // 0.5 · (1/r), not 0.5/r: the same number in plain lanes (halving is
        // exact), and a reciprocal of r that follows (a unit vector's 1/|x|)
        // shares the division
        self.chain(r, V::c(0.5) * (V::one() / r))
    }
    #[inline(always)]
    fn sqrt_recip(self) -> (Self, Self) {
        let (r, inv) = self.re.sqrt_recip();
        let root = self.chain(r, V::c(0.5) * inv);
        // the parts of `1 / root`, with 1/r the lanes' reciprocal
        let mut eps = root.eps;
        each_mut(&mut eps, |e| *e = (V::zero() - inv * *e) * inv);
        (root, Dual { re: inv, eps })
    }
    #[inline(always)]
    fn abs(self) -> Self {
        Self::select(self.re.cmp_lt(V::zero()), -self, self)
    }
    #[inline(always)]
    fn floor(self) -> Self {
        // (a step: derivatives zero; written out, as a function passed in
        // can be called out of line from a `#[target_feature]` row function
        // and lose its vector instructions)
        Self::constant(self.re.floor())
    }
    #[inline(always)]
    fn ceil(self) -> Self {
        Self::constant(self.re.ceil())
    }
    #[inline(always)]
    fn round(self) -> Self {
        Self::constant(self.re.round())
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        self * a + b
    }
    #[inline(always)]
    fn cmp_eq(self, o: Self) -> V::Mask {
        self.re.cmp_eq(o.re)
    }
    #[inline(always)]
    fn cmp_ne(self, o: Self) -> V::Mask {
        self.re.cmp_ne(o.re)
    }
    #[inline(always)]
    fn cmp_lt(self, o: Self) -> V::Mask {
        self.re.cmp_lt(o.re)
    }
    #[inline(always)]
    fn cmp_le(self, o: Self) -> V::Mask {
        self.re.cmp_le(o.re)
    }
    #[inline(always)]
    fn cmp_gt(self, o: Self) -> V::Mask {
        self.re.cmp_gt(o.re)
    }
    #[inline(always)]
    fn cmp_ge(self, o: Self) -> V::Mask {
        self.re.cmp_ge(o.re)
    }
    #[inline(always)]
    fn select(m: V::Mask, t: Self, f: Self) -> Self {
        let mut eps = t.eps;
        each_zip(&mut eps, &f.eps, |e, b| *e = V::select(m, *e, b));
        Dual { re: V::select(m, t.re, f.re), eps }
    }
    /// The table holds constants: the lanes read have no derivative part.
    #[inline(always)]
    fn gather(
        table: &[f64],
        offsets: [Self; 3],
        strides: [usize; 2],
        m: V::Mask,
        otherwise: Self,
    ) -> Self {
        let re = V::gather(table, offsets.map(|o| o.re), strides, m, otherwise.re);
        let mut eps = otherwise.eps;
        each_mut(&mut eps, |e| *e = V::select(m, V::zero(), *e));
        Dual { re, eps }
    }
    #[inline(always)]
    fn negate_if_odd(self, k: Self) -> Self {
        let mut eps = self.eps;
        each_mut(&mut eps, |e| *e = e.negate_if_odd(k.re));
        Dual { re: self.re.negate_if_odd(k.re), eps }
    }
    #[inline(always)]
    fn mul_pow2(self, n: Self) -> Self {
        let p = V::one().mul_pow2(n.re);
        self.chain(self.re * p, p)
    }
    #[inline(always)]
    fn apply<const K: usize, F: Smooth<K>>(x: [Self; K], f: &F) -> Self {
        let (re, slopes) = f.eval(x.map(|a| a.re), true);
        let mut eps = [V::zero(); N];
        // (no loop of one trip: see [`each_mut`])
        let part = |j: usize, e: &mut V| match K {
            1 => *e += x[0].eps[j] * slopes[0],
            _ => {
                for (a, &d) in x.iter().zip(slopes.iter()) {
                    *e += a.eps[j] * d;
                }
            }
        };
        each_indexed(&mut eps, part);
        Dual { re, eps }
    }
    #[inline(always)]
    fn write_f32(self, out: &mut [f32]) {
        self.re.write_f32(out);
    }
    /// Part `o`: with `P = V::PARTS`, parts `0..P` are the value's, parts
    /// `(1 + i) * P ..` those of the derivative along direction `i`.
    #[inline(always)]
    fn write_part(self, o: usize, out: &mut [f32]) {
        let (j, k) = (o / V::PARTS, o % V::PARTS);
        if j == 0 {
            self.re.write_part(k, out);
        } else {
            self.eps[j - 1].write_part(k, out);
        }
    }
    #[inline(always)]
    fn part_lane(self, o: usize, i: usize) -> f32 {
        let (j, k) = (o / V::PARTS, o % V::PARTS);
        if j == 0 {
            self.re.part_lane(k, i)
        } else {
            self.eps[j - 1].part_lane(k, i)
        }
    }
    #[inline(always)]
    fn part_f64(self, o: usize, i: usize) -> f64 {
        let (j, k) = (o / V::PARTS, o % V::PARTS);
        if j == 0 {
            self.re.part_f64(k, i)
        } else {
            self.eps[j - 1].part_f64(k, i)
        }
    }
}

impl<S: Real, const N: usize> PartialEq for Dual<S, N> {
    /// Compares the values (as comparisons in the kernel do).
    #[inline(always)]
    fn eq(&self, o: &Self) -> bool {
        self.re == o.re
    }
}

impl<S: Real, const N: usize> PartialOrd for Dual<S, N> {
    #[inline(always)]
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        self.re.partial_cmp(&o.re)
    }
}

impl<S: Real, const N: usize> Real for Dual<S, N> {
    const MANTISSA_DIGITS: u32 = S::MANTISSA_DIGITS;
    #[inline(always)]
    fn val(self) -> f64 {
        self.re.val()
    }
}

impl<S: DiffReal, const N: usize> DiffReal for Dual<S, N> {
    #[inline(always)]
    fn is_const_zero(self) -> bool {
        self.re.is_const_zero() && self.eps.iter().all(|e| e.is_const_zero())
    }
}

/// A number whose derivative parts can be seeded and read back by direction.
pub trait Seeded: DiffReal {
    /// Number of derivative directions carried.
    const DIRECTIONS: usize;
    /// `value` with derivative 1 along direction `dir` (< [`Seeded::DIRECTIONS`]).
    fn seed(value: f64, dir: usize) -> Self;
    /// The derivative part along direction `dir` (its value).
    fn derivative(self, dir: usize) -> f64;
}

impl<S: DiffReal, const N: usize> Seeded for Dual<S, N> {
    const DIRECTIONS: usize = N;
    #[inline]
    fn seed(value: f64, dir: usize) -> Self {
        let mut x = Self::c(value);
        x.eps[dir] = S::one();
        x
    }
    #[inline]
    fn derivative(self, dir: usize) -> f64 {
        self.eps[dir].val()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::real::X2;

    fn f<V: Num>(x: V, y: V) -> V {
        let s = (x.sin() * y.exp() + x.atan2(y) + (x * y).sqrt()) / (y.cos() - x.tan())
            + (x / y).ln()
            - x.mul_pow2(V::c(3.0)).abs().negate_if_odd(V::c(3.0));
        V::select(x.cmp_gt(V::c(0.5)), s, -s) + x.floor()
    }

    /// f's derivatives by x and y, by hand.
    fn df(x: f64, y: f64) -> (f64, f64) {
        let g = x.sin() * y.exp() + x.atan2(y) + (x * y).sqrt();
        let h = y.cos() - x.tan();
        let gx = x.cos() * y.exp() + y / (x * x + y * y) + 0.5 * y / (x * y).sqrt();
        let gy = x.sin() * y.exp() - x / (x * x + y * y) + 0.5 * x / (x * y).sqrt();
        let (hx, hy) = (-(1.0 + x.tan() * x.tan()), -y.sin());
        let sign = if x > 0.5 { 1.0 } else { -1.0 };
        let dx = (gx * h - g * hx) / (h * h) + 1.0 / x + 8.0;
        let dy = (gy * h - g * hy) / (h * h) - 1.0 / y;
        (sign * dx, sign * dy)
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn scalar_duals_carry_exact_derivatives() {
        for x in [0.3, 0.7] {
            let (a, b) = (Dense64::<2>::seed(x, 0), Dense64::<2>::seed(1.7, 1));
            let r = f(a, b);
            let (dx, dy) = df(x, 1.7);
            assert_eq!(r.val(), f(x, 1.7), "the value is the plain computation's");
            assert!(close(r.derivative(0), dx, 1e-13) && close(r.derivative(1), dy, 1e-13));
            let r32 = f(a.to_f32(), b.to_f32());
            assert!(close(r32.derivative(0), dx, 1e-5) && close(r32.derivative(1), dy, 1e-5));
        }
        let x = Dense64::<2>::seed(0.3, 0);
        assert_eq!((x * Dense64::c(10.0)).floor().derivative(0), 0.0);
        assert_eq!(x.mul_pow2(Dense64::c(3.0)).derivative(0), 8.0);
        assert_eq!((-x).abs().derivative(0), 1.0);
        assert!(
            !Dense64::<2>::seed(0.0, 1).is_const_zero() && Dense64::<2>::c(0.0).is_const_zero()
        );
        assert_eq!(Dense64::<2>::seed(0.0, 1).constant().derivative(1), 0.0);
    }

    #[test]
    fn lanes_are_scalar_duals_side_by_side() {
        let xs = [0.3, 0.7, 0.2, 0.9];
        type L = Dual<X2<X2<f64>>, 2>;
        let x = L::from_fn(|i| Dense64::<2>::seed(xs[i], 0));
        let y = L::splat(Dense64::<2>::seed(1.7, 1));
        let r = f(x, y);
        for (i, &xv) in xs.iter().enumerate() {
            let want = f(Dense64::<2>::seed(xv, 0), Dense64::<2>::seed(1.7, 1));
            let got = r.lane(i);
            // the lanes' sine and exponential are the fast polynomials
            assert!(close(got.re, want.re, 1e-15), "{i}");
            for d in 0..2 {
                assert!(close(got.eps[d], want.eps[d], 1e-14), "{i} {d}");
                assert_eq!(r.part_lane(d + 1, i), got.eps[d] as f32);
            }
        }
    }

    #[test]
    fn nested_duals_carry_second_derivatives() {
        // g(a, b) = sin(a b) exp(a): d²g/da db, d²g/da² by hand
        let g = |a: HyperDual64, b: HyperDual64| (a * b).sin() * a.exp();
        let (a0, b0) = (0.4f64, 1.3f64);
        let (s, c, e) = ((a0 * b0).sin(), (a0 * b0).cos(), a0.exp());
        let gab = e * (c - a0 * b0 * s + a0 * c);
        let gaa = e * (-b0 * b0 * s + 2.0 * b0 * c + s);
        let ga = e * (b0 * c + s);
        let gb = e * a0 * c;
        let r = g(hyper(a0, 1.0, 0.0), hyper(b0, 0.0, 1.0));
        let parts: Vec<f64> = (0..4).map(|o| r.part_lane(o, 0) as f64).collect();
        let want = [s * e, ga, gb, gab];
        for (p, w) in parts.iter().zip(want) {
            assert!(close(*p, w, 1e-6), "{parts:?} vs {want:?}");
        }
        assert!(close(r.eps[0].eps[0], gab, 1e-14));
        let r = g(hyper(a0, 1.0, 1.0), hyper(b0, 0.0, 0.0));
        assert!(close(r.eps[0].eps[0], gaa, 1e-14) && close(r.re.eps[0], ga, 1e-14));
        assert_eq!(HyperDual64::PARTS, 4);
    }

    #[test]
    fn sqrt_recip_is_the_square_root_and_its_reciprocal() {
        // the same numbers as `sqrt` and `1 / sqrt` where the lanes take a
        // correctly rounded root (scalars), and their derivatives by hand
        let x = Dense64::<2>::seed(0.37, 0) * Dense64::<2>::seed(2.9, 1);
        let (r, inv) = x.sqrt_recip();
        let (want_r, want_inv) = (x.sqrt(), Dense64::<2>::one() / x.sqrt());
        assert_eq!((r.re, r.eps), (want_r.re, want_r.eps));
        assert_eq!((inv.re, inv.eps), (want_inv.re, want_inv.eps));
        let v = 0.37 * 2.9f64;
        assert!(close(inv.eps[0], -0.5 * 2.9 * v.powf(-1.5), 1e-15));
        assert!(close(r.eps[1], 0.5 * 0.37 / v.sqrt(), 1e-15));
        // second derivatives through the nested parts: d²(1/√(a b))/da²
        let (a0, b0) = (0.4f64, 1.3f64);
        let (_, inv) = (hyper(a0, 1.0, 1.0) * hyper(b0, 0.0, 0.0)).sqrt_recip();
        assert!(close(inv.eps[0].eps[0], 0.75 * b0 * b0 * (a0 * b0).powf(-2.5), 1e-14));
    }
}
