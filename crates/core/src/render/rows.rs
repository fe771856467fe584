//! The one row driver: every CPU render (the image, the derivative images,
//! the contracted derivatives, the second derivatives) walks the detector
//! here, row by row, into one or more output planes.
//!
//! The rules that decide which pixels are rendered live here once: the
//! region of interest, the mask, zeroing what is not rendered, and
//! nanoBragg.c's shared tricubic-interpolation flag (every pixel after the
//! first out-of-range point in raster order is nearest-neighbour, which is
//! reproduced by re-rendering from that row on). Rows run in parallel, each
//! computed by one thread in a fixed order, so no output depends on the
//! number of threads.
//!
//! A [`RowKernel`] renders one row; [`KernelRows`] is the one for the
//! generic render kernel (any number type: f64, f32, SIMD lanes, dual
//! numbers), and [`Avx2`] / [`Avx512`] compile any row kernel with the
//! target features of a SIMD level chosen at run time.

use super::background::RowBackground;
use super::kernel::{Fallback, Kernel, MathMode};
use crate::real::{Mask, Num, Real};
use crate::setup::Plan;
use crate::stats::{row_stats, RowStats};

/// The element type of an output plane: `f32`, as the command line writes
/// images, or `f64`, for images whose rounding must not hide a finite
/// difference (Python's float64 tensors, gradient checks).
pub trait Pixel: Copy + Default + Send + Sync + 'static {
    /// Store part `o` of `v`'s lanes (see [`Num::write_part`]) into
    /// `out[..V::LANES]`.
    fn write_part<V: Num>(v: &V, o: usize, out: &mut [Self]);
    /// Part `o` of lane `i` of `v`.
    fn part_lane<V: Num>(v: &V, o: usize, i: usize) -> Self;
    /// [`row_stats`] of a row of this type.
    fn row_stats(row: &[Self], s: usize, roi: [i64; 4], mask: Option<&[u16]>) -> RowStats;
    /// This value plus `x`.
    fn plus(self, x: f64) -> Self;
}

impl Pixel for f32 {
    #[inline(always)]
    fn write_part<V: Num>(v: &V, o: usize, out: &mut [f32]) {
        v.write_part(o, out);
    }
    #[inline(always)]
    fn part_lane<V: Num>(v: &V, o: usize, i: usize) -> f32 {
        v.part_lane(o, i)
    }
    fn row_stats(row: &[f32], s: usize, roi: [i64; 4], mask: Option<&[u16]>) -> RowStats {
        row_stats(row, s, roi, mask)
    }
    #[inline(always)]
    fn plus(self, x: f64) -> f32 {
        (self as f64 + x) as f32
    }
}

impl Pixel for f64 {
    #[inline(always)]
    fn write_part<V: Num>(v: &V, o: usize, out: &mut [f64]) {
        for (i, x) in out[..V::LANES].iter_mut().enumerate() {
            *x = v.part_f64(o, i);
        }
    }
    #[inline(always)]
    fn part_lane<V: Num>(v: &V, o: usize, i: usize) -> f64 {
        v.part_f64(o, i)
    }
    /// The statistics of the row rounded to f32, as the command line reports
    /// them.
    fn row_stats(row: &[f64], s: usize, roi: [i64; 4], mask: Option<&[u16]>) -> RowStats {
        let rounded: Vec<f32> = row.iter().map(|&x| x as f32).collect();
        row_stats(&rounded, s, roi, mask)
    }
    #[inline(always)]
    fn plus(self, x: f64) -> f64 {
        self + x
    }
}

/// What rendering one row gives: its solid-angle sum and its first
/// interpolation fallback (image index, and the point when the kernel
/// reports it).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RowOut {
    /// Sum of the solid angles of the row's sub-pixel evaluations.
    pub omega: f64,
    /// Image index of the first pixel whose tricubic interpolation left the
    /// grid, and that point.
    pub fallback: Option<(usize, Option<Fallback>)>,
}

