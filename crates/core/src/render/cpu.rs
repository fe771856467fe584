//! The CPU backend: rows in parallel with rayon, adjacent pixels of a row in
//! the lanes of a SIMD vector.
//!
//! The instruction set is chosen at run time ([`simd_level`]): AVX-512F,
//! AVX2 + FMA, or portable scalar code. Every level runs the one generic
//! kernel ([`Kernel::lanes`]); a row is rendered inside a function compiled
//! for the chosen level, so the kernel and its number type inline there.
//! Each row is computed by one thread in a fixed order, so the image does not
//! depend on the number of threads.

use super::background::RowBackground;
use super::kernel::{Exact, Fast, Kernel, MathMode};
use super::rows::{render_planes, zeroed_plane, KernelRows, Pixel, RowKernel, VALUE};
use crate::real::{Num, Real, X2};
use crate::setup::Plan;
use crate::stats::RowStats;
use std::any::TypeId;

/// How the float image is computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Precision {
    /// f64, fast math (default): the C program's image to about 1e-15
    /// relative (see docs/performance.md).
    #[default]
    Fast64,
    /// f64 with the C program's formulas and libm: bit-identical to
    /// nanoBragg.c (the golden-parity reference; about the C program's speed).
    Exact64,
    /// f32 lanes, fast math: twice the lanes, about 1e-6 relative.
    Fast32,
}

/// How to render a plan: the precision, and what does not change the image
/// (threads, SIMD level, whether rows report their statistics).
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions {
    /// How the image is computed.
    pub precision: Precision,
    /// Threads to use (0 = rayon's default, all cores).
    pub threads: usize,
    /// The most SIMD the render may use (`None`: the best of this CPU;
    /// a level the CPU lacks falls back to the best it has).
    pub simd: Option<SimdLevel>,
    /// Gather each row's statistics into [`RenderInfo::rows`] (they cost a
    /// tenth of a fast 1024² render; the image statistics of a run use
    /// them, a caller that wants the image alone does not).
    pub row_stats: bool,
}

impl RenderOptions {
    /// Render in `precision`, on all cores and the best SIMD level, without
    /// row statistics.
    pub fn new(precision: Precision) -> Self {
        RenderOptions { precision, ..Self::default() }
    }
    /// The same on `threads` threads (0: all cores).
    pub fn threads(self, threads: usize) -> Self {
        RenderOptions { threads, ..self }
    }
    /// The same on at most `level`.
    pub fn simd(self, level: SimdLevel) -> Self {
        RenderOptions { simd: Some(level), ..self }
    }
    /// The same, gathering each row's statistics.
    pub fn row_stats(self) -> Self {
        RenderOptions { row_stats: true, ..self }
    }
}

/// A rendered image (photons per pixel, fast index fastest) and what the
/// render reports.
#[derive(Debug, Clone)]
pub struct Rendered<T> {
    /// The image: f32 as written, or f64 before that rounding.
    pub image: Vec<T>,
    /// What the C program reports about it, and the row statistics.
    pub info: RenderInfo,
}

impl<T> Rendered<T> {
    /// The image and the report.
    pub fn into_parts(self) -> (Vec<T>, RenderInfo) {
        (self.image, self.info)
    }
}

/// What a render reports besides the image.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RenderInfo {
    /// Sum of solid angles over all sub-pixel evaluations.
    pub omega_sum: f64,
    /// First point where tricubic interpolation left the grid (raster order):
    /// (h, k, l) and (h0, k0, l0).
    pub interpolation_fallback: Option<([f64; 3], [i64; 3])>,
    /// Each row's contribution to the image statistics, gathered while the
    /// row was rendered where [`RenderOptions::row_stats`] (see
    /// [`crate::stats::stats_from_rows`]); empty otherwise.
    pub rows: Vec<RowStats>,
}

/// The SIMD instruction sets the CPU backend can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// Portable scalar code.
    Scalar,
    /// AVX2 with FMA: 4 f64 / 8 f32 lanes per vector, two vectors per call.
    Avx2,
    /// AVX-512F: 8 f64 / 16 f32 lanes per vector, two vectors per call.
    Avx512,
}

