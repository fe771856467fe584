//! The per-pixel physics, written once and generic over the number type.
//!
//! [`Kernel`] holds the plan's numbers in the lane type of `V`;
//! [`Kernel::lanes`] computes `V::LANES` adjacent pixels of a row at once
//! (lane `i` is pixel `f0 + i`) and [`Kernel::pixel`] one pixel with a scalar
//! `V`. The loops over sensor layers, sub-pixels, sources and phi × mosaic
//! cells are the same for every lane; where the C program branches on a value
//! that differs between pixels, the kernel computes a [`Mask`] and merges with
//! [`Num::select`] (skipping work only when no lane needs it).
//!
//! The mode `M` picks how functions are evaluated:
//! - [`Exact`]: nanoBragg.c's formulas in its order of operations, libm
//!   functions, no fused multiply-adds. The f64 instance (scalar or SIMD: IEEE
//!   arithmetic is lane by lane, libm runs per lane) reproduces the C program
//!   bit for bit.
//! - [`Fast`]: the same physics with
//!   - `sincg(πh, N)` from the fractional part of `h` ([`Grating`]): for
//!     small `N` a Chebyshev polynomial in `sin²(πf)` (no division), else two
//!     short sine polynomials on \[-π/2, π/2\] and one division for the
//!     three factors;
//!   - the Kahn factor in algebraic form ([`Polarization`], no atan2/cos);
//!   - `1/airpath` once, for the unit vector and the solid angle;
//!   - the scattering vector as `d/λ − i/λ` and Miller indices with fused
//!     multiply-adds; polynomial `exp`, `sin`/`cos` ([`crate::real::fast`]);
//!   - `sinc3` by its Taylor series near 0 (no cancellation);
//!   - `scale/steps` folded into one factor.
//!
//!   Results differ from [`Exact`] by rounding only (about 1e-15 relative in
//!   f64, and more accurate than C near whole h); f32 keeps about 1e-6
//!   relative. See docs/performance.md for the measured parity.
//!
//! `SINGLE` ([`Kernel::lanes_with`]) is the same code with the sensor-layer,
//! sub-pixel and source loops known to run once; the driver picks it when the
//! plan allows ([`Kernel::single_sample`]).

use super::samples::Photons;
use crate::config::CrystalShape;
use crate::physics::lattice::{
    exact_grating, round_spot, sinc3_fast, Grating, GratingForm, GAUSS_XTAL_WIDTH,
    ROUND_XTAL_SCALE, TOPHAT_RADIUS_SQR,
};
use crate::physics::{polarization_factor_in, PolarBasis, Polarization};
use crate::real::{fast, DiffReal, Mask, Num, Real};
use crate::setup::{Interpolation, Leaves, Plan};
use crate::sf::{polin3, HklGrid};
use crate::vec3::{dot, magnitude, rotate_axis, rotate_axis_sc, unitize, V3};
use std::fmt::Debug;
use std::marker::PhantomData;

/// `[e(0), e(1), e(2)]` written out with `$i` = 0, 1, 2: no closure, so the
/// expression inlines into SIMD row functions however large the number type
/// (dual numbers over lanes) makes it.
macro_rules! v3 {
    ($i:ident => $e:expr) => {
        [
            {
                let $i = 0;
                $e
            },
            {
                let $i = 1;
                $e
            },
            {
                let $i = 2;
                $e
            },
        ]
    };
}

/// How the kernel evaluates its functions (see the module documentation).
pub trait MathMode: Copy + Debug + Default + Send + Sync + 'static {
    /// Whether this is the fast mode.
    const FAST: bool;
}

/// nanoBragg.c's formulas and operation order with libm functions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exact;

/// Reduced-argument polynomials and algebraic forms (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fast;

impl MathMode for Exact {
    const FAST: bool = false;
}

impl MathMode for Fast {
    const FAST: bool = true;
}

/// One source as the kernel uses it.
#[derive(Debug, Clone, Copy)]
pub struct KSource<R> {
    /// Incident beam direction (minus the unit vector towards the source).
    pub incident: V3<R>,
    /// Wavelength (m).
    pub lambda: R,
    /// 1/λ (1/m).
    pub inv_lambda: R,
    /// incident/λ (1/m).
    pub incident_over_lambda: V3<R>,
    /// The Kahn factor's constants for this source (fast mode).
    pub polarization: Polarization<R>,
    /// The unit incident, E and B directions (exact mode).
    pub basis: PolarBasis<R>,
    /// Factor on this source's photons (weight over the mean weight; read
    /// only where the kernel weights the sources).
    pub weight: R,
}

/// One rotated cell (phi step × mosaic domain): real-space a, b, c (m).
#[derive(Debug, Clone, Copy)]
pub struct KCell<R> {
    /// a (m).
    pub a: V3<R>,
    /// b (m).
    pub b: V3<R>,
    /// c (m).
    pub c: V3<R>,
}

/// Where tricubic interpolation left the grid: (h, k, l) and (h0, k0, l0).
pub type Fallback = ([f64; 3], [i64; 3]);

/// Watches a pixel's intermediate values as the kernel computes them: the
/// `-printout` trace ([`super::trace`]) is the kernel run with a recording
/// probe. Every method defaults to doing nothing, and [`NoProbe`] is what
/// the renders pass, so their code is unchanged.
pub trait Probe<V: Num> {
    /// A sub-pixel's position (m).
    #[inline(always)]
    fn position(&mut self, _pos: &V3<V>) {}
    /// A source's scattering vector (1/m), before the `-dmin` cut.
    #[inline(always)]
    fn scattering(&mut self, _scattering: &V3<V>) {}
    /// A cell's fractional (h, k, l) and lattice factor.
    #[inline(always)]
    fn lattice(&mut self, _cell: &KCell<V::Scalar>, _hkl: [V; 3], _f_latt: V) {}
    /// The structure factor looked up for the lanes in `hit`.
    #[inline(always)]
    fn structure_factor(&mut self, _f_cell: V, _hit: V::Mask) {}
    /// The pixel's accumulated intensity and its last polarization, solid
    /// angle and capture fraction.
    #[inline(always)]
    fn finish(&mut self, _i: V, _polar: V, _omega: V, _capture_fraction: V) {}
}

/// The probe that watches nothing.
pub struct NoProbe;

impl<V: Num> Probe<V> for NoProbe {}

