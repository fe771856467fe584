//! The one interface every renderer implements: a resolved [`Plan`], a
//! [`Precision`] and an output slice. The pipeline picks a backend
//! (`-device`) and never needs to know which one it holds.

use super::cpu::{self, Precision, RenderInfo, RenderOptions};
use crate::setup::Plan;

/// Why a backend could not render (the CPU backend never fails).
#[derive(Debug)]
pub struct BackendError {
    /// The backend's name, e.g. "cuda".
    pub backend: &'static str,
    /// What went wrong.
    pub msg: String,
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.backend, self.msg)
    }
}

impl std::error::Error for BackendError {}

/// A device that renders the float image of a plan.
pub trait Backend {
    /// Short name for reports and errors ("cpu", "cuda").
    fn name(&self) -> &'static str;

    /// Renders `plan` in `precision` into `image` (`fpixels * spixels`
    /// values, fast index fastest). Every pixel is written: those outside the
    /// ROI or under the mask get 0.
    fn render_into(
        &self,
        plan: &Plan,
        precision: Precision,
        image: &mut [f32],
    ) -> Result<RenderInfo, BackendError>;
}

/// The CPU backend: SIMD kernels chosen at run time, on `threads` threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// Render options (threads, SIMD level; the precision and row
    /// statistics are the caller's).
    pub opts: RenderOptions,
}

impl Backend for Cpu {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn render_into(
        &self,
        plan: &Plan,
        precision: Precision,
        image: &mut [f32],
    ) -> Result<RenderInfo, BackendError> {
        Ok(cpu::render_into(plan, RenderOptions { precision, row_stats: true, ..self.opts }, image))
    }
}