/// Renders one row of the detector into output planes.
///
/// Implementations mark `row` `#[inline(always)]` so that it compiles into
/// the SIMD wrappers ([`Avx2`], [`Avx512`]).
pub(crate) trait RowKernel<T: Pixel = f32>: Sync {
    /// Row `s` into `planes` (one slice of `fpixels` values per output).
    /// Only the pixels [`RowBlocks`] yields are written. With `limit` p,
    /// only pixels up to image index p start with interpolation on.
    fn row(&self, s: usize, planes: &mut [&mut [T]], limit: Option<usize>) -> RowOut;
    /// Whether the plan starts with tricubic interpolation on.
    fn interpolates(&self) -> bool;

    /// [`RowKernel::row`] compiled with AVX2 and FMA ([`Avx2`]'s rows).
    ///
    /// (Methods of the trait rather than functions of this module: rustc
    /// compiles an instance of a provided method with the code of the
    /// implementing type's module, so the kernels of different modules are
    /// optimised in parallel; as functions of this module, every SIMD row
    /// went into one code-generation unit, which one core compiled alone:
    /// see docs/performance.md.)
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_avx2(&self, s: usize, planes: &mut [&mut [T]], limit: Option<usize>) -> RowOut {
        self.row(s, planes, limit)
    }

    /// [`RowKernel::row`] compiled with AVX-512F ([`Avx512`]'s rows).
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn row_avx512(&self, s: usize, planes: &mut [&mut [T]], limit: Option<usize>) -> RowOut {
        self.row(s, planes, limit)
    }
}

/// The totals of a render through [`render_planes`].
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanesOut {
    /// Sum of solid angles over all sub-pixel evaluations.
    pub omega_sum: f64,
    /// The first interpolation fallback (raster order), when the kernel
    /// reports its point.
    pub fallback: Option<Fallback>,
    /// Each row's statistics of plane 0 (empty unless asked for).
    pub rows: Vec<RowStats>,
}

/// Render every row of `plan` with `kernel` into `planes` (each
/// `fpixels * spixels` long; pixels not rendered are set to 0), then
/// re-render after a tricubic fallback. With `stats`, each row's statistics
/// of plane 0 are gathered while the row is in cache.
pub(crate) fn render_planes<T: Pixel, K: RowKernel<T>>(
    plan: &Plan,
    kernel: &K,
    planes: &mut [&mut [T]],
    stats: bool,
    background: Option<RowBackground<'_>>,
) -> PlanesOut {
    let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
    for p in planes.iter() {
        assert_eq!(p.len(), fp * sp, "every plane holds fpixels * spixels values");
    }
    let mut omega = vec![0.0f64; sp];
    // (the statistics and background are the first plane's, the image's:
    // none without one)
    let (stats, background) = if planes.is_empty() { (false, None) } else { (stats, background) };
    let mut rows = vec![RowStats::default(); if stats { sp } else { 0 }];
    // (no planes: a kernel that sums, such as a backward pass, still runs)
    if fp == 0 || sp == 0 {
        return PlanesOut { omega_sum: 0.0, fallback: None, rows };
    }
    let mut fallback = None;
    let job = |limit| Rows { plan, kernel, limit, grain: 1, background };
    if let Some((p, point)) = render_rows(job(None), planes, &mut omega, &mut rows, 0) {
        fallback = point;
        if kernel.interpolates() && !plan.corrected {
            // (-corrected: each point falls back alone, nothing to redo)
            // pixels up to p start interpolating (and give the same values
            // as before), later ones start in nearest mode
            let r = p / fp;
            let rows_from = if stats { &mut rows[r..] } else { &mut rows[..] };
            render_rows(job(Some(p)), planes, &mut omega[r..], rows_from, r);
        }
    }
    PlanesOut { omega_sum: omega.iter().sum(), fallback, rows }
}

/// `outputs` zeroed images (one allocation each: `vec![image; n]` would
/// copy the first).
pub(crate) fn zeroed_planes<T: Pixel>(plan: &Plan, outputs: usize) -> Vec<Vec<T>> {
    let n = plan.detector.fpixels * plan.detector.spixels;
    (0..outputs).map(|_| zeroed_plane(n)).collect()
}