/// The plan's numbers in the kernel's lane type.
#[derive(Debug, Clone)]
pub struct Kernel<'p, V: Num, M: MathMode = Exact> {
    plan: &'p Plan,
    fpixels: usize,
    pub(crate) oversample: usize,
    subpixel: V::Scalar,
    pixel: V::Scalar,
    fdet: V3<V::Scalar>,
    sdet: V3<V::Scalar>,
    odet: V3<V::Scalar>,
    pix0: V3<V::Scalar>,
    beam: V3<V::Scalar>,
    distance: V::Scalar,
    close_distance: V::Scalar,
    /// pixel² × close_distance (fast solid angle).
    omega_scale: V::Scalar,
    pub(crate) thickstep: V::Scalar,
    pub(crate) thicksteps: usize,
    pub(crate) thick_zero: bool,
    /// One sensor layer, oversample 1, one source: a pixel is one sample
    /// (see [`Kernel::single_sample`] and
    /// [`super::samples::Samples::UNROLL_ONE_SAMPLE`]).
    pub(crate) one_sample: bool,
    /// Whether a pixel can lie at the sample (see [`may_reach_sample`]).
    may_reach_sample: bool,
    mu: V::Scalar,
    pub(crate) sources: Vec<KSource<V::Scalar>>,
    /// Each source's photons are multiplied by its `weight` (a spectrum, or
    /// source-file weights under `-corrected`); otherwise the sum is
    /// nanoBragg.c's, unweighted.
    pub(crate) weighted: bool,
    pub(crate) cells: Vec<KCell<V::Scalar>>,
    a_star: V3<V::Scalar>,
    b_star: V3<V::Scalar>,
    c_star: V3<V::Scalar>,
    na: V::Scalar,
    nb: V::Scalar,
    nc: V::Scalar,
    /// Square spots of a fractional or moving N: fractional h ([`grating_index`]).
    reduce_h: [bool; 3],
    /// Grating factors along a, b, c; `None` where N ≤ 1 (factor 1).
    gratings: [Option<Grating<V::Scalar>>; 3],
    /// Square crystal with three polynomial-form gratings (fast mode).
    poly3: bool,
    /// ... all three for odd N.
    poly3_odd: bool,
    /// The most polynomial coefficients of the three ([`Grating::poly_terms`]).
    poly3_terms: usize,
    /// Every cell's term can be added without the `F_latt == 0` skip: no
    /// grid, no water, no `-dmin`, no compounding `oversample_*` factor, a
    /// default_F whose square is finite in the lane type and a background
    /// that is not -0 (see `add_cell`).
    plain_sum: bool,
    fudge: V::Scalar,
    kahn: V::Scalar,
    /// The Kahn factor carries a derivative (ψ is needed even where it is 0).
    kahn_moves: bool,
    dmin: V::Scalar,
    pub(crate) i_bg: V::Scalar,
    pub(crate) scale: V::Scalar,
    pub(crate) steps: V::Scalar,
    /// scale / steps (fast).
    scale_per_step: V::Scalar,
    pub(crate) default_f: V::Scalar,
    /// `-corrected`: the solid angle, capture fraction and polarization are
    /// taken at every sample and multiply that sample's photons once; an
    /// out-of-range tricubic point falls back alone ([`Plan::corrected`]).
    pub(crate) corrected: bool,
    /// The water background's share of one sample (`-corrected`): `i_bg`
    /// over the sub-pixels and sources, so that its sum weights `i_bg` with
    /// the mean of the samples' factors.
    pub(crate) bg_per_sample: V::Scalar,
    pub(crate) grid: Option<&'p HklGrid>,
    hkls: usize,
    mode: PhantomData<(V, M)>,
}

/// Per-pixel result of [`Kernel::pixel`].
#[derive(Debug, Clone, Copy)]
pub struct PixelResult<R> {
    /// Photons in the pixel.
    pub value: R,
    /// Sum of the solid angles of all sub-pixel evaluations (for statistics).
    pub omega_sum: f64,
    /// Set when tricubic interpolation ran out of the grid in this pixel:
    /// the (h, k, l) and nearest (h0, k0, l0) of that point.
    pub out_of_range: Option<([f64; 3], [i64; 3])>,
}

/// Result of [`Kernel::lanes`] for `V::LANES` adjacent pixels.
#[derive(Debug, Clone, Copy)]
pub struct LaneResult<V> {
    /// Photons in each pixel.
    pub value: V,
    /// Sum of the solid angles of each pixel's sub-pixel evaluations.
    pub omega_sum: V,
    /// The lowest lane whose interpolation flag was cleared, with the point
    /// where it left the grid.
    pub out_of_range: Option<(usize, Fallback)>,
}

impl<'p, V: Num, M: MathMode> Kernel<'p, V, M> {
    /// Convert the plan for this number type and mode: the kernel of the
    /// plan's own leaves ([`Plan::leaves`]), rounded to `V::Scalar` after
    /// everything derived from them is formed in f64.
    pub fn new(plan: &'p Plan) -> Self {
        Self::build(plan, &plan.leaves, <V::Scalar as Num>::c, false)
    }

    /// The kernel of `plan` with other real-space cells (per phi step ×
    /// mosaic domain, as [`Leaves::cells`]).
    pub(crate) fn with_cells(plan: &'p Plan, cells: &[[V3<f64>; 3]]) -> Self {
        let mut leaves = plan.leaves.clone();
        leaves.cells = cells.to_vec();
        Self::build(plan, &leaves, <V::Scalar as Num>::c, false)
    }

    /// The value of pixel (`fpixel`, `spixel`) (lane 0 onwards) whose first
    /// sweep over the phi steps takes the cells of `first`
    /// ([`Plan::first_sweep_cells`]), or `None` where no source of the
    /// pixel passes `-dmin` (no sweep).
    pub(crate) fn first_sweep_pixel(
        &self,
        first: &Kernel<'p, V, M>,
        fpixel: usize,
        spixel: usize,
        interp: &mut u32,
    ) -> Option<V> {
        let mut out_of_range = None;
        let mut hook =
            crate::render::samples::FirstSweep { first, i_acc: V::splat(self.i_bg), swept: false };
        let end = self.samples(fpixel, spixel, interp, &mut out_of_range, &mut hook);
        hook.swept.then(|| self.finish_value(hook.i_acc, end.factors))
    }

