//! Derivative images: the exact render kernel over dual numbers whose
//! parts are SIMD lanes ([`Dual`]`<F64x4, N>` with AVX2, `<F64x8, N>` with
//! AVX-512F, and their f32 counterparts), so one call computes `LANES`
//! adjacent pixels and their derivatives, exactly as the scalar dual does
//! per pixel; the scalar dual ([`Dense64`], [`Dense32`]) where the CPU has
//! neither. The SIMD base types fault on a CPU without the instruction set:
//! the rows run inside the row driver's `#[target_feature]` wrappers
//! ([`crate::render::rows`]). Values and derivatives agree with the scalar
//! kernel to rounding (the lanes' sine and exponential are polynomials, see
//! [`crate::real::dual`]; about 1e-13 relative where a sine is taken of a
//! large argument such as π·h·N, whose argument carries that error).

use super::dual::{Dense32, Dense64, Dual};
use crate::real::Num;
use crate::render::kernel::{Exact, Kernel};
use crate::render::rows::{render_images, KernelRows, Pixel, RowKernel, RowOut};
use crate::setup::Plan;

/// The exact kernel's rows of value and derivative images. (A type of this
/// module so that their SIMD rows compile apart from the images' rows, in
/// parallel with them: see [`RowKernel::row_avx2`].)
struct DualRows<'k, 'p, V: Num>(KernelRows<'k, 'p, V, Exact>);

impl<T: Pixel, V: Num> RowKernel<T> for DualRows<'_, '_, V> {
    #[inline(always)]
    fn row(&self, s: usize, planes: &mut [&mut [T]], limit: Option<usize>) -> RowOut {
        self.0.row(s, planes, limit)
    }
    fn interpolates(&self) -> bool {
        RowKernel::<T>::interpolates(&self.0)
    }
}

/// The two entry points of one precision: `$name` on the best SIMD level of
/// this CPU and `$on` on a given one, over the dense dual `$dense` (scalar
/// fallback) and the lane duals over `$wide` (AVX-512) / `$narrow` (AVX2)
/// vectors.
macro_rules! dense_renderer {
    ($(#[$doc:meta])* $name:ident, $on:ident, $dense:ident, $wide:ident, $narrow:ident) => {
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
                        let k = Kernel::<Dual<$wide, N>, Exact>::from_leaves(plan, leaves);
                        // SAFETY: the level is at most this CPU's.
                        let rows = unsafe { Avx512::new(DualRows(KernelRows::new(k, &parts))) };
                        return render_images(plan, &rows, outputs);
                    }
                    SimdLevel::Avx2 => {
                        let k = Kernel::<Dual<$narrow, N>, Exact>::from_leaves(plan, leaves);
                        // SAFETY: the level is at most this CPU's.
                        let rows = unsafe { Avx2::new(DualRows(KernelRows::new(k, &parts))) };
                        return render_images(plan, &rows, outputs);
                    }
                    SimdLevel::Scalar => {}
                }
            }
            let k = Kernel::<$dense<N>, Exact>::from_leaves(plan, leaves);
            render_images(plan, &DualRows(KernelRows::new(k, &parts)), outputs)
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
    render_dense64, render_dense64_on, Dense64, F64x8, F64x4
);
dense_renderer!(
    /// [`render_dense64`] in f32: [`Dual`] over `F32x8` / `F32x16`.
    render_dense32, render_dense32_on, Dense32, F32x16, F32x8
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SfSource, SimConfig};
    use crate::diff::{Deltas, Leaves, Param, Seeded};
    use crate::render::SimdLevel;
    use crate::setup::SetupSeeds;

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
        cfg.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 4).into());
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
