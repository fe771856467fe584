//! The sample loop: every sensor layer, sub-pixel and source of a block of
//! pixels, in nanoBragg.c's order and with its rules for when the solid
//! angle, the capture fraction and the polarization are taken again (at the
//! first sample where they are still 0, or at every sample under the
//! matching `-oversample_*` flag).
//!
//! What happens at each source is the caller's ([`Samples`]): the image
//! kernel adds every cell's photons ([`Photons`], which also feeds the
//! `-printout` probe); the contracted derivatives also sum the photons'
//! derivatives by the kernel's inner numbers (`diff::contract`).

use super::kernel::{Fallback, Kernel, MathMode, NoProbe, Probe};
use crate::real::{Mask, Num};
use crate::vec3::V3;

/// What the sample loop does at each sample of a block of pixels.
pub(crate) trait Samples<V: Num, M: MathMode> {
    /// The position (m) of sub-pixel (`sub_f`, `sub_s`) of pixels `f0 + lane`
    /// of row `spixel` at depth `odet_pos` (`os` sub-pixels per edge,
    /// `lane_offset` each lane's first sub-pixel index): the kernel's
    /// [`Kernel::sample_position`] unless the hook watches or replaces it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn position(
        &mut self,
        kernel: &Kernel<V, M>,
        f0: usize,
        spixel: usize,
        sub: [usize; 2],
        os: usize,
        lane_offset: V,
        odet_pos: V,
    ) -> V3<V> {
        kernel.sample_position(f0, spixel, sub, os, lane_offset, odet_pos)
    }

    /// The solid angle was taken at this sample in the lanes of `m`, from
    /// the distance `airpath` (and, fast mode, its reciprocal).
    #[inline(always)]
    fn omega_taken(&mut self, _m: V::Mask, _airpath: V, _inv_airpath: V) {}

    /// The polarization was taken at this sample in the lanes of `m`, for
    /// source number `src` towards `diffracted`.
    #[inline(always)]
    fn polar_taken(&mut self, _m: V::Mask, _src: usize, _diffracted: &V3<V>) {}

    /// A source's scattering vector (1/m), before the `-dmin` cut.
    #[inline(always)]
    fn scattering(&mut self, _q: &V3<V>) {}

    /// One source of the sample (number `src`, towards `diffracted`),
    /// scattering `q` in the lanes of `active`, with the sample's [capture
    /// fraction, polarization, solid angle].
    #[allow(clippy::too_many_arguments)]
    fn source(
        &mut self,
        kernel: &Kernel<V, M>,
        src: (usize, &V3<V>),
        q: V3<V>,
        active: V::Mask,
        factors: [V; 3],
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
    );

    /// Whether a block of pixels with one sample each (one sensor layer,
    /// sub-pixel and source) takes a copy of the loop without loops: what
    /// the loops carry from one sample to the next (the factors, the
    /// diffracted direction) no longer round-trips through the stack at each
    /// loop's end. The contracted derivatives' hook, whose duals the loops
    /// spilled, does in AVX-512 vectors (a 1024² Jᵀv by 5 parameters,
    /// 2 threads: 11.1 to 9.7 ms); the image's does not (no change
    /// measured), which keeps its rows one copy.
    const UNROLL_ONE_SAMPLE: bool = false;
}

/// What the sample loop leaves: the last capture fraction, polarization and
/// solid angle (those not compounded by an `-oversample_*` flag apply once,
/// at the end), and the sum of the solid angles.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleEnd<V> {
    /// [capture fraction, polarization, solid angle].
    pub factors: [V; 3],
    /// Sum of the solid angles over the samples.
    pub omega_sum: V,
}

