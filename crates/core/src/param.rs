//! The continuous parameters an image can be differentiated by, named like
//! the command-line flags, and the perturbations that inject them into setup
//! (here, below the setup code that reads them; [`crate::diff`] differentiates).

use crate::error::{Error, Result};
use crate::real::DiffReal;
use std::fmt;
use std::str::FromStr;

macro_rules! params {
    ($($v:ident = $name:literal, $unit:literal, $doc:literal;)*) => {
        /// A continuous parameter of the simulation, in the units of its flag.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Param {
            $(#[doc = $doc] $v,)*
        }

        impl Param {
            /// Every parameter, in a fixed order.
            pub const ALL: [Param; [$($name),*].len()] = [$(Param::$v),*];
            /// Number of parameters.
            pub const COUNT: usize = Self::ALL.len();

            /// The name used on the command line (as the flag, without `-`).
            pub fn name(self) -> &'static str {
                match self { $(Param::$v => $name,)* }
            }

            /// The unit of the derivative's denominator ("per ...").
            pub fn unit(self) -> &'static str {
                match self { $(Param::$v => $unit,)* }
            }
        }
    };
}

params! {
    Distance = "distance", "mm", "`-distance` (ignored by the geometry when `-close_distance` is given).";
    CloseDistance = "close_distance", "mm", "`-close_distance` (as given or as derived from `-distance`).";
    Xbeam = "Xbeam", "mm", "`-Xbeam` (as given or defaulted).";
    Ybeam = "Ybeam", "mm", "`-Ybeam` (as given or defaulted).";
    DetectorRotX = "detector_rotx", "deg", "`-detector_rotx`.";
    DetectorRotY = "detector_roty", "deg", "`-detector_roty`.";
    DetectorRotZ = "detector_rotz", "deg", "`-detector_rotz`.";
    Twotheta = "twotheta", "deg", "`-twotheta`.";
    CellA = "cell_a", "Å", "`-cell` a.";
    CellB = "cell_b", "Å", "`-cell` b.";
    CellC = "cell_c", "Å", "`-cell` c.";
    CellAlpha = "cell_alpha", "deg", "`-cell` alpha.";
    CellBeta = "cell_beta", "deg", "`-cell` beta.";
    CellGamma = "cell_gamma", "deg", "`-cell` gamma.";
    MissetX = "misset_x", "deg", "Rotation of the crystal about x after its orientation (and misset).";
    MissetY = "misset_y", "deg", "Rotation about y after `misset_x`.";
    MissetZ = "misset_z", "deg", "Rotation about z after `misset_y`.";
    Na = "Na", "cell", "`-Na`, continuous (unit cells along a as used).";
    Nb = "Nb", "cell", "`-Nb`, continuous.";
    Nc = "Nc", "cell", "`-Nc`, continuous.";
    Mosaic = "mosaic", "deg", "`-mosaic` spread, the seeded domain axes held fixed.";
    Phi = "phi", "deg", "`-phi` start angle.";
    Osc = "osc", "deg", "`-osc` range (the phi step count held fixed).";
    Lambda = "lambda", "Å", "`-lambda` (also rescales a `-mat` matrix, as the flag does).";
    Dispersion = "dispersion", "%", "`-dispersion` (the wavelength count held fixed).";
    Divergence = "divergence", "mrad", "`-divergence`: both divergence ranges together.";
    Polar = "polar", "1", "`-polar` Kahn factor.";
    Fluence = "fluence", "photons/m²", "`-fluence` (as used, also when derived from `-flux`).";
    Water = "water", "µm", "`-water` droplet size.";
    DefaultF = "default_F", "1", "`-default_F` (where the lookup returns it, not inside an HKL grid).";
    Fudge = "fudge", "1", "`-fudge` spot-size factor.";
    LambdaOffset = "lambda_offset", "Å", "`-lambda_offset`: added to every source wavelength (λ' = offset + scale · λ).";
    LambdaScale = "lambda_scale", "1", "`-lambda_scale`: multiplies every source wavelength.";
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Param {
    type Err = Error;
    fn from_str(s: &str) -> Result<Param> {
        let t = s.trim().trim_start_matches('-');
        Param::ALL.iter().copied().find(|p| p.name().eq_ignore_ascii_case(t)).ok_or_else(|| {
            let names: Vec<_> = Param::ALL.iter().map(|p| p.name()).collect();
            Error::Invalid {
                what: "-gradient",
                msg: format!(
                    "unknown parameter '{}' (known: {})",
                    crate::error::shown(s),
                    names.join(", ")
                ),
            }
        })
    }
}

impl Param {
    /// The parameters of a comma-separated list (`all` names every one).
    pub fn parse_list(s: &str) -> Result<Vec<Param>> {
        if s.trim().eq_ignore_ascii_case("all") {
            return Ok(Param::ALL.to_vec());
        }
        let mut out = Vec::new();
        for name in s.split(',').filter(|n| !n.trim().is_empty()) {
            let p: Param = name.parse()?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        if out.is_empty() {
            return Err(Error::Invalid { what: "-gradient", msg: "no parameter named".into() });
        }
        Ok(out)
    }

    /// "per mm" etc., for reports.
    pub fn per_unit(self) -> String {
        format!("per {}", self.unit())
    }
}

/// One perturbation per [`Param`], added where setup uses the parameter: all
/// constant zeros for an ordinary run (setup then computes exactly what it
/// computes without them), seeded duals for derivatives.
#[derive(Debug, Clone, Copy)]
pub struct Deltas<R> {
    d: [R; Param::COUNT],
}

impl<R: DiffReal> Default for Deltas<R> {
    fn default() -> Self {
        Deltas { d: [R::zero(); Param::COUNT] }
    }
}

impl<R: DiffReal> Deltas<R> {
    /// All zero.
    pub fn zero() -> Self {
        Self::default()
    }

    /// Set the perturbation of `p`.
    pub fn set(&mut self, p: Param, x: R) {
        self.d[p as usize] = x;
    }

    /// The perturbation of `p`.
    #[inline]
    pub fn get(&self, p: Param) -> R {
        self.d[p as usize]
    }

    /// Whether `p` is perturbed.
    #[inline]
    pub fn has(&self, p: Param) -> bool {
        !self.d[p as usize].is_const_zero()
    }

    /// `x + scale · δp`, or exactly `x` when `p` is not perturbed.
    #[inline]
    pub fn apply(&self, p: Param, x: R, scale: f64) -> R {
        if self.has(p) {
            x + self.get(p) * R::c(scale)
        } else {
            x
        }
    }

    /// Whether any parameter is perturbed.
    pub fn any(&self) -> bool {
        Param::ALL.iter().any(|&p| self.has(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Param::ALL {
            assert_eq!(p.name().parse::<Param>().unwrap(), p);
            assert!(!p.unit().is_empty());
        }
        assert_eq!("-xbeam".parse::<Param>().unwrap(), Param::Xbeam);
        assert!("bogus".parse::<Param>().is_err());
        assert_eq!(Param::parse_list("Na,phi,Na").unwrap(), vec![Param::Na, Param::Phi]);
        assert_eq!(Param::parse_list("all").unwrap().len(), Param::COUNT);
        assert!(Param::parse_list(",").is_err());
    }

    #[test]
    fn zero_deltas_leave_values_alone() {
        let d = Deltas::<f64>::zero();
        assert!(!d.any());
        assert_eq!(d.apply(Param::Phi, -0.0, 2.0).to_bits(), (-0.0f64).to_bits());
    }
}
