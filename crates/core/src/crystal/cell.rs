//! Unit cell construction: `-cell` or `-mat`, misset, and the real- and
//! reciprocal-space vectors, built in nanoBragg.c's order of operations.
//!
//! The C program builds a triclinic cell from `-cell` through its reciprocal
//! cell and back, so the cell actually used differs slightly from the one
//! requested for non-90° angles; this is reproduced (docs/compat.md), and
//! `-corrected` builds the requested cell exactly.

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

/// The given cell (`-cell`) and the reciprocal vectors built from it, in
/// nanoBragg.c's orientation (a* along x, b* in the xy plane).
struct GivenCell<R> {
    lengths: [R; 3],
    volume: R,
    stars: [V3<R>; 3],
}

impl<R: DiffReal> GivenCell<R> {
    /// The cell of `-cell a b c alpha beta gamma` (Å, degrees), with the cell
    /// parameters of `deltas`; missing lengths and angles defaulted, an
    /// impossible volume or reciprocal length replaced (with a warning).
    /// `exact`: the reciprocal cell of exactly this cell (nanoBragg.c's c*
    /// along z is `c* V / (a b c sin γ*)`, which is `V* / (a* b* sin γ*)`
    /// only where the angles are 90°).
    fn resolve(
        cell: [f64; 6],
        deltas: &Deltas<R>,
        exact: bool,
        warnings: &mut Vec<Warning>,
    ) -> GivenCell<R> {
        let k = R::c;
        let given = |p: Param, i: usize| deltas.apply(p, k(cell[i]), 1.0);
        let a_len = given(Param::CellA, 0);
        let mut b_len = given(Param::CellB, 1);
        let mut c_len = given(Param::CellC, 2);
        let angle = |p: Param, i: usize| {
            let x = given(p, i) / k(RTD);
            if x.val() <= 0.0 {
                k(std::f64::consts::FRAC_PI_2)
            } else {
                x
            }
        };
        let alpha = angle(Param::CellAlpha, 3);
        let beta = angle(Param::CellBeta, 4);
        let gamma = angle(Param::CellGamma, 5);
        if b_len.val() <= 0.0 {
            b_len = a_len;
        }
        if c_len.val() <= 0.0 {
            c_len = a_len;
        }
        let aavg = (alpha + beta + gamma) / k(2.0);
        let skew = aavg.sin() * (aavg - alpha).sin() * (aavg - beta).sin() * (aavg - gamma).sin();
        // not abs(): a skew of -0 stays -0, as in nanoBragg.c
        let skew = if skew.val() < 0.0 { -skew } else { skew };
        let mut v_cell = k(2.0) * a_len * b_len * c_len * skew.sqrt();
        if v_cell.val() <= 0.0 {
            warnings.push(Warning::ImpossibleCellVolume(v_cell.val()));
            v_cell = k(f64::MIN_POSITIVE);
        }
        let v_star = R::one() / v_cell;
        let mut s0 = [
            b_len * c_len * alpha.sin() * v_star,
            c_len * a_len * beta.sin() * v_star,
            a_len * b_len * gamma.sin() * v_star,
        ];
        if s0.iter().any(|x| x.val() <= 0.0) {
            warnings.push(Warning::ImpossibleReciprocalLengths(s0.map(R::val)));
            s0 = s0.map(|x| {
                let x = x.abs();
                if x.val() <= 0.0 {
                    k(f64::MIN_POSITIVE)
                } else {
                    x
                }
            });
        }
        let [as0, bs0, cs0] = s0;
        let sin_gamma_star = clamp1(c_len * v_star / as0 / bs0);
        let cos_star = |x: R, y: R, z: R| {
            let cos = (y.cos() * z.cos() - x.cos()) / (y.sin() * z.sin());
            if (cos * cos).val() > 1.0 {
                R::one()
            } else {
                cos
            }
        };
        let cos_alpha_star = cos_star(alpha, beta, gamma);
        let cos_beta_star = cos_star(beta, gamma, alpha);
        let cos_gamma_star = cos_star(gamma, alpha, beta);
        let stars = [
            [as0, R::zero(), R::zero()],
            [bs0 * cos_gamma_star, bs0 * sin_gamma_star, R::zero()],
            [
                cs0 * cos_beta_star,
                cs0 * (cos_alpha_star - cos_beta_star * cos_gamma_star) / sin_gamma_star,
                if exact {
                    v_star / (as0 * bs0 * sin_gamma_star)
                } else {
                    cs0 * v_cell / (a_len * b_len * c_len * sin_gamma_star)
                },
            ],
        ];
        GivenCell { lengths: [a_len, b_len, c_len], volume: v_cell, stars }
    }
}

