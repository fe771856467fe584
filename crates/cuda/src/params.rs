//! The kernel's parameter block, the constants it shares with the CPU
//! kernel, and the host-side packing of the plan's arrays (no CUDA needed:
//! shared by the GPU path and the host build of the kernel).
//!
//! `Params` and the constants are declared here only: [`kernel_source`]
//! prepends their C declarations (generated from the Rust ones, with
//! `static_assert`s of the layout Rust computed) to `kernel.cu`.
#![cfg_attr(not(any(feature = "cuda", feature = "host-kernel")), allow(dead_code))]

use nanobragg_core::config::CrystalShape;
use nanobragg_core::physics::lattice::{GAUSS_XTAL_WIDTH, ROUND_XTAL_SCALE, TOPHAT_RADIUS_SQR};
use nanobragg_core::render::Precision;
use nanobragg_core::setup::{Interpolation, Plan};
use nanobragg_core::units::R_E_SQR;
use std::fmt::Write;

/// A Rust type with a C spelling, for the generated declarations.
trait CType {
    /// The C declaration of a field `name` of this type.
    fn c_field(name: &str) -> String;
}

macro_rules! c_scalar {
    ($($t:ty => $c:literal),*) => {
        $(impl CType for $t {
            fn c_field(name: &str) -> String {
                format!("{} {name}", $c)
            }
        })*
    };
}
c_scalar!(f64 => "double", f32 => "float", i32 => "int", i64 => "long long");

impl<T: CType, const N: usize> CType for [T; N] {
    fn c_field(name: &str) -> String {
        T::c_field(&format!("{name}[{N}]"))
    }
}

