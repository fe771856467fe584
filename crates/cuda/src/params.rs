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
    pub(crate) lat_coef: [f32; 18],
    pub(crate) lat_even: [f32; 3],
    pub(crate) fast_dmin: f32,
    pub(crate) fast_kahn: f32,
    pub(crate) fast_n: [f32; 3],
    pub(crate) fast_f2: f32,
    pub(crate) fast: i32,
    pub(crate) lat_deg: i32,
    pub(crate) lat_any_even: i32,
    pub(crate) grid_lookup: i32,
}

/// Which build of the kernel a plan needs: the f32 module is compiled for the
/// plan's lattice polynomial degree, parity and structure-factor lookup (one
/// small specialised inner loop instead of all of them); f64 has one build.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    pub(crate) dtype: Dtype,
    pub(crate) deg: i32,
    pub(crate) even: bool,
    pub(crate) grid: bool,
}

#[cfg(feature = "cuda")]
impl Variant {
    pub(crate) fn new(p: &Params, dtype: Dtype) -> Variant {
        match dtype {
            Dtype::F64 => Variant { dtype, deg: -1, even: false, grid: false },
            Dtype::F32 => Variant {
                dtype,
                deg: p.lat_deg,
                even: p.lat_any_even != 0,
                grid: p.grid_lookup != 0,
            },
        }
    }
}

/// Highest N (cells along an axis) for which the f32 kernel evaluates the
/// square crystal's lattice factor as a polynomial (larger N: the direct
/// sin ratio, whose error does not grow with N).
const LAT_POLY_MAX_N: f64 = 12.0;

/// The square crystal's lattice factor along one axis as the f32 fast path
/// evaluates it: `(sin(N t) / sin t)^2 = (1 - y)^e P(y)^2` with `y = sin^2 t`,
/// `e = 1` for even N. Returns P's ascending coefficients and e, or `None`
/// when N is not a whole number in 1..=LAT_POLY_MAX_N. An axis with N <= 1
/// has no factor (as in nanoBragg.c): P = 1.
pub(crate) fn lattice_poly(n: f64) -> Option<(Vec<f64>, bool)> {
    if n <= 1.0 {
        return Some((vec![1.0], false));
    }
    if n != n.round() || n > LAT_POLY_MAX_N {
        return None;
    }
    let n = n as usize;
    // Chebyshev U_{n-1}(c) = sin(n t) / sin t, c = cos t: U_0 = 1, U_1 = 2c,
    // U_{k+1} = 2c U_k - U_{k-1} (coefficients ascending in c, whole numbers).
    let (mut u0, mut u1) = (vec![1.0f64], vec![0.0, 2.0]);
    for _ in 1..n - 1 {
        let mut next = vec![0.0; u1.len() + 1];
        for (i, &v) in u1.iter().enumerate() {
            next[i + 1] += 2.0 * v;
        }
        for (i, &v) in u0.iter().enumerate() {
            next[i] -= v;
        }
        (u0, u1) = (u1, next);
    }
    let u = if n == 1 { u0 } else { u1 };
    // U_{n-1} is even in c (odd n) or c times an even polynomial (even n):
    // Q(z), z = c^2; then P(y) = Q(1 - y).
    let even = n.is_multiple_of(2);
    let q: Vec<f64> = u.iter().skip(usize::from(even)).step_by(2).copied().collect();
    let mut poly = vec![0.0; q.len()];
    for (j, &qj) in q.iter().enumerate() {
        // qj (1 - y)^j
        let mut binom = 1.0;
        for (i, c) in poly.iter_mut().enumerate().take(j + 1) {
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            *c += qj * binom * sign;
            binom = binom * (j - i) as f64 / (i + 1) as f64;
        }
    }
    Some((poly, even))
}