/// The best instruction set of this CPU, or the one named by the
/// environment variable `NANOBRAGG_SIMD` (`scalar`, `avx2`, `avx512`) when
/// the CPU has it.
pub fn simd_level() -> SimdLevel {
    let best = detect();
    match std::env::var("NANOBRAGG_SIMD").ok().as_deref().map(str::trim) {
        Some("scalar") => SimdLevel::Scalar,
        Some("avx2") => best.min(SimdLevel::Avx2),
        _ => best,
    }
}

fn detect() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return SimdLevel::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Scalar
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::render::rows::{Avx2, Avx512};
    use crate::render::simd::{avx2, avx512};

    /// Render with the best kernel for `level` (at most this CPU's), or
    /// `None` for scalar code.
    pub(super) fn render<T: Pixel>(
        plan: &Plan,
        precision: Precision,
        level: SimdLevel,
        image: &mut [T],
        stats: bool,
    ) -> Option<RenderInfo> {
        // Several vectors per call: independent dependency chains through
        // the square root, division and polynomial latencies. AVX2 takes
        // four (one pixel's chain is longer than the reorder window, so
        // consecutive calls barely overlap: 1.2x faster than two in f64,
        // 1.1x in f32 on Zen 3; two were 1.4-1.6x faster than one);
        // AVX-512 two (1.0-1.1x over one). See docs/performance.md.
        macro_rules! on {
            ($wrap:ident, $v:ty) => {{
                let kernel = Kernel::<$v, Fast>::new(plan);
                // SAFETY: `level` is at most this CPU's (`detect`), so the
                // CPU has the wrapper's target features.
                let rows = unsafe { $wrap::new(KernelRows::new(kernel, VALUE)) };
                render_with(plan, &rows, image, stats, true)
            }};
        }
        let out = match (level, precision) {
            (SimdLevel::Scalar, _) => return None,
            // exact: libm per lane dominates; plain scalar code is as fast
            (_, Precision::Exact64) => return None,
            (SimdLevel::Avx2, Precision::Fast64) => on!(Avx2, X2<X2<avx2::F64x4>>),
            (SimdLevel::Avx2, Precision::Fast32) => on!(Avx2, X2<X2<avx2::F32x8>>),
            (SimdLevel::Avx512, Precision::Fast64) => on!(Avx512, X2<avx512::F64x8>),
            (SimdLevel::Avx512, Precision::Fast32) => on!(Avx512, X2<avx512::F32x16>),
        };
        Some(out)
    }
}

/// Render into `image` (`fpixels * spixels` long; pixels not rendered are
/// set to 0), gathering each row's statistics where `stats`; the amorphous
/// background in its fast form where `fast`.
fn render_with<T: Pixel, K: RowKernel<T>>(
    plan: &Plan,
    rows: &K,
    image: &mut [T],
    stats: bool,
    fast: bool,
) -> RenderInfo {
    let background = plan.background.as_deref().map(|bg| RowBackground::new(bg, fast));
    let out = render_planes(plan, rows, &mut [image], stats, background);
    RenderInfo { omega_sum: out.omega_sum, interpolation_fallback: out.fallback, rows: out.rows }
}

/// Render with `kernel` in portable code.
fn render_portable<T: Pixel, V: Num, M: MathMode>(
    plan: &Plan,
    kernel: Kernel<V, M>,
    image: &mut [T],
    stats: bool,
) -> RenderInfo {
    let fast = TypeId::of::<M>() != TypeId::of::<Exact>();
    render_with(plan, &KernelRows::new(kernel, VALUE), image, stats, fast)
}

/// Runs `f` on `threads` threads (0: the current pool's), in the current
/// pool where it has that many already (a new pool costs thread starts on
/// every render: many small renders, such as a multi-panel detector's).
pub fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    if threads > 0 && threads != rayon::current_num_threads() {
        if let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
            return pool.install(f);
        }
    }
    f()
}

