//! Render kernels: one per backend, all reading a [`crate::setup::Plan`].

pub mod backend;
pub(crate) mod background;
pub mod cpu;
pub mod interrupt;
pub mod kernel;
pub(crate) mod rows;
pub(crate) mod samples;
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd;
pub mod trace;

pub use backend::{Backend, BackendError, Cpu};
pub use background::fast_amorphous_image;
pub use cpu::{
    put_first_sweep, render, render_as, render_into, simd_level, Precision, RenderInfo,
    RenderOptions, Rendered, SimdLevel,
};
pub use rows::Pixel;
