//! Unit cell construction: `-cell` or `-mat`, misset, and the real- and
//! reciprocal-space vectors, built in nanoBragg.c's order of operations.
//!
//! The C program builds a triclinic cell from `-cell` through its reciprocal
//! cell and back, so the cell actually used differs slightly from the one
//! requested for non-90° angles; this is reproduced (docs/compat.md).

use crate::config::{CrystalConfig, Misset};
use crate::error::{Error, Result, Warning};
use crate::param::{Deltas, Param};
use crate::real::{DiffReal, Real};
use crate::units::RTD;
use crate::vec3::{cross, dot, lift, magnitude, rescale, rotate_xyz, scale, V3};

/// The resolved crystal lattice at phi = 0, before mosaic rotation.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Real-space a (m).
    pub a_m: [f64; 3],
    /// Real-space b (m).
    pub b_m: [f64; 3],
    /// Real-space c (m).
    pub c_m: [f64; 3],
    /// Reciprocal a* (1/Å).
    pub a_star: [f64; 3],
    /// Reciprocal b* (1/Å).
    pub b_star: [f64; 3],
    /// Reciprocal c* (1/Å).
    pub c_star: [f64; 3],
    /// Cell lengths a, b, c (Å) and angles alpha, beta, gamma (deg) as used.
    pub cell: [f64; 6],
    /// Reciprocal lengths (1/Å) and angles (deg).
    pub recip_cell: [f64; 6],
    /// Cell volume (Å³).
    pub volume_a3: f64,
    /// Misset angles (rad) when drawn at random, for reporting.
    pub random_misset_rad: Option<[f64; 3]>,
    /// Warnings raised on the way.
    pub warnings: Vec<Warning>,
}

fn clamp_angles<R: Real>(sin: &mut R, cos: &mut R) {
    *sin = clamp1(*sin);
    if (*cos * *cos).val() > 1.0 {
        *cos = R::one();
    }
}

/// `x.clamp(-1, 1)` (NaN passes through).
fn clamp1<R: Real>(x: R) -> R {
    if x.val() < -1.0 {
        -R::one()
    } else if x.val() > 1.0 {
        R::one()
    } else {
        x
    }
}

/// The cell vectors in the number type of [`Cell::resolve_in`].
#[derive(Debug, Clone, Copy)]
pub struct CellVectors<R> {
    /// Real-space a (m).
    pub a: V3<R>,
    /// Real-space b (m).
    pub b: V3<R>,
    /// Real-space c (m).
    pub c: V3<R>,
    /// Reciprocal a* (1/Å).
    pub a_star: V3<R>,
    /// Reciprocal b* (1/Å).
    pub b_star: V3<R>,
    /// Reciprocal c* (1/Å).
    pub c_star: V3<R>,
}

impl Cell {
    /// Build the cell from `-cell` and/or `-mat` (with `lambda_m` removed from a
    /// MOSFLM matrix) and apply the misset. `random_umat` supplies the rotation
    /// for `-misset random` (drawn by the caller from the misset seed).
    pub fn resolve(
        cfg: &CrystalConfig,
        lambda_m: f64,
        random_umat: Option<[f64; 9]>,
    ) -> Result<Cell> {
        Ok(Self::resolve_in::<f64>(cfg, lambda_m, random_umat, &Deltas::zero())?.0)
    }