    /// The one kernel constructor: every number a parameter can move from
    /// `l` (numbers derived from them formed in `L`, then passed through
    /// `to`), the integer counts, masks, the structure-factor grid and the
    /// thickness from `plan`. With `derivatives` the leaves may carry
    /// derivatives: the shortcuts that drop them (polynomial gratings, the
    /// plain sum, an unpolarized Kahn factor) are off.
    fn build<L: DiffReal>(
        plan: &'p Plan,
        l: &Leaves<L>,
        to: impl Fn(L) -> V::Scalar + Copy,
        derivatives: bool,
    ) -> Self {
        let k = |x: f64| to(L::c(x));
        let v = |x: V3<L>| x.map(to);
        let d = &plan.detector;
        let n_val = l.n_cells.map(|n| n.val());
        let gratings: [Option<Grating<V::Scalar>>; 3] =
            n_val.map(|n| if n > 1.0 { Some(Grating::new(n)) } else { None });
        let poly3 = plan.shape == CrystalShape::Square
            && gratings.iter().all(|g| g.is_some_and(|g| g.form() == GratingForm::Polynomial));
        let plain_sum = plan.grid.is_none()
            && plan.water_size_m == 0.0
            && plan.dmin_m <= 0.0
            && (plan.corrected
                || !(plan.oversample_thick || plan.oversample_polar || plan.oversample_omega))
            && (k(plan.default_f) * k(plan.default_f)).val().is_finite()
            && plan.i_bg.is_finite()
            && plan.i_bg.to_bits() != (-0.0f64).to_bits();
        let steps = L::c(plan.steps as f64);
        Kernel {
            plan,
            fpixels: d.fpixels,
            oversample: plan.oversample,
            subpixel: to(l.pixel / L::c(plan.oversample as f64)),
            pixel: to(l.pixel),
            fdet: v(l.fdet),
            sdet: v(l.sdet),
            odet: v(l.odet),
            pix0: v(l.pix0),
            beam: v(l.beam),
            distance: to(l.distance),
            close_distance: to(l.close_distance),
            omega_scale: to(l.pixel * l.pixel * l.close_distance),
            thickstep: k(d.thickstep_m),
            thicksteps: d.thicksteps,
            thick_zero: d.thick_m == 0.0,
            one_sample: plan.oversample == 1 && d.thicksteps == 1 && l.sources.len() == 1,
            may_reach_sample: may_reach_sample(d),
            mu: k(d.mu_per_m),
            sources: l
                .sources
                .iter()
                .map(|s| {
                    let basis = PolarBasis::new(v(s.incident), v(l.polar_axis));
                    KSource {
                        incident: v(s.incident),
                        lambda: to(s.lambda),
                        inv_lambda: to(L::one() / s.lambda),
                        incident_over_lambda: v(s.incident.map(|x| x / s.lambda)),
                        // fast mode only (not used by the exact kernel)
                        polarization: if derivatives {
                            Polarization::from_basis(to(l.kahn), &basis, l.kahn.is_const_zero())
                        } else {
                            let val = |x: V3<L>| x.map(L::val);
                            Polarization::new(l.kahn.val(), val(s.incident), val(l.polar_axis))
                        },
                        basis,
                        weight: k(s.weight),
                    }
                })
                .collect(),
            weighted: plan.sources.weighted,
            cells: l.cells.iter().map(|&[a, b, c]| KCell { a: v(a), b: v(b), c: v(c) }).collect(),
            a_star: v(l.recip[0]),
            b_star: v(l.recip[1]),
            c_star: v(l.recip[2]),
            na: to(l.n_cells[0]),
            nb: to(l.n_cells[1]),
            nc: to(l.n_cells[2]),
            reduce_h: l
                .n_cells
                .map(|n| n.val().fract() != 0.0 || !(n - L::c(n.val())).is_const_zero()),
            gratings,
            poly3: poly3 && !derivatives,
            poly3_odd: !derivatives && gratings.iter().all(|g| g.is_some_and(|g| !g.is_even())),
            poly3_terms: match derivatives {
                false => gratings.iter().flatten().map(|g| g.poly_terms()).max().unwrap_or(5),
                true => 5,
            },
            plain_sum: plain_sum && !derivatives,
            fudge: to(l.fudge),
            kahn: to(l.kahn),
            kahn_moves: derivatives && !l.kahn.is_const_zero(),
            dmin: k(plan.dmin_m),
            i_bg: to(l.i_bg),
            scale: to(l.scale),
            steps: to(steps),
            scale_per_step: to(l.scale / steps),
            default_f: to(l.default_f),
            corrected: plan.corrected,
            // i_bg · steps over the sub-pixels and sources: the final
            // division by `steps` then leaves i_bg times the mean of the
            // samples' factors, whatever the sampling (nanoBragg.c's i_bg
            // shrinks as 1/steps, oversample² included)
            bg_per_sample: to(l.i_bg * L::c(plan.steps as f64)
                / L::c((plan.oversample * plan.oversample * l.sources.len().max(1)) as f64)),
            grid: plan.grid.as_ref(),
            hkls: plan.hkls,
            mode: PhantomData,
        }
    }

