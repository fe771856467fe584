//! Exact derivatives of every pixel by continuous parameters.
//!
//! Setup and the physics kernel are written once, generic over the number
//! type; instantiated with dual numbers (num-dual) they carry derivatives
//! through the same code that renders the image:
//! - [`param`]: the parameters ([`Param`], named like the flags) and the
//!   perturbations ([`Deltas`]) setup adds where each parameter enters;
//! - [`dual`]: [`crate::real::Real`] for num-dual's types ([`DiffReal`],
//!   [`Seeded`]);
//! - [`dense`]: the dense dual numbers derivative images are rendered with
//!   ([`Dense64`], [`Dense32`]);
//! - [`leaves`]: the numbers the kernel reads, computed in any [`DiffReal`];
//! - [`jacobian`]: derivative images through the exact render kernel, in
//!   f64 or f32 ([`crate::render::Precision`]);
//! - [`hessian`]: second-derivative images (hyper-dual numbers);
//! - [`loss`]: a loss of the image against an observed one, its gradient and
//!   the Fisher information (standard errors).
//!
//! See docs/derivatives.md.

pub(crate) mod contract;
pub mod dense;
pub mod dual;
pub mod hessian;
pub mod jacobian;
// the f32 renderer over its lanes is x86-only (see render_dense32)
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) mod lanes;
pub mod leaves;
pub mod loss;
pub mod param;

pub use dense::{Dense32, Dense64};
pub use dual::{DiffReal, Seeded};
pub use hessian::{hessian_with, Hessian};
pub use jacobian::{jacobian, jacobian_in, jacobian_with, Jacobian};
pub use leaves::Leaves;
pub use loss::{loss_gradient, LossEval, LossKind};

pub use param::{Deltas, Param};

use crate::vec3::V3;

/// Rotate about x, then y, then z (radians), as [`crate::vec3::rotate`];
/// an angle is skipped only when it is a constant zero (value and
/// derivatives), so an angle of 0 that carries a derivative still rotates.
/// For f64 this is exactly [`crate::vec3::rotate`].
#[inline]
pub fn rotate_xyz<R: DiffReal>(v: V3<R>, phix: R, phiy: R, phiz: R) -> V3<R> {
    let [mut x, mut y, mut z] = v;
    if !phix.is_const_zero() {
        let (s, c) = (phix.sin(), phix.cos());
        let ny = y * c + z * (-s);
        let nz = y * s + z * c;
        y = ny;
        z = nz;
    }
    if !phiy.is_const_zero() {
        let (s, c) = (phiy.sin(), phiy.cos());
        let nx = x * c + y * R::zero() + z * s;
        let nz = x * (-s) + y * R::zero() + z * c;
        x = nx;
        z = nz;
    }
    if !phiz.is_const_zero() {
        let (s, c) = (phiz.sin(), phiz.cos());
        let nx = x * c + y * (-s);
        let ny = x * s + y * c;
        x = nx;
        y = ny;
    }
    [x, y, z]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotate_xyz_is_vec3_rotate_in_f64() {
        let v = [0.3, -0.7, 0.2];
        for (a, b, c) in [(0.1, -0.4, 0.9), (0.0, 0.5, 0.0), (0.0, 0.0, 0.0), (-0.0, 1.0, -0.0)] {
            let r = rotate_xyz(v, a, b, c);
            let e = crate::vec3::rotate(v, a, b, c);
            assert_eq!(r.map(f64::to_bits), e.map(f64::to_bits));
        }
    }
}
