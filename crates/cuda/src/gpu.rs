//! The CUDA implementation (feature `cuda`).

use crate::params::{
    base_params, kernel_names, kernel_source, pack_cells, pack_static, single, Params, Variant,
};
use crate::{check_plan, fallback_from_info, CudaError, DeviceInfo, Shot};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, DriverError,
    LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};
use nanobragg_core::render::{Precision, RenderInfo, Rendered};
use nanobragg_core::setup::{Interpolation, Plan};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

// SAFETY: plain #[repr(C)] data of f64/i64/i32/f32 without padding; the C
// struct is generated from it, with a static_assert of its size.
unsafe impl DeviceRepr for Params {}

const BLOCK: u32 = 128;
const MODE_FIRST: i32 = 0;
const MODE_RERUN: i32 = 1;
const MODE_PROBE: i32 = 2;

fn drv(e: DriverError) -> CudaError {
    CudaError::Driver(e.to_string())
}

/// Run `f`, turning a panic inside cudarc (missing symbol, failed load) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, CudaError>) -> Result<T, CudaError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(CudaError::Driver(format!("CUDA library call panicked: {msg}")))
        }
    }
}

/// Places where libnvrtc may be when it is not on the loader path: the CUDA
/// toolkit and the `nvidia-cuda-nvrtc` Python wheels.
fn nvrtc_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("NANOBRAGG_NVRTC") {
        out.push(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/lib/x86_64-linux-gnu",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut roots: Vec<PathBuf> =
        ["/usr/local/lib", "/usr/lib", "/usr/local/lib64", "/opt/conda/lib"]
            .iter()
            .map(PathBuf::from)
            .collect();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(Path::new(&v).join("lib"));
        }
    }
    if let Some(h) = std::env::var_os("HOME") {
        roots.push(Path::new(&h).join(".local/lib"));
    }
    let list = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    for root in &roots {
        for py in list(root) {
            if !py.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3")) {
                continue;
            }
            for sp in ["site-packages", "dist-packages"] {
                for pkg in list(&py.join(sp).join("nvidia")) {
                    dirs.push(pkg.join("lib"));
                }
            }
        }
    }
    for d in dirs {
        let mut libs: Vec<PathBuf> = list(&d)
            .into_iter()
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libnvrtc.so"))
            })
            .collect();
        libs.reverse(); // libnvrtc.so.13 before libnvrtc.so.12 before libnvrtc.so
        out.extend(libs);
    }
    out
}

/// Load libcuda and libnvrtc once per process.
fn load_libraries() -> Result<(), CudaError> {
    static LOADED: OnceLock<Result<(), (bool, String)>> = OnceLock::new();
    let r = LOADED.get_or_init(|| {
        // SAFETY: loading the NVIDIA libraries runs their initialisers only.
        let driver =
            catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false);
        if !driver {
            return Err((true, "libcuda.so.1 is not on the library path".into()));
        }
        // SAFETY: as above, for libnvrtc.
        let present =
            || catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false);
        if std::env::var_os("NANOBRAGG_NVRTC").is_some() || !present() {
            let mut tried = Vec::new();
            for path in nvrtc_candidates() {
                // NVRTC dlopens its builtins library by name at compile time: load it
                // from the same folder first so that lookup finds it.
                if let Some(dir) = path.parent() {
                    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                        let name = entry.file_name();
                        let name = name.to_string_lossy();
                        if name.starts_with("libnvrtc-builtins.so") && !name.contains(".alt") {
                            // SAFETY: as above; the library stays loaded for the process.
                            if let Ok(lib) = unsafe { libloading::Library::new(entry.path()) } {
                                std::mem::forget(lib);
                            }
                        }
                    }
                }
                // SAFETY: as above; the library stays loaded for the process.
                if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
                    std::mem::forget(lib);
                    if present() {
                        return Ok(());
                    }
                }
                tried.push(path.display().to_string());
            }
            if !present() {
                return Err((
                    false,
                    format!("searched the loader path and {} other files", tried.len()),
                ));
            }
        }
        Ok(())
    });
    match r {
        Ok(()) => Ok(()),
        Err((true, m)) => Err(CudaError::NoDriver(m.clone())),
        Err((false, m)) => Err(CudaError::NoNvrtc(m.clone())),
    }
}