/// The plan's amorphous background (`-stol`) as an image (0 outside the ROI
/// and under the mask), rows in parallel, as a render in `precision` adds it;
/// `None` without one. The CPU renders include it already: this is for
/// images rendered elsewhere.
pub fn background_image(plan: &Plan, precision: Precision) -> Option<Vec<f64>> {
    use rayon::prelude::*;
    let bg = RowBackground::new(plan.background.as_deref()?, fast_background(precision));
    let fp = plan.detector.fpixels;
    let mut image = vec![0.0f64; fp * plan.detector.spixels];
    if fp > 0 {
        image.par_chunks_mut(fp).enumerate().for_each(|(s, row)| bg.add_row(plan, s, row));
    }
    Some(image)
}

/// Whether a render in `precision` adds the fast form of the background.
fn fast_background(precision: Precision) -> bool {
    precision != Precision::Exact64
}

/// Adds the plan's amorphous background (`-stol`), if any, to an image
/// rendered elsewhere (the GPU) in `precision`; the CPU renders include it
/// already.
pub fn add_background(plan: &Plan, precision: Precision, image: &mut [f32]) {
    use rayon::prelude::*;
    let Some(bg) = plan.background.as_deref() else { return };
    let bg = RowBackground::new(bg, fast_background(precision));
    let fp = plan.detector.fpixels;
    if fp > 0 {
        image.par_chunks_mut(fp).enumerate().for_each(|(s, row)| bg.add_row(plan, s, row));
    }
}

/// Render `plan` into a new image, zeroed by the render's threads. In an
/// `f64` image, the f32 image before its rounding.
pub fn render<T: Pixel>(plan: &Plan, opts: RenderOptions) -> Rendered<T> {
    in_pool(opts.threads, || {
        let mut image = zeroed_plane(plan.detector.fpixels * plan.detector.spixels);
        let info = render_on_into(plan, opts, &mut image);
        Rendered { image, info }
    })
}

/// Render into a caller's buffer of `fpixels * spixels` values, for example a
/// memory-mapped output file. Every pixel is written (those outside the ROI
/// or masked with 0), so `image` may hold anything, such as an old image.
/// Same image as [`render`].
///
/// Panics if `image` has another length.
pub fn render_into<T: Pixel>(plan: &Plan, opts: RenderOptions, image: &mut [T]) -> RenderInfo {
    in_pool(opts.threads, || render_on_into(plan, opts, image))
}

/// Render in a scalar type of the caller's (dual numbers; fast mode, the
/// portable kernel): f64 and f32 are [`render`] in [`Precision::Fast64`]
/// and [`Precision::Fast32`], whatever `opts.precision` says.
pub fn render_as<R: Real>(plan: &Plan, opts: RenderOptions) -> Rendered<f32> {
    if TypeId::of::<R>() == TypeId::of::<f32>() {
        return render(plan, RenderOptions { precision: Precision::Fast32, ..opts });
    }
    if TypeId::of::<R>() == TypeId::of::<f64>() {
        return render(plan, RenderOptions { precision: Precision::Fast64, ..opts });
    }
    in_pool(opts.threads, || {
        let mut image = zeroed_plane(plan.detector.fpixels * plan.detector.spixels);
        let info = render_portable(plan, Kernel::<R, Fast>::new(plan), &mut image, opts.row_stats);
        Rendered { image, info }
    })
}

/// Render into `image` in the current pool.
fn render_on_into<T: Pixel>(plan: &Plan, opts: RenderOptions, image: &mut [T]) -> RenderInfo {
    let n = plan.detector.fpixels * plan.detector.spixels;
    assert_eq!(image.len(), n, "render_into: the image must hold fpixels * spixels values");
    let (precision, stats) = (opts.precision, opts.row_stats);
    let level = opts.simd.unwrap_or_else(simd_level).min(detect());
    #[cfg(target_arch = "x86_64")]
    let simd = x86::render(plan, precision, level, image, stats);
    #[cfg(not(target_arch = "x86_64"))]
    let simd = None;
    let _ = level;
    let mut info = simd.unwrap_or_else(|| {
        // Portable code: several scalars per call, which LLVM partly
        // vectorises with the baseline SSE2 (about 2x over plain scalars).
        match precision {
            Precision::Fast64 => {
                render_portable(plan, Kernel::<X2<X2<f64>>, Fast>::new(plan), image, stats)
            }
            Precision::Exact64 => {
                render_portable(plan, Kernel::<f64, Exact>::new(plan), image, stats)
            }
            Precision::Fast32 => {
                render_portable(plan, Kernel::<X2<X2<X2<f32>>>, Fast>::new(plan), image, stats)
            }
        }
    });
    put_first_sweep(plan, precision, image, stats.then_some(&mut info.rows[..]));
    info
}