    /// The plan this kernel renders.
    pub fn plan(&self) -> &'p Plan {
        self.plan
    }

    /// Whether every pixel is one sample of one source ([`Kernel::one_sample`])
    /// taken by the single-sample path (see [`Kernel::lanes_with`]). (Not
    /// under `-corrected`, whose factors multiply every sample: the general
    /// loop.)
    pub fn single_sample(&self) -> bool {
        self.one_sample && !self.corrected
    }

    /// What a pixel's photon sum starts from: the water background, which
    /// under `-corrected` is added per sample instead ([`Kernel::add_cells`]).
    #[inline(always)]
    pub(crate) fn i_start(&self) -> V {
        if self.corrected {
            V::zero()
        } else {
            V::splat(self.i_bg)
        }
    }

    /// Pixels along the fast axis.
    pub fn fpixels(&self) -> usize {
        self.fpixels
    }

    /// Whether the plan starts with tricubic interpolation on.
    pub fn interpolates(&self) -> bool {
        self.plan.interpolation == Interpolation::Tricubic
    }

    /// Nearest-neighbour structure factor, or `default_F` off the grid.
    #[inline(always)]
    fn f_nearest(&self, h0: i64, k0: i64, l0: i64) -> V::Scalar {
        match self.nearest_index(h0, k0, l0) {
            Some(i) => V::Scalar::c(self.grid.expect("an index is into the grid").data[i]),
            None => self.default_f,
        }
    }

    /// [`Kernel::f_nearest`] at whole `hkl0` in the lanes of `hit` (one
    /// gather on the vector types), 0 in the others. The grid has values.
    #[inline(always)]
    fn f_nearest_lanes(&self, g: &HklGrid, hkl0: [V; 3], hit: V::Mask) -> V {
        let lo = [g.h_min, g.k_min, g.l_min];
        let span = [g.h_max - g.h_min, g.k_max - g.k_min, g.l_max - g.l_min];
        let mut inside = hit;
        let offsets = std::array::from_fn(|a| {
            let o = hkl0[a] - V::c(lo[a] as f64);
            inside = inside & o.cmp_ge(V::zero()) & o.cmp_le(V::c(span[a] as f64));
            o
        });
        let strides = [(g.k_range() + 1) as usize, (g.l_range() + 1) as usize];
        let off_grid = V::select(hit, V::splat(self.default_f), V::zero());
        V::gather(&g.data, offsets, strides, inside, off_grid)
    }

    /// The grid index the nearest-neighbour lookup reads at whole (h0, k0,
    /// l0), or `None` where it returns `default_F`.
    #[inline(always)]
    pub(crate) fn nearest_index(&self, h0: i64, k0: i64, l0: i64) -> Option<usize> {
        let g = self.grid.filter(|_| self.hkls > 0)?;
        g.index_of(h0, k0, l0)
    }

    /// Compute pixels `f0 .. f0 + V::LANES` of row `spixel` (lanes past the
    /// detector edge compute an extrapolated position; callers drop them).
    ///
    /// `interp` holds one tricubic flag per lane (bit `i` for lane `i`): set
    /// for the lanes that start interpolating, cleared at a lane's first
    /// out-of-range point, as the shared flag of nanoBragg.c is (see the CPU
    /// driver for how pixels after the first fallback are re-rendered).
    #[inline(always)]
    pub fn lanes(&self, f0: usize, spixel: usize, interp: &mut u32) -> LaneResult<V> {
        self.lanes_with::<false>(f0, spixel, interp)
    }

    /// [`Kernel::lanes`]; with `SINGLE` the caller guarantees one sensor
    /// layer, one sub-pixel and one source ([`Kernel::single_sample`]), so
    /// those loops are known to run once.
    #[inline(always)]
    pub fn lanes_with<const SINGLE: bool>(
        &self,
        f0: usize,
        spixel: usize,
        interp: &mut u32,
    ) -> LaneResult<V> {
        self.lanes_probed::<SINGLE>(f0, spixel, interp, &mut NoProbe)
    }

    /// [`Kernel::lanes_with`], showing its intermediate values to `probe`.
    #[inline(always)]
    pub fn lanes_probed<const SINGLE: bool>(
        &self,
        f0: usize,
        spixel: usize,
        interp: &mut u32,
        probe: &mut impl Probe<V>,
    ) -> LaneResult<V> {
        if SINGLE {
            return self.lanes_single(f0, spixel, interp, probe);
        }
        let mut out_of_range = None;
        let mut photons = Photons { i_acc: self.i_start(), probe };
        let end = self.samples(f0, spixel, interp, &mut out_of_range, &mut photons);
        let (i_acc, [capture_fraction, polar, omega_pixel]) = (photons.i_acc, end.factors);
        photons.probe.finish(i_acc, polar, omega_pixel, capture_fraction);
        let value = self.finish_value(i_acc, end.factors);
        LaneResult { value, omega_sum: end.omega_sum, out_of_range }
    }

    /// [`Kernel::lanes_probed`] with one sensor layer, one sub-pixel and one
    /// source: the same steps without those loops, and the solid angle,
    /// capture fraction and polarization computed once (as the first
    /// sample of the general loops computes them).
    #[inline(always)]
    fn lanes_single(
        &self,
        f0: usize,
        spixel: usize,
        interp: &mut u32,
        probe: &mut impl Probe<V>,
    ) -> LaneResult<V> {
        let plan = self.plan;
        let s = V::splat;
        let zero = V::zero();
        let one = V::one();
        let mut out_of_range = None;
        let lane_offset = V::from_fn(|i| V::Scalar::c(i as f64));
        let odet_pos = V::c(0.0) * s(self.thickstep);
        let (fdet_pos, sdet_pos) = self.subpixel_offsets(f0, spixel, 0, 0, 1, lane_offset);
        let pos = self.position(fdet_pos, sdet_pos, odet_pos);
        probe.position(&pos);
        let (mut diffracted, airpath, inv_airpath) = self.direction(pos);
        let omega_pixel = self.solid_angle(airpath, inv_airpath);
        // the general loop starts from 1 (no thickness) or 0 and recomputes a 0
        let capture_fraction = if self.thick_zero && !plan.oversample_thick {
            one
        } else {
            self.capture(diffracted, 0)
        };
        let src = &self.sources[0];
        let scattering = self.scattering(diffracted, src);
        probe.scattering(&scattering);
        let mut polar = if plan.nopolar { one } else { zero };
        let mut i_acc = s(self.i_bg);
        let active = self.dmin_active(scattering);
        if active.any() {
            if !plan.nopolar || plan.oversample_polar {
                polar = self.polarize(src, &mut diffracted, active, polar);
            }
            let factors = [capture_fraction, polar, omega_pixel];
            i_acc = self.add_cells(
                scattering,
                active,
                factors,
                src.weight,
                i_acc,
                interp,
                &mut out_of_range,
                probe,
            );
        }
        probe.finish(i_acc, polar, omega_pixel, capture_fraction);
        let value = self.finish_value(i_acc, [capture_fraction, polar, omega_pixel]);
        LaneResult { value, omega_sum: omega_pixel, out_of_range }
    }

    /// `i_acc` with every cell's term added ([`Kernel::add_cell`]), cells in
    /// order: the phi × mosaic loop of one sample and source, whose photons
    /// are multiplied by `weight` where the kernel weights the sources.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_cells(
        &self,
        scattering: V3<V>,
        active: V::Mask,
        factors: [V; 3],
        weight: V::Scalar,
        mut i_acc: V,
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
        probe: &mut impl Probe<V>,
    ) -> V {
        if self.corrected {
            // this sample's factors multiply its photons once, the water
            // background's share included
            let [capture_fraction, polar, omega] = factors;
            let mut sample_weight = capture_fraction * polar * omega;
            if self.weighted {
                // and the source's share of the fluence
                sample_weight *= V::splat(weight);
            }
            let bg = V::splat(self.bg_per_sample) * sample_weight;
            i_acc = V::select(active, i_acc + bg, i_acc);
            let factors = [sample_weight, V::one(), V::one()];
            for cell in &self.cells {
                i_acc = self.add_cell::<true>(
                    cell,
                    scattering,
                    active,
                    factors,
                    weight,
                    i_acc,
                    interp,
                    out_of_range,
                    probe,
                );
            }
            return i_acc;
        }
        for cell in &self.cells {
            i_acc = self.add_cell::<false>(
                cell,
                scattering,
                active,
                factors,
                weight,
                i_acc,
                interp,
                out_of_range,
                probe,
            );
        }
        i_acc
    }

    /// `i_acc` with the lanes of `active` where `cell` scatters increased by
    /// F_cell² F_latt² (times the source's `weight` where the kernel weights
    /// the sources, and the `oversample_*` factors that compound; with
    /// `CORRECTED` times the sample's weight, `factors[0]`, instead, which
    /// includes the source's).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn add_cell<const CORRECTED: bool>(
        &self,
        cell: &KCell<V::Scalar>,
        scattering: V3<V>,
        active: V::Mask,
        [capture_fraction, polar, omega_pixel]: [V; 3],
        weight: V::Scalar,
        i_acc: V,
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
        probe: &mut impl Probe<V>,
    ) -> V {
        let plan = self.plan;
        let zero = V::zero();
        let [h, k, l] = self.miller(cell, scattering);
        let f_latt = self.lattice(h, k, l);
        probe.lattice(cell, [h, k, l], f_latt);
        if self.plain_sum {
            // every lane active, F_cell = default_F (finite), no factor
            // compounds, I never -0: where F_latt = 0 the sum adds +0 and
            // leaves I as the skip would (the mask only tells the probe)
            let f_cell = V::splat(self.default_f);
            probe.structure_factor(f_cell, active & f_latt.cmp_ne(zero));
            if CORRECTED {
                return i_acc + f_cell * f_cell * capture_fraction * f_latt * f_latt;
            }
            let term = f_cell * f_cell * f_latt * f_latt;
            return i_acc + if self.weighted { term * V::splat(weight) } else { term };
        }
        let mut hit = active;
        if plan.water_size_m == 0.0 {
            hit = hit & f_latt.cmp_ne(zero);
            if !hit.any() {
                return i_acc;
            }
        }
        let f_cell = if self.grid.is_none() {
            // no grid: never interpolates, nearest is default_F
            V::splat(self.default_f)
        } else {
            self.structure_factor([h, k, l], hit, interp, out_of_range)
        };
        probe.structure_factor(f_cell, hit);
        if CORRECTED {
            let i_new = i_acc + f_cell * f_cell * capture_fraction * f_latt * f_latt;
            return V::select(hit, i_new, i_acc);
        }
        let term = f_cell * f_cell * f_latt * f_latt;
        let mut i_new = i_acc + if self.weighted { term * V::splat(weight) } else { term };
        if plan.oversample_thick {
            i_new *= capture_fraction;
        }
        if plan.oversample_polar {
            i_new *= polar;
        }
        if plan.oversample_omega {
            i_new *= omega_pixel;
        }
        V::select(hit, i_new, i_acc)
    }

    /// The pixel value from the accumulated intensity and the last capture
    /// fraction, polarization and solid angle (those not compounded).
    #[inline(always)]
    pub(crate) fn finish_value(
        &self,
        i_acc: V,
        [capture_fraction, polar, omega_pixel]: [V; 3],
    ) -> V {
        let plan = self.plan;
        let s = V::splat;
        let mut value = if M::FAST {
            s(self.scale_per_step) * i_acc
        } else {
            s(self.scale) * i_acc / s(self.steps)
        };
        if self.corrected {
            // every sample's factors are in i_acc
            return value;
        }
        if !plan.oversample_thick {
            value *= capture_fraction;
        }
        if !plan.oversample_polar {
            value *= polar;
        }
        if !plan.oversample_omega {
            value *= omega_pixel;
        }
        value
    }

    /// Fast- and slow-axis offsets (m) of sub-pixel (`sub_f`, `sub_s`) of
    /// pixels `f0 + lane` of row `spixel` (`os` sub-pixels per pixel edge).
    #[inline(always)]
    pub(crate) fn subpixel_offsets(
        &self,
        f0: usize,
        spixel: usize,
        sub_f: usize,
        sub_s: usize,
        os: usize,
        lane_offset: V,
    ) -> (V, V) {
        let s = V::splat;
        // whole numbers: the lane offset adds exactly
        let fidx = V::c((f0 * os + sub_f) as f64) + lane_offset;
        let fdet_pos = s(self.subpixel) * fidx + s(self.subpixel) / V::c(2.0);
        let sdet_pos =
            s(self.subpixel) * V::c((spixel * os + sub_s) as f64) + s(self.subpixel) / V::c(2.0);
        (fdet_pos, sdet_pos)
    }

    /// Position (m) of the sample point at the given offsets along the fast,
    /// slow and normal axes (on a curved detector, moved onto the sphere).
    #[inline(always)]
    pub(crate) fn position(&self, fdet_pos: V, sdet_pos: V, odet_pos: V) -> V3<V> {
        let s = V::splat;
        let sv = splat3::<V>;
        let fast = M::FAST;
        let mut pos: V3<V> = if fast {
            // the slow/thickness part is the same for every lane
            v3!(i => {
                let base = sdet_pos * s(self.sdet[i])
                    + odet_pos * s(self.odet[i])
                    + s(self.pix0[i]);
                fdet_pos.mul_add(s(self.fdet[i]), base)
            })
        } else {
            v3!(i => {
                fdet_pos * s(self.fdet[i])
                    + sdet_pos * s(self.sdet[i])
                    + odet_pos * s(self.odet[i])
                    + s(self.pix0[i])
            })
        };
        if self.plan.detector.curved {
            let distance = s(self.distance);
            let v = v3!(i => distance * s(self.beam[i]));
            let (a1, a2) = (pos[1] / distance, pos[2] / distance);
            pos = if fast {
                let (s1, c1) = fast::sin_cos(a1);
                let (s2, c2) = fast::sin_cos(a2);
                let nv = rotate_axis_sc(v, sv(self.sdet), s1, c1);
                rotate_axis_sc(nv, sv(self.fdet), s2, c2)
            } else {
                let nv = rotate_axis(v, sv(self.sdet), a1);
                rotate_axis(nv, sv(self.fdet), a2)
            };
        }
        pos
    }

    /// Unit vector to `pos`, the distance, and (fast mode) 1/distance.
    #[inline(always)]
    pub(crate) fn direction(&self, pos: V3<V>) -> (V3<V>, V, V) {
        let zero = V::zero();
        if M::FAST {
            if !self.may_reach_sample {
                // no pixel at the sample: airpath > 0 in every lane
                let (airpath, inv) = dot_fma(pos, pos).sqrt_recip();
                return (v3!(i => pos[i] * inv), airpath, inv);
            }
            let airpath = magnitude_fma(pos);
            let inv = V::one() / airpath;
            let nonzero = airpath.cmp_ne(zero);
            (v3!(i => V::select(nonzero, pos[i] * inv, zero)), airpath, inv)
        } else {
            let (d, airpath) = unitize(pos);
            (d, airpath, zero)
        }
    }

    /// Solid angle of a pixel seen at distance `airpath`.
    #[inline(always)]
    pub(crate) fn solid_angle(&self, airpath: V, inv_airpath: V) -> V {
        let s = V::splat;
        let point = self.plan.detector.point_pixel;
        if M::FAST {
            if point {
                inv_airpath * inv_airpath
            } else {
                s(self.omega_scale) * (inv_airpath * inv_airpath * inv_airpath)
            }
        } else if point {
            V::one() / airpath / airpath
        } else {
            s(self.pixel) * s(self.pixel) / airpath / airpath * s(self.close_distance) / airpath
        }
    }

    /// Solid angle (`-corrected`) of a pixel's area seen at `pos`, distance
    /// `airpath`: `pixel² cos ψ / airpath²` with ψ the angle between the ray
    /// and the detector normal at that point (this sample's own layer depth;
    /// a curved detector faces the sample, cos ψ = 1). Summed over a pixel's
    /// sub-pixels and divided by their count, it is the midpoint rule for
    /// the integral of `cos ψ / r²` over the pixel (docs/compat.md).
    #[inline(always)]
    pub(crate) fn solid_angle_at(&self, pos: V3<V>, airpath: V, inv_airpath: V) -> V {
        let s = V::splat;
        let d = &self.plan.detector;
        if d.point_pixel || d.curved {
            let area = if d.point_pixel { V::one() } else { s(self.pixel) * s(self.pixel) };
            return if M::FAST {
                area * (inv_airpath * inv_airpath)
            } else {
                area / airpath / airpath
            };
        }
        let normal = dot(pos, splat3::<V>(self.odet));
        if M::FAST {
            s(self.pixel) * s(self.pixel) * normal * (inv_airpath * inv_airpath * inv_airpath)
        } else {
            s(self.pixel) * s(self.pixel) / airpath / airpath * normal / airpath
        }
    }

    /// Fraction of the rays along `diffracted` absorbed in sensor layer
    /// `thick_tic`.
    #[inline(always)]
    pub(crate) fn capture(&self, diffracted: V3<V>, thick_tic: usize) -> V {
        let s = V::splat;
        let parallax = dot(diffracted, splat3::<V>(self.odet));
        let t = V::c(thick_tic as f64);
        let (step, mu) = (s(self.thickstep), s(self.mu));
        let (x0, x1) = (-t * step * mu / parallax, -(t + V::one()) * step * mu / parallax);
        if M::FAST {
            fast::exp(x0) - fast::exp(x1)
        } else {
            x0.exp() - x1.exp()
        }
    }

    /// Scattering vector (1/m) of `src` towards `diffracted`.
    #[inline(always)]
    pub(crate) fn scattering(&self, diffracted: V3<V>, src: &KSource<V::Scalar>) -> V3<V> {
        let s = V::splat;
        if M::FAST {
            v3!(i => {
                diffracted[i].mul_add(s(src.inv_lambda), -s(src.incident_over_lambda[i]))
            })
        } else {
            v3!(i => (diffracted[i] - s(src.incident[i])) / s(src.lambda))
        }
    }

    /// The lanes whose scattering vector passes the `-dmin` cut.
    #[inline(always)]
    pub(crate) fn dmin_active(&self, scattering: V3<V>) -> V::Mask {
        if self.dmin > V::Scalar::zero() {
            // stol only feeds this cut
            let (zero, half) = (V::zero(), V::c(0.5));
            let stol = half * magnitude(scattering);
            !(stol.cmp_gt(zero) & V::splat(self.dmin).cmp_gt(half / stol))
        } else {
            V::Mask::splat(true)
        }
    }

    /// `polar` with the lanes in `recompute` set to the polarization factor
    /// of `src` towards `diffracted` (which the exact mode unitizes in
    /// place in those lanes, as nanoBragg.c does).
    #[inline(always)]
    pub(crate) fn polarize(
        &self,
        src: &KSource<V::Scalar>,
        diffracted: &mut V3<V>,
        recompute: V::Mask,
        polar: V,
    ) -> V {
        if M::FAST {
            return V::select(recompute, src.polarization.factor(*diffracted), polar);
        }
        let sv = splat3::<V>;
        let basis = PolarBasis {
            incident: sv(src.basis.incident),
            e_in: sv(src.basis.e_in),
            b_in: sv(src.basis.b_in),
        };
        let p = polarization_factor_in(V::splat(self.kahn), &basis, *diffracted, self.kahn_moves);
        let u = unitize(*diffracted).0;
        *diffracted = v3!(i => V::select(recompute, u[i], diffracted[i]));
        V::select(recompute, p, polar)
    }

    /// Fractional Miller indices of `scattering` in `cell`.
    #[inline(always)]
    pub(crate) fn miller(&self, cell: &KCell<V::Scalar>, scattering: V3<V>) -> [V; 3] {
        let sv = splat3::<V>;
        if M::FAST {
            [
                dot_fma(sv(cell.a), scattering),
                dot_fma(sv(cell.b), scattering),
                dot_fma(sv(cell.c), scattering),
            ]
        } else {
            [dot(sv(cell.a), scattering), dot(sv(cell.b), scattering), dot(sv(cell.c), scattering)]
        }
    }

    /// Square spots in the exact mode: along a, b, c, the N (its value) and
    /// whether the index is reduced ([`exact_grating`]), or `None` where the
    /// factor is 1. F_latt is the product of the three factors, in order.
    pub(crate) fn square_axes(&self) -> [Option<(f64, bool)>; 3] {
        let n = [self.na, self.nb, self.nc];
        std::array::from_fn(|i| (n[i].val() > 1.0).then_some((n[i].val(), self.reduce_h[i])))
    }

    /// Lattice factor F_latt of the crystal shape at (h, k, l).
    #[inline(always)]
    pub(crate) fn lattice(&self, h: V, k: V, l: V) -> V {
        let s = V::splat;
        let one = V::one();
        if M::FAST && self.poly3 {
            // the common case without branches between the factors
            let [ga, gb, gc] = &self.gratings;
            if let (Some(ga), Some(gb), Some(gc)) = (ga, gb, gc) {
                // polynomials only as long as the longest needs (one
                // predictable branch instead of the zero padding's FMAs)
                let gs = [ga, gb, gc];
                return match (self.poly3_odd, self.poly3_terms) {
                    (true, 1) => poly3::<V, false, 1>(gs, h, k, l),
                    (true, 2) => poly3::<V, false, 2>(gs, h, k, l),
                    (true, 3) => poly3::<V, false, 3>(gs, h, k, l),
                    (true, 4) => poly3::<V, false, 4>(gs, h, k, l),
                    (true, _) => poly3::<V, false, 5>(gs, h, k, l),
                    (false, _) => ga.poly(h) * gb.poly(k) * gc.poly(l),
                };
            }
        }
        let hkl0 = nearest_hkl([h, k, l]);
        let (na, nb, nc) = (s(self.na), s(self.nb), s(self.nc));
        match self.plan.shape {
            CrystalShape::Square => {
                if M::FAST {
                    // at most one division for the three factors
                    let mut acc = (one, one, false);
                    grating_factor(&self.gratings[0], h, &mut acc);
                    grating_factor(&self.gratings[1], k, &mut acc);
                    grating_factor(&self.gratings[2], l, &mut acc);
                    let (num, den, divide) = acc;
                    if divide {
                        num / den
                    } else {
                        num
                    }
                } else {
                    let g = exact_grating::<V>;
                    let mut f = one;
                    let r = self.reduce_h;
                    if self.na > V::Scalar::one() {
                        f *= g(h, na, r[0]);
                    }
                    if self.nb > V::Scalar::one() {
                        f *= g(k, nb, r[1]);
                    }
                    if self.nc > V::Scalar::one() {
                        f *= g(l, nc, r[2]);
                    }
                    f
                }
            }
            CrystalShape::Round => {
                let dh = h - hkl0[0];
                let dk = k - hkl0[1];
                let dl = l - hkl0[2];
                let hrad_sqr = dh * dh * na * na + dk * dk * nb * nb + dl * dl * nc * nc;
                let u = hrad_sqr * s(self.fudge);
                let shape = if M::FAST { sinc3_fast(u.sqrt()) } else { round_spot(u) };
                na * nb * nc * V::c(ROUND_XTAL_SCALE) * shape
            }
            CrystalShape::Gauss | CrystalShape::Tophat => {
                let dh = h - hkl0[0];
                let dk = k - hkl0[1];
                let dl = l - hkl0[2];
                let (a, b, c) = (self.a_star.map(s), self.b_star.map(s), self.c_star.map(s));
                let dx = dh * a[0] + dk * b[0] + dl * c[0];
                let dy = dh * a[1] + dk * b[1] + dl * c[1];
                let dz = dh * a[2] + dk * b[2] + dl * c[2];
                let rad_star_sqr = (dx * dx + dy * dy + dz * dz) * na * na * nb * nb * nc * nc;
                if self.plan.shape == CrystalShape::Gauss {
                    let x = -(rad_star_sqr / V::c(GAUSS_XTAL_WIDTH) * s(self.fudge));
                    na * nb * nc * if M::FAST { fast::exp(x) } else { x.exp() }
                } else {
                    let inside = (rad_star_sqr * s(self.fudge)).cmp_lt(V::c(TOPHAT_RADIUS_SQR));
                    na * nb * nc * V::select(inside, one, V::zero())
                }
            }
        }
    }

    /// Structure factor F_cell for the lanes in `hit` (other lanes get 0).
    #[inline(always)]
    pub(crate) fn structure_factor(
        &self,
        hkl: [V; 3],
        hit: V::Mask,
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
    ) -> V {
        let Some(g) = self.grid else {
            // no grid: never interpolates, nearest is default_F
            return V::splat(self.default_f);
        };
        let hkl0 = nearest_hkl(hkl);
        let hit_lanes = hit;
        let hit = hit.bits();
        let tricubic = *interp & hit;
        let nearest = |i: usize| {
            self.f_nearest(
                hkl0[0].lane(i).val() as i64,
                hkl0[1].lane(i).val() as i64,
                hkl0[2].lane(i).val() as i64,
            )
        };
        if tricubic == 0 {
            if self.hkls == 0 {
                return V::splat(self.default_f);
            }
            return self.f_nearest_lanes(g, hkl0, hit_lanes);
        }
        V::from_fn(|i| {
            if hit >> i & 1 == 0 {
                return V::Scalar::zero();
            }
            if tricubic >> i & 1 != 0 {
                let [h, k, l] = hkl.map(|x| x.lane(i));
                let (hv, kv, lv) = (h.val(), k.val(), l.val());
                if !tricubic_in_range(g, [hv, kv, lv]) {
                    if out_of_range.is_none_or(|(j, _)| i < j) {
                        let hkl0 = hkl0.map(|x| x.lane(i).val() as i64);
                        *out_of_range = Some((i, ([hv, kv, lv], hkl0)));
                    }
                    if !self.corrected {
                        // nanoBragg.c switches interpolation off for good
                        *interp &= !(1 << i);
                    }
                } else {
                    return tricubic_at(g, h, k, l);
                }
            }
            nearest(i)
        })
    }
}

