//! Per-pixel physics: lattice transforms and polarization.

pub mod lattice;
pub mod polarization;

pub use lattice::{sinc3, sinc3_fast, sincg, sincg_pi_reduced, Grating, GratingForm};
pub use polarization::{
    polarization_factor, polarization_factor_in, polarization_factor_with, PolarBasis, Polarization,
};