/// Put in the pixel that holds nanoBragg.c's first sweep over the phi steps
/// ([`Plan::first_sweep_cells`]), where the plan has one: the first pixel
/// rendered (raster order, in the ROI and not masked) with a source that
/// passes `-dmin`, computed again in `precision`, and with `rows` its row's
/// statistics. Every renderer of an image calls it after the render (after
/// the amorphous background, which it adds to that pixel again).
pub fn put_first_sweep<T: Pixel>(
    plan: &Plan,
    precision: Precision,
    image: &mut [T],
    rows: Option<&mut [RowStats]>,
) {
    let put = match precision {
        Precision::Fast64 => first_sweep::<f64, Fast>(plan).map(|(i, v)| put_at(i, v, image)),
        Precision::Exact64 => first_sweep::<f64, Exact>(plan).map(|(i, v)| put_at(i, v, image)),
        Precision::Fast32 => first_sweep::<f32, Fast>(plan).map(|(i, v)| put_at(i, v, image)),
    };
    if let (Some(i), Some(bg)) = (put, plan.background.as_deref()) {
        // the pixel as the render left it: with the background
        let fp = plan.detector.fpixels;
        let value = RowBackground::new(bg, fast_background(precision)).pixel(i % fp, i / fp);
        image[i] = image[i].plus(value);
    }
    if let (Some(i), Some(rows)) = (put, rows) {
        let fp = plan.detector.fpixels;
        let s = i / fp;
        let row = &image[s * fp..(s + 1) * fp];
        rows[s] = T::row_stats(row, s, plan.detector.roi, plan.mask.as_deref());
    }
}

/// Writes `v` at index `i` of `image`; returns `i`.
fn put_at<R: Real, T: Pixel>(i: usize, v: R, image: &mut [T]) -> usize {
    T::write_part(&v, 0, &mut image[i..i + 1]);
    i
}

