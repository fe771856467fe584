//! Three-vector helpers with the C program's exact operation order.
//!
//! nanoBragg.c keeps vectors as `double[4]` with the magnitude in element 0;
//! here a vector is `[R; 3]` and magnitudes are returned instead. Most
//! helpers are generic over [`Num`], so they also serve SIMD lanes.

use crate::real::{DiffReal, Num, Real};

/// A three-vector.
pub type V3<R> = [R; 3];

/// Dot product (`dot_product` in nanoBragg.c).
#[inline(always)]
pub fn dot<R: Num>(x: V3<R>, y: V3<R>) -> R {
    x[0] * y[0] + x[1] * y[1] + x[2] * y[2]
}

/// Cross product (`cross_product` in nanoBragg.c).
#[inline(always)]
pub fn cross<R: Num>(x: V3<R>, y: V3<R>) -> V3<R> {
    [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]]
}

/// Length (`magnitude` in nanoBragg.c).
#[inline(always)]
pub fn magnitude<R: Num>(v: V3<R>) -> R {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

/// Unit vector and the original length (`unitize` in nanoBragg.c); a zero
/// vector stays zero.
#[inline(always)]
pub fn unitize<R: Num>(v: V3<R>) -> (V3<R>, R) {
    let mag = magnitude(v);
    let nonzero = mag.cmp_ne(R::zero());
    // written out (no closure), so that it inlines into SIMD row functions
    let zero = R::zero();
    let u = [
        R::select(nonzero, v[0] / mag, zero),
        R::select(nonzero, v[1] / mag, zero),
        R::select(nonzero, v[2] / mag, zero),
    ];
    (u, mag)
}

/// Scale by a factor (`vector_scale` in nanoBragg.c).
#[inline(always)]
pub fn scale<R: Num>(v: V3<R>, s: R) -> V3<R> {
    [s * v[0], s * v[1], s * v[2]]
}

/// Rescale to a given length (`vector_rescale` in nanoBragg.c); a zero
/// vector is treated as having length 1.
#[inline(always)]
pub fn rescale<R: Num>(v: V3<R>, new_mag: R) -> V3<R> {
    let old = magnitude(v);
    let old = R::select(old.cmp_le(R::zero()), R::one(), old);
    [new_mag / old * v[0], new_mag / old * v[1], new_mag / old * v[2]]
}

/// Rotate about x, then y, then z (radians); zero angles are skipped exactly
/// as in `rotate` of nanoBragg.c.
#[inline]
pub fn rotate<R: Real>(v: V3<R>, phix: R, phiy: R, phiz: R) -> V3<R> {
    rotate_skipping(v, [phix, phiy, phiz], |a| a == R::zero())
}

/// The x, y, z rotations of [`rotate`] and [`rotate_xyz`]; an angle for
/// which `skip` holds is not applied.
#[inline(always)]
fn rotate_skipping<R: Real>(
    v: V3<R>,
    [phix, phiy, phiz]: V3<R>,
    skip: impl Fn(R) -> bool,
) -> V3<R> {
    let [mut x, mut y, mut z] = v;
    if !skip(phix) {
        let (s, c) = (phix.sin(), phix.cos());
        let ny = y * c + z * (-s);
        let nz = y * s + z * c;
        y = ny;
        z = nz;
    }
    if !skip(phiy) {
        let (s, c) = (phiy.sin(), phiy.cos());
        let nx = x * c + y * R::zero() + z * s;
        let nz = x * (-s) + y * R::zero() + z * c;
        x = nx;
        z = nz;
    }
    if !skip(phiz) {
        let (s, c) = (phiz.sin(), phiz.cos());
        let nx = x * c + y * (-s);
        let ny = x * s + y * c;
        x = nx;
        y = ny;
    }
    [x, y, z]
}

/// Rotate about a unit axis by `phi` radians (`rotate_axis` in nanoBragg.c).
#[inline(always)]
pub fn rotate_axis<R: Num>(v: V3<R>, axis: V3<R>, phi: R) -> V3<R> {
    rotate_axis_sc(v, axis, phi.sin(), phi.cos())
}

/// [`rotate_axis`] given the sine and cosine of the angle.
#[inline(always)]
pub fn rotate_axis_sc<R: Num>(v: V3<R>, axis: V3<R>, sinphi: R, cosphi: R) -> V3<R> {
    let d = (axis[0] * v[0] + axis[1] * v[1] + axis[2] * v[2]) * (R::one() - cosphi);
    [
        axis[0] * d + v[0] * cosphi + (-axis[2] * v[1] + axis[1] * v[2]) * sinphi,
        axis[1] * d + v[1] * cosphi + (axis[2] * v[0] - axis[0] * v[2]) * sinphi,
        axis[2] * d + v[2] * cosphi + (-axis[1] * v[0] + axis[0] * v[1]) * sinphi,
    ]
}

/// Multiply by a row-major 3×3 matrix (`rotate_umat` in nanoBragg.c).
#[inline(always)]
pub fn rotate_umat<R: Num>(v: V3<R>, u: &[R; 9]) -> V3<R> {
    [
        u[0] * v[0] + u[1] * v[1] + u[2] * v[2],
        u[3] * v[0] + u[4] * v[1] + u[5] * v[2],
        u[6] * v[0] + u[7] * v[1] + u[8] * v[2],
    ]
}

/// Convert a vector's components to another scalar type.
#[inline(always)]
pub fn lift<R: Num>(v: [f64; 3]) -> V3<R> {
    [R::c(v[0]), R::c(v[1]), R::c(v[2])]
}

/// Rotate about x, then y, then z (radians), as [`rotate`];
/// an angle is skipped only when it is a constant zero (value and
/// derivatives), so an angle of 0 that carries a derivative still rotates.
/// For f64 this is exactly [`rotate`].
#[inline]
pub fn rotate_xyz<R: DiffReal>(v: V3<R>, phix: R, phiy: R, phiz: R) -> V3<R> {
    rotate_skipping(v, [phix, phiy, phiz], R::is_const_zero)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotate_axis_quarter_turn() {
        let v = rotate_axis([1.0, 0.0, 0.0], [0.0, 0.0, 1.0], std::f64::consts::FRAC_PI_2);
        assert!((v[0]).abs() < 1e-15 && (v[1] - 1.0).abs() < 1e-15 && v[2].abs() < 1e-15);
    }

    #[test]
    fn rotate_xyz_matches_axis_rotations() {
        let v = [0.3, -0.7, 0.2];
        let (a, b, c) = (0.1, -0.4, 0.9);
        let r = rotate(v, a, b, c);
        let e = rotate_axis(
            rotate_axis(rotate_axis(v, [1.0, 0.0, 0.0], a), [0.0, 1.0, 0.0], b),
            [0.0, 0.0, 1.0],
            c,
        );
        for i in 0..3 {
            assert!((r[i] - e[i]).abs() < 1e-15);
        }
    }

    #[test]
    fn unitize_zero_stays_zero() {
        let (u, m) = unitize([0.0f64; 3]);
        assert_eq!(u, [0.0; 3]);
        assert_eq!(m, 0.0);
    }

    #[test]
    fn rotate_xyz_is_vec3_rotate_in_f64() {
        let v = [0.3, -0.7, 0.2];
        for (a, b, c) in [(0.1, -0.4, 0.9), (0.0, 0.5, 0.0), (0.0, 0.0, 0.0), (-0.0, 1.0, -0.0)] {
            let r = rotate_xyz(v, a, b, c);
            let e = rotate(v, a, b, c);
            assert_eq!(r.map(f64::to_bits), e.map(f64::to_bits));
        }
    }
}