/// The sources as the kernel reads them (see the layout note in kernel.cu):
/// per source the incident direction and wavelength, in the plan's order;
/// then 1/lambda sorted within each run of sources that share a direction;
/// then each run's length at its first source.
pub(crate) fn source_values(plan: &Plan) -> Vec<f64> {
    let list = &plan.sources.list;
    let n = list.len();
    let mut out = vec![0.0; 6 * n];
    for (i, s) in list.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&[-s.dir[0], -s.dir[1], -s.dir[2], s.lambda_m]);
    }
    let mut g = 0;
    while g < n {
        let dir = list[g].dir;
        let mut end = g + 1;
        while end < n && list[end].dir.iter().zip(&dir).all(|(a, b)| a.to_bits() == b.to_bits()) {
            end += 1;
        }
        let mut inv: Vec<f64> = list[g..end].iter().map(|s| 1.0 / s.lambda_m).collect();
        inv.sort_by(f64::total_cmp);
        out[4 * n + g..4 * n + end].copy_from_slice(&inv);
        out[5 * n + g] = (end - g) as f64;
        g = end;
    }
    out
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
    p.fast_dmin = p.dmin as f32;
    p.fast_kahn = p.kahn as f32;
    p.fast_n = [p.na as f32, p.nb as f32, p.nc as f32];
    p.fast_f2 = p.default_f as f32 * p.default_f as f32;
    p.fast = !(plan.oversample_omega || plan.oversample_polar || plan.oversample_thick) as i32;
    p.grid_lookup = (p.has_grid != 0 && p.hkls_pos != 0) as i32;
    p.lat_deg = -1;
    if plan.shape == CrystalShape::Square {
        let polys: Vec<_> = plan.n_cells.iter().map(|&n| lattice_poly(n)).collect();
        if polys.iter().all(Option::is_some) {
            let polys: Vec<_> = polys.into_iter().flatten().collect();
            let deg = polys.iter().map(|(c, _)| c.len() - 1).max().unwrap_or(0).max(1);
            for (axis, (coef, even)) in polys.iter().enumerate() {
                for (dst, &c) in p.lat_coef[6 * axis..].iter_mut().zip(coef) {
                    *dst = c as f32; // whole numbers below 2^24: exact
                }
                p.lat_even[axis] = if *even { 1.0 } else { 0.0 };
            }
            p.lat_deg = deg as i32;
            p.lat_any_even = polys.iter().any(|(_, e)| *e) as i32;
        }
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
    let sources = pack(source_values(plan).into_iter(), dtype);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattice_poly_matches_the_sin_ratio() {
        for n in 1..=12 {
            let (coef, even) = lattice_poly(n as f64).expect("whole N");
            assert!(coef.len() <= 6);
            assert_eq!(even, n > 1 && n % 2 == 0);
            for i in 1..200 {
                let t = i as f64 * 0.0157;
                let y = t.sin() * t.sin();
                let p = coef.iter().rev().fold(0.0, |acc, &c| acc * y + c);
                let got = if even { (1.0 - y) * p * p } else { p * p };
                let want = if n == 1 { 1.0 } else { ((n as f64 * t).sin() / t.sin()).powi(2) };
                assert!(
                    (got - want).abs() <= 1e-9 * (n * n) as f64,
                    "N={n} t={t}: {got} vs {want}"
                );
            }
        }
        assert_eq!(lattice_poly(5.0), Some((vec![5.0, -20.0, 16.0], false)));
        assert_eq!(lattice_poly(0.5), Some((vec![1.0], false)));
        assert_eq!(lattice_poly(4.5), None);
        assert_eq!(lattice_poly(13.0), None);
    }

    #[test]
    fn sources_are_grouped_by_direction() {
        use nanobragg_core::config::SimConfig;
        use nanobragg_core::setup::SetupSeeds;
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
        cfg.detector.fpixels = 8;
        cfg.detector.spixels = 8;
        cfg.beam.hdivrange_mrad = 2.0;
        cfg.beam.hdivsteps = 3;
        cfg.beam.dispersion_pct = 10.0;
        cfg.beam.dispsteps = 4;
        cfg.sf.default_f = 100.0;
        let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap();
        let n = plan.sources.list.len();
        assert_eq!(n, 12);
        let v = source_values(&plan);
        assert_eq!(v.len(), 6 * n);
        for (i, s) in plan.sources.list.iter().enumerate() {
            assert_eq!(v[4 * i..4 * i + 4], [-s.dir[0], -s.dir[1], -s.dir[2], s.lambda_m]);
        }
        // three runs of four wavelengths, 1/lambda ascending within each
        for g in [0, 4, 8] {
            assert_eq!(v[5 * n + g], 4.0);
            let inv = &v[4 * n + g..4 * n + g + 4];
            assert!(inv.windows(2).all(|w| w[0] <= w[1]));
            let mut want: Vec<f64> =
                plan.sources.list[g..g + 4].iter().map(|s| 1.0 / s.lambda_m).collect();
            want.sort_by(f64::total_cmp);
            assert_eq!(inv, &want[..]);
        }
        let p = base_params(&plan);
        assert_eq!((p.fast, p.lat_deg, p.grid_lookup), (1, 1, 0)); // N = 1: P = 1
    }
}