/// Whether the 4×4×4 neighbourhood of a tricubic interpolation at `hkl`
/// lies inside the grid (nanoBragg.c's test; outside it the nearest value is
/// used).
pub(crate) fn tricubic_in_range(g: &HklGrid, [h, k, l]: [f64; 3]) -> bool {
    let (hmin, kmin, lmin) = (g.h_min as f64, g.k_min as f64, g.l_min as f64);
    !((h - hmin + 3.0) > g.h_range() as f64
        || (h - 2.0 < hmin)
        || (k - kmin + 3.0) > g.k_range() as f64
        || (k - 2.0 < kmin)
        || (l - lmin + 3.0) > g.l_range() as f64
        || (l - 2.0 < lmin))
}

impl<'p, V: Num, M: MathMode> Kernel<'p, V, M>
where
    V::Scalar: DiffReal,
{
    /// The kernel of `plan` with every number a parameter can move taken
    /// from `leaves` (see [`Kernel::build`]). With dual numbers the pixels
    /// carry the leaves' derivatives; `V` may be a bundle of lanes of such
    /// numbers (its scalar the leaves' type). In the fast mode the square
    /// lattice factors come from N's value alone (no derivative by N): the
    /// pieces other than [`Kernel::lattice`] carry every derivative in both
    /// modes.
    pub fn from_leaves(plan: &'p Plan, leaves: &Leaves<V::Scalar>) -> Self {
        Self::build(plan, leaves, |x| x, true)
    }
}

