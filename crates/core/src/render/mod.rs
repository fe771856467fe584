//! Render kernels: one per backend, all reading a [`crate::setup::Plan`].

pub mod cpu;
pub mod kernel;

pub use cpu::{render, RenderOptions, RenderOutput};
