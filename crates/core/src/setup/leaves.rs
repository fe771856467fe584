//! The numbers the render kernel reads, computed in any [`DiffReal`] by the
//! same setup code as [`Plan::new`] (detector, cell, sources, phi × mosaic),
//! with the parameters' perturbations added where they enter.

use super::{rotated_cells, Plan, SetupSeeds};
use crate::config::{Misset, SimConfig};
use crate::crystal::cell::Cell;
use crate::error::Result;
use crate::geometry::Detector;
use crate::param::{Deltas, Param};
use crate::real::DiffReal;
use crate::rng::Ran1;
use crate::source::Sources;
use crate::units::{AVOGADRO, RTD, R_E_SQR, WATER_F, WATER_MW};
use crate::vec3::{lift, V3};

/// One source as the kernel reads it.
#[derive(Debug, Clone, Copy)]
pub struct LeafSource<R> {
    /// Incident beam direction (minus the unit vector towards the source).
    pub incident: V3<R>,
    /// Wavelength (m).
    pub lambda: R,
}

/// Everything the render kernel reads from a [`Plan`] that a [`Param`] can
/// move, in the number type `R`.
#[derive(Debug, Clone)]
pub struct Leaves<R> {
    /// Pixel edge (m).
    pub pixel: R,
    /// Fast axis.
    pub fdet: V3<R>,
    /// Slow axis.
    pub sdet: V3<R>,
    /// Detector normal.
    pub odet: V3<R>,
    /// Sample to the first pixel's corner (m).
    pub pix0: V3<R>,
    /// Beam direction.
    pub beam: V3<R>,
    /// Sample to beam spot (m).
    pub distance: R,
    /// Sample to detector plane (m).
    pub close_distance: R,
    /// Polarization axis.
    pub polar_axis: V3<R>,
    /// Sources.
    pub sources: Vec<LeafSource<R>>,
    /// Real-space a, b, c (m) per phi step × mosaic domain.
    pub cells: Vec<[V3<R>; 3]>,
    /// Reciprocal a*, b*, c* (1/Å) at phi 0 (spot shapes).
    pub recip: [V3<R>; 3],
    /// Unit cells along a, b, c.
    pub n_cells: [R; 3],
    /// Spot-size factor.
    pub fudge: R,
    /// Kahn factor.
    pub kahn: R,
    /// r_e² · fluence.
    pub scale: R,
    /// Water background (photons/sr).
    pub i_bg: R,
    /// `default_F`.
    pub default_f: R,
}

impl<R: DiffReal> Leaves<R> {
    /// The leaves of `plan` (resolved from `cfg` with `seeds`) with
    /// `deltas` added. With all-zero deltas the values are the plan's.
    pub fn new(
        cfg: &SimConfig,
        plan: &Plan,
        seeds: SetupSeeds,
        deltas: &Deltas<R>,
    ) -> Result<Leaves<R>> {
        let c = R::c;
        let lambda0 = deltas.apply(Param::Lambda, c(cfg.beam.lambda_a), 1.0) / c(1.0e10);
        let (det, place) = Detector::resolve_in(&cfg.detector, deltas)?;
        let random_umat = (cfg.crystal.misset == Misset::Random).then(|| {
            let mut rng = Ran1::new(seeds.misset_idum);
            crate::crystal::mosaic::mosaic_rotation_umat(90.0, &mut rng)
        });
        let (_, cell) = Cell::resolve_in(&cfg.crystal, lambda0, random_umat, deltas)?;
        let (_, sources) =
            Sources::resolve_in(&cfg.beam, lambda0, det.beam, det.polar, det.vert, deltas)?;
        let n_cells = [Param::Na, Param::Nb, Param::Nc]
            .map(|p| deltas.apply(p, c(plan.n_cells[p as usize - Param::Na as usize]), 1.0));

        let phi0 = deltas.apply(Param::Phi, c(plan.phi0_rad), 1.0 / RTD);
        let mut phistep = c(plan.phistep_rad);
        if deltas.has(Param::Osc) {
            phistep = deltas.apply(Param::Osc, phistep, 1.0 / RTD / plan.phisteps as f64);
        }
        let spread = deltas.apply(Param::Mosaic, c(plan.mosaic_spread_rad), 1.0 / RTD);
        let umats = {
            let mut rng = Ran1::new(-cfg.crystal.mosaic_seed);
            crate::crystal::mosaic::mosaic_umats_in(spread, plan.mosaic_domains(), &mut rng)
        };
        let cells = rotated_cells(
            [cell.a, cell.b, cell.c],
            det.spindle,
            phi0,
            phistep,
            plan.phisteps,
            &umats,
            plan.mosaic_spread_rad > 0.0,
        )
        .iter()
        .map(|m| [[m[0], m[1], m[2]], [m[3], m[4], m[5]], [m[6], m[7], m[8]]])
        .collect();

        let fluence = deltas.apply(Param::Fluence, c(plan.fluence), 1.0);
        let water = deltas.apply(Param::Water, c(cfg.sampling.water_um), 1.0) / c(1e6);
        let i_bg = c(WATER_F)
            * c(WATER_F)
            * c(R_E_SQR)
            * fluence
            * water
            * water
            * water
            * c(1e6)
            * c(AVOGADRO)
            / c(WATER_MW);
        Ok(Leaves {
            pixel: c(plan.detector.pixel_size_m),
            fdet: place.fdet,
            sdet: place.sdet,
            odet: place.odet,
            pix0: place.pix0,
            beam: lift(det.beam),
            distance: place.distance,
            close_distance: place.close_distance,
            polar_axis: lift(det.polar),
            sources: sources
                .iter()
                .map(|s| LeafSource { incident: s.dir.map(|x| -x), lambda: s.lambda })
                .collect(),
            cells,
            recip: [cell.a_star, cell.b_star, cell.c_star],
            n_cells,
            fudge: deltas.apply(Param::Fudge, c(plan.fudge), 1.0),
            kahn: deltas.apply(Param::Polar, c(plan.kahn_factor), 1.0),
            scale: c(R_E_SQR) * fluence,
            i_bg,
            default_f: deltas.apply(Param::DefaultF, c(plan.default_f), 1.0),
        })
    }
}

impl<R: Copy> Leaves<R> {
    /// Every number passed through `f` (e.g. to lower the precision of
    /// leaves computed in f64, as the f32 render takes an f64 plan).
    pub fn map<S>(&self, f: impl Fn(R) -> S) -> Leaves<S> {
        let v = |x: V3<R>| x.map(&f);
        Leaves {
            pixel: f(self.pixel),
            fdet: v(self.fdet),
            sdet: v(self.sdet),
            odet: v(self.odet),
            pix0: v(self.pix0),
            beam: v(self.beam),
            distance: f(self.distance),
            close_distance: f(self.close_distance),
            polar_axis: v(self.polar_axis),
            sources: self
                .sources
                .iter()
                .map(|s| LeafSource { incident: v(s.incident), lambda: f(s.lambda) })
                .collect(),
            cells: self.cells.iter().map(|c| c.map(v)).collect(),
            recip: self.recip.map(v),
            n_cells: self.n_cells.map(&f),
            fudge: f(self.fudge),
            kahn: f(self.kahn),
            scale: f(self.scale),
            i_bg: f(self.i_bg),
            default_f: f(self.default_f),
        }
    }
}
