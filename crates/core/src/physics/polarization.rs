//! Polarization of scattered X-rays.

use crate::real::{Mask, Num, Real};
use crate::vec3::{cross, dot, lift, unitize, V3};

/// Kahn polarization factor (`polarization_factor` in nanoBragg.c).
///
/// `kahn_factor` is the degree of polarization along `axis` (0 = unpolarized,
/// 1 = fully polarized); `incident` and `diffracted` are beam directions.
/// Returns `0.5 (1 + cos²2θ − k cos 2ψ sin²2θ)` where ψ is the azimuth of the
/// diffracted ray about the incident beam measured from the E-vector.
#[inline(always)]
pub fn polarization_factor<R: Num>(
    kahn_factor: R,
    incident: V3<R>,
    diffracted: V3<R>,
    axis: V3<R>,
) -> R {
    polarization_factor_with(kahn_factor, incident, diffracted, axis, false)
}

/// [`polarization_factor`]; with `always_psi` the angle ψ is computed also
/// where the Kahn factor's value is 0 (for a factor that carries a
/// derivative: d/dk of the factor needs cos 2ψ).
#[inline(always)]
pub fn polarization_factor_with<R: Num>(
    kahn_factor: R,
    incident: V3<R>,
    diffracted: V3<R>,
    axis: V3<R>,
    always_psi: bool,
) -> R {
    polarization_factor_in(kahn_factor, &PolarBasis::new(incident, axis), diffracted, always_psi)
}

/// The unit incident direction and the E and B directions about it: the
/// part of [`polarization_factor`] that depends only on the source, formed
/// once per source (the same operations as per ray, so the same values).
#[derive(Debug, Clone, Copy)]
pub struct PolarBasis<R> {
    /// Unit incident direction.
    pub incident: V3<R>,
    /// Unit E direction (perpendicular to the beam, in the plane of the axis).
    pub e_in: V3<R>,
    /// Unit B direction (axis × incident).
    pub b_in: V3<R>,
}

impl<R: Num> PolarBasis<R> {
    /// The basis of a beam along `incident` polarized along `axis`.
    #[inline(always)]
    pub fn new(incident: V3<R>, axis: V3<R>) -> Self {
        let incident = unitize(incident).0;
        let axis = unitize(axis).0;
        let b_in = unitize(cross(axis, incident)).0;
        let e_in = unitize(cross(incident, b_in)).0;
        PolarBasis { incident, e_in, b_in }
    }
}

/// [`polarization_factor_with`] from a source's [`PolarBasis`].
#[inline(always)]
pub fn polarization_factor_in<R: Num>(
    kahn_factor: R,
    basis: &PolarBasis<R>,
    diffracted: V3<R>,
    always_psi: bool,
) -> R {
    let diffracted = unitize(diffracted).0;
    let cos2theta = dot(basis.incident, diffracted);
    let cos2theta_sqr = cos2theta * cos2theta;
    let sin2theta_sqr = R::one() - cos2theta_sqr;
    let mut psi = R::zero();
    let polarized = kahn_factor.cmp_ne(R::zero()) | R::Mask::splat(always_psi);
    if polarized.any() {
        let e_out = dot(diffracted, basis.e_in);
        let b_out = dot(diffracted, basis.b_in);
        psi = R::select(polarized, -b_out.atan2(e_out), psi);
    }
    R::c(0.5) * (R::one() + cos2theta_sqr - kahn_factor * (R::c(2.0) * psi).cos() * sin2theta_sqr)
}

/// The Kahn factor for one source, prepared for the fast render path.
///
/// The E and B directions about the incident beam depend only on the source,
/// so they are formed once. With `E`, `B` and `c` the projections of the unit
/// diffracted direction on them and on the incident beam, `E² + B² = 1 − c² =
/// sin²2θ` and `cos 2ψ = (E² − B²)/(E² + B²)`, so the factor is
/// `0.5 (1 + c² − k (E² − B²))`: no arctangent, no cosine, no division, and no
/// special case when the diffracted ray is along the beam.
#[derive(Debug, Clone, Copy)]
pub struct Polarization<S> {
    incident: V3<S>,
    e_in: V3<S>,
    b_in: V3<S>,
    kahn: S,
    /// Polarization axis along the beam: C's ψ is 0 then (atan2(0, 0)).
    degenerate: bool,
    /// A Kahn factor of exactly 0 without a derivative: the factor is
    /// 0.5 (1 + c²), the same number the full formula gives.
    unpolarized: bool,
}

