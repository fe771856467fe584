//! The kernel built for the CPU (feature `host-kernel`): the same source the
//! GPU compiles ([`crate::kernel_source`]: the declarations generated from
//! Rust, then `kernel.cu`), compiled as C++ by the system compiler (`$CXX`,
//! else `c++`) between a small head that maps the CUDA qualifiers and
//! built-ins to C++ and libm, and a tail that runs the launches of the GPU
//! path over every pixel in turn (`host_shim.cpp`). No CUDA and no GPU are
//! needed. It is a correctness check, not a renderer: one thread, and a
//! process per render that exchanges the buffers through pipes.
//!
//! With `-ffp-contract=off` every f64 product and sum is rounded on its own,
//! as in NVRTC's `--fmad=false` build and in the CPU's exact path, and libm
//! is the one Rust calls: the f64 image equals
//! the CPU's `Precision::Exact64` render bit for bit.

use crate::params::{base_params, kernel_names, pack_cells, pack_static, single};
use crate::{check_plan, fallback_from_info, finish, CudaError};
use nanobragg_core::render::{Backend, BackendError, Precision, RenderInfo, Rendered};
use nanobragg_core::setup::Plan;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The head and tail around the kernel source.
const SHIM: &str = include_str!("host_shim.cpp");
/// Where the kernel source goes in [`SHIM`].
const KERNEL_MARK: &str = "//@KERNEL@\n";
/// Flags of the host build: no contraction of a*b+c into an FMA, IEEE math.
const CXXFLAGS: [&str; 4] = ["-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math"];

/// The complete C++ program.
fn program_source() -> String {
    let (head, tail) = SHIM.split_once(KERNEL_MARK).expect("host_shim.cpp has the kernel mark");
    format!("{head}{}\n#line 1 \"host_shim_tail\"\n{tail}", crate::kernel_source())
}