impl<'p, R: Real, M: MathMode> Kernel<'p, R, M> {
    /// Compute one pixel. `interpolate` is the running tricubic flag: it starts
    /// as the plan's choice and is cleared at the first out-of-range point, as
    /// the shared flag of nanoBragg.c is.
    #[inline(never)]
    pub fn pixel(&self, fpixel: usize, spixel: usize, interpolate: &mut bool) -> PixelResult<R> {
        let mut bits = *interpolate as u32;
        let r = self.lanes(fpixel, spixel, &mut bits);
        *interpolate = bits & 1 != 0;
        PixelResult {
            value: r.value,
            omega_sum: r.omega_sum.val(),
            out_of_range: r.out_of_range.map(|(_, p)| p),
        }
    }
}

/// Tricubic interpolation of the grid around (h, k, l) (inside the grid).
#[inline(never)]
fn tricubic_at<R: Real>(g: &HklGrid, h: R, k: R, l: R) -> R {
    let hf = h.val().floor() as i32;
    let kf = k.val().floor() as i32;
    let lf = l.val().floor() as i32;
    let axis = |x: i32| [(x - 1) as f64, x as f64, (x + 1) as f64, (x + 2) as f64];
    let mut sub = [[[0.0f64; 4]; 4]; 4];
    for (i1, plane) in sub.iter_mut().enumerate() {
        for (i2, row) in plane.iter_mut().enumerate() {
            for (i3, v) in row.iter_mut().enumerate() {
                *v = g.at(
                    hf - 1 + i1 as i32 - g.h_min,
                    kf - 1 + i2 as i32 - g.k_min,
                    lf - 1 + i3 as i32 - g.l_min,
                );
            }
        }
    }
    polin3(&axis(hf), &axis(kf), &axis(lf), &sub, h, k, l)
}

