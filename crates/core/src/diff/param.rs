//! The parameters ([`Param`]) and perturbations ([`Deltas`]) are defined in
//! [`crate::param`], below setup; here, what only the derivative tools need.

pub use crate::param::{Deltas, Param};

use crate::config::{Misset, SimConfig};
use crate::error::{Error, Result};

impl Param {
    /// A copy of `cfg` with this parameter moved by `h` (in its unit) from
    /// the value the run uses: the finite-difference counterpart of a seeded
    /// derivative. Parameters whose flag was not given start from the value
    /// setup defaults them to (`resolved`, the plan of `cfg`).
    pub fn nudged(
        self,
        cfg: &SimConfig,
        resolved: &crate::setup::Plan,
        h: f64,
    ) -> Result<SimConfig> {
        let mut c = cfg.clone();
        let d = &mut c.detector;
        let det = &resolved.detector;
        match self {
            Param::Distance => d.distance_mm += h,
            Param::CloseDistance => {
                // where setup adds the delta: as given, or |ratio · distance|
                // before the two-theta rotation (the final close distance
                // differs from it under a beam pivot with two-theta)
                let ratio = det.close_distance_m / det.distance_m;
                let close = d.close_distance_mm.unwrap_or((ratio * d.distance_mm).abs());
                d.close_distance_mm = Some(close + h);
            }
            Param::Xbeam => d.xbeam_mm = Some(d.xbeam_mm.unwrap_or(det.xbeam_m * 1000.0) + h),
            Param::Ybeam => d.ybeam_mm = Some(d.ybeam_mm.unwrap_or(det.ybeam_m * 1000.0) + h),
            Param::DetectorRotX => d.rotx_deg += h,
            Param::DetectorRotY => d.roty_deg += h,
            Param::DetectorRotZ => d.rotz_deg += h,
            Param::Twotheta => d.twotheta_deg += h,
            Param::CellA
            | Param::CellB
            | Param::CellC
            | Param::CellAlpha
            | Param::CellBeta
            | Param::CellGamma => {
                let i = self as usize - Param::CellA as usize;
                let cell = c.crystal.cell.as_mut().ok_or_else(|| needs(self, "-cell"))?;
                cell[i] += h;
            }
            Param::MissetX | Param::MissetY | Param::MissetZ => {
                let i = self as usize - Param::MissetX as usize;
                let mut m = match c.crystal.misset {
                    Misset::None => [0.0; 3],
                    Misset::Angles(a) => a,
                    Misset::Random => return Err(needs(self, "-misset angles (not random)")),
                };
                if m.iter().any(|&x| x != 0.0) {
                    // the extra rotation composes with the misset: no flag moves it alone
                    return Err(needs(self, "no -misset angles"));
                }
                m[i] += h;
                c.crystal.misset = Misset::Angles(m);
            }
            Param::Na => c.crystal.na = resolved.n_cells[0] + h,
            Param::Nb => c.crystal.nb = resolved.n_cells[1] + h,
            Param::Nc => c.crystal.nc = resolved.n_cells[2] + h,
            Param::Mosaic => c.crystal.mosaic_deg += h,
            Param::Phi => c.crystal.phi0_deg += h,
            Param::Osc => c.crystal.osc_deg += h,
            Param::Lambda => c.beam.lambda_a += h,
            Param::Dispersion => c.beam.dispersion_pct += h,
            Param::Divergence => {
                c.beam.hdivrange_mrad += h;
                c.beam.vdivrange_mrad += h;
            }
            Param::Polar => c.beam.kahn_factor += h,
            Param::Fluence => {
                c.beam.fluence = resolved.fluence + h;
                c.beam.flux = 0.0;
            }
            Param::Water => c.sampling.water_um += h,
            Param::DefaultF => c.sf.default_f += h,
            Param::Fudge => c.crystal.fudge += h,
            Param::LambdaOffset => c.beam.lambda_offset_a += h,
            Param::LambdaScale => c.beam.lambda_scale += h,
        }
        Ok(c)
    }
}

fn needs(p: Param, what: &str) -> Error {
    Error::Invalid { what: "-gradient", msg: format!("the derivative by {p} needs {what}") }
}