fn context() -> Result<Arc<CudaContext>, CudaError> {
    load_libraries()?;
    let n = CudaContext::device_count().map_err(|e| CudaError::NoDevice(e.to_string()))?;
    if n <= 0 {
        return Err(CudaError::NoDevice("the driver reports no CUDA devices".into()));
    }
    let ordinal = DEVICE.load(std::sync::atomic::Ordering::Relaxed) % n as usize;
    CudaContext::new(ordinal).map_err(|e| CudaError::NoDevice(e.to_string()))
}

/// The GPU a process renders on, modulo the devices visible (see [`select_device`]).
static DEVICE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Renders on GPU `ordinal` (modulo the number visible) from the next
/// context on: an MPI rank takes the GPU of its local rank.
pub fn select_device(ordinal: usize) {
    DEVICE.store(ordinal, std::sync::atomic::Ordering::Relaxed);
}

/// The GPU that [`render`] and [`GpuRenderer`] use (device 0, or the one
/// [`select_device`] chose; `CUDA_VISIBLE_DEVICES` also selects).
pub fn device_info() -> Result<DeviceInfo, CudaError> {
    guarded(|| {
        let ctx = context()?;
        Ok(DeviceInfo {
            name: ctx.name().map_err(drv)?,
            compute_capability: ctx.compute_capability().map_err(drv)?,
            total_mem: ctx.total_mem().map_err(drv)?,
        })
    })
}

/// `NANOBRAGG_CUDA_MINBLOCKS` for one kernel ("f32", "fast", "f64" or
/// "simple"): "N" (all kernels) or e.g. "fast=8,simple=6".
fn min_blocks_override(kernel: &str) -> Option<u32> {
    let v = std::env::var("NANOBRAGG_CUDA_MINBLOCKS").ok()?;
    v.split(',')
        .find_map(|part| match part.split_once('=') {
            Some((k, n)) if k.trim() == kernel => n.trim().parse().ok(),
            Some(_) => None,
            None => part.trim().parse().ok(),
        })
        .filter(|&n: &u32| (1..=16).contains(&n))
}

