//! The dual numbers derivatives are carried in ([`crate::real::dual`]: one
//! family for scalars, SIMD lanes and second derivatives) and their seeding
//! by parameters.

pub use crate::real::dual::{hyper, Dense32, Dense64, Dual, HyperDual64, Seeded};
pub use crate::real::DiffReal;

use super::param::{Deltas, Param};

/// Deltas seeding `params[i]` along direction `i` of `R`.
pub(crate) fn seeded<R: Seeded>(params: &[Param]) -> Deltas<R> {
    let mut deltas = Deltas::<R>::zero();
    for (i, &p) in params.iter().enumerate() {
        deltas.set(p, R::seed(0.0, i));
    }
    deltas
}