/// The compiled program, built once per process (and reused across
/// processes: the file name carries a hash of the source, compiler and
/// flags), in the temporary directory with its source beside it (`.cpp`).
fn executable() -> Result<PathBuf, CudaError> {
    static EXE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    EXE.get_or_init(|| {
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let src = program_source();
        let mut h = std::hash::DefaultHasher::new();
        (&src, &cxx, CXXFLAGS).hash(&mut h);
        let dir = std::env::temp_dir();
        let exe = dir.join(format!("nanobragg-host-kernel-{:016x}", h.finish()));
        if exe.is_file() {
            return Ok(exe);
        }
        // unique names until the rename: concurrent builds cannot collide
        let tmp =
            dir.join(format!("nanobragg-host-kernel-{}-{:016x}", std::process::id(), h.finish()));
        let cpp = tmp.with_extension("cpp");
        std::fs::write(&cpp, &src).map_err(|e| format!("{}: {e}", cpp.display()))?;
        let out = Command::new(&cxx)
            .args(CXXFLAGS)
            .arg("-o")
            .arg(&tmp)
            .arg(&cpp)
            .output()
            .map_err(|e| format!("cannot run the C++ compiler `{cxx}`: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`{cxx}` failed on {}:\n{}",
                cpp.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // the source stays beside the program, to read or to compile elsewhere
        let _ = std::fs::rename(&cpp, exe.with_extension("cpp"));
        std::fs::rename(&tmp, &exe).map_err(|e| format!("{}: {e}", exe.display()))?;
        Ok(exe)
    })
    .clone()
    .map_err(CudaError::HostKernel)
}

/// The host build of the kernel through the core's [`Backend`] interface,
/// as [`crate::Cuda`] renders on a GPU: the same image, background and first
/// phi sweep.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostKernel;

impl Backend for HostKernel {
    fn name(&self) -> &'static str {
        "host-kernel"
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

/// Renders `plan` with the host build of the kernel, as
/// [`crate::render`] does on a GPU (the same kernels, passes and packing):
/// Fast32 runs the f32 kernel, Fast64 and Exact64 the f64 one.
pub fn render(plan: &Plan, precision: Precision) -> Result<Rendered<f32>, CudaError> {
    check_plan(plan)?;
    let single = single(precision);
    let params = base_params(plan);
    let (sources, grid) = pack_static(plan, single);
    let cells = pack_cells(&plan.cells_m, single);
    let mask: Vec<u8> = match &plan.mask {
        Some(m) => m.iter().flat_map(|v| v.to_ne_bytes()).collect(),
        None => vec![0; 2],
    };
    let use_fast = kernel_names(&params, single).0.is_some();
    let mut input = params.as_bytes().to_vec();
    let head = [single as u64, use_fast as u64];
    let lengths = [&cells, &sources, &grid, &mask].map(|a| a.len() as u64);
    for v in head.iter().chain(&lengths) {
        input.extend(v.to_ne_bytes());
    }
    for part in [cells, sources, grid, mask] {
        input.extend(part);
    }

    let fail = |e: String| CudaError::HostKernel(e);
    let mut child = Command::new(executable()?)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("cannot start the host kernel: {e}")))?;
    // the program reads all of its input before it writes anything
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(&input).map_err(|e| fail(format!("host kernel input: {e}")))?;
    drop(stdin);
    let out = child.wait_with_output().map_err(|e| fail(format!("host kernel: {e}")))?;
    if !out.status.success() {
        return Err(fail(format!(
            "host kernel {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let d = &plan.detector;
    let npix = d.fpixels * d.spixels;
    if out.stdout.len() != 4 * npix + 8 * (d.spixels + 7) {
        return Err(fail(format!("host kernel wrote {} bytes", out.stdout.len())));
    }
    let (image, rest) = out.stdout.split_at(4 * npix);
    let image = image.chunks_exact(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect();
    let f64s: Vec<f64> =
        rest.chunks_exact(8).map(|b| f64::from_ne_bytes(b.try_into().unwrap())).collect();
    let (rows, info) = f64s.split_at(d.spixels);
    Ok(Rendered {
        image,
        info: RenderInfo {
            omega_sum: rows.iter().sum(),
            interpolation_fallback: fallback_from_info(params.interpolate != 0, info),
            rows: Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobragg_core::config::SimConfig;
    use nanobragg_core::render::{self as cpu, RenderOptions};
    use nanobragg_core::setup::SetupSeeds;

    #[test]
    fn f64_equals_render_exact_with_fractional_n() {
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
        cfg.crystal.misset = nanobragg_core::config::Misset::Angles([10.0, 20.0, 30.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (3.3, 4.0, 5.2);
        cfg.sf.default_f = 100.0;
        cfg.detector.fpixels = 24;
        cfg.detector.spixels = 20;
        let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap();
        let host = render(&plan, Precision::Exact64).unwrap();
        let cpu = cpu::render::<f32>(&plan, RenderOptions::new(Precision::Exact64));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&host.image), bits(&cpu.image));
        assert!(host.image.iter().any(|&v| v > 0.0));
        assert_eq!(host.info.omega_sum.to_bits(), cpu.info.omega_sum.to_bits());
    }

    /// A two-line weighted spectrum with divergence: the f64 kernel equals
    /// the CPU's exact render bit for bit and the weight-normalised sum of
    /// single-wavelength renders to the f32 image's rounding; the f32
    /// grouped-source path (weights sorted with 1/λ) the CPU's f32 render.
    #[test]
    fn weighted_spectrum_matches_the_cpu_and_the_weighted_sum() {
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([40.0, 50.0, 60.0, 90.0, 90.0, 90.0]);
        cfg.crystal.misset = nanobragg_core::config::Misset::Angles([5.0, -8.0, 12.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (4.0, 4.0, 4.0);
        cfg.sf.default_f = 100.0;
        (cfg.detector.fpixels, cfg.detector.spixels) = (24, 20);
        (cfg.detector.pixel_mm, cfg.detector.distance_mm) = (0.4, 60.0);
        (cfg.beam.hdivrange_mrad, cfg.beam.hdivsteps) = (2.0, 2);
        let lines = [[1.0, 0.3], [1.06, 0.9]];
        let mut spec = cfg.clone();
        spec.beam.spectrum = Some(lines.to_vec());
        let plan = Plan::new(&spec, SetupSeeds { misset_idum: -1 }).unwrap();
        assert!(plan.sources.weighted);
        let host = render(&plan, Precision::Exact64).unwrap();
        let cpu = cpu::render::<f32>(&plan, RenderOptions::new(Precision::Exact64));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&host.image), bits(&cpu.image));
        let singles: Vec<Vec<f32>> = lines
            .iter()
            .map(|&[l, _]| {
                let mut c = cfg.clone();
                c.beam.lambda_a = l;
                let p = Plan::new(&c, SetupSeeds { misset_idum: -1 }).unwrap();
                render(&p, Precision::Exact64).unwrap().image
            })
            .collect();
        let total = lines[0][1] + lines[1][1];
        let mut lit = 0;
        for (i, &g) in host.image.iter().enumerate() {
            let want =
                (lines[0][1] * singles[0][i] as f64 + lines[1][1] * singles[1][i] as f64) / total;
            assert!((g as f64 - want).abs() <= 1e-6 * want, "pixel {i}: {g} vs {want}");
            lit += (want > 0.0) as usize;
        }
        assert!(lit > host.image.len() / 2);
        // f32: the grouped-source path
        assert!(kernel_names(&base_params(&plan), true).0.is_some());
        let host32 = render(&plan, Precision::Fast32).unwrap();
        let cpu32 = cpu::render::<f32>(&plan, RenderOptions::new(Precision::Fast32));
        let rel = |a: &[f32], b: &[f32]| {
            let (mut num, mut den) = (0.0f64, 0.0f64);
            for (x, y) in a.iter().zip(b) {
                num += (*x as f64 - *y as f64).powi(2);
                den += (*y as f64).powi(2);
            }
            (num / den).sqrt()
        };
        // f32 rounding (the CPU's f32 render is as far from the exact image),
        // far below what ignoring or misplacing a weight changes
        let (err, cpu_err) = (rel(&host32.image, &cpu.image), rel(&cpu32.image, &cpu.image));
        eprintln!("f32 host {err:e}, f32 CPU {cpu_err:e} from the exact image");
        assert!(err < 1e-4 && cpu_err < 1e-4, "f32 host {err:e}, f32 CPU {cpu_err:e}");
        let mut equal = spec.clone();
        equal.beam.spectrum = Some(vec![[1.0, 1.0], [1.06, 1.0]]);
        let unweighted = Plan::new(&equal, SetupSeeds { misset_idum: -1 }).unwrap();
        let unweighted = render(&unweighted, Precision::Fast32).unwrap().image;
        assert!(rel(&unweighted, &cpu.image) > 100.0 * err);
    }
}