/// Declares a `#[repr(C)]` struct (every field `pub(crate)`) and its
/// `c_declaration()`: the same struct in C, doc comments as comments, then
/// `static_assert`s of its size and of every field's offset as Rust laid
/// them out (`std::mem::offset_of!`), so that a C compiler that disagrees
/// refuses the source.
macro_rules! c_struct {
    (
        $(#[$meta:meta])*
        pub(crate) struct $name:ident { $($(#[doc = $doc:literal])* $field:ident: $ty:ty,)* }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        pub(crate) struct $name { $($(#[doc = $doc])* pub(crate) $field: $ty,)* }

        // no padding: every byte of the block is a field (see `as_bytes`)
        const _: () = assert!(std::mem::size_of::<$name>() == 0 $(+ std::mem::size_of::<$ty>())*);

        impl $name {
            /// The C declaration of this struct with its layout assertions.
            pub(crate) fn c_declaration() -> String {
                let name = stringify!($name);
                let mut c = format!("struct {name} {{\n");
                let mut asserts = format!(
                    "static_assert(sizeof({name}) == {}, \"{name}: size differs from Rust\");\n",
                    std::mem::size_of::<$name>()
                );
                // NVRTC before 13.4 has no constant offsetof: the host build checks the
                // offsets (CUDA lays out structs of these types as the host does).
                asserts.push_str("#ifndef __CUDACC_RTC__\n");
                $(
                    $(let _ = writeln!(c, "    //{}", $doc);)*
                    let _ = writeln!(c, "    {};", <$ty as CType>::c_field(stringify!($field)));
                    let _ = writeln!(
                        asserts,
                        "static_assert(__builtin_offsetof({name}, {0}) == {1}, \"{name}.{0}: offset differs from Rust\");",
                        stringify!($field),
                        std::mem::offset_of!($name, $field),
                    );
                )*
                c.push_str("};\n");
                asserts.push_str("#endif\n");
                c + &asserts
            }
        }
    };
}

/// Coefficients of P per axis in [`Params::lat_coef`].
const LAT_TERMS: usize = 6;

/// Numbers the kernel shares with the CPU kernel, defined in C as these
/// names (Rust's shortest round-trip spelling: the C compiler reads the same
/// double back).
const SHARED_CONSTANTS: [(&str, f64); 4] = [
    ("NB_PI", std::f64::consts::PI),
    ("ROUND_XTAL_SCALE", ROUND_XTAL_SCALE),
    ("GAUSS_XTAL_WIDTH", GAUSS_XTAL_WIDTH),
    ("TOPHAT_RADIUS_SQR", TOPHAT_RADIUS_SQR),
];

/// The CUDA C source of the kernels as written (without the generated
/// declarations; see [`kernel_source`]).
pub const KERNEL_CU: &str = include_str!("kernel.cu");

/// The declarations generated from Rust that `kernel.cu` relies on: the
/// shared constants and `struct Params` with its layout assertions.
pub fn generated_declarations() -> String {
    let mut c = String::from("// Generated from crates/cuda/src/params.rs: do not edit.\n");
    for (name, value) in SHARED_CONSTANTS {
        let _ = writeln!(c, "#define {name} {value:?}");
    }
    let _ = writeln!(c, "#define NB_LAT_TERMS {LAT_TERMS}");
    c + &Params::c_declaration()
}

/// The complete kernel source: [`generated_declarations`], then `kernel.cu`.
/// Compiled by NVRTC (feature `cuda`) and by the host compiler (feature
/// `host-kernel`).
pub fn kernel_source() -> String {
    generated_declarations() + "#line 1 \"kernel.cu\"\n" + KERNEL_CU
}

c_struct! {
    /// The kernel's parameter block, passed by value to every launch. Its C
    /// declaration is generated from this one ([`Params::c_declaration`]).
    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct Params {
        subpixel: f64,
        pixel: f64,
        fdet: [f64; 3],
        sdet: [f64; 3],
        odet: [f64; 3],
        pix0: [f64; 3],
        beam: [f64; 3],
        polar_axis: [f64; 3],
        distance: f64,
        close_distance: f64,
        thickstep: f64,
        mu: f64,
        a_star: [f64; 3],
        b_star: [f64; 3],
        c_star: [f64; 3],
        na: f64,
        nb: f64,
        nc: f64,
        fudge: f64,
        kahn: f64,
        dmin: f64,
        i_bg: f64,
        scale: f64,
        steps: f64,
        default_f: f64,
        water_size: f64,
        roi: [i64; 4],
        fpixels: i32,
        spixels: i32,
        oversample: i32,
        thicksteps: i32,
        nsources: i32,
        ncells: i32,
        thick_zero: i32,
        curved: i32,
        point_pixel: i32,
        nopolar: i32,
        os_omega: i32,
        os_polar: i32,
        os_thick: i32,
        /// 0 square, 1 round, 2 gauss, 3 tophat
        shape: i32,
        has_grid: i32,
        hkls_pos: i32,
        /// the plan starts with tricubic interpolation
        interpolate: i32,
        has_mask: i32,
        h_min: i32,
        h_max: i32,
        k_min: i32,
        k_max: i32,
        l_min: i32,
        l_max: i32,
        write_omega: i32,
        /// each source's photons times its weight factor (sources [6n, 8n))
        weighted: i32,
        /// f32 grouped-source path (nb_fast_subpixel): per axis a, b, c, P(y)'s
        /// ascending coefficients
        lat_coef: [f32; 3 * LAT_TERMS],
        /// per axis: 1 when N is even (U^2 = (1 - y) P(y)^2), else 0
        lat_even: [f32; 3],
        /// dmin, kahn, N, default_F^2 in single precision
        fast_dmin: f32,
        fast_kahn: f32,
        fast_n: [f32; 3],
        fast_f2: f32,
        /// no -oversample_omega/_polar/_thick: sources x cells may be reordered
        fast: i32,
        /// square crystal, whole N <= 12: degree of P (1..5); -1: lattice()
        lat_deg: i32,
        lat_any_even: i32,
        /// has_grid && hkls_pos: nearest-neighbour structure factors
        grid_lookup: i32,
        /// to a multiple of 8 bytes: no trailing padding
        pad_end_: i32,
    }
}

/// Whether `precision` runs the f32 kernel (Fast32) rather than the f64 one
/// (Fast64 and Exact64: the GPU has one f64 kernel, nanoBragg.c's formulas).
pub(crate) fn single(precision: Precision) -> bool {
    precision == Precision::Fast32
}

/// Which build of the kernel a plan needs: the f32 module is compiled for the
/// plan's lattice polynomial degree, parity and structure-factor lookup (one
/// small specialised inner loop instead of all of them); f64 has one build.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    pub(crate) single: bool,
    pub(crate) deg: i32,
    pub(crate) even: bool,
    pub(crate) grid: bool,
}

#[cfg(feature = "cuda")]
impl Variant {
    pub(crate) fn new(p: &Params, single: bool) -> Variant {
        if single {
            Variant { single, deg: p.lat_deg, even: p.lat_any_even != 0, grid: p.grid_lookup != 0 }
        } else {
            Variant { single, deg: -1, even: false, grid: false }
        }
    }
}

/// The kernels a plan renders with: the specialised first-pass kernel, if
/// the plan allows one (no -oversample_* flag, no tricubic interpolation;
/// f32: grouped sources; f64: the C loop for a square crystal), and the
/// general kernel (every other pass).
pub(crate) fn kernel_names(p: &Params, single: bool) -> (Option<&'static str>, &'static str) {
    let simple = p.fast != 0 && p.interpolate == 0;
    match single {
        true => (simple.then_some("nb_render_fast_f32"), "nb_render_f32"),
        false => ((simple && p.shape == 0).then_some("nb_render_simple_f64"), "nb_render_f64"),
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
/// then each run's length at its first source; then each source's weight
/// factor in the plan's order, and in the order of the sorted 1/lambda.
pub(crate) fn source_values(plan: &Plan) -> Vec<f64> {
    let list = &plan.sources.list;
    let n = list.len();
    let weights = plan.sources.kernel_weights();
    let mut out = vec![0.0; 8 * n];
    out[6 * n..7 * n].copy_from_slice(&weights);
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
        let mut inv: Vec<(f64, f64)> =
            (g..end).map(|i| (1.0 / list[i].lambda_m, weights[i])).collect();
        inv.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (k, (il, w)) in inv.into_iter().enumerate() {
            out[4 * n + g + k] = il;
            out[7 * n + g + k] = w;
        }
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
        weighted: plan.sources.weighted as i32,
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
                for (dst, &c) in p.lat_coef[LAT_TERMS * axis..].iter_mut().zip(coef) {
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
pub(crate) fn pack(vals: impl Iterator<Item = f64>, single: bool) -> Vec<u8> {
    match single {
        true => vals.flat_map(|v| (v as f32).to_ne_bytes()).collect(),
        false => vals.flat_map(|v| v.to_ne_bytes()).collect(),
    }
}

/// The phi x mosaic cells (nine values each) in the kernel's scalar type.
pub(crate) fn pack_cells(cells_m: &[[f64; 9]], single: bool) -> Vec<u8> {
    pack(cells_m.iter().flatten().copied(), single)
}

/// The plan's static arrays in the kernel's scalar type: the sources (see
/// [`source_values`]) and the structure-factor grid (one value when there is
/// none: the kernel never reads it then).
pub(crate) fn pack_static(plan: &Plan, single: bool) -> (Vec<u8>, Vec<u8>) {
    let sources = pack(source_values(plan).into_iter(), single);
    let grid = match &plan.grid {
        Some(g) if !g.data.is_empty() => pack(g.data.iter().copied(), single),
        _ => pack([0.0].into_iter(), single),
    };
    (sources, grid)
}

impl Params {
    /// The block's bytes, as the kernel receives them (the host build's
    /// copy; the GPU takes the struct through cudarc's `DeviceRepr`).
    #[cfg(feature = "host-kernel")]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: Params is #[repr(C)] of f64, i64, i32 and f32 fields whose
        // fields leave no padding (asserted where c_struct! declares it); every byte is initialised, and the slice borrows self.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Params).cast::<u8>(),
                std::mem::size_of::<Params>(),
            )
        }
    }
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
        assert_eq!(v.len(), 8 * n);
        // unweighted: every factor 1
        assert!(v[6 * n..].iter().all(|&w| w == 1.0));
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
