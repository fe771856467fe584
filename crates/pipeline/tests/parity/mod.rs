//! The plans the CUDA kernel is checked on (on a GPU by gpu_parity.rs, on
//! the CPU by host_kernel.rs), built from nanoBragg arguments by the
//! pipeline's parser, and the comparisons both use.

use nanobragg_core::render::{Precision, Rendered};
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_pipeline::parse::parse_args;
use std::path::Path;

/// Representative plans mirroring the golden cases: (name, nanoBragg
/// arguments). `-hkl` names a file of tests/golden/inputs.
pub const CASES: &[(&str, &str)] = &[
    ("cubic", "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100 -detpixels 256"),
    (
        "triclinic-misset",
        "-default_F 100 -cell 70 80 90 75 85 95 -N 4 -lambda 1.0 -distance 90 -detpixels 128 -pixel 0.15 -Xbeam 8.2 -Ybeam 11.7 -misset 15 20.5 30.25 -phi 12 -polar 0.9",
    ),
    (
        "mosaic-phi-abs-twotheta",
        "-default_F 100 -cell 70 80 90 75 85 95 -N 5 -lambda 1.05 -distance 100 -detpixels 256 -pixel 0.2 -mosaic 0.5 -mosaic_dom 5 -mosaic_seed 2468 -phi -7.25 -osc 90.5 -phisteps 9 -detector_rotx 5 -detector_roty 3 -detector_rotz 2 -twotheta 10 -detector_abs 500 -detector_thick 450 -thicksteps 5 -polar 0.95 -oversample 1",
    ),
    (
        "mosaic-nabc",
        "-default_F 100 -cell 80 90 100 90 90 90 -Na 6 -Nb 5 -Nc 8 -lambda 1.0 -distance 100 -detpixels 256 -pixel 0.1 -misset 5 8 12 -mosaic 0.8 -mosaic_dom 12 -mosaic_seed 4242 -oversample 1",
    ),
    (
        "oversample-polar-thick",
        "-default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 1.0 -distance 50 -detpixels 128 -pixel 0.1 -oversample 2 -oversample_polar -oversample_thick -polar 0.8 -detector_abs 250 -detector_thick 300 -thicksteps 3 -detector_roty 15",
    ),
    (
        "oversample-omega",
        "-default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 1.0 -distance 40 -detpixels 128 -pixel 0.1 -oversample 3 -oversample_omega",
    ),
    (
        "hkl-tricubic",
        "-hkl p1_tric.hkl -cell 28 31 35 80 95 105 -N 2 -lambda 1.0 -distance 60 -detpixels 192 -pixel 0.1 -misset 10 -5 20",
    ),
    (
        "hkl-fallback",
        "-hkl p1_tric.hkl -cell 28 31 35 80 95 105 -N 2 -lambda 1.0 -distance 25 -detpixels 192 -pixel 0.1 -misset 10 -5 20",
    ),
    (
        "hkl-nearest-sparse",
        "-hkl sparse.hkl -default_F 15 -cell 40 40 40 90 90 90 -N 6 -lambda 1.0 -distance 70 -detpixels 192 -pixel 0.1 -misset 7 11 13",
    ),
    (
        "curved-detector",
        "-curved_det -detsize 51.2 -pixel 0.2 -distance 60 -default_F 100 -cell 50 50 50 90 90 90 -N 5 -lambda 1.0 -misset 0 3 0 -oversample 1",
    ),
    (
        "roi-mask",
        "-default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 1.0 -distance 100 -detpixels 256 -pixel 0.1 -misset 0 0 10 -roi 30 180 50 200 -fluence 5e28 -oversample 1",
    ),
    (
        "round-os2",
        "-round_xtal -default_F 100 -cell 100 100 100 90 90 90 -Na 4 -Nb 6 -Nc 3 -lambda 1.0 -distance 80 -detpixels 192 -pixel 0.1 -oversample 2 -misset 0 0 8",
    ),
    (
        "gauss-fudge",
        "-gauss_xtal -fudge 8 -default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 1.0 -distance 80 -detpixels 192 -pixel 0.1 -oversample 1 -misset 0 0 8",
    ),
    (
        "tophat-fudge",
        "-tophat_spots -fudge 3 -default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 1.0 -distance 80 -detpixels 192 -pixel 0.1 -oversample 1 -misset 0 0 8",
    ),
    (
        "water-nopolar-dmin-point",
        "-water 0.1 -nopolar -dmin 20 -point_pixel -default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 1.0 -distance 100 -detpixels 128 -pixel 0.1 -oversample 1",
    ),
    // the f32 grouped-source path: many wavelengths per direction, the dmin
    // prefix cut with several directions, even N
    (
        "exafel-small",
        "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100 -detpixels 96 -pixel 0.4 -dispersion 10 -dispsteps 100 -mosaic 0.5 -mosaic_dom 25",
    ),
    (
        "exafel-dmin-div",
        "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100 -detpixels 96 -pixel 0.4 -dispersion 10 -dispsteps 7 -hdivrange 2.0 -hdivsteps 3 -mosaic 0.5 -mosaic_dom 3 -dmin 9",
    ),
    (
        "even-N-disp",
        "-default_F 100 -cell 80 90 100 90 90 90 -Na 4 -Nb 12 -Nc 2 -lambda 1.0 -distance 100 -detpixels 96 -pixel 0.2 -misset 5 8 12 -dispersion 5 -dispsteps 4",
    ),
    (
        "divergence-dispersion",
        "-default_F 100 -cell 100 100 100 90 90 90 -N 5 -energy 9000 -distance 100 -detpixels 192 -pixel 0.1 -hdivrange 2.0 -vdivrange 1.0 -hdivsteps 5 -vdivsteps 3 -dispersion 4 -dispsteps 5 -oversample 1",
    ),
    // fractional N (library only: nanoBragg.c rounds N), square crystal: the
    // lattice factor of the index's fractional part
    (
        "fractional-N",
        "-default_F 100 -cell 100 100 100 90 90 90 -N 4.5 -lambda 1.0 -distance 100 -detpixels 128 -pixel 0.1 -misset 5 8 12 -oversample 1",
    ),
    (
        "fractional-Nabc-mosaic",
        "-default_F 100 -cell 70 80 90 75 85 95 -Na 3.3 -Nb 4.5 -Nc 5.2 -lambda 1.0 -distance 90 -detpixels 128 -pixel 0.15 -misset 15 20.5 30.25 -mosaic 0.5 -mosaic_dom 4 -mosaic_seed 77 -phi 3 -osc 2 -phisteps 2",
    ),
    (
        "fractional-N-round",
        "-round_xtal -default_F 100 -cell 100 100 100 90 90 90 -Na 3.5 -Nb 6 -Nc 2.7 -lambda 1.0 -distance 80 -detpixels 96 -pixel 0.1 -oversample 2 -misset 0 0 8",
    ),
];

