//! Polarization of scattered X-rays.

use crate::real::Real;
use crate::vec3::{cross, dot, unitize, V3};

/// Kahn polarization factor (`polarization_factor` in nanoBragg.c).
///
/// `kahn_factor` is the degree of polarization along `axis` (0 = unpolarized,
/// 1 = fully polarized); `incident` and `diffracted` are beam directions.
/// Returns `0.5 (1 + cos²2θ − k cos 2ψ sin²2θ)` where ψ is the azimuth of the
/// diffracted ray about the incident beam measured from the E-vector.
#[inline(always)]
pub fn polarization_factor<R: Real>(
    kahn_factor: R,
    incident: V3<R>,
    diffracted: V3<R>,
    axis: V3<R>,
) -> R {
    let incident = unitize(incident).0;
    let diffracted = unitize(diffracted).0;
    let axis = unitize(axis).0;
    let cos2theta = dot(incident, diffracted);
    let cos2theta_sqr = cos2theta * cos2theta;
    let sin2theta_sqr = R::one() - cos2theta_sqr;
    let mut psi = R::zero();
    if kahn_factor != R::zero() {
        let b_in = unitize(cross(axis, incident)).0;
        let e_in = unitize(cross(incident, b_in)).0;
        let e_out = dot(diffracted, e_in);
        let b_out = dot(diffracted, b_in);
        psi = -b_out.atan2(e_out);
    }
    R::c(0.5) * (R::one() + cos2theta_sqr - kahn_factor * (R::c(2.0) * psi).cos() * sin2theta_sqr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpolarized_is_half_one_plus_cos_squared() {
        let inc = [1.0, 0.0, 0.0];
        let t: f64 = 0.7;
        let diff = [t.cos(), t.sin(), 0.0];
        let p = polarization_factor(0.0, inc, diff, [0.0, 0.0, 1.0]);
        assert!((p - 0.5 * (1.0 + t.cos().powi(2))).abs() < 1e-15);
    }

    #[test]
    fn fully_polarized_limits() {
        let inc = [1.0, 0.0, 0.0];
        let t: f64 = 0.9;
        // scattering in the plane perpendicular to E (E along z): factor 1
        let diff = [t.cos(), t.sin(), 0.0];
        let p = polarization_factor(1.0, inc, diff, [0.0, 0.0, 1.0]);
        assert!((p - 1.0).abs() < 1e-14, "{p}");
        // scattering in the plane of E: cos^2 2theta
        let diff = [t.cos(), 0.0, t.sin()];
        let p = polarization_factor(1.0, inc, diff, [0.0, 0.0, 1.0]);
        assert!((p - t.cos().powi(2)).abs() < 1e-14, "{p}");
        // forward scattering is never attenuated
        let p = polarization_factor(0.95, inc, inc, [0.0, 0.0, 1.0]);
        assert!((p - 1.0).abs() < 1e-15);
    }
}
