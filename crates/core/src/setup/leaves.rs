//! The numbers the render kernel reads, computed in any [`DiffReal`] by
//! [`Plan::with_leaves`] (detector, cell, sources, phi × mosaic), with the
//! parameters' perturbations added where they enter.

use super::{Plan, SetupSeeds};
use crate::config::SimConfig;
use crate::error::Result;
use crate::param::Deltas;
use crate::real::DiffReal;
use crate::vec3::V3;

/// One source as the kernel reads it.
#[derive(Debug, Clone, Copy)]
pub struct LeafSource<R> {
    /// Incident beam direction (minus the unit vector towards the source).
    pub incident: V3<R>,
    /// Wavelength (m).
    pub lambda: R,
    /// Factor on the source's photons: its weight over the mean weight
    /// (1 where the render does not weight the sources; see
    /// [`crate::source::Sources::kernel_weights`]). Not a parameter.
    pub weight: f64,
}

/// Everything the render kernel reads from a [`Plan`] that a [`crate::param::Param`] can
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
    /// The leaves of `cfg` (whose plan is `plan`, resolved with `seeds`)
    /// with `deltas` added, by the plan's one setup code path
    /// ([`Plan::with_leaves`]) without building `plan`'s structure factors
    /// again. With all-zero deltas the values are the plan's.
    pub fn new(
        cfg: &SimConfig,
        plan: &Plan,
        seeds: SetupSeeds,
        deltas: &Deltas<R>,
    ) -> Result<Leaves<R>> {
        if plan.background.is_some() {
            return Err(crate::error::Error::Invalid {
                what: "-stol",
                msg: "the amorphous background has no derivatives: leave -stol out of -gradient, refine and the Python derivatives".into(),
            });
        }
        Ok(Plan::resolve(cfg, seeds, deltas, super::StructureFactors::Count(plan.hkls))?.1)
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
                .map(|s| LeafSource {
                    incident: v(s.incident),
                    lambda: f(s.lambda),
                    weight: s.weight,
                })
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