/// PTX for one kernel variant and architecture, compiled once per process.
fn ptx(variant: Variant, cc: (i32, i32)) -> Result<String, CudaError> {
    type PtxCache = Mutex<HashMap<(Variant, (i32, i32)), String>>;
    static CACHE: OnceLock<PtxCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = map.get(&(variant, cc)) {
        return Ok(p.clone());
    }
    let single = variant.single;
    let upper = if single { "F32" } else { "F64" };
    let mut options =
        vec![format!("--gpu-architecture=compute_{}{}", cc.0, cc.1), format!("-DNB_ONLY_{upper}")];
    if single {
        options.push(format!("-DNB_FAST_DEG={}", variant.deg));
        options.push(format!("-DNB_FAST_EVEN={}", i32::from(variant.even)));
        options.push(format!("-DNB_FAST_GRID={}", i32::from(variant.grid)));
    }
    // Tuning: minimum resident blocks per SM (caps the registers), e.g.
    // NANOBRAGG_CUDA_MINBLOCKS=8 (every kernel) or "fast=8,simple=6" (kernels
    // f32, fast, f64, simple).
    let kernels: &[&str] = if single { &["f32", "fast"] } else { &["f64", "simple"] };
    for &k in kernels {
        if let Some(v) = min_blocks_override(k) {
            options.push(format!("-DNB_MINB_{}={v}", k.to_uppercase()));
        }
    }
    let opts = CompileOptions {
        // f64 keeps every product and sum separately rounded, as the CPU kernel;
        // f32 lets the compiler fuse multiply-adds (faster, and no less accurate).
        fmad: Some(single),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        options,
        name: Some("nanobragg_kernel.cu".into()),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(kernel_source(), opts).map_err(|e| match e {
        CompileError::CompileError { log, .. } => {
            CudaError::Compile(log.to_string_lossy().into_owned())
        }
        other => CudaError::Compile(other.to_string()),
    })?;
    let src = ptx.to_src();
    map.insert((variant, cc), src.clone());
    Ok(src)
}

/// The loaded module for one kernel variant on the context's device, loaded
/// once per process (loading JIT-compiles the PTX).
fn module(ctx: &Arc<CudaContext>, variant: Variant) -> Result<Arc<CudaModule>, CudaError> {
    type ModuleCache = Mutex<HashMap<(usize, Variant), Arc<CudaModule>>>;
    static MODULES: OnceLock<ModuleCache> = OnceLock::new();
    let cache = MODULES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = map.get(&(ctx.ordinal(), variant)) {
        return Ok(m.clone());
    }
    let cc = ctx.compute_capability().map_err(drv)?;
    let module = ctx.load_module(Ptx::from_src(ptx(variant, cc)?)).map_err(drv)?;

    map.insert((ctx.ordinal(), variant), module.clone());
    Ok(module)
}

/// Render a plan on the GPU: the kernel's image, solid-angle sum and
/// interpolation fallback point, which are `nanobragg_core::render::render`'s
/// (f64) or `render_as::<f32>`'s (f32) up to the rounding of the device's
/// math library, before the amorphous background and nanoBragg.c's first phi
/// sweep ([`crate::Cuda`]'s `render_into` adds both).
pub fn render(plan: &Plan, precision: Precision) -> Result<Rendered<f32>, CudaError> {
    let mut r = GpuRenderer::new(plan, precision)?;
    // one image: no page-locked buffer (pinning 4 bytes per pixel costs more
    // than it saves); the host vector is faulted in while the GPU computes
    r.render_full(false)
}

/// Fill `dst` with `src` (or zeros) using several threads: a fresh vector's
/// pages are faulted in in parallel, which dominates copying a large image.
fn fill_parallel(dst: &mut Vec<f32>, src: Option<&[f32]>, n: usize) {
    dst.clear();
    dst.reserve(n);
    let spare = &mut dst.spare_capacity_mut()[..n];
    let threads = if n < (1 << 20) {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |t| t.get()).min(16)
    };
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (i, part) in spare.chunks_mut(chunk).enumerate() {
            let src = src.map(|s| &s[i * chunk..i * chunk + part.len()]);
            let mut work = move || match src {
                Some(s) => part.iter_mut().zip(s).for_each(|(d, &v)| {
                    d.write(v);
                }),
                None => part.iter_mut().for_each(|d| {
                    d.write(0.0);
                }),
            };
            if threads == 1 {
                work();
            } else {
                scope.spawn(work);
            }
        }
    });
    // SAFETY: every one of the first n elements was written above.
    unsafe { dst.set_len(n) };
}

fn launch_cfg(threads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((threads as u32).div_ceil(BLOCK), 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Per-stream buffers: one shot in flight on each of two streams.
struct Slot {
    stream: Arc<CudaStream>,
    cells: CudaSlice<u8>,
    image: CudaSlice<f32>,
    first: CudaSlice<u32>,
    info: CudaSlice<f64>,
    pinned: Option<PinnedHostSlice<f32>>,
}

/// A GPU renderer for one plan: context, compiled module and the plan's static
/// arrays (sources, structure factors, mask) stay on the device; shots that
/// differ in crystal orientation are rendered with one cell upload each.
pub struct GpuRenderer {
    ctx: Arc<CudaContext>,
    func: CudaFunction,
    /// Plans without -oversample_* flags or tricubic interpolation: the
    /// specialised first-pass kernel (f32: grouped sources; f64: the C loop
    /// for a square crystal).
    fast: Option<CudaFunction>,
    row_omega: CudaFunction,
    precision: Precision,
    name: String,
    base: Params,
    npix: usize,
    ncells: usize,
    interpolate: bool,
    plan_shot: Shot,
    sources: CudaSlice<u8>,
    grid: CudaSlice<u8>,
    mask: CudaSlice<u16>,
    omega: CudaSlice<f64>,
    omega_full: bool,
    rows: CudaSlice<f64>,
    slots: Vec<Slot>,
}

impl std::fmt::Debug for GpuRenderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuRenderer")
            .field("device", &self.name)
            .field("precision", &self.precision)
            .field("npix", &self.npix)
            .finish()
    }
}