/// A zeroed image of `n` pixels, zeroed by the current thread pool's
/// threads (a reused heap block is otherwise cleared by one thread: 7 % of
/// the time of a fast f64 1024² render on 2 cores). Large images ask Linux
/// for transparent huge pages before they are touched: the zeroing then
/// takes one page fault per 2 MiB instead of one per 4 KiB, which is a
/// noticeable part of a large, fast render on virtual machines.
pub(crate) fn zeroed_plane<T: Pixel>(n: usize) -> Vec<T> {
    use rayon::prelude::*;
    use std::mem::MaybeUninit;
    let mut image = Vec::<T>::with_capacity(n);
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        const MADV_HUGEPAGE: i32 = 14;
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        let start = image.as_ptr() as usize;
        let end = start + n * std::mem::size_of::<T>();
        let (lo, hi) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if hi > lo {
            // SAFETY: [lo, hi) lies inside the allocation, which nothing has
            // read or written yet; MADV_HUGEPAGE is only a hint.
            unsafe {
                madvise(lo as *mut std::ffi::c_void, hi - lo, MADV_HUGEPAGE);
            }
        }
    }
    // 256 KiB pieces: many per thread, each worth a task
    let piece = (256 << 10) / std::mem::size_of::<T>().max(1);
    image.spare_capacity_mut()[..n]
        .par_chunks_mut(piece.max(1))
        .for_each(|c| c.fill(MaybeUninit::new(T::default())));
    // SAFETY: the capacity is at least n and its first n values were written
    // just above.
    unsafe { image.set_len(n) };
    image
}

/// Render `rows` into `outputs` new images (value, then derivatives).
pub(crate) fn render_images<T: Pixel>(
    plan: &Plan,
    rows: &impl RowKernel<T>,
    outputs: usize,
) -> Vec<Vec<T>> {
    let mut images = zeroed_planes(plan, outputs);
    let mut planes: Vec<&mut [T]> = images.iter_mut().map(|i| &mut i[..]).collect();
    render_planes(plan, rows, &mut planes, false, None);
    images
}

/// The first fallback of a range of rows: image index and point.
type First = Option<(usize, Option<Fallback>)>;

/// Rows `first_row..` of `planes` in parallel; returns the first fallback
/// (raster order).
fn render_rows<T: Pixel, K: RowKernel<T>>(
    mut job: Rows<'_, K>,
    planes: &mut [&mut [T]],
    omega: &mut [f64],
    stats: &mut [RowStats],
    first_row: usize,
) -> First {
    let fp = job.plan.detector.fpixels;
    let mut rest: Vec<&mut [T]> = planes.iter_mut().map(|p| &mut p[first_row * fp..]).collect();
    // a few pieces per thread (rows differ in cost), as rayon's own splitting
    job.grain = omega.len().div_ceil(16 * rayon::current_num_threads()).max(1);
    job.split(&mut rest, omega, stats, first_row)
}

/// A parallel render of rows, halving the range down to `grain` rows.
/// (Splitting the planes per range, rather than collecting every row's
/// slices first, keeps the temporary allocations small: a large one made
/// the allocator return the planes' memory to the system between calls.)
struct Rows<'a, K> {
    plan: &'a Plan,
    kernel: &'a K,
    limit: Option<usize>,
    grain: usize,
    /// Added to the first plane's rendered pixels.
    background: Option<RowBackground<'a>>,
}