/// Reciprocal vectors after the misset, and the misset angles when drawn (rad).
type Misset3<R> = ([V3<R>; 3], Option<[f64; 3]>);

/// The reciprocal vectors rotated by the misset (given, or drawn: then also
/// returned, in radians) and by the misset parameters of `deltas`.
fn apply_misset<R: DiffReal>(
    cfg: &CrystalConfig,
    random_umat: Option<[f64; 9]>,
    deltas: &Deltas<R>,
    mut stars: [V3<R>; 3],
) -> Result<Misset3<R>> {
    let k = R::c;
    let mut random_misset_rad = None;
    let misset = match cfg.misset {
        Misset::None => None,
        Misset::Angles(d) => Some([d[0] / RTD, d[1] / RTD, d[2] / RTD]),
        Misset::Random => {
            let umat = random_umat.ok_or(Error::Invalid {
                what: "-misset",
                msg: "random misset needs a seed".into(),
            })?;
            let m = crate::crystal::mosaic::umat2misset(&umat);
            random_misset_rad = Some(m);
            Some(m)
        }
    };
    if let Some(m) = misset {
        let m = m.map(k);
        stars = stars.map(|v| rotate_xyz(v, m[0], m[1], m[2]));
    }
    // the misset parameters: a further rotation after the orientation
    let extra = [Param::MissetX, Param::MissetY, Param::MissetZ]
        .map(|p| deltas.apply(p, R::zero(), 1.0) / k(RTD));
    if extra.iter().any(|x| !x.is_const_zero()) {
        stars = stars.map(|v| rotate_xyz(v, extra[0], extra[1], extra[2]));
    }
    Ok((stars, random_misset_rad))
}

