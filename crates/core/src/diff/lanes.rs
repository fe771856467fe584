//! Dense dual numbers over SIMD lanes, and the row driver that renders
//! derivative images with them.
//!
//! [`DualLanes64`]`<V, N>` holds a value `V` and `N` derivative parts `V`,
//! where `V` is a bundle of f64 lanes (`F64x4` with AVX2, `F64x8` with
//! AVX-512F): lane `i` is the dense dual [`Dense64`]`<N>` of pixel `f0 + i`.
//! It implements [`Num`] lane by lane (comparisons and `select` act on the
//! value lanes, every derivative part follows the selected lane), so the one
//! generic render kernel ([`Kernel::lanes`]) computes `V::LANES` adjacent
//! pixels and their derivatives per call, exactly as the scalar dual does per
//! pixel. [`DualLanes32`] is the same over f32 lanes.
//!
//! The SIMD base types are crate-private (they fault on a CPU without the
//! instruction set): the rows are rendered inside `#[target_feature]`
//! functions chosen at run time ([`crate::render::simd_level`]), as the image
//! renderer does. Every operation is `#[inline(always)]` (and written without
//! closures) so that it inlines there.
//!
//! The render kernel runs in its exact mode (nanoBragg.c's formulas and
//! order), but `sin`, `cos` and `exp` of these lanes take their value parts
//! from the branch-free polynomials of [`crate::real::fast`] (sin/cos
//! 3e-16·max(1, |x|) absolute, exp 3e-16 relative in f64) instead of libm per
//! lane, which cost most of the time; the derivative parts follow from the
//! same values (d sin = cos, d exp = exp). `atan2`, `tan` and `ln` stay libm
//! per lane. Values and derivatives therefore agree with the scalar
//! [`Dense64`] kernel to rounding (about 1e-13 relative where a sine is taken
//! of a large argument such as π·h·N; the argument itself carries that error).

use super::dense::{Dense32, Dense64};
use crate::real::{fast, Num, Real};
use crate::render::kernel::{Exact, Kernel};
use crate::render::rows::{render_images, KernelRows};
use crate::setup::Plan;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