impl<K> Rows<'_, K> {
    /// Rows `first_row ..` (as many as `omega` holds) of `planes`: halved
    /// and rendered in parallel above `grain` rows, else in order; returns
    /// the first fallback.
    fn split<T: Pixel>(
        &self,
        planes: &mut [&mut [T]],
        omega: &mut [f64],
        stats: &mut [RowStats],
        first_row: usize,
    ) -> First
    where
        K: RowKernel<T>,
    {
        let (rows, fp) = (omega.len(), self.plan.detector.fpixels);
        if rows > self.grain {
            let mid = rows / 2;
            let (mut lo, mut hi): (Vec<&mut [T]>, Vec<&mut [T]>) =
                planes.iter_mut().map(|p| p.split_at_mut(mid * fp)).unzip();
            let (omega_lo, omega_hi) = omega.split_at_mut(mid);
            let (stats_lo, stats_hi) = stats.split_at_mut(mid.min(stats.len()));
            let (a, b) = rayon::join(
                || self.split(&mut lo, omega_lo, stats_lo, first_row),
                || self.split(&mut hi, omega_hi, stats_hi, first_row + mid),
            );
            return a.or(b);
        }
        let plan = self.plan;
        let (roi, mask) = (plan.detector.roi, plan.mask.as_deref());
        let mut first = None;
        for (r, omega) in omega.iter_mut().enumerate() {
            if super::interrupt::skip_row() {
                // the caller that asked for the stop throws the image away
                continue;
            }
            let s = first_row + r;
            let mut row: Vec<&mut [T]> =
                planes.iter_mut().map(|p| &mut p[r * fp..(r + 1) * fp]).collect();
            for plane in row.iter_mut() {
                clear_unrendered(plan, s, plane);
            }
            let out = self.kernel.row(s, &mut row, self.limit);
            if let Some(bg) = self.background {
                bg.add_row(plan, s, row[0]);
            }
            *omega = out.omega;
            if let Some(st) = stats.get_mut(r) {
                // while the row is in cache
                *st = T::row_stats(row[0], s, roi, mask);
            }
            first = first.or(out.fallback);
        }
        first
    }
}

/// Zeroes the pixels of row `s` that no kernel writes (outside the region
/// of interest, masked), so that a target need not start zeroed.
fn clear_unrendered<T: Pixel>(plan: &Plan, s: usize, row: &mut [T]) {
    let Some((lo, hi)) = roi_row(plan, s) else {
        row.fill(T::default());
        return;
    };
    row[..lo].fill(T::default());
    row[hi + 1..].fill(T::default());
    if let Some(mask) = plan.mask.as_deref() {
        let fp = plan.detector.fpixels;
        for (v, &m) in row[lo..=hi].iter_mut().zip(&mask[s * fp + lo..=s * fp + hi]) {
            if m == 0 {
                *v = T::default();
            }
        }
    }
}

/// The pixels `lo..=hi` of row `s` inside the plan's region of interest, or
/// `None` when the row has none.
#[inline(always)]
pub(crate) fn roi_row(plan: &Plan, s: usize) -> Option<(usize, usize)> {
    roi_row_of(plan.detector.roi, plan.detector.fpixels, s)
}

/// The pixels `lo..=hi` of row `s` inside `roi` (`[xmin, xmax, ymin,
/// ymax]`) on a detector `fp` pixels wide, if any.
#[inline(always)]
pub(crate) fn roi_row_of(roi: [i64; 4], fp: usize, s: usize) -> Option<(usize, usize)> {
    let si = s as i64;
    if si < roi[2] || si > roi[3] || roi[1] < 0 || fp == 0 {
        return None;
    }
    let (lo, hi) = (roi[0].max(0) as usize, (roi[1] as usize).min(fp - 1));
    // a ROI whose xmin lies past its xmax or the detector renders nothing
    // in the row, as in nanoBragg.c
    (lo <= hi).then_some((lo, hi))
}

/// A block of adjacent pixels of a row (see [`RowBlocks`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    /// Fast index of its first pixel.
    pub f0: usize,
    /// Pixels in the block (the lane count, or fewer at the end of the ROI).
    pub n: usize,
    /// The lanes rendered (not masked), as bits.
    pub live: u32,
    /// Of those, the ones that start with tricubic interpolation on.
    pub interp: u32,
    /// Every lane is rendered: the block can be stored whole.
    pub full: bool,
}

impl Block {
    /// The rendered lanes.
    #[inline(always)]
    pub fn live_lanes(self) -> impl Iterator<Item = usize> {
        (0..self.n).filter(move |i| self.live >> i & 1 != 0)
    }