impl GpuRenderer {
    /// Set up the device for a plan: compile (once per process) and load the
    /// kernel, upload sources, structure factors and mask.
    pub fn new(plan: &Plan, precision: Precision) -> Result<GpuRenderer, CudaError> {
        check_plan(plan)?;
        guarded(|| Self::new_inner(plan, precision))
    }

    fn new_inner(plan: &Plan, precision: Precision) -> Result<GpuRenderer, CudaError> {
        let ctx = context()?;
        let name = ctx.name().map_err(drv)?;
        let base = base_params(plan);
        let single = single(precision);
        let module = module(&ctx, Variant::new(&base, single))?;
        let (fast, general) = kernel_names(&base, single);
        let fast = match fast {
            Some(name) => Some(module.load_function(name).map_err(drv)?),
            None => None,
        };
        let func = module.load_function(general).map_err(drv)?;
        let row_omega = module.load_function("nb_row_omega").map_err(drv)?;
        let stream = ctx.default_stream();

        let d = &plan.detector;
        let npix = d.fpixels * d.spixels;
        let (sources, grid) = pack_static(plan, single);
        let sources = stream.clone_htod(&sources).map_err(drv)?;
        let grid = stream.clone_htod(&grid).map_err(drv)?;
        let mask = match &plan.mask {
            Some(m) => stream.clone_htod(m).map_err(drv)?,
            None => stream.alloc_zeros::<u16>(1).map_err(drv)?,
        };
        let ncells = plan.cells_m.len();
        let esize = if single { 4 } else { 8 };
        let mut slots = Vec::with_capacity(2);
        for _ in 0..2 {
            let s = ctx.new_stream().map_err(drv)?;
            slots.push(Slot {
                cells: s.alloc_zeros::<u8>(ncells * 9 * esize).map_err(drv)?,
                image: s.alloc_zeros::<f32>(npix).map_err(drv)?,
                first: s.alloc_zeros::<u32>(1).map_err(drv)?,
                info: s.alloc_zeros::<f64>(7).map_err(drv)?,
                pinned: None,
                stream: s,
            });
        }
        let omega = stream.alloc_zeros::<f64>(1).map_err(drv)?;
        let rows = stream.alloc_zeros::<f64>(d.spixels).map_err(drv)?;
        stream.synchronize().map_err(drv)?;
        Ok(GpuRenderer {
            ctx,
            func,
            fast,
            row_omega,
            precision,
            name,
            base,
            npix,
            ncells,
            interpolate: plan.interpolation == Interpolation::Tricubic,
            plan_shot: Shot::from_plan(plan),
            sources,
            grid,
            mask,
            omega,
            omega_full: false,
            rows,
            slots,
        })
    }