/// The raster index and value of the pixel that holds nanoBragg.c's first
/// sweep over the phi steps ([`Plan::first_sweep_cells`]), in the kernel
/// `R`, `M`; `None` where the plan has no such sweep.
pub(crate) fn first_sweep<R: Real, M: MathMode>(plan: &Plan) -> Option<(usize, R)> {
    let cells = plan.first_sweep_cells.as_ref()?;
    let (kernel, first) = (Kernel::<R, M>::new(plan), Kernel::<R, M>::with_cells(plan, cells));
    let d = &plan.detector;
    let (fp, sp, roi) = (d.fpixels, d.spixels, d.roi);
    let span = |lo, hi, n| {
        let (a, b) = crate::stats::roi_span(lo, hi, n);
        a..b
    };
    let mut interp = kernel.interpolates() as u32;
    for s in span(roi[2], roi[3], sp) {
        for f in span(roi[0], roi[1], fp) {
            let i = s * fp + f;
            if plan.mask.as_ref().is_some_and(|m| m[i] == 0) {
                continue;
            }
            if let Some(v) = kernel.first_sweep_pixel(&first, f, s, &mut interp) {
                return Some((i, v));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SfSource, SimConfig};
    use crate::setup::SetupSeeds;
    use crate::stats::row_stats;

    /// A small plan with most kernel branches: mosaic, phi, sensor layers,
    /// polarization, oversampling, structure factors with tricubic
    /// interpolation that runs off the grid, a region of interest and a mask
    /// that cut blocks of lanes.
    fn plan(shape: usize) -> Plan {
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 6.0, 12.0);
        cfg.beam.lambda_a = 1.2;
        cfg.beam.kahn_factor = 0.9;
        cfg.detector.distance_mm = 60.0;
        (cfg.detector.fpixels, cfg.detector.spixels) = (45, 37);
        cfg.detector.pixel_mm = 0.4;
        cfg.detector.roi = Some([2, 41, 1, 35]);
        cfg.detector.mask = Some((0..45 * 37).map(|i| (i % 7 != 3) as u16).collect());
        cfg.detector.thick_um = 300.0;
        cfg.detector.thicksteps = 2;
        cfg.detector.attenuation_um = Some(Some(400.0));
        cfg.crystal.mosaic_deg = 0.3;
        cfg.crystal.mosaic_domains = 3;
        cfg.crystal.osc_deg = 2.0;
        cfg.crystal.phisteps = 2;
        cfg.sampling.oversample = 2;
        cfg.crystal.shape = match shape {
            0 => crate::config::CrystalShape::Square,
            1 => crate::config::CrystalShape::Round,
            2 => crate::config::CrystalShape::Gauss,
            _ => crate::config::CrystalShape::Tophat,
        };
        cfg.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 4).into());
        cfg.sf.default_f = 3.0;
        cfg.sf.interpolate = Some(true);
        Plan::new(&cfg, SetupSeeds { misset_idum: 0 }).expect("test plan")
    }

    /// With phi steps at 0°, 10°, 20° nanoBragg.c's step at 0 takes the
    /// rotation left from the 20° step, but in the first pixel: so the image
    /// is the weighted sum of renders of the 10°–20° steps and of one step
    /// at 20° (0° in the first pixel, and everywhere when corrected). In f64
    /// before rounding, every precision, 1 and 2 threads.
    #[test]
    fn a_phi_step_at_zero_keeps_the_last_rotation_but_in_the_first_pixel() {
        let image = |phi0: f64, osc: f64, steps: i64, corrected: bool, p: Precision, t: usize| {
            let mut cfg = SimConfig::default();
            cfg.crystal.cell = Some([60.0, 70.0, 80.0, 90.0, 90.0, 90.0]);
            (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 5.0, 5.0);
            cfg.crystal.misset = crate::config::Misset::Angles([10.0, 20.0, 30.0]);
            cfg.detector.distance_mm = 50.0;
            (cfg.detector.fpixels, cfg.detector.spixels) = (40, 30);
            cfg.detector.pixel_mm = 1.0;
            (cfg.crystal.phi0_deg, cfg.crystal.osc_deg, cfg.crystal.phisteps) = (phi0, osc, steps);
            cfg.sampling.corrected = corrected;
            cfg.sf.default_f = 100.0;
            // one sweep over the phi steps per pixel
            cfg.sampling.oversample = 1;
            let plan = Plan::new(&cfg, SetupSeeds { misset_idum: 0 }).unwrap();
            render::<f64>(&plan, RenderOptions::new(p).threads(t)).image
        };
        for p in [Precision::Fast64, Precision::Exact64] {
            let pair = image(10.0, 20.0, 2, false, p, 1);
            let (at20, at0) = (image(20.0, 0.0, 1, false, p, 1), image(0.0, 0.0, 1, false, p, 1));
            for (corrected, threads) in [(false, 1), (false, 2), (true, 2)] {
                let got = image(0.0, 30.0, 3, corrected, p, threads);
                for i in 0..got.len() {
                    let last = if i == 0 || corrected { at0[i] } else { at20[i] };
                    let want = (2.0 * pair[i] + last) / 3.0;
                    let err = (got[i] - want).abs();
                    // -corrected multiplies the factors per sample: other roundings
                    let tol = if corrected { 1e-10 } else { 1e-12 };
                    assert!(
                        err <= tol * want.abs(),
                        "{p:?} {corrected} pixel {i}: {} for {want}",
                        got[i]
                    );
                }
                // the first pixel differs (the test would not see the rule otherwise)
                assert!((at20[0] - at0[0]).abs() > 1e-6 * at0[0]);
            }
        }
    }

    fn worst(a: &[f32], b: &[f32]) -> f64 {
        let max = b.iter().fold(0f64, |m, &v| m.max(v.abs() as f64));
        a.iter().zip(b).fold(0f64, |m, (&x, &y)| m.max((x as f64 - y as f64).abs())) / max
    }

    /// Every pixel of `plan` from the single-sample steps and from the
    /// general loops, bit for bit (values, solid angles, fallbacks).
    fn single_matches_general<V: Num, M: MathMode>(plan: &Plan, what: &str) {
        let kernel = Kernel::<V, M>::new(plan);
        assert!(kernel.single_sample(), "{what}");
        let bits = |v: V| (0..V::LANES).map(|i| v.lane(i).val().to_bits()).collect::<Vec<_>>();
        let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
        let (mut on_a, mut on_b) = (u32::MAX, u32::MAX);
        let mut left_grid = false;
        for s in 0..sp {
            for f0 in (0..fp).step_by(V::LANES) {
                let a = kernel.lanes_with::<true>(f0, s, &mut on_a);
                let b = kernel.lanes_with::<false>(f0, s, &mut on_b);
                assert_eq!(bits(a.value), bits(b.value), "{what}: row {s} from {f0}");
                assert_eq!(bits(a.omega_sum), bits(b.omega_sum), "{what}: row {s} from {f0}");
                assert_eq!(a.out_of_range.is_some(), b.out_of_range.is_some(), "{what}");
                assert_eq!(on_a, on_b, "{what}");
                left_grid |= a.out_of_range.is_some();
            }
        }
        assert!(
            plan.grid.is_none() || left_grid,
            "{what}: the interpolation should leave the grid"
        );
    }

    #[test]
    fn single_sample_path_is_the_general_loop() {
        let base = || {
            let mut cfg = crate::render::kernel::small_config();
            cfg.beam.kahn_factor = 0.9;
            cfg
        };
        let mut variants: Vec<(&str, SimConfig)> = Vec::new();
        variants.push(("plain", base()));
        let mut c = base();
        c.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 4).into());
        c.sf.interpolate = Some(true);
        variants.push(("hkl, tricubic", c));
        let mut c = base();
        c.beam.nopolar = true;
        c.sampling.dmin_a = 2.5;
        variants.push(("nopolar, dmin", c));
        let mut c = base();
        (c.sampling.oversample_omega, c.sampling.oversample_polar) = (true, true);
        c.sampling.oversample_thick = true;
        // (a sensor with a thickness always has two layers or more)
        variants.push(("oversample flags", c));
        let mut c = base();
        c.beam.nopolar = true;
        c.sampling.oversample_polar = true;
        c.sampling.water_um = 50.0;
        c.crystal.shape = crate::config::CrystalShape::Round;
        variants.push(("nopolar + oversample_polar, water, round", c));
        let mut c = base();
        (c.crystal.na, c.crystal.nb, c.crystal.nc) = (4.0, 12.0, 2.0);
        c.crystal.mosaic_deg = 0.3;
        c.crystal.mosaic_domains = 3;
        variants.push(("even and reduced gratings, mosaic", c));
        for (what, cfg) in &variants {
            let plan = Plan::new(cfg, SetupSeeds { misset_idum: 0 }).expect("test plan");
            single_matches_general::<f64, Fast>(&plan, what);
            single_matches_general::<f64, Exact>(&plan, what);
            single_matches_general::<f32, Fast>(&plan, what);
            single_matches_general::<X2<X2<f64>>, Fast>(&plan, what);
        }
    }

    #[test]
    fn rendered_row_statistics_are_those_of_the_image() {
        // this plan's tricubic interpolation runs off the grid, so rows are
        // re-rendered: their statistics must follow
        let plan = plan(0);
        let n = plan.detector.fpixels * plan.detector.spixels;
        let mut image = vec![0.0f32; n];
        let info =
            render_into(&plan, RenderOptions::new(Precision::Fast64).row_stats(), &mut image);
        assert!(info.interpolation_fallback.is_some());
        let (fp, roi, mask) = (plan.detector.fpixels, plan.detector.roi, plan.mask.as_deref());
        let rows: Vec<RowStats> =
            image.chunks(fp).enumerate().map(|(s, r)| row_stats(r, s, roi, mask)).collect();
        assert_eq!(info.rows, rows);
        let from_rows = crate::stats::stats_from_rows(&image, fp, roi, &info.rows);
        assert_eq!(from_rows, crate::stats::image_stats(&image, fp, roi, mask));
        assert!(from_rows.max_i > 0.0 && from_rows.count > 0);
    }

    #[test]
    fn every_level_and_precision_agrees_with_exact() {
        for shape in 0..4 {
            let plan = plan(shape);
            let opts = RenderOptions::default().threads(2);
            let exact = render::<f32>(
                &plan,
                RenderOptions { precision: Precision::Exact64, ..opts }.simd(SimdLevel::Scalar),
            );
            assert!(exact.image.iter().any(|&v| v > 0.0));
            assert!(exact.info.interpolation_fallback.is_some(), "the test should leave the grid");
            for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
                // the exact path is one code on every level
                let e = render::<f32>(
                    &plan,
                    RenderOptions { precision: Precision::Exact64, ..opts }.simd(level),
                );
                assert_eq!(e.image, exact.image, "shape {shape} {level:?}");
                let f64 = render::<f32>(
                    &plan,
                    RenderOptions { precision: Precision::Fast64, ..opts }.simd(level),
                );
                let f32 = render::<f32>(
                    &plan,
                    RenderOptions { precision: Precision::Fast32, ..opts }.simd(level),
                );
                assert!(worst(&f64.image, &exact.image) < 1e-12, "shape {shape} {level:?}");
                assert!(worst(&f32.image, &exact.image) < 2e-4, "shape {shape} {level:?}");
                assert_eq!(e.info.interpolation_fallback, exact.info.interpolation_fallback);
                for out in [&e, &f64, &f32] {
                    let (hkl, hkl0) = out.info.interpolation_fallback.unwrap();
                    let (want, want0) = exact.info.interpolation_fallback.unwrap();
                    assert_eq!(hkl0, want0);
                    assert!(hkl.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-4));
                    assert!((out.info.omega_sum / exact.info.omega_sum - 1.0).abs() < 1e-6);
                }
                // pixels outside the region of interest or masked stay 0
                let fp = plan.detector.fpixels;
                for (i, &v) in f64.image.iter().enumerate() {
                    let (f, s) = (i % fp, i / fp);
                    if !(2..=41).contains(&f) || !(1..=35).contains(&s) || i % 7 == 3 {
                        assert_eq!(v, 0.0);
                    }
                }
            }
        }
    }

    /// A target holding an old image (here NaN everywhere) is overwritten
    /// completely: the masked and out-of-ROI pixels too.
    #[test]
    fn render_into_overwrites_every_pixel() {
        let plan = plan(0);
        let opts = RenderOptions::default().threads(2);
        for precision in [Precision::Exact64, Precision::Fast64, Precision::Fast32] {
            let fresh = render::<f32>(&plan, RenderOptions { precision, ..opts });
            let mut old = vec![f32::NAN; fresh.image.len()];
            render_into(&plan, RenderOptions { precision, ..opts }.row_stats(), &mut old);
            assert!(old.iter().zip(&fresh.image).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    #[test]
    fn an_f64_image_rounds_to_the_f32_one() {
        let plan = plan(2);
        for precision in [Precision::Fast64, Precision::Exact64, Precision::Fast32] {
            let want = render::<f32>(&plan, RenderOptions::new(precision)).image;
            let (wide, info) = render::<f64>(&plan, RenderOptions::new(precision)).into_parts();
            let rounded: Vec<f32> = wide.iter().map(|&x| x as f32).collect();
            assert_eq!(rounded, want, "{precision:?}");
            // f32 lanes have no more digits to give
            let more = wide.iter().zip(&want).any(|(&w, &n)| w != n as f64);
            assert_eq!(more, precision != Precision::Fast32, "{precision:?}");
            // the statistics are the f32 image's, which the caller does not have
            assert!(info.rows.is_empty());
        }
    }

    #[test]
    fn threads_do_not_change_the_image() {
        let plan = plan(0);
        for precision in [Precision::Exact64, Precision::Fast64, Precision::Fast32] {
            let one = render::<f32>(&plan, RenderOptions::new(precision).threads(1));
            let three = render::<f32>(&plan, RenderOptions::new(precision).threads(3));
            assert_eq!(one.image, three.image, "{precision:?}");
            assert_eq!(one.info.omega_sum.to_bits(), three.info.omega_sum.to_bits());
        }
    }
}
