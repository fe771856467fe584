//! The kernel's parameter block and the host-side packing of the plan's
//! arrays (no CUDA needed: shared by the GPU path and the host emulation check).

use crate::Dtype;
use nanobragg_core::config::CrystalShape;
use nanobragg_core::setup::{Interpolation, Plan};
use nanobragg_core::units::R_E_SQR;

/// Kernel parameters; must match `struct Params` in kernel.cu field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Params {
    pub(crate) subpixel: f64,
    pub(crate) pixel: f64,
    pub(crate) fdet: [f64; 3],
    pub(crate) sdet: [f64; 3],
    pub(crate) odet: [f64; 3],
    pub(crate) pix0: [f64; 3],
    pub(crate) beam: [f64; 3],
    pub(crate) polar_axis: [f64; 3],
    pub(crate) distance: f64,
    pub(crate) close_distance: f64,
    pub(crate) thickstep: f64,
    pub(crate) mu: f64,
    pub(crate) a_star: [f64; 3],
    pub(crate) b_star: [f64; 3],
    pub(crate) c_star: [f64; 3],
    pub(crate) na: f64,
    pub(crate) nb: f64,
    pub(crate) nc: f64,
    pub(crate) fudge: f64,
    pub(crate) kahn: f64,
    pub(crate) dmin: f64,
    pub(crate) i_bg: f64,
    pub(crate) scale: f64,
    pub(crate) steps: f64,
    pub(crate) default_f: f64,
    pub(crate) water_size: f64,
    pub(crate) roi: [i64; 4],
    pub(crate) fpixels: i32,
    pub(crate) spixels: i32,
    pub(crate) oversample: i32,
    pub(crate) thicksteps: i32,
    pub(crate) nsources: i32,
    pub(crate) ncells: i32,
    pub(crate) thick_zero: i32,
    pub(crate) curved: i32,
    pub(crate) point_pixel: i32,
    pub(crate) nopolar: i32,
    pub(crate) os_omega: i32,
    pub(crate) os_polar: i32,
    pub(crate) os_thick: i32,
    pub(crate) shape: i32,
    pub(crate) has_grid: i32,
    pub(crate) hkls_pos: i32,
    pub(crate) interpolate: i32,
    pub(crate) has_mask: i32,
    pub(crate) h_min: i32,
    pub(crate) h_max: i32,
    pub(crate) k_min: i32,
    pub(crate) k_max: i32,
    pub(crate) l_min: i32,
    pub(crate) l_max: i32,
    pub(crate) write_omega: i32,
    pub(crate) pad_: i32,
}

pub(crate) fn base_params(plan: &Plan) -> Params {
    let d = &plan.detector;
    let mut p = Params {
        subpixel: d.pixel_size_m / plan.oversample as f64,
        pixel: d.pixel_size_m,
        fdet: d.fdet,
        sdet: d.sdet,
        odet: d.odet,
        pix0: d.pix0,
        beam: d.beam,
        polar_axis: d.polar,
        distance: d.distance_m,
        close_distance: d.close_distance_m,
        thickstep: d.thickstep_m,
        mu: d.mu_per_m,
        a_star: plan.cell.a_star,
        b_star: plan.cell.b_star,
        c_star: plan.cell.c_star,
        na: plan.n_cells[0],
        nb: plan.n_cells[1],
        nc: plan.n_cells[2],
        fudge: plan.fudge,
        kahn: plan.kahn_factor,
        dmin: plan.dmin_m,
        i_bg: plan.i_bg,
        scale: R_E_SQR * plan.fluence,
        steps: plan.steps as f64,
        default_f: plan.default_f,
        water_size: plan.water_size_m,
        roi: d.roi,
        fpixels: d.fpixels as i32,
        spixels: d.spixels as i32,
        oversample: plan.oversample as i32,
        thicksteps: d.thicksteps as i32,
        nsources: plan.sources.list.len() as i32,
        ncells: plan.cells_m.len() as i32,
        thick_zero: (d.thick_m == 0.0) as i32,
        curved: d.curved as i32,
        point_pixel: d.point_pixel as i32,
        nopolar: plan.nopolar as i32,
        os_omega: plan.oversample_omega as i32,
        os_polar: plan.oversample_polar as i32,
        os_thick: plan.oversample_thick as i32,
        shape: match plan.shape {
            CrystalShape::Square => 0,
            CrystalShape::Round => 1,
            CrystalShape::Gauss => 2,
            CrystalShape::Tophat => 3,
        },
        has_grid: plan.grid.is_some() as i32,
        hkls_pos: (plan.hkls > 0) as i32,
        interpolate: (plan.interpolation == Interpolation::Tricubic) as i32,
        has_mask: plan.mask.is_some() as i32,
        ..Default::default()
    };
    if let Some(g) = &plan.grid {
        (p.h_min, p.h_max, p.k_min, p.k_max, p.l_min, p.l_max) =
            (g.h_min, g.h_max, g.k_min, g.k_max, g.l_min, g.l_max);
    }
    p
}

/// Host values converted to the kernel's scalar type, as bytes.
pub(crate) fn pack(vals: impl Iterator<Item = f64>, dtype: Dtype) -> Vec<u8> {
    match dtype {
        Dtype::F32 => vals.flat_map(|v| (v as f32).to_ne_bytes()).collect(),
        Dtype::F64 => vals.flat_map(|v| v.to_ne_bytes()).collect(),
    }
}

/// Everything the kernel reads for the plan's own orientation, serialised for
/// running `kernel.cu` on the host (see docs/gpu.md, "host emulation"): five
/// little-endian u64 byte lengths, then the parameter block, cells, sources,
/// structure factor grid and mask.
#[doc(hidden)]
pub fn host_kernel_inputs(plan: &Plan, dtype: Dtype) -> Vec<u8> {
    let p = base_params(plan);
    // SAFETY: Params is #[repr(C)] plain old data without padding holes that
    // matter (they are only copied).
    let pbytes = unsafe {
        std::slice::from_raw_parts(&p as *const Params as *const u8, std::mem::size_of::<Params>())
    }
    .to_vec();
    let cells = pack(plan.cells_m.iter().flat_map(|c| c.iter().copied()), dtype);
    let sources = pack(
        plan.sources.list.iter().flat_map(|s| [-s.dir[0], -s.dir[1], -s.dir[2], s.lambda_m]),
        dtype,
    );
    let grid = match &plan.grid {
        Some(g) if !g.data.is_empty() => pack(g.data.iter().copied(), dtype),
        _ => pack([0.0].into_iter(), dtype),
    };
    let mask: Vec<u8> = match &plan.mask {
        Some(m) => m.iter().flat_map(|v| v.to_le_bytes()).collect(),
        None => vec![0, 0],
    };
    let mut out = Vec::new();
    for part in [&pbytes, &cells, &sources, &grid, &mask] {
        out.extend((part.len() as u64).to_le_bytes());
    }
    for part in [pbytes, cells, sources, grid, mask] {
        out.extend(part);
    }
    out
}