/// Lengths and angles (degrees) of three vectors, given the lengths of the
/// dual ones and the volume product that relates them (`sin α = |x*| · V /
/// (|y| |z|)`), as nanoBragg.c reports a cell and its reciprocal.
fn lengths_and_angles(v: [[f64; 3]; 3], dual_lengths: [f64; 3], volume: f64) -> [f64; 6] {
    let l = v.map(magnitude);
    let angle = |i: usize, j: usize, k: usize| {
        let mut sin = dual_lengths[i] * volume / l[j] / l[k];
        let mut cos = dot(v[j], v[k]) / l[j] / l[k];
        clamp_angles(&mut sin, &mut cos);
        sin.atan2(cos) * RTD
    };
    [l[0], l[1], l[2], angle(0, 1, 2), angle(1, 0, 2), angle(2, 0, 1)]
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
        Ok(Self::resolve_in::<f64>(cfg, lambda_m, random_umat, &Deltas::zero(), false)?.0)
    }

    /// [`Cell::resolve`] in any number type, with the cell and misset
    /// parameters of `deltas` added where they enter (`lambda_m` may carry
    /// the wavelength's). With all-zero deltas and not `exact` the f64
    /// instance is [`Cell::resolve`]. `exact` (`-corrected`): a `-cell` is
    /// built with exactly its lengths, angles and volume.
    pub fn resolve_in<R: DiffReal>(
        cfg: &CrystalConfig,
        lambda_m: R,
        random_umat: Option<[f64; 9]>,
        deltas: &Deltas<R>,
        exact: bool,
    ) -> Result<(Cell, CellVectors<R>)> {
        let k = R::c;
        let mut warnings = Vec::new();
        let given = cfg.cell.map(|cell| GivenCell::resolve(cell, deltas, exact, &mut warnings));
        let mut stars = given.as_ref().map_or([[R::zero(); 3]; 3], |g| g.stars);
        if let Some(mat) = cfg.mat {
            let s = k(1e-10) / lambda_m;
            stars = mat.map(|row| scale(lift(row), s));
        }
        if let Some([a, b, c]) = cfg.real_space_a {
            // the reciprocal vectors (1/Å), as -mat gives them after the division by λ
            let v = dot(a, cross(b, c));
            stars = [cross(b, c), cross(c, a), cross(a, b)].map(|x| lift(x.map(|x| x / v)));
        }
        let oriented = cfg.mat.is_some() || cfg.real_space_a.is_some();
        if !oriented && given.as_ref().is_none_or(|g| g.lengths[0].val() == 0.0) {
            return Err(Error::Invalid {
                what: "-cell",
                msg: "no unit cell: give -cell a b c alpha beta gamma or -mat FILE".into(),
            });
        }
        let (stars, random_misset_rad) = apply_misset(cfg, random_umat, deltas, stars)?;
        let [a_star, b_star, c_star] = stars;

        let mut asxbs = cross(a_star, b_star);
        let mut bsxcs = cross(b_star, c_star);
        let mut csxas = cross(c_star, a_star);
        let mut v_star = dot(a_star, bsxcs);
        if let Some(g) = &given {
            let [a_len, b_len, c_len] = g.lengths;
            bsxcs = rescale(bsxcs, a_len / g.volume);
            csxas = rescale(csxas, b_len / g.volume);
            asxbs = rescale(asxbs, c_len / g.volume);
            v_star = R::one() / g.volume;
        }
        let v_cell = R::one() / v_star;
        if !(v_cell.val().is_finite() && v_cell.val() != 0.0) {
            return Err(match (oriented, &cfg.cell) {
                (false, Some(cell)) => Error::Invalid {
                    what: "-cell",
                    msg: format!(
                        "the cell's volume comes out as {:e} Å³ (edges {:e} {:e} {:e} Å): \
                         not finite or zero",
                        v_cell.val(),
                        cell[0],
                        cell[1],
                        cell[2]
                    ),
                },
                _ => Error::Invalid {
                    what: "-mat",
                    msg: "the reciprocal vectors are coplanar (zero cell volume)".into(),
                },
            });
        }
        let a = scale(bsxcs, v_cell);
        let b = scale(csxas, v_cell);
        let c = scale(asxbs, v_cell);
        let a_star = scale(cross(b, c), v_star);
        let b_star = scale(cross(c, a), v_star);
        let c_star = scale(cross(a, b), v_star);
        let vectors = CellVectors {
            a: scale(a, k(1e-10)),
            b: scale(b, k(1e-10)),
            c: scale(c, k(1e-10)),
            a_star,
            b_star,
            c_star,
        };
        // the reported cell, in f64
        let real = [a, b, c].map(|v| v.map(R::val));
        let recip = [a_star, b_star, c_star].map(|v| v.map(R::val));
        let (v_cell, v_star) = (v_cell.val(), v_star.val());
        let cell = Cell {
            a_m: scale(real[0], 1e-10),
            b_m: scale(real[1], 1e-10),
            c_m: scale(real[2], 1e-10),
            a_star: recip[0],
            b_star: recip[1],
            c_star: recip[2],
            cell: lengths_and_angles(real, recip.map(magnitude), v_cell),
            recip_cell: lengths_and_angles(recip, real.map(magnitude), v_star),
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
