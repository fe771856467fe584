//! Per-pixel physics: lattice transforms and polarization.

pub mod lattice;
pub mod polarization;

pub use lattice::{sinc3, sincg};
pub use polarization::polarization_factor;
