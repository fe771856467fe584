//! Exact derivatives of every pixel by continuous parameters.
//!
//! Setup and the physics kernel are written once, generic over the number
//! type; instantiated with dual numbers ([`crate::real::dual`]) they carry
//! derivatives through the same code that renders the image:
//! - [`param`]: the parameters ([`Param`], named like the flags) and the
//!   perturbations ([`Deltas`]) setup adds where each parameter enters;
//! - [`dual`]: the dual numbers ([`Dual`], [`Dense64`], [`Dense32`],
//!   [`HyperDual64`]) and their seeding ([`Seeded`]);
//! - [`leaves`]: the numbers the kernel reads, computed in any [`DiffReal`];
//! - [`jacobian`]: derivative images through the exact render kernel, in
//!   f64 or f32 ([`crate::render::Precision`]);
//! - [`hessian`]: second-derivative images (hyper-dual numbers);
//! - [`structure_factors`]: derivatives of a weighted image by every
//!   structure factor of the grid;
//! - [`loss`]: a loss of the image against an observed one, its gradient and
//!   the Fisher information (standard errors).
//!
//! See docs/derivatives.md.

pub(crate) mod contract;
pub mod dual;
pub mod hessian;
pub mod jacobian;
// the f32 renderer over its lanes is x86-only (see render_dense32)
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) mod lanes;
pub mod leaves;
pub mod loss;
pub mod param;
pub mod structure_factors;

pub use dual::{Dense32, Dense64, DiffReal, Dual, HyperDual64, Seeded};
pub use hessian::{hessian_of, hessian_with, Hessian};
pub use jacobian::{
    jacobian, jacobian_in, jacobian_of, jacobian_with, jvp_of, vjp_of, Jacobian, Products, Weights,
};
pub use leaves::Leaves;
pub use loss::{loss_gradient, LossEval, LossKind};

pub use crate::vec3::rotate_xyz;
pub use param::{Deltas, Param};
pub use structure_factors::{sf_vjp_of, SfProducts};