impl<V: Num, M: MathMode> Kernel<'_, V, M> {
    /// Run the sample loop over pixels `f0 ..` of row `spixel` (see the
    /// module docs).
    #[inline(always)]
    pub(crate) fn samples<H: Samples<V, M>>(
        &self,
        f0: usize,
        spixel: usize,
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
        hook: &mut H,
    ) -> SampleEnd<V> {
        if H::UNROLL_ONE_SAMPLE && self.one_sample {
            self.sample_loop::<true>(f0, spixel, interp, out_of_range, hook)
        } else {
            self.sample_loop::<false>(f0, spixel, interp, out_of_range, hook)
        }
    }

    /// [`Kernel::samples`], with `ONE` for a plan of one sample per pixel
    /// (the loops' bounds then known to be 1).
    #[inline(always)]
    fn sample_loop<const ONE: bool>(
        &self,
        f0: usize,
        spixel: usize,
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
        hook: &mut impl Samples<V, M>,
    ) -> SampleEnd<V> {
        let plan = self.plan();
        let s = V::splat;
        let (zero, one) = (V::zero(), V::one());
        let mut omega_sum = zero;
        let mut polar = if plan.nopolar { one } else { zero };
        let mut omega_pixel = zero;
        let mut capture_fraction = zero;
        let (os, thicksteps, sources) = match ONE {
            true => (1, 1, &self.sources[..1]),
            false => (self.oversample, self.thicksteps, &self.sources[..]),
        };
        let lane_offset = V::from_fn(|i| V::Scalar::c((i * os) as f64));
        // -corrected takes every factor at every sample (the capture
        // fraction only where the sensor has a thickness, the polarization
        // only without -nopolar: else they are 1)
        let corrected = self.corrected;
        let oversample_omega = V::Mask::splat(plan.oversample_omega || corrected);
        let oversample_thick =
            V::Mask::splat(if corrected { !self.thick_zero } else { plan.oversample_thick });
        let oversample_polar =
            V::Mask::splat(if corrected { !plan.nopolar } else { plan.oversample_polar });
        for thick_tic in 0..thicksteps {
            let odet_pos = V::c(thick_tic as f64) * s(self.thickstep);
            capture_fraction = if self.thick_zero { one } else { zero };
            for sub_s in 0..os {
                for sub_f in 0..os {
                    let sub = [sub_f, sub_s];
                    let pos = hook.position(self, f0, spixel, sub, os, lane_offset, odet_pos);
                    let (mut diffracted, airpath, inv_airpath) = self.direction(pos);
                    let recompute = omega_pixel.cmp_eq(zero) | oversample_omega;
                    if recompute.any() {
                        let omega = if corrected {
                            self.solid_angle_at(pos, airpath, inv_airpath)
                        } else {
                            self.solid_angle(airpath, inv_airpath)
                        };
                        omega_pixel = V::select(recompute, omega, omega_pixel);
                        hook.omega_taken(recompute, airpath, inv_airpath);
                    }
                    omega_sum += omega_pixel;
                    let recompute = capture_fraction.cmp_eq(zero) | oversample_thick;
                    if recompute.any() {
                        let fraction = self.capture(diffracted, thick_tic);
                        capture_fraction = V::select(recompute, fraction, capture_fraction);
                    }
                    for (index, src) in sources.iter().enumerate() {
                        let q = self.scattering(diffracted, src);
                        hook.scattering(&q);
                        let active = self.dmin_active(q);
                        if !active.any() {
                            continue;
                        }
                        let recompute = active & (polar.cmp_eq(zero) | oversample_polar);
                        if recompute.any() {
                            polar = self.polarize(src, &mut diffracted, recompute, polar);
                            hook.polar_taken(recompute, index, &diffracted);
                        }
                        let factors = [capture_fraction, polar, omega_pixel];
                        let src = (index, &diffracted);
                        hook.source(self, src, q, active, factors, interp, out_of_range);
                    }
                }
            }
        }
        SampleEnd { factors: [capture_fraction, polar, omega_pixel], omega_sum }
    }
}

impl<V: Num, M: MathMode> Kernel<'_, V, M> {
    /// The position (m) of sub-pixel `sub` of pixels `f0 + lane` of row
    /// `spixel` at depth `odet_pos` (see [`Samples::position`]).
    #[inline(always)]
    pub(crate) fn sample_position(
        &self,
        f0: usize,
        spixel: usize,
        [sub_f, sub_s]: [usize; 2],
        os: usize,
        lane_offset: V,
        odet_pos: V,
    ) -> V3<V> {
        let (fdet_pos, sdet_pos) = self.subpixel_offsets(f0, spixel, sub_f, sub_s, os, lane_offset);
        self.position(fdet_pos, sdet_pos, odet_pos)
    }
}

/// The image's sample hook: the photons of every cell, summed from the
/// water background on, shown to a probe.
pub(crate) struct Photons<'a, V, P> {
    /// The photons summed so far (before the scale and the factors that
    /// apply once).
    pub i_acc: V,
    /// What watches the pixel (`-printout`).
    pub probe: &'a mut P,
}

impl<V: Num, M: MathMode, P: Probe<V>> Samples<V, M> for Photons<'_, V, P> {
    #[inline(always)]
    fn position(
        &mut self,
        kernel: &Kernel<V, M>,
        f0: usize,
        spixel: usize,
        [sub_f, sub_s]: [usize; 2],
        os: usize,
        lane_offset: V,
        odet_pos: V,
    ) -> V3<V> {
        let pos = kernel.sample_position(f0, spixel, [sub_f, sub_s], os, lane_offset, odet_pos);
        self.probe.position(&pos);
        pos
    }

    #[inline(always)]
    fn scattering(&mut self, q: &V3<V>) {
        self.probe.scattering(q);
    }

    #[inline(always)]
    fn source(
        &mut self,
        kernel: &Kernel<V, M>,
        (src, _): (usize, &V3<V>),
        q: V3<V>,
        active: V::Mask,
        factors: [V; 3],
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
    ) {
        let w = kernel.sources[src].weight;
        self.i_acc =
            kernel.add_cells(q, active, factors, w, self.i_acc, interp, out_of_range, self.probe);
    }
}

/// The image's sample hook for the pixel that holds nanoBragg.c's first
/// sweep over the phi steps ([`crate::setup::Plan::first_sweep_cells`]): its
/// first source takes the cells of `first`, every later one the kernel's.
pub(crate) struct FirstSweep<'a, 'p, V: Num, M: MathMode> {
    /// The kernel with the first sweep's cells.
    pub first: &'a Kernel<'p, V, M>,
    /// The photons summed so far.
    pub i_acc: V,
    /// Whether the first sweep was taken.
    pub swept: bool,
}

impl<V: Num, M: MathMode> Samples<V, M> for FirstSweep<'_, '_, V, M> {
    fn source(
        &mut self,
        kernel: &Kernel<V, M>,
        (src, _): (usize, &V3<V>),
        q: V3<V>,
        active: V::Mask,
        factors: [V; 3],
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
    ) {
        let cells = if self.swept { kernel } else { self.first };
        self.swept = true;
        let (w, acc) = (kernel.sources[src].weight, self.i_acc);
        self.i_acc =
            cells.add_cells(q, active, factors, w, acc, interp, out_of_range, &mut NoProbe);
    }
}