/// Nearest whole Miller indices, `ceil(x - 0.5)` as nanoBragg.c rounds.
#[inline(always)]
fn nearest_hkl<V: Num>(hkl: [V; 3]) -> [V; 3] {
    let half = V::c(0.5);
    [(hkl[0] - half).ceil(), (hkl[1] - half).ceil(), (hkl[2] - half).ceil()]
}

/// The three polynomial-form factors for odd N from `LEN` coefficients.
#[inline(always)]
fn poly3<V: Num, const EVEN: bool, const LEN: usize>(
    [ga, gb, gc]: [&Grating<V::Scalar>; 3],
    h: V,
    k: V,
    l: V,
) -> V {
    ga.poly_len::<V, EVEN, LEN>(h) * gb.poly_len::<V, EVEN, LEN>(k) * gc.poly_len::<V, EVEN, LEN>(l)
}

/// Multiply one grating factor into (numerator, denominator, whether the
/// denominator is used).
#[inline(always)]
fn grating_factor<V: Num>(g: &Option<Grating<V::Scalar>>, x: V, acc: &mut (V, V, bool)) {
    match g {
        None => {}
        Some(g) if g.form() == GratingForm::Polynomial => acc.0 *= g.poly(x),
        Some(g) => {
            let (n, d) = g.parts(x);
            acc.0 *= n;
            acc.1 *= d;
            acc.2 = true;
        }
    }
}