    /// Name of the device.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// The precision the renderer computes in (Fast64 and Exact64 both run
    /// the f64 kernel).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    fn check_shot(&self, shot: &Shot) -> Result<(), CudaError> {
        if shot.cells_m.len() != self.ncells {
            return Err(CudaError::Invalid(format!(
                "shot has {} phi x mosaic cells, the plan {}",
                shot.cells_m.len(),
                self.ncells
            )));
        }
        Ok(())
    }

    /// Queue one shot on slot `k`: cell upload, first pass, and (tricubic
    /// plans) the nearest-neighbour re-render of pixels after the first
    /// fallback; optionally the fallback probe and the solid-angle row sums.
    fn enqueue(&mut self, k: usize, shot: &Shot, full: bool) -> Result<(), CudaError> {
        let cells = pack_cells(&shot.cells_m, single(self.precision));
        let mut p = self.base;
        [p.a_star, p.b_star, p.c_star] = shot.recip;
        p.write_omega = full as i32;
        if full && !self.omega_full {
            self.omega = self.slots[0].stream.alloc_zeros::<f64>(self.npix).map_err(drv)?;
            self.omega_full = true;
        }
        let npix = self.npix;
        let interpolate = self.interpolate;
        let Self { func, fast, row_omega, sources, grid, mask, omega, rows, slots, .. } = self;
        let slot = &mut slots[k];
        let stream = slot.stream.clone();
        stream.memcpy_htod(&cells, &mut slot.cells).map_err(drv)?;
        if interpolate {
            stream.memcpy_htod(&[u32::MAX], &mut slot.first).map_err(drv)?;
            if full {
                stream.memset_zeros(&mut slot.info).map_err(drv)?;
            }
        }
        let mut modes = vec![(MODE_FIRST, npix)];
        if interpolate {
            modes.push((MODE_RERUN, npix));
            if full {
                modes.push((MODE_PROBE, 1));
            }
        }
        for (mode, threads) in modes {
            let kernel = match (&*fast, mode) {
                (Some(f), MODE_FIRST) => f,
                _ => &*func,
            };
            let mut b = stream.launch_builder(kernel);
            b.arg(&p);
            b.arg(&slot.cells);
            b.arg(&*sources);
            b.arg(&*grid);
            b.arg(&*mask);
            b.arg(&mut slot.image);
            if full {
                b.arg(&mut *omega);
            } else {
                // not written: a read keeps the two streams independent
                b.arg(&*omega);
            }
            b.arg(&mut slot.first);
            b.arg(&mut slot.info);
            b.arg(&mode);
            // SAFETY: argument types and buffer sizes match nb_render_*: cells hold
            // ncells*9 scalars, sources nsources*6, grid the padded hkl grid (or one
            // value when has_grid is 0), mask npix (or one value when has_mask is 0),
            // image npix, omega npix when write_omega, first 1, info 7.
            unsafe { b.launch(launch_cfg(threads)) }.map_err(drv)?;
        }
        if full {
            let spixels = p.spixels;
            let fpixels = p.fpixels;
            let mut b = stream.launch_builder(row_omega);
            b.arg(&*omega);
            b.arg(&mut *rows);
            b.arg(&fpixels);
            b.arg(&spixels);
            // SAFETY: omega holds fpixels*spixels values, rows spixels.
            unsafe { b.launch(launch_cfg(spixels as usize)) }.map_err(drv)?;
        }
        Ok(())
    }

    /// Page-locked host buffer of slot `k` (allocated on first use).
    fn ensure_pinned(&mut self, k: usize) -> Result<(), CudaError> {
        if self.slots[k].pinned.is_none() {
            // SAFETY: the buffer is only read after a copy into it completed.
            let p =
                unsafe { self.ctx.alloc_pinned_with_flags::<f32>(self.npix, 0) }.map_err(drv)?;
            self.slots[k].pinned = Some(p);
        }
        Ok(())
    }

    /// Copy slot 0's image into `dst`: through its page-locked buffer (then
    /// a parallel host copy), or straight into `dst` (pageable, after faulting
    /// its pages in in parallel).
    fn copy_image(&mut self, dst: &mut Vec<f32>, pinned: bool) -> Result<(), CudaError> {
        let n = self.npix;
        if !pinned {
            if dst.len() != n {
                fill_parallel(dst, None, n);
            }
            let slot = &self.slots[0];
            slot.stream.memcpy_dtoh(&slot.image, dst).map_err(drv)?;
            return slot.stream.synchronize().map_err(drv);
        }
        self.ensure_pinned(0)?;
        let slot = &mut self.slots[0];
        let buf = slot.pinned.as_mut().expect("allocated");
        slot.stream.memcpy_dtoh(&slot.image, buf).map_err(drv)?;
        let host = buf.as_slice().map_err(drv)?;
        fill_parallel(dst, Some(host), n);
        Ok(())
    }

    /// Render the plan's own orientation: the full [`Rendered`].
    pub fn render(&mut self) -> Result<Rendered<f32>, CudaError> {
        self.render_full(true)
    }

    fn render_full(&mut self, pinned: bool) -> Result<Rendered<f32>, CudaError> {
        guarded(|| {
            let shot = self.plan_shot.clone();
            self.enqueue(0, &shot, true)?;
            let mut image = Vec::new();
            if !pinned {
                fill_parallel(&mut image, None, self.npix); // overlaps the kernel
            }
            self.copy_image(&mut image, pinned)?;
            let slot = &self.slots[0];
            let rows = slot.stream.clone_dtoh(&self.rows).map_err(drv)?;
            let info = slot.stream.clone_dtoh(&slot.info).map_err(drv)?;
            slot.stream.synchronize().map_err(drv)?;
            let omega_sum = rows.iter().sum();
            let interpolation_fallback = fallback_from_info(self.interpolate, &info);
            Ok(Rendered {
                image,
                info: RenderInfo { omega_sum, interpolation_fallback, rows: Vec::new() },
            })
        })
    }

    /// Render one shot (the plan's own orientation when `None`) and leave the
    /// image on the device; returns when it is finished. Fetch it with
    /// [`GpuRenderer::download`].
    pub fn render_to_device(&mut self, shot: Option<&Shot>) -> Result<(), CudaError> {
        guarded(|| {
            let shot = match shot {
                Some(s) => {
                    self.check_shot(s)?;
                    s.clone()
                }
                None => self.plan_shot.clone(),
            };
            self.enqueue(0, &shot, false)?;
            self.slots[0].stream.synchronize().map_err(drv)
        })
    }

    /// Copy the image of the last [`GpuRenderer::render_to_device`] to the host.
    pub fn download(&mut self) -> Result<Vec<f32>, CudaError> {
        let mut image = Vec::with_capacity(self.npix);
        self.download_into(&mut image)?;
        Ok(image)
    }

    /// As [`GpuRenderer::download`], into a reused vector (no allocation once
    /// it has the capacity).
    pub fn download_into(&mut self, image: &mut Vec<f32>) -> Result<(), CudaError> {
        guarded(|| self.copy_image(image, true))
    }

    /// Render shots and hand each image to `sink(index, image)` in order.
    /// Two streams alternate: while one shot's image is copied back (into
    /// pinned memory) and handed to `sink`, the next shot is computed.
    pub fn render_batch_with<F: FnMut(usize, &[f32])>(
        &mut self,
        shots: &[Shot],
        mut sink: F,
    ) -> Result<(), CudaError> {
        for s in shots {
            self.check_shot(s)?;
        }
        guarded(|| {
            self.ensure_pinned(0)?;
            self.ensure_pinned(1)?;
            let n = shots.len();
            for (i, shot) in shots.iter().enumerate() {
                let k = i % 2;
                if i >= 2 {
                    let img = self.slots[k]
                        .pinned
                        .as_ref()
                        .expect("allocated")
                        .as_slice()
                        .map_err(drv)?;
                    sink(i - 2, img);
                }
                self.enqueue(k, shot, false)?;
                let slot = &mut self.slots[k];
                let pinned = slot.pinned.as_mut().expect("allocated");
                slot.stream.memcpy_dtoh(&slot.image, pinned).map_err(drv)?;
            }
            for i in n.saturating_sub(2)..n {
                let slot = &self.slots[i % 2];
                slot.stream.synchronize().map_err(drv)?;
                let img = slot.pinned.as_ref().expect("allocated").as_slice().map_err(drv)?;
                sink(i, img);
            }
            Ok(())
        })
    }

    /// Render shots and collect their images.
    pub fn render_batch(&mut self, shots: &[Shot]) -> Result<Vec<Vec<f32>>, CudaError> {
        let mut out = Vec::with_capacity(shots.len());
        self.render_batch_with(shots, |_, img| out.push(img.to_vec()))?;
        Ok(out)
    }

    /// Render shots given as cell lists only (a, b, c per phi step × mosaic
    /// domain); the reciprocal vectors used by the Gaussian and top-hat spot
    /// shapes stay the plan's.
    pub fn render_batch_cells(
        &mut self,
        cells_per_shot: &[Vec<[f64; 9]>],
    ) -> Result<Vec<Vec<f32>>, CudaError> {
        let shots: Vec<Shot> = cells_per_shot
            .iter()
            .map(|c| Shot { cells_m: c.clone(), recip: self.plan_shot.recip })
            .collect();
        self.render_batch(&shots)
    }
}
