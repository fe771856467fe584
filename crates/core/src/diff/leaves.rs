//! Which parameters an image can be differentiated by. The numbers the kernel
//! reads ([`Leaves`]) are computed by setup, in [`crate::setup`].

pub use crate::setup::{LeafSource, Leaves};

use super::param::Param;
use crate::config::{CrystalShape, SimConfig};
use crate::error::{Error, Result};
use crate::setup::Plan;

/// Fails with a clear message when the image of `plan` is not differentiable
/// by `p` (or the derivative would be identically zero by construction).
pub fn check_param(cfg: &SimConfig, plan: &Plan, p: Param) -> Result<()> {
    let no = |why: &str| Err(Error::Invalid { what: "-gradient", msg: format!("{p}: {why}") });
    match p {
        Param::Na | Param::Nb | Param::Nc | Param::Fudge if plan.shape == CrystalShape::Tophat => {
            no("tophat spots are flat-topped with hard edges: not differentiable by N or fudge")
        }
        Param::Fudge if plan.shape == CrystalShape::Square => {
            no("square (default) spots do not use -fudge")
        }
        Param::CellA
        | Param::CellB
        | Param::CellC
        | Param::CellAlpha
        | Param::CellBeta
        | Param::CellGamma
            if cfg.crystal.cell.is_none() =>
        {
            no("needs -cell (the cell comes from -mat)")
        }
        Param::Mosaic if !(plan.mosaic_spread_rad > 0.0 && plan.mosaic_domains() > 1) => {
            no("needs -mosaic > 0 with more than one domain")
        }
        Param::Osc if !(cfg.crystal.osc_deg >= 0.0 && cfg.crystal.phistep_deg < 0.0) => {
            no("needs -osc given without -phistep (the step is osc / phisteps)")
        }
        Param::Lambda if cfg.beam.spectrum.is_some() => {
            no("-spectrum sets the wavelengths: use lambda_offset or lambda_scale")
        }
        Param::Dispersion
            if plan.sources.dispsteps < 2
                || cfg.beam.sources.is_some()
                || cfg.beam.spectrum.is_some() =>
        {
            no("needs -dispersion > 0 (and no -sourcefile or -spectrum)")
        }
        Param::Divergence
            if plan.sources.hdivsteps * plan.sources.vdivsteps < 2
                || cfg.beam.sources.is_some() =>
        {
            no("needs -divergence > 0 (and no -sourcefile)")
        }
        Param::Polar if plan.nopolar => no("-nopolar leaves no polarization factor"),
        _ => Ok(()),
    }
}

/// `params` less those [`check_param`] refuses for this model, and the ones
/// left out with why (`mosaic: needs -mosaic > 0 ...`): what a list of
/// `all` parameters means.
pub fn applicable(cfg: &SimConfig, plan: &Plan, params: &[Param]) -> (Vec<Param>, Vec<String>) {
    let (mut keep, mut skipped) = (Vec::new(), Vec::new());
    for &p in params {
        match check_param(cfg, plan, p) {
            Ok(()) => keep.push(p),
            Err(Error::Invalid { msg, .. }) => skipped.push(msg),
            Err(e) => skipped.push(format!("{p}: {e}")),
        }
    }
    (keep, skipped)
}