    /// Store part `o` of `v` (one pixel per lane; see [`Num::write_part`])
    /// into the block's pixels of `plane`.
    #[inline(always)]
    pub fn store<V: Num, T: Pixel>(self, v: &V, o: usize, plane: &mut [T]) {
        if self.full {
            T::write_part(v, o, &mut plane[self.f0..self.f0 + V::LANES]);
        } else {
            for i in self.live_lanes() {
                plane[self.f0 + i] = T::part_lane(v, o, i);
            }
        }
    }
}

/// The blocks of `lanes` pixels of a row inside the region of interest
/// that have a rendered pixel, left to right.
pub(crate) struct RowBlocks<'p> {
    mask: Option<&'p [u16]>,
    row_start: usize,
    f0: usize,
    hi: usize,
    lanes: usize,
    start_on: bool,
    limit: Option<usize>,
}

impl<'p> RowBlocks<'p> {
    /// Row `s` of `plan` (`start_on`: tricubic interpolation starts on;
    /// `limit`: see [`RowKernel::row`]), or `None` when the ROI misses it.
    #[inline(always)]
    pub fn new(
        plan: &'p Plan,
        s: usize,
        lanes: usize,
        start_on: bool,
        limit: Option<usize>,
    ) -> Option<Self> {
        let (lo, hi) = roi_row(plan, s)?;
        let fp = plan.detector.fpixels;
        let mask = plan.mask.as_deref().map(|m| &m[s * fp..(s + 1) * fp]);
        Some(RowBlocks { mask, row_start: s * fp, f0: lo, hi, lanes, start_on, limit })
    }
}

impl Iterator for RowBlocks<'_> {
    type Item = Block;
    #[inline(always)]
    fn next(&mut self) -> Option<Block> {
        while self.f0 <= self.hi {
            let (f0, lanes) = (self.f0, self.lanes);
            self.f0 += lanes;
            let n = lanes.min(self.hi + 1 - f0);
            let (live, interp) = self.block_lanes(f0, n);
            if live != 0 {
                return Some(Block { f0, n, live, interp, full: live == all_lanes(lanes) });
            }
        }
        None
    }
}

impl RowBlocks<'_> {
    /// The lanes of the block of `n` pixels from fast index `f0` as bits:
    /// those rendered (not masked), and of those the ones that start with
    /// tricubic interpolation on.
    #[inline(always)]
    fn block_lanes(&self, f0: usize, n: usize) -> (u32, u32) {
        let mut live = if n == self.lanes { all_lanes(n) } else { (1u32 << n) - 1 };
        if let Some(m) = self.mask {
            for (i, &v) in m[f0..f0 + n].iter().enumerate() {
                if v == 0 {
                    live &= !(1 << i);
                }
            }
        }
        let first = self.row_start + f0;
        let interp = match self.limit {
            _ if !self.start_on => 0,
            None => live,
            Some(p) if p >= first + n - 1 => live,
            Some(p) if p < first => 0,
            Some(p) => live & ((1u32 << (p + 1 - first)) - 1),
        };
        (live, interp)
    }
}

fn all_lanes(lanes: usize) -> u32 {
    if lanes >= 32 {
        u32::MAX
    } else {
        (1u32 << lanes) - 1
    }
}

/// The rows of the render kernel: plane `j` receives part `parts[j]` of
/// each pixel (0 the value, `1 + i` the derivative along direction `i`).
///
/// The row kernel owns the render kernel: the SIMD wrappers take the row
/// kernel by reference as a function argument, which tells the optimiser
/// that the kernel's numbers do not change while rows are stored, so they
/// stay in registers across the blocks of a row (7 % fewer instructions
/// than through a second reference).
pub(crate) struct KernelRows<'k, 'p, V: Num, M: MathMode> {
    kernel: Kernel<'p, V, M>,
    parts: &'k [usize],
}

/// Part 0 alone: the image.
pub(crate) const VALUE: &[usize] = &[0];

impl<'k, 'p, V: Num, M: MathMode> KernelRows<'k, 'p, V, M> {
    /// Rows of `kernel` storing `parts` (one plane each).
    pub fn new(kernel: Kernel<'p, V, M>, parts: &'k [usize]) -> Self {
        KernelRows { kernel, parts }
    }
}

