//! Built without the `cuda` feature: every entry point reports
//! [`CudaError::NotBuilt`].

use crate::{CudaError, DeviceInfo, Shot};
use nanobragg_core::render::{Precision, Rendered};
use nanobragg_core::setup::Plan;
use std::convert::Infallible;

/// Nothing to select without the `cuda` feature.
pub fn select_device(_ordinal: usize) {}

/// The GPU that would be used (always [`CudaError::NotBuilt`] in this build).
pub fn device_info() -> Result<DeviceInfo, CudaError> {
    Err(CudaError::NotBuilt)
}

/// Render a plan on the GPU (always [`CudaError::NotBuilt`] in this build).
pub fn render(_plan: &Plan, _precision: Precision) -> Result<Rendered<f32>, CudaError> {
    Err(CudaError::NotBuilt)
}

/// Batch renderer (cannot be constructed in this build).
#[derive(Debug)]
pub struct GpuRenderer {
    never: Infallible,
}

impl GpuRenderer {
    /// Always [`CudaError::NotBuilt`] in this build.
    pub fn new(_plan: &Plan, _precision: Precision) -> Result<GpuRenderer, CudaError> {
        Err(CudaError::NotBuilt)
    }

    /// Name of the device.
    pub fn device_name(&self) -> &str {
        match self.never {}
    }

    /// The precision the renderer computes in.
    pub fn precision(&self) -> Precision {
        match self.never {}
    }

    /// Render the plan's own orientation.
    pub fn render(&mut self) -> Result<Rendered<f32>, CudaError> {
        match self.never {}
    }

    /// Render one shot and leave the image on the device.
    pub fn render_to_device(&mut self, _shot: Option<&Shot>) -> Result<(), CudaError> {
        match self.never {}
    }

    /// Copy the last image rendered by [`GpuRenderer::render_to_device`] to the host.
    pub fn download(&mut self) -> Result<Vec<f32>, CudaError> {
        match self.never {}
    }

    /// As [`GpuRenderer::download`], into a reused vector.
    pub fn download_into(&mut self, _image: &mut Vec<f32>) -> Result<(), CudaError> {
        match self.never {}
    }

    /// Render shots, handing each image to `sink` in order.
    pub fn render_batch_with<F: FnMut(usize, &[f32])>(
        &mut self,
        _shots: &[Shot],
        _sink: F,
    ) -> Result<(), CudaError> {
        match self.never {}
    }

    /// Render shots and collect their images.
    pub fn render_batch(&mut self, _shots: &[Shot]) -> Result<Vec<Vec<f32>>, CudaError> {
        match self.never {}
    }

    /// Render shots given as cell lists only (reciprocal vectors from the plan).
    pub fn render_batch_cells(
        &mut self,
        _cells_per_shot: &[Vec<[f64; 9]>],
    ) -> Result<Vec<Vec<f32>>, CudaError> {
        match self.never {}
    }
}