/// The plan of a case, as the `nanobragg` command builds it (a missing
/// `-misset_seed` is -1 rather than the clock). `roi-mask` also gets a mask
/// (a disc and every 7th pixel) on top of its ROI.
pub fn plan(name: &str, args: &str) -> Plan {
    let inputs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/inputs");
    let mut list: Vec<String> = args.split_whitespace().map(String::from).collect();
    for i in 1..list.len() {
        if list[i - 1] == "-hkl" {
            list[i] = inputs.join(&list[i]).display().to_string();
        }
    }
    let inv = parse_args(&list).unwrap_or_else(|e| panic!("{name}: {e}"));
    let misset_idum = inv.config.crystal.misset_seed.map_or(-1, |s| -s);
    let mut p = Plan::new(&inv.config, SetupSeeds { misset_idum }).expect("plan");
    if name == "roi-mask" {
        let (fp, sp) = (p.detector.fpixels, p.detector.spixels);
        let mut m = vec![1u16; fp * sp];
        for s in 0..sp {
            for f in 0..fp {
                let (df, ds) = (f as f64 - 100.0, s as f64 - 120.0);
                if df * df + ds * ds < 900.0 || (s * fp + f) % 7 == 0 {
                    m[s * fp + f] = 0;
                }
            }
        }
        p.mask = Some(m);
    }
    p
}

/// Pearson correlation and max |a - b| / max |b|.
pub fn compare(gpu: &[f32], cpu: &[f32]) -> (f64, f64) {
    assert_eq!(gpu.len(), cpu.len());
    let n = gpu.len() as f64;
    let (ma, mb) = (
        gpu.iter().map(|&x| x as f64).sum::<f64>() / n,
        cpu.iter().map(|&x| x as f64).sum::<f64>() / n,
    );
    let (mut sab, mut saa, mut sbb, mut dmax, mut bmax) = (0.0, 0.0, 0.0, 0.0f64, 0.0f64);
    for (&a, &b) in gpu.iter().zip(cpu) {
        let (a, b) = (a as f64, b as f64);
        sab += (a - ma) * (b - mb);
        saa += (a - ma) * (a - ma);
        sbb += (b - mb) * (b - mb);
        dmax = dmax.max((a - b).abs());
        bmax = bmax.max(b.abs());
    }
    let corr = if saa == 0.0 && sbb == 0.0 { 1.0 } else { sab / (saa * sbb).sqrt() };
    (corr, if bmax > 0.0 { dmax / bmax } else { dmax })
}

/// Minimum correlation, max |d| / max and omega_sum tolerance of a kernel
/// precision against the CPU's exact render (f64: the GPU's libm may round its
/// transcendental functions differently from the CPU's).
pub fn tolerances(precision: Precision) -> (f64, f64, f64) {
    match precision {
        Precision::Fast32 => (0.9999, 1e-3, 1e-4),
        _ => (0.999999, 1e-6, 1e-9),
    }
}

/// Holds `got` (a kernel's render) to `want` (the CPU's exact render) within
/// [`tolerances`], with the same fallback point in f64; prints the figures.
pub fn check(name: &str, precision: Precision, got: &Rendered<f32>, want: &Rendered<f32>) {
    let (corr, rel) = compare(&got.image, &want.image);
    let omega_rel = (got.info.omega_sum - want.info.omega_sum).abs()
        / want.info.omega_sum.abs().max(f64::MIN_POSITIVE);
    let identical =
        got.image.iter().zip(&want.image).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
    let kind = nanobragg_cuda::kernel_type_name(precision);
    println!(
        "parity {name:<26} {kind:<4} corr {corr:.12} max|d|/max {rel:.3e} omega_rel {omega_rel:.3e} bit-identical {:.2}% fallback {:?} cpu {:?}",
        100.0 * identical as f64 / want.image.len() as f64,
        got.info.interpolation_fallback.map(|f| f.1),
        want.info.interpolation_fallback.map(|f| f.1),
    );
    let (min_corr, max_rel, omega_tol) = tolerances(precision);
    assert!(corr >= min_corr, "{name} {kind}: correlation {corr}");
    assert!(rel <= max_rel, "{name} {kind}: max|d|/max {rel}");
    assert!(
        omega_rel <= omega_tol,
        "{name} {kind}: omega_sum {} vs {}",
        got.info.omega_sum,
        want.info.omega_sum
    );
    if precision != Precision::Fast32 {
        assert_eq!(
            got.info.interpolation_fallback.map(|f| f.1),
            want.info.interpolation_fallback.map(|f| f.1),
            "{name}: interpolation fallback point"
        );
    }
}