macro_rules! dual_lanes {
    ($(#[$doc:meta])* $t:ident, $dense:ident, $s:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct $t<V, const N: usize> {
            /// The values (one pixel per lane).
            pub(crate) re: V,
            /// The derivative along each direction.
            pub(crate) eps: [V; N],
        }

        impl<V: Num<Scalar = $s>, const N: usize> $t<V, N> {
            /// `f(x)` from `f(re)` and `f'(re)`.
            #[inline(always)]
            fn chain(self, f: V, df: V) -> Self {
                let mut eps = self.eps;
                for e in eps.iter_mut() {
                    *e *= df;
                }
                $t { re: f, eps }
            }
            /// Derivative parts zero.
            #[inline(always)]
            pub(crate) fn constant(re: V) -> Self {
                $t { re, eps: [V::zero(); N] }
            }
        }

        impl<V: Num<Scalar = $s>, const N: usize> Add for $t<V, N> {
            type Output = Self;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                let mut eps = self.eps;
                for (e, &d) in eps.iter_mut().zip(o.eps.iter()) {
                    *e += d;
                }
                $t { re: self.re + o.re, eps }
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> Sub for $t<V, N> {
            type Output = Self;
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                let mut eps = self.eps;
                for (e, &d) in eps.iter_mut().zip(o.eps.iter()) {
                    *e -= d;
                }
                $t { re: self.re - o.re, eps }
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> Mul for $t<V, N> {
            type Output = Self;
            // the product rule adds
            #[allow(clippy::suspicious_arithmetic_impl)]
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                let mut eps = self.eps;
                for (e, &d) in eps.iter_mut().zip(o.eps.iter()) {
                    *e = *e * o.re + self.re * d;
                }
                $t { re: self.re * o.re, eps }
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> Div for $t<V, N> {
            type Output = Self;
            #[allow(clippy::suspicious_arithmetic_impl)]
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                let re = self.re / o.re;
                let inv = V::one() / o.re;
                let mut eps = self.eps;
                for (e, &d) in eps.iter_mut().zip(o.eps.iter()) {
                    *e = (*e - re * d) * inv;
                }
                $t { re, eps }
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> Neg for $t<V, N> {
            type Output = Self;
            #[inline(always)]
            fn neg(self) -> Self {
                let mut eps = self.eps;
                for e in eps.iter_mut() {
                    *e = -*e;
                }
                $t { re: -self.re, eps }
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> AddAssign for $t<V, N> {
            #[inline(always)]
            fn add_assign(&mut self, o: Self) {
                *self = *self + o;
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> SubAssign for $t<V, N> {
            #[inline(always)]
            fn sub_assign(&mut self, o: Self) {
                *self = *self - o;
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> MulAssign for $t<V, N> {
            #[inline(always)]
            fn mul_assign(&mut self, o: Self) {
                *self = *self * o;
            }
        }
        impl<V: Num<Scalar = $s>, const N: usize> DivAssign for $t<V, N> {
            #[inline(always)]
            fn div_assign(&mut self, o: Self) {
                *self = *self / o;
            }
        }

        impl<V: Num<Scalar = $s>, const N: usize> Num for $t<V, N> {
            type Scalar = $dense<N>;
            type Mask = V::Mask;
            const LANES: usize = V::LANES;
            #[inline(always)]
            fn splat(x: $dense<N>) -> Self {
                let mut eps = [V::zero(); N];
                for (e, &d) in eps.iter_mut().zip(x.eps.iter()) {
                    *e = V::splat(d);
                }
                $t { re: V::splat(x.re), eps }
            }
            #[inline(always)]
            fn from_fn(mut f: impl FnMut(usize) -> $dense<N>) -> Self {
                let mut xs = [$dense::<N>::c(0.0); 16];
                for (i, x) in xs.iter_mut().enumerate().take(V::LANES) {
                    *x = f(i);
                }
                let mut eps = [V::zero(); N];
                for (j, e) in eps.iter_mut().enumerate() {
                    *e = V::from_fn(|i| xs[i].eps[j]);
                }
                $t { re: V::from_fn(|i| xs[i].re), eps }
            }
            #[inline(always)]
            fn lane(self, i: usize) -> $dense<N> {
                let mut eps = [0.0; N];
                for (e, v) in eps.iter_mut().zip(self.eps.iter()) {
                    *e = v.lane(i);
                }
                $dense { re: self.re.lane(i), eps }
            }
            #[inline(always)]
            fn c(x: f64) -> Self {
                Self::constant(V::c(x))
            }
            #[inline(always)]
            fn sin(self) -> Self {
                let (s, c) = fast::sin_cos(self.re);
                self.chain(s, c)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                let (s, c) = fast::sin_cos(self.re);
                self.chain(c, -s)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                let t = self.re.tan();
                self.chain(t, V::one() + t * t)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                let e = fast::exp(self.re);
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
                for (e, &b) in eps.iter_mut().zip(x.eps.iter()) {
                    *e = (x.re * *e - self.re * b) * d;
                }
                $t { re: self.re.atan2(x.re), eps }
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                let r = self.re.sqrt();
                self.chain(r, V::c(0.5) / r)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                Self::select(self.re.cmp_lt(V::zero()), -self, self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
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
                for (e, &b) in eps.iter_mut().zip(f.eps.iter()) {
                    *e = V::select(m, *e, b);
                }
                $t { re: V::select(m, t.re, f.re), eps }
            }
            #[inline(always)]
            fn negate_if_odd(self, k: Self) -> Self {
                let mut eps = self.eps;
                for e in eps.iter_mut() {
                    *e = e.negate_if_odd(k.re);
                }
                $t { re: self.re.negate_if_odd(k.re), eps }
            }
            #[inline(always)]
            fn mul_pow2(self, n: Self) -> Self {
                let p = V::one().mul_pow2(n.re);
                self.chain(self.re * p, p)
            }
            #[inline(always)]
            fn write_f32(self, out: &mut [f32]) {
                self.re.write_f32(out);
            }
            #[inline(always)]
            fn write_part(self, o: usize, out: &mut [f32]) {
                if o == 0 {
                    self.re.write_f32(out);
                } else {
                    self.eps[o - 1].write_f32(out);
                }
            }
            #[inline(always)]
            fn part_lane(self, o: usize, i: usize) -> f32 {
                let v = if o == 0 { self.re } else { self.eps[o - 1] };
                v.lane(i).val() as f32
            }
        }

    };
}

dual_lanes!(
    /// Value and `N` derivatives, each a bundle of f64 lanes `V`.
    DualLanes64,
    Dense64,
    f64
);
dual_lanes!(
    /// Value and `N` derivatives, each a bundle of f32 lanes `V`.
    DualLanes32,
    Dense32,
    f32
);

/// The two entry points of one precision: `$name` on the best SIMD level of
/// this CPU and `$on` on a given one, over the dense dual `$dense` (scalar
/// fallback) and the lane duals `$lanes` of `$wide` (AVX-512) / `$narrow`
/// (AVX2) vectors.
macro_rules! dense_renderer {
    ($(#[$doc:meta])* $name:ident, $on:ident, $dense:ident, $lanes:ident, $wide:ident, $narrow:ident) => {
        $(#[$doc])*
        pub(crate) fn $name<const N: usize>(
            plan: &Plan,
            leaves: &super::Leaves<$dense<N>>,
            outputs: usize,
        ) -> Vec<Vec<f32>> {
            $on(plan, leaves, outputs, crate::render::simd_level())
        }

        /// The same on a given SIMD level (at most this CPU's).
        pub(crate) fn $on<const N: usize>(
            plan: &Plan,
            leaves: &super::Leaves<$dense<N>>,
            outputs: usize,
            level: crate::render::SimdLevel,
        ) -> Vec<Vec<f32>> {
            let _ = level;
            let parts: Vec<usize> = (0..outputs).collect();
            #[cfg(target_arch = "x86_64")]
            {
                use crate::render::rows::{Avx2, Avx512};
                use crate::render::simd::{avx2::$narrow, avx512::$wide};
                use crate::render::SimdLevel;
                match level.min(crate::render::simd_level()) {
                    SimdLevel::Avx512 => {
                        let k = Kernel::<$lanes<$wide, N>, Exact>::from_leaves(plan, leaves);
                        // SAFETY: the level is at most this CPU's.
                        let rows = unsafe { Avx512::new(KernelRows::new(&k, &parts)) };
                        return render_images(plan, &rows, outputs);
                    }
                    SimdLevel::Avx2 => {
                        let k = Kernel::<$lanes<$narrow, N>, Exact>::from_leaves(plan, leaves);
                        // SAFETY: the level is at most this CPU's.
                        let rows = unsafe { Avx2::new(KernelRows::new(&k, &parts)) };
                        return render_images(plan, &rows, outputs);
                    }
                    SimdLevel::Scalar => {}
                }
            }
            let k = Kernel::<$dense<N>, Exact>::from_leaves(plan, leaves);
            render_images(plan, &KernelRows::new(&k, &parts), outputs)
        }
    };
}

dense_renderer!(
    /// Render `outputs` planes (value, then derivatives) of every pixel of
    /// `plan` from the leaves, on the best SIMD level of this CPU; returns one
    /// image per output. Rows run in parallel, each pixel by one thread in a
    /// fixed order. nanoBragg.c's shared tricubic flag is handled as the image
    /// renderer handles it: every pixel after the first out-of-range point
    /// (raster order) is re-rendered nearest-neighbour.
    render_dense64, render_dense64_on, Dense64, DualLanes64, F64x8, F64x4
);
dense_renderer!(
    /// [`render_dense64`] in f32: [`DualLanes32`] over `F32x8` / `F32x16`.
    render_dense32, render_dense32_on, Dense32, DualLanes32, F32x16, F32x8
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SfSource, SimConfig};
    use crate::diff::{Deltas, Leaves, Param, Seeded};
    use crate::real::X2;
    use crate::render::SimdLevel;
    use crate::setup::SetupSeeds;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[test]
    fn lanes_match_the_scalar_dual() {
        fn f<V: Num>(x: V, y: V) -> V {
            let s = (x.sin() * y.exp() + x.atan2(y) + (x * y).sqrt()) / (y.cos() - x.tan())
                + (x / y).ln()
                - x.mul_pow2(V::c(3.0)).abs().negate_if_odd(V::c(3.0));
            V::select(x.cmp_gt(V::c(0.5)), s, -s) + x.floor()
        }
        let xs = [0.3, 0.7, 0.2, 0.9];
        type L = DualLanes64<X2<X2<f64>>, 2>;
        let x = L::from_fn(|i| Dense64::<2>::seed(xs[i], 0));
        let y = L::splat(Dense64::<2>::seed(1.7, 1));
        let r = f(x, y);
        for (i, &xv) in xs.iter().enumerate() {
            let want = f(Dense64::<2>::seed(xv, 0), Dense64::<2>::seed(1.7, 1));
            let got = r.lane(i);
            assert!(close(got.re, want.re, 1e-15), "{i}");
            for d in 0..2 {
                assert!(close(got.eps[d], want.eps[d], 1e-14), "{i} {d}");
                assert_eq!(r.part_lane(d + 1, i), got.eps[d] as f32);
            }
        }
    }

    /// Every SIMD level renders the scalar dual's images: a plan with a
    /// region of interest and a mask that cut blocks of lanes, oversampling,
    /// sensor layers, polarization, mosaic domains and tricubic
    /// interpolation that leaves the grid.
    #[test]
    fn simd_rows_match_the_scalar_rows() {
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 6.0, 7.0);
        cfg.beam.kahn_factor = 0.9;
        cfg.detector.distance_mm = 60.0;
        (cfg.detector.fpixels, cfg.detector.spixels) = (45, 29);
        cfg.detector.pixel_mm = 0.4;
        cfg.detector.roi = Some([2, 41, 1, 27]);
        cfg.detector.mask = Some((0..45 * 29).map(|i| (i % 7 != 3) as u16).collect());
        cfg.detector.thick_um = 300.0;
        cfg.detector.thicksteps = 2;
        cfg.crystal.mosaic_deg = 0.3;
        cfg.crystal.mosaic_domains = 2;
        cfg.sampling.oversample = 2;
        cfg.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 4));
        cfg.sf.default_f = 3.0;
        cfg.sf.interpolate = Some(true);
        let seeds = SetupSeeds { misset_idum: 0 };
        let plan = Plan::new(&cfg, seeds).unwrap();
        let params = [Param::Distance, Param::CellB, Param::Na, Param::Lambda];
        let mut deltas = Deltas::<Dense64<4>>::zero();
        for (i, &p) in params.iter().enumerate() {
            deltas.set(p, Dense64::<4>::seed(0.0, i));
        }
        let leaves = Leaves::new(&cfg, &plan, seeds, &deltas).unwrap();
        let scalar = render_dense64_on(&plan, &leaves, 5, SimdLevel::Scalar);
        let leaves32 = leaves.map(Dense64::to_f32);
        let scalar32 = render_dense32_on(&plan, &leaves32, 5, SimdLevel::Scalar);
        assert!(scalar[0].iter().any(|&v| v > 0.0));
        for level in [SimdLevel::Avx2, SimdLevel::Avx512] {
            for (bound, want, got) in [
                (1e-9, &scalar, render_dense64_on(&plan, &leaves, 5, level)),
                (2e-4, &scalar32, render_dense32_on(&plan, &leaves32, 5, level)),
            ] {
                for (o, (w, g)) in want.iter().zip(&got).enumerate() {
                    let max = w.iter().fold(0f32, |m, v| m.max(v.abs()));
                    assert!(max > 0.0, "output {o}");
                    for (i, (a, b)) in w.iter().zip(g).enumerate() {
                        // masked and out-of-ROI pixels stay 0 on every level
                        assert_eq!(*a == 0.0, *b == 0.0, "{level:?} output {o} pixel {i}");
                        assert!((a - b).abs() <= bound * max, "{level:?} {o} {i}: {a} {b}");
                    }
                }
            }
        }
    }
}