    /// [`Cell::resolve`] in any number type, with the cell and misset
    /// parameters of `deltas` added where they enter (`lambda_m` may carry
    /// the wavelength's). With all-zero deltas the f64 instance is
    /// [`Cell::resolve`].
    pub fn resolve_in<R: DiffReal>(
        cfg: &CrystalConfig,
        lambda_m: R,
        random_umat: Option<[f64; 9]>,
        deltas: &Deltas<R>,
    ) -> Result<(Cell, CellVectors<R>)> {
        let k = R::c;
        let mut warnings = Vec::new();
        let mut a_len = R::zero();
        let mut b_len = R::zero();
        let mut c_len = R::zero();
        let mut v_cell = R::zero();
        let mut a_star = [R::zero(); 3];
        let mut b_star = [R::zero(); 3];
        let mut c_star = [R::zero(); 3];
        let user_cell = cfg.cell.is_some();
        if let Some(cell) = cfg.cell {
            let given = |p: Param, i: usize| deltas.apply(p, k(cell[i]), 1.0);
            a_len = given(Param::CellA, 0);
            b_len = given(Param::CellB, 1);
            c_len = given(Param::CellC, 2);
            let mut alpha = given(Param::CellAlpha, 3) / k(RTD);
            let mut beta = given(Param::CellBeta, 4) / k(RTD);
            let mut gamma = given(Param::CellGamma, 5) / k(RTD);
            if b_len.val() <= 0.0 {
                b_len = a_len;
            }
            if c_len.val() <= 0.0 {
                c_len = a_len;
            }
            if alpha.val() <= 0.0 {
                alpha = k(std::f64::consts::FRAC_PI_2);
            }
            if beta.val() <= 0.0 {
                beta = k(std::f64::consts::FRAC_PI_2);
            }
            if gamma.val() <= 0.0 {
                gamma = k(std::f64::consts::FRAC_PI_2);
            }
            let aavg = (alpha + beta + gamma) / k(2.0);
            let mut skew =
                aavg.sin() * (aavg - alpha).sin() * (aavg - beta).sin() * (aavg - gamma).sin();
            if skew.val() < 0.0 {
                skew = -skew;
            }
            v_cell = k(2.0) * a_len * b_len * c_len * skew.sqrt();
            if v_cell.val() <= 0.0 {
                warnings.push(Warning::ImpossibleCellVolume(v_cell.val()));
                v_cell = k(f64::MIN_POSITIVE);
            }
            let v_star = R::one() / v_cell;
            let mut as0 = b_len * c_len * alpha.sin() * v_star;
            let mut bs0 = c_len * a_len * beta.sin() * v_star;
            let mut cs0 = a_len * b_len * gamma.sin() * v_star;
            if as0.val() <= 0.0 || bs0.val() <= 0.0 || cs0.val() <= 0.0 {
                warnings.push(Warning::ImpossibleReciprocalLengths([
                    as0.val(),
                    bs0.val(),
                    cs0.val(),
                ]));
                as0 = as0.abs();
                bs0 = bs0.abs();
                cs0 = cs0.abs();
                if as0.val() <= 0.0 {
                    as0 = k(f64::MIN_POSITIVE);
                }
                if bs0.val() <= 0.0 {
                    bs0 = k(f64::MIN_POSITIVE);
                }
                if cs0.val() <= 0.0 {
                    cs0 = k(f64::MIN_POSITIVE);
                }
            }
            let mut sin_gamma_star = c_len * v_star / as0 / bs0;
            let mut cos_alpha_star =
                (beta.cos() * gamma.cos() - alpha.cos()) / (beta.sin() * gamma.sin());
            let mut cos_beta_star =
                (gamma.cos() * alpha.cos() - beta.cos()) / (gamma.sin() * alpha.sin());
            let mut cos_gamma_star =
                (alpha.cos() * beta.cos() - gamma.cos()) / (alpha.sin() * beta.sin());
            sin_gamma_star = clamp1(sin_gamma_star);
            if (cos_alpha_star * cos_alpha_star).val() > 1.0 {
                cos_alpha_star = R::one();
            }
            if (cos_beta_star * cos_beta_star).val() > 1.0 {
                cos_beta_star = R::one();
            }
            if (cos_gamma_star * cos_gamma_star).val() > 1.0 {
                cos_gamma_star = R::one();
            }
            a_star = [as0, R::zero(), R::zero()];
            b_star = [bs0 * cos_gamma_star, bs0 * sin_gamma_star, R::zero()];
            c_star = [
                cs0 * cos_beta_star,
                cs0 * (cos_alpha_star - cos_beta_star * cos_gamma_star) / sin_gamma_star,
                cs0 * v_cell / (a_len * b_len * c_len * sin_gamma_star),
            ];
        }
        if let Some(mat) = cfg.mat {
            let s = k(1e-10) / lambda_m;
            a_star = scale(lift(mat[0]), s);
            b_star = scale(lift(mat[1]), s);
            c_star = scale(lift(mat[2]), s);
        }
        if cfg.mat.is_none() && a_len.val() == 0.0 {
            return Err(Error::Invalid {
                what: "-cell",
                msg: "no unit cell: give -cell a b c alpha beta gamma or -mat FILE".into(),
            });
        }

        let mut random_misset_rad = None;
        let mut misset = match cfg.misset {
            Misset::None => None,
            Misset::Angles(d) => Some([d[0] / RTD, d[1] / RTD, d[2] / RTD]),
            Misset::Random => None,
        };
        if cfg.misset == Misset::Random {
            let umat = random_umat.ok_or(Error::Invalid {
                what: "-misset",
                msg: "random misset needs a seed".into(),
            })?;
            let m = crate::crystal::mosaic::umat2misset(&umat);
            random_misset_rad = Some(m);
            misset = Some(m);
        }
        if let Some(m) = misset {
            let m = m.map(k);
            a_star = rotate_xyz(a_star, m[0], m[1], m[2]);
            b_star = rotate_xyz(b_star, m[0], m[1], m[2]);
            c_star = rotate_xyz(c_star, m[0], m[1], m[2]);
        }
        // the misset parameters: a further rotation after the orientation
        let extra = [Param::MissetX, Param::MissetY, Param::MissetZ]
            .map(|p| deltas.apply(p, R::zero(), 1.0) / k(RTD));
        if extra.iter().any(|x| !x.is_const_zero()) {
            a_star = rotate_xyz(a_star, extra[0], extra[1], extra[2]);
            b_star = rotate_xyz(b_star, extra[0], extra[1], extra[2]);
            c_star = rotate_xyz(c_star, extra[0], extra[1], extra[2]);
        }

        let mut asxbs = cross(a_star, b_star);
        let mut bsxcs = cross(b_star, c_star);
        let mut csxas = cross(c_star, a_star);
        let mut v_star = dot(a_star, bsxcs);
        if user_cell {
            bsxcs = rescale(bsxcs, a_len / v_cell);
            csxas = rescale(csxas, b_len / v_cell);
            asxbs = rescale(asxbs, c_len / v_cell);
            v_star = R::one() / v_cell;
        }
        v_cell = R::one() / v_star;
        if !(v_cell.val().is_finite() && v_cell.val() != 0.0) {
            return Err(Error::Invalid {
                what: "-mat",
                msg: "the reciprocal vectors are coplanar (zero cell volume)".into(),
            });
        }
        let a = scale(bsxcs, v_cell);
        let b = scale(csxas, v_cell);
        let c = scale(asxbs, v_cell);
        a_star = scale(cross(b, c), v_star);
        b_star = scale(cross(c, a), v_star);
        c_star = scale(cross(a, b), v_star);
        let vectors = CellVectors {
            a: scale(a, k(1e-10)),
            b: scale(b, k(1e-10)),
            c: scale(c, k(1e-10)),
            a_star,
            b_star,
            c_star,
        };
        // the reported cell, in f64
        let (a, b, c) = (a.map(R::val), b.map(R::val), c.map(R::val));
        let (a_star, b_star, c_star) = (a_star.map(R::val), b_star.map(R::val), c_star.map(R::val));
        let (v_cell, v_star) = (v_cell.val(), v_star.val());
        let (al, bl, cl) = (magnitude(a), magnitude(b), magnitude(c));
        let (asl, bsl, csl) = (magnitude(a_star), magnitude(b_star), magnitude(c_star));

        let mut sin_alpha = asl * v_cell / bl / cl;
        let mut sin_beta = bsl * v_cell / al / cl;
        let mut sin_gamma = csl * v_cell / al / bl;
        let mut cos_alpha = dot(b, c) / bl / cl;
        let mut cos_beta = dot(a, c) / al / cl;
        let mut cos_gamma = dot(a, b) / al / bl;
        clamp_angles(&mut sin_alpha, &mut cos_alpha);
        clamp_angles(&mut sin_beta, &mut cos_beta);
        clamp_angles(&mut sin_gamma, &mut cos_gamma);
        let alpha = sin_alpha.atan2(cos_alpha);
        let beta = sin_beta.atan2(cos_beta);
        let gamma = sin_gamma.atan2(cos_gamma);

        let mut sin_alpha_s = al * v_star / bsl / csl;
        let mut sin_beta_s = bl * v_star / asl / csl;
        let mut sin_gamma_s = cl * v_star / asl / bsl;
        let mut cos_alpha_s = dot(b_star, c_star) / bsl / csl;
        let mut cos_beta_s = dot(a_star, c_star) / asl / csl;
        let mut cos_gamma_s = dot(a_star, b_star) / asl / bsl;
        clamp_angles(&mut sin_alpha_s, &mut cos_alpha_s);
        clamp_angles(&mut sin_beta_s, &mut cos_beta_s);
        clamp_angles(&mut sin_gamma_s, &mut cos_gamma_s);
        let alpha_s = sin_alpha_s.atan2(cos_alpha_s);
        let beta_s = sin_beta_s.atan2(cos_beta_s);
        let gamma_s = sin_gamma_s.atan2(cos_gamma_s);

        let cell = Cell {
            a_m: scale(a, 1e-10),
            b_m: scale(b, 1e-10),
            c_m: scale(c, 1e-10),
            a_star,
            b_star,
            c_star,
            cell: [al, bl, cl, alpha * RTD, beta * RTD, gamma * RTD],
            recip_cell: [asl, bsl, csl, alpha_s * RTD, beta_s * RTD, gamma_s * RTD],
            volume_a3: v_cell,
            random_misset_rad,
            warnings,
        };
        Ok((cell, vectors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(cell: [f64; 6]) -> CrystalConfig {
        CrystalConfig { cell: Some(cell), ..Default::default() }
    }

    #[test]
    fn cubic_cell_is_exact() {
        let c = Cell::resolve(&cfg([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]), 1e-10, None).unwrap();
        assert!((c.cell[0] - 100.0).abs() < 1e-9);
        assert!((c.cell[3] - 90.0).abs() < 1e-9);
        assert!((c.volume_a3 - 1e6).abs() < 1e-3);
        assert!((c.a_m[0] - 100e-10).abs() < 1e-20);
        // a . a* = 1
        assert!((dot(scale(c.a_m, 1e10), c.a_star) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn triclinic_reciprocal_duality() {
        let c = Cell::resolve(&cfg([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]), 1e-10, None).unwrap();
        let a = scale(c.a_m, 1e10);
        let b = scale(c.b_m, 1e10);
        let cc = scale(c.c_m, 1e10);
        // reciprocal vectors stay perpendicular to the other two direct ones
        assert!(dot(a, c.b_star).abs() < 1e-12);
        assert!(dot(b, c.c_star).abs() < 1e-12);
        assert!(dot(cc, c.a_star).abs() < 1e-12);
        // the C construction keeps the cell close to, but not exactly at, the request
        // lengths are forced to the request, angles drift slightly (C quirk)
        assert!((c.cell[0] - 70.0).abs() < 1e-9);
        assert!((c.cell[3] - 75.0).abs() < 0.5 && (c.cell[3] - 75.0).abs() > 1e-6);
        assert!((c.cell[5] - 95.0).abs() < 0.5);
    }

    #[test]
    fn missing_cell_is_an_error() {
        assert!(Cell::resolve(&CrystalConfig::default(), 1e-10, None).is_err());
    }
}
