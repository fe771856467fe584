//! nanobragg-cuda: the NVIDIA GPU backend of nanobragg.
//!
//! The per-pixel physics of [`nanobragg_core::render::kernel`] is ported to a
//! CUDA C kernel (`src/kernel.cu`, templated on `float`/`double`) that is
//! compiled at run time with NVRTC, after the declarations generated from
//! Rust (the parameter block and the shared constants, [`kernel_source`]). The CUDA driver and NVRTC are loaded
//! dynamically (via `cudarc`), so nothing CUDA is needed to build the crate,
//! and without the `cuda` cargo feature the crate is a stub whose entry points
//! return [`CudaError::NotBuilt`].
//!
//! * [`render`] renders one [`Plan`] and returns the same
//!   [`Rendered`] as the CPU path (image, solid-angle sum, interpolation
//!   fallback point), including nanoBragg.c's interpolation fallback rule.
//! * [`GpuRenderer`] keeps a context, the compiled module and the plan's static
//!   arrays on the device and renders many shots that differ only in crystal
//!   orientation ([`Shot`]), overlapping copy-back with compute.
//! * [`Cuda`] is the [`Backend`] the pipeline renders through.
//! * With the `host-kernel` feature, [`host::render`] compiles the same
//!   kernel source as C++ with the system compiler and runs it on the CPU
//!   (no GPU, no CUDA): the tests hold it to the CPU's exact render bit for bit.
#![warn(missing_docs)]

use nanobragg_core::render::{put_first_sweep, Backend, BackendError, Precision, RenderInfo};
use nanobragg_core::setup::Plan;

pub use nanobragg_core::render::Rendered;

#[cfg(feature = "host-kernel")]
pub mod host;
mod params;
pub use params::{generated_declarations, kernel_source, KERNEL_CU};

#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
pub use gpu::{device_info, render, select_device, GpuRenderer};

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{device_info, render, select_device, GpuRenderer};

/// The kernel's scalar type for a precision: "f32" (Fast32) or "f64"
/// (Fast64 and Exact64 both run the f64 kernel, nanoBragg.c's formulas).
pub fn kernel_type_name(precision: Precision) -> &'static str {
    if params::single(precision) {
        "f32"
    } else {
        "f64"
    }
}

/// The CUDA backend: [`render`] on device 0, through the core's [`Backend`]
/// interface.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cuda;

impl Backend for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn render_into(
        &self,
        plan: &Plan,
        precision: Precision,
        image: &mut [f32],
    ) -> Result<RenderInfo, BackendError> {
        finish(self.name(), render(plan, precision), plan, precision, image)
    }
}

/// The kernel's image of `plan` (`rendered` by the backend named
/// `backend`) as every renderer leaves it, into `image`: with the amorphous
/// background, then nanoBragg.c's first phi sweep put in
/// ([`put_first_sweep`]), which the kernel does not render.
pub(crate) fn finish(
    backend: &'static str,
    rendered: Result<Rendered<f32>, CudaError>,
    plan: &Plan,
    precision: Precision,
    image: &mut [f32],
) -> Result<RenderInfo, BackendError> {
    let out = rendered.map_err(|e| BackendError { backend, msg: e.to_string() })?;
    if out.image.len() != image.len() {
        return Err(BackendError {
            backend,
            msg: format!("image holds {} values, the plan {}", image.len(), out.image.len()),
        });
    }
    // (the kernel gathers no row statistics: callers take them from the image)
    let (rendered, info) = out.into_parts();
    image.copy_from_slice(&rendered);
    nanobragg_core::render::cpu::add_background(plan, precision, image);
    put_first_sweep(plan, precision, image, None);
    Ok(info)
}

