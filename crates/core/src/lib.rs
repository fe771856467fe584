//! nanobragg-core: the physics of nanoBragg, resolved once into a plan and
//! rendered by per-backend kernels.
//!
//! The flow is [`config::SimConfig`] (what the user gave) →
//! [`setup::Plan`] (flat arrays in SI units, everything that does not depend on
//! the pixel) → [`render`] (one kernel per backend writing an output slice).
//! Nothing here prints; the CLI reports what [`setup::Plan`] records.
#![warn(missing_docs)]

pub mod amorphous;
pub mod config;
pub mod crystal;
pub mod diff;
pub mod error;
pub mod experiment;
pub mod geometry;
pub mod memory;
pub mod model;
pub mod noise;
pub mod noise_stream;
pub mod param;
pub mod philox;
pub mod physics;
pub mod psf;
pub mod psf_convolution;
pub mod real;
pub mod render;
pub mod response;
pub mod rng;
pub mod setup;
pub mod sf;
pub mod source;
pub mod stats;
pub mod units;
pub mod vec3;

pub use config::SimConfig;
pub use error::Error;
pub use experiment::Experiment;
pub use real::Real;