impl<S: Real> Polarization<S> {
    /// Prepare for one incident direction (need not be unit) and E-vector axis.
    pub fn new(kahn_factor: f64, incident: [f64; 3], axis: [f64; 3]) -> Self {
        let incident = unitize(incident).0;
        let axis = unitize(axis).0;
        let b_in = unitize(cross(axis, incident)).0;
        let e_in = unitize(cross(incident, b_in)).0;
        Polarization {
            incident: lift(incident),
            e_in: lift(e_in),
            b_in: lift(b_in),
            kahn: S::c(kahn_factor),
            degenerate: b_in == [0.0; 3],
            unpolarized: kahn_factor == 0.0,
        }
    }

    /// Prepare from a source's basis, with a Kahn factor and basis that may
    /// carry derivatives (`S` a dual number); `unpolarized`: the Kahn factor
    /// is exactly 0 and carries no derivative (the factor is then taken as
    /// 0.5 (1 + c²), the same numbers, derivative parts included).
    pub fn from_basis(kahn_factor: S, basis: &PolarBasis<S>, unpolarized: bool) -> Self {
        Polarization {
            incident: basis.incident,
            e_in: basis.e_in,
            b_in: basis.b_in,
            kahn: kahn_factor,
            degenerate: basis.b_in.iter().all(|b| b.val() == 0.0),
            unpolarized,
        }
    }

    /// The factor for a unit diffracted direction.
    #[inline(always)]
    pub fn factor<V: Num<Scalar = S>>(&self, diffracted: V3<V>) -> V {
        // written out: `map` leaves copies (memcpy) of wide dual numbers
        let l = |v: &V3<S>| [V::splat(v[0]), V::splat(v[1]), V::splat(v[2])];
        let c = dot(l(&self.incident), diffracted);
        let c2 = c * c;
        let one = V::one();
        if self.unpolarized {
            return V::c(0.5) * (one + c2);
        }
        let kahn = V::splat(self.kahn);
        let e2_minus_b2 = if self.degenerate {
            one - c2
        } else {
            let e = dot(l(&self.e_in), diffracted);
            let b = dot(l(&self.b_in), diffracted);
            e * e - b * b
        };
        V::c(0.5) * (one + c2 - kahn * e2_minus_b2)
    }
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

    /// A Kahn factor of 0 without derivative parts: the short form gives the
    /// full formula's numbers, value and derivatives by a moving source and
    /// direction.
    #[test]
    fn a_constant_zero_kahn_factor_is_the_unpolarized_form() {
        use crate::real::dual::Dense64;
        let d = |x: f64, a: f64, b: f64| Dense64::<2> { re: x, eps: [a, b] };
        let incident = [d(0.9, 0.1, 0.0), d(0.1, -0.3, 0.2), d(-0.2, 0.0, 0.5)];
        let basis =
            PolarBasis::new(incident, [d(0.0, 0.0, 0.0), d(0.3, 0.0, 0.0), d(1.0, 0.0, 0.0)]);
        let toward = unitize([d(0.4, 0.2, 0.0), d(0.8, 0.0, -0.1), d(0.3, 0.05, 0.3)]).0;
        let zero = Dense64::<2>::c(0.0);
        let short = Polarization::from_basis(zero, &basis, true).factor(toward);
        let full = Polarization::from_basis(zero, &basis, false).factor(toward);
        assert_eq!(short.re.to_bits(), full.re.to_bits());
        for (a, b) in short.eps.iter().zip(&full.eps) {
            assert_eq!(a.to_bits(), b.to_bits());
        }
        assert!(full.eps.iter().all(|&e| e != 0.0));
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

    #[test]
    fn algebraic_form_matches() {
        let axis = [0.1, 0.2, 1.0];
        for &k in &[0.0, 0.5, 0.95, 1.0] {
            for &inc in &[[1.0, 0.0, 0.0], [0.9, 0.1, -0.2]] {
                let pol = Polarization::<f64>::new(k, inc, axis);
                for i in 0..200 {
                    let t = i as f64 * 0.031;
                    let d = unitize([t.cos(), t.sin() * 0.6, t.sin() * 0.8 - 0.1]).0;
                    let want = polarization_factor(k, inc, d, axis);
                    let got = pol.factor(d);
                    assert!((got - want).abs() < 1e-14, "{k} {t}: {got} vs {want}");
                }
                // along the beam
                let u = unitize(inc).0;
                assert!((pol.factor(u) - 1.0).abs() < 1e-15);
            }
        }
        // axis along the beam: psi = 0 in C
        let pol = Polarization::<f64>::new(0.7, [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]);
        let d = [0.6, 0.8, 0.0];
        let want = polarization_factor(0.7, [1.0, 0.0, 0.0], d, [1.0, 0.0, 0.0]);
        assert!((pol.factor(d) - want).abs() < 1e-15);
    }
}