/// Errors of the GPU backend. None of the entry points panic.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// The crate was compiled without the `cuda` feature.
    #[error("nanobragg was built without CUDA support (rebuild with --features cuda)")]
    NotBuilt,
    /// libcuda could not be loaded (no NVIDIA driver on this machine).
    #[error("no CUDA driver found (libcuda.so could not be loaded): {0}")]
    NoDriver(String),
    /// The driver loaded but no usable device was found.
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    /// libnvrtc could not be loaded.
    #[error(
        "NVRTC (libnvrtc.so) not found: {0}; install the CUDA toolkit or the nvidia-cuda-nvrtc \
         wheel and add its lib directory to LD_LIBRARY_PATH, or set NANOBRAGG_NVRTC to the library file"
    )]
    NoNvrtc(String),
    /// NVRTC rejected the kernel source.
    #[error("CUDA kernel compilation failed: {0}")]
    Compile(String),
    /// A CUDA driver call failed.
    #[error("CUDA error: {0}")]
    Driver(String),
    /// The plan or the shots cannot be rendered on the GPU.
    #[error("invalid GPU render input: {0}")]
    Invalid(String),
    /// The host build of the kernel (feature `host-kernel`) failed to
    /// compile or to run.
    #[error("host build of the CUDA kernel: {0}")]
    HostKernel(String),
}

/// The interpolation fallback point from the kernel's `info` buffer (h, k, l,
/// h0, k0, l0, found), for a plan that starts with tricubic interpolation.
#[cfg_attr(not(any(feature = "cuda", feature = "host-kernel")), allow(dead_code))]
pub(crate) fn fallback_from_info(interpolate: bool, info: &[f64]) -> Option<([f64; 3], [i64; 3])> {
    (interpolate && info[6] == 1.0)
        .then(|| ([info[0], info[1], info[2]], [info[3] as i64, info[4] as i64, info[5] as i64]))
}

/// What [`device_info`] reports about the GPU that would be used.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// Device name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Total device memory (bytes).
    pub total_mem: usize,
}

/// One crystal orientation to render with a [`GpuRenderer`]: the real-space
/// cell for every phi step × mosaic domain (as [`Plan::cells_m`]) and the
/// reciprocal vectors the Gaussian and top-hat spot shapes use (as
/// `plan.cell.a_star` and friends, which nanoBragg.c does not rotate with phi
/// or mosaic).
#[derive(Debug, Clone, PartialEq)]
pub struct Shot {
    /// a, b, c (m) per phi step × mosaic domain, phi outer; nine values each.
    pub cells_m: Vec<[f64; 9]>,
    /// a*, b*, c* (1/m).
    pub recip: [[f64; 3]; 3],
}

impl Shot {
    /// The plan's own orientation.
    pub fn from_plan(plan: &Plan) -> Shot {
        Shot {
            cells_m: plan.cells_m.clone(),
            recip: [plan.cell.a_star, plan.cell.b_star, plan.cell.c_star],
        }
    }

    /// The plan's crystal turned by the row-major rotation `u` after the
    /// misset, before the phi and mosaic rotations: the orientation of
    /// [`Plan::rotated`], which is the plan the CPU renders for this shot
    /// (and whose C first-sweep pixel, [`put_first_sweep`], a batch leaves
    /// to the caller).
    pub fn rotated(plan: &Plan, u: &[f64; 9]) -> Shot {
        Shot::from_plan(&plan.rotated(u))
    }
}