impl<T: Pixel, V: Num, M: MathMode> RowKernel<T> for KernelRows<'_, '_, V, M> {
    #[inline(always)]
    fn row(&self, s: usize, planes: &mut [&mut [T]], limit: Option<usize>) -> RowOut {
        if self.kernel.single_sample() {
            kernel_row::<T, V, M, true>(&self.kernel, self.parts, s, planes, limit)
        } else {
            kernel_row::<T, V, M, false>(&self.kernel, self.parts, s, planes, limit)
        }
    }
    fn interpolates(&self) -> bool {
        self.kernel.interpolates()
    }
}

/// Row `s` of `kernel` into `planes` (part `parts[j]` into plane `j`).
#[inline(always)]
fn kernel_row<T: Pixel, V: Num, M: MathMode, const SINGLE: bool>(
    kernel: &Kernel<V, M>,
    parts: &[usize],
    s: usize,
    planes: &mut [&mut [T]],
    limit: Option<usize>,
) -> RowOut {
    let plan = kernel.plan();
    let Some(blocks) = RowBlocks::new(plan, s, V::LANES, kernel.interpolates(), limit) else {
        return RowOut::default();
    };
    let mut omega_lanes = V::zero();
    let mut fallback = None;
    for mut b in blocks {
        let r = kernel.lanes_with::<SINGLE>(b.f0, s, &mut b.interp);
        match (&mut *planes, parts) {
            // the image: no loop over planes
            ([plane], &[o]) => b.store(&r.value, o, plane),
            (planes, parts) => {
                for (&o, plane) in parts.iter().zip(planes.iter_mut()) {
                    b.store(&r.value, o, plane);
                }
            }
        }
        omega_lanes += if b.full {
            r.omega_sum
        } else {
            V::select(V::Mask::from_bits(b.live), r.omega_sum, V::zero())
        };
        if fallback.is_none() {
            if let Some((i, p)) = r.out_of_range {
                fallback = Some((s * plan.detector.fpixels + b.f0 + i, Some(p)));
            }
        }
    }
    let omega = (0..V::LANES).map(|i| omega_lanes.lane(i).val()).sum();
    RowOut { omega, fallback }
}

#[cfg(target_arch = "x86_64")]
macro_rules! simd_rows {
    ($(#[$doc:meta])* $name:ident, $row:ident) => {
        $(#[$doc])*
        pub(crate) struct $name<K>(K);

        impl<K> $name<K> {
            /// # Safety
            /// The CPU must have these target features
            /// (see [`crate::render::simd_level`]).
            pub unsafe fn new(rows: K) -> Self {
                $name(rows)
            }
        }

        impl<T: Pixel, K: RowKernel<T>> RowKernel<T> for $name<K> {
            fn row(&self, s: usize, planes: &mut [&mut [T]], limit: Option<usize>) -> RowOut {
                // SAFETY: only constructed (unsafe `new`) on a CPU with these features.
                unsafe { self.0.$row(s, planes, limit) }
            }
            fn interpolates(&self) -> bool {
                self.0.interpolates()
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
simd_rows!(
    /// A row kernel compiled with AVX2 and FMA.
    Avx2,
    row_avx2
);
#[cfg(target_arch = "x86_64")]
simd_rows!(
    /// A row kernel compiled with AVX-512F.
    Avx512,
    row_avx512
);

#[cfg(test)]
mod tests {
    use super::zeroed_plane;

    /// Every value of a new plane is +0, also where the allocator hands back
    /// memory that held an image (sizes below, at and above one zeroing piece,
    /// and not a multiple of it).
    #[test]
    fn a_zeroed_plane_is_zero_everywhere() {
        for n in [0, 1, 1007, 32768, 3 << 20 | 5] {
            drop(vec![1.5f64; n]);
            let plane = zeroed_plane::<f64>(n);
            assert_eq!(plane.len(), n);
            assert!(plane.iter().all(|x| x.to_bits() == 0), "f64, {n}");
            drop(vec![-2.5f32; n]);
            let plane = zeroed_plane::<f32>(n);
            assert_eq!(plane.len(), n);
            assert!(plane.iter().all(|x| x.to_bits() == 0), "f32, {n}");
        }
    }
}