/// A vector of the kernel's scalars in every lane.
#[inline(always)]
fn splat3<V: Num>(v: V3<V::Scalar>) -> V3<V> {
    [V::splat(v[0]), V::splat(v[1]), V::splat(v[2])]
}

/// `x · y` with fused multiply-adds.
#[inline(always)]
fn dot_fma<V: Num>(x: V3<V>, y: V3<V>) -> V {
    x[2].mul_add(y[2], x[1].mul_add(y[1], x[0] * y[0]))
}

/// Whether a pixel of some sensor layer can lie at the sample, where its
/// distance is 0 and its direction is set to 0. On a flat detector every
/// pixel of layer `t` lies in the plane at distance `pix0 · odet + t ·
/// thickstep` from the sample; unless that is tiny against the detector's
/// size (then rounding could land a position on the sample), no position
/// is the zero vector and the fast kernel drops the select that guards it.
fn may_reach_sample(d: &crate::geometry::detector::Detector) -> bool {
    if d.curved {
        return true;
    }
    let d0 = dot(d.pix0, d.odet);
    let layers = d.thicksteps.max(1);
    let size = magnitude(d.pix0)
        + (d.fpixels + d.spixels) as f64 * d.pixel_size_m
        + layers as f64 * d.thickstep_m.abs();
    !size.is_finite() || (0..layers).any(|t| (d0 + t as f64 * d.thickstep_m).abs() <= 1e-3 * size)
}

/// `|v|` with fused multiply-adds.
#[inline(always)]
fn magnitude_fma<V: Num>(v: V3<V>) -> V {
    dot_fma(v, v).sqrt()
}

/// A small triclinic crystal (N = 5, 3, 7, default_F 3) on a 21 × 19 detector,
/// one sample per pixel: the base of the kernel's bit-for-bit tests.
#[cfg(test)]
pub(crate) fn small_config() -> crate::config::SimConfig {
    let mut cfg = crate::config::SimConfig::default();
    cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 3.0, 7.0);
    cfg.beam.lambda_a = 1.2;
    cfg.detector.distance_mm = 60.0;
    (cfg.detector.fpixels, cfg.detector.spixels) = (21, 19);
    cfg.detector.pixel_mm = 0.4;
    cfg.sampling.oversample = 1;
    cfg.sf.default_f = 3.0;
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::real::X2;
    use crate::setup::SetupSeeds;

    /// Every pixel with and without the plain sum, bit for bit.
    fn plain_sum_is_the_skip<V: Num, M: MathMode>(plan: &Plan, what: &str) {
        let plain = Kernel::<V, M>::new(plan);
        assert!(plain.plain_sum, "{what}");
        let mut masked = plain.clone();
        masked.plain_sum = false;
        let bits = |v: V| (0..V::LANES).map(|i| v.lane(i).val().to_bits()).collect::<Vec<_>>();
        let mut zeros = 0;
        for s in 0..plan.detector.spixels {
            for f0 in (0..plan.detector.fpixels).step_by(V::LANES) {
                let (mut a, mut b) = (0, 0);
                let (x, y) = (plain.lanes(f0, s, &mut a), masked.lanes(f0, s, &mut b));
                assert_eq!(bits(x.value), bits(y.value), "{what}: row {s} from {f0}");
                zeros += (0..V::LANES).filter(|&i| x.value.lane(i).val() == 0.0).count();
            }
        }
        // the top-hat spots leave most pixels at exactly 0: F_latt = 0 there
        assert!(plan.shape != CrystalShape::Tophat || zeros > 0, "{what}");
    }

    #[test]
    fn plain_sum_gives_the_skipped_sum() {
        for shape in
            [CrystalShape::Square, CrystalShape::Round, CrystalShape::Gauss, CrystalShape::Tophat]
        {
            let mut cfg = small_config();
            cfg.crystal.shape = shape;
            cfg.crystal.mosaic_deg = 0.3;
            cfg.crystal.mosaic_domains = 2;
            (cfg.detector.fpixels, cfg.detector.spixels) = (27, 23);
            let plan = Plan::new(&cfg, SetupSeeds { misset_idum: 0 }).expect("test plan");
            let what = format!("{shape:?}");
            plain_sum_is_the_skip::<f64, Fast>(&plan, &what);
            plain_sum_is_the_skip::<f64, Exact>(&plan, &what);
            plain_sum_is_the_skip::<f32, Fast>(&plan, &what);
            plain_sum_is_the_skip::<X2<X2<f64>>, Fast>(&plan, &what);
        }
    }

    /// The fast kernel drops the zero-distance guard only where no pixel can
    /// lie at the sample, and the values are the same bit for bit.
    #[test]
    fn directions_skip_the_guard_only_off_the_sample() {
        let plan = Plan::new(&small_config(), SetupSeeds { misset_idum: 0 }).expect("test plan");
        let d = &plan.detector;
        assert!(!may_reach_sample(d));
        fn same<V: Num>(plan: &Plan) {
            let fast = Kernel::<V, Fast>::new(plan);
            assert!(!fast.may_reach_sample);
            let mut guarded = fast.clone();
            guarded.may_reach_sample = true;
            let bits = |v: V| (0..V::LANES).map(|i| v.lane(i).val().to_bits()).collect::<Vec<_>>();
            for s in 0..plan.detector.spixels {
                for f0 in (0..plan.detector.fpixels).step_by(V::LANES) {
                    let (mut a, mut b) = (0, 0);
                    let (x, y) = (fast.lanes(f0, s, &mut a), guarded.lanes(f0, s, &mut b));
                    assert_eq!(bits(x.value), bits(y.value), "row {s} from {f0}");
                    assert_eq!(bits(x.omega_sum), bits(y.omega_sum));
                }
            }
        }
        same::<f64>(&plan);
        same::<f32>(&plan);
        same::<X2<X2<f32>>>(&plan);
        // the plane through the sample, directly or at the third of four layers
        let mut through = d.clone();
        let d0 = dot(d.pix0, d.odet);
        through.pix0 = std::array::from_fn(|i| d.pix0[i] - d0 * d.odet[i]);
        assert!(may_reach_sample(&through));
        (through.thicksteps, through.thickstep_m) = (4, 1e-4);
        through.pix0 = std::array::from_fn(|i| through.pix0[i] - 2e-4 * d.odet[i]);
        assert!(may_reach_sample(&through));
        through.thickstep_m = 3e-4;
        assert!(!may_reach_sample(&through));
        let mut curved = d.clone();
        curved.curved = true;
        assert!(may_reach_sample(&curved));
    }
}