/// Checks a plan can be rendered by the kernel (sizes fit its index types).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn check_plan(plan: &Plan) -> Result<(), CudaError> {
    let d = &plan.detector;
    let npix = d
        .fpixels
        .checked_mul(d.spixels)
        .ok_or_else(|| CudaError::Invalid("detector too large".into()))?;
    if npix == 0 {
        return Err(CudaError::Invalid("detector has no pixels".into()));
    }
    if npix >= u32::MAX as usize || d.fpixels > i32::MAX as usize || d.spixels > i32::MAX as usize {
        return Err(CudaError::Invalid(format!(
            "{}x{} pixels is too many for one GPU image",
            d.fpixels, d.spixels
        )));
    }
    if plan.corrected {
        // the GPU kernel applies nanoBragg.c's per-pixel factors
        return Err(CudaError::Invalid(
            "-corrected is not implemented on the GPU (its kernel reproduces nanoBragg.c's \
             physics only): use -device cpu"
                .into(),
        ));
    }
    if plan.sources.list.is_empty() || plan.cells_m.is_empty() {
        return Err(CudaError::Invalid("no sources or no crystal orientations".into()));
    }
    if plan.oversample == 0
        || plan.oversample > i32::MAX as usize
        || plan.detector.thicksteps > i32::MAX as usize
    {
        return Err(CudaError::Invalid("oversample or thicksteps out of range".into()));
    }
    if let Some(m) = &plan.mask {
        if m.len() != npix {
            return Err(CudaError::Invalid(format!(
                "mask has {} pixels, detector {}",
                m.len(),
                npix
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobragg_core::config::SimConfig;
    use nanobragg_core::setup::SetupSeeds;

    fn plan(mosaic: bool) -> Plan {
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
        cfg.crystal.misset = nanobragg_core::config::Misset::Angles([10.0, 20.0, 30.0]);
        cfg.crystal.na = 5.0;
        cfg.crystal.nb = 5.0;
        cfg.crystal.nc = 5.0;
        cfg.crystal.phi0_deg = 3.0;
        cfg.crystal.osc_deg = 2.0;
        cfg.crystal.phisteps = 3;
        if mosaic {
            cfg.crystal.mosaic_deg = 0.5;
            cfg.crystal.mosaic_domains = 4;
        }
        cfg.sf.default_f = 100.0;
        cfg.detector.fpixels = 16;
        cfg.detector.spixels = 16;
        Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap()
    }

    #[test]
    fn identity_rotation_reproduces_the_plan_cells() {
        for mosaic in [false, true] {
            let p = plan(mosaic);
            let id = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
            let s = Shot::rotated(&p, &id);
            assert_eq!(s.cells_m.len(), p.cells_m.len());
            assert_eq!(s, Shot::from_plan(&p));
        }
    }

    #[test]
    fn rotation_keeps_cell_lengths() {
        let p = plan(true);
        let (c, s) = (0.3f64.cos(), 0.3f64.sin());
        let u = [c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0];
        let shot = Shot::rotated(&p, &u);
        for (x, y) in shot.cells_m.iter().zip(&p.cells_m) {
            let n = |v: &[f64]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
            assert!((n(&x[0..3]) - n(&y[0..3])).abs() < 1e-20);
            assert!(x != y);
        }
    }

    #[test]
    fn plan_checks() {
        let p = plan(false);
        assert!(check_plan(&p).is_ok());
        let mut bad = p.clone();
        bad.mask = Some(vec![1; 3]);
        assert!(matches!(check_plan(&bad), Err(CudaError::Invalid(_))));
        // the GPU kernel has nanoBragg.c's physics only
        let mut corrected = p.clone();
        corrected.corrected = true;
        match check_plan(&corrected) {
            Err(CudaError::Invalid(msg)) => assert!(msg.contains("-corrected"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kernel_source_exports_both_precisions() {
        let src = kernel_source();
        assert!(src.contains("nb_render_f32"));
        assert!(src.contains("nb_render_f64"));
        assert!(src.starts_with(&generated_declarations()));
        assert_eq!(kernel_type_name(Precision::Exact64), "f64");
        assert_eq!(kernel_type_name(Precision::Fast32), "f32");
    }

    #[test]
    fn backend_reports_errors() {
        let p = plan(false);
        let mut image = vec![0.0; 3];
        // without a device (or the feature) the render fails; with one, the size check does
        let e = Cuda.render_into(&p, Precision::Exact64, &mut image).unwrap_err();
        assert_eq!(e.backend, "cuda");
        assert_eq!(Cuda.name(), "cuda");
    }
}
