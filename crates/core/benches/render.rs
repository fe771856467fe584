//! Render-only timings of the CPU kernel (no setup, no output files).
//!
//! `cargo bench -p nanobragg-core --bench render -- [SIZE ...] [--threads N]
//! [--reps N] [--level scalar|avx2|avx512]`: renders the bench crystal of
//! `scripts/bench.sh` (`-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2
//! -N 5 -distance 100 -detpixels SIZE`) in every precision and prints the
//! median time and pixels per second. `comprehensive` as a size renders the
//! golden case of that name. For whole-program timings against
//! nanoBragg.c use `scripts/bench.sh`.

use nanobragg_core::render::{render_on, simd_level, Precision, RenderOptions, SimdLevel};
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::SimConfig;
use std::time::Instant;

fn plan(size: i64) -> Plan {
    let mut cfg = SimConfig::default();
    cfg.sf.default_f = 100.0;
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    cfg.beam.lambda_a = 6.2;
    cfg.crystal.na = 5.0;
    cfg.crystal.nb = 5.0;
    cfg.crystal.nc = 5.0;
    cfg.detector.distance_mm = 100.0;
    cfg.detector.fpixels = size;
    cfg.detector.spixels = size;
    Plan::new(&cfg, SetupSeeds { misset_idum: 0 }).expect("bench plan")
}

/// The golden case `comprehensive` (tests/golden/cases.toml).
fn comprehensive() -> Plan {
    let mut cfg = SimConfig::default();
    cfg.sf.default_f = 100.0;
    cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 5.0, 5.0);
    cfg.beam.lambda_a = 1.05;
    cfg.beam.kahn_factor = 0.95;
    cfg.detector.distance_mm = 100.0;
    (cfg.detector.fpixels, cfg.detector.spixels) = (512, 512);
    cfg.detector.pixel_mm = 0.1;
    cfg.crystal.mosaic_deg = 0.5;
    cfg.crystal.mosaic_domains = 5;
    cfg.crystal.mosaic_seed = 2468;
    cfg.crystal.phi0_deg = -7.25;
    cfg.crystal.osc_deg = 90.5;
    cfg.crystal.phisteps = 9;
    (cfg.detector.rotx_deg, cfg.detector.roty_deg, cfg.detector.rotz_deg) = (5.0, 3.0, 2.0);
    cfg.detector.twotheta_deg = 10.0;
    cfg.detector.attenuation_um = Some(Some(500.0));
    cfg.detector.thick_um = 450.0;
    cfg.detector.thicksteps = 5;
    cfg.sampling.oversample = 1;
    Plan::new(&cfg, SetupSeeds { misset_idum: 0 }).expect("comprehensive plan")
}

fn main() {
    let mut sizes: Vec<i64> = Vec::new();
    let mut threads = 0usize;
    let mut reps = 5usize;
    let mut level = simd_level();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()).unwrap_or(5).max(1),
            "--level" => {
                level = match args.next().as_deref() {
                    Some("scalar") => SimdLevel::Scalar,
                    Some("avx2") => SimdLevel::Avx2,
                    _ => SimdLevel::Avx512,
                }
            }
            "--bench" => {}
            "comprehensive" => sizes.push(0),
            s => {
                if let Ok(n) = s.parse() {
                    sizes.push(n)
                }
            }
        }
    }
    if sizes.is_empty() {
        sizes = vec![512, 1024, 2048];
    }
    let opts = RenderOptions { threads };
    println!("level {level:?} (best on this CPU: {:?}), threads {threads} (0 = all)", simd_level());
    println!(
        "{:>6} {:>9} {:>10} {:>10} {:>12}",
        "size", "precision", "median s", "min s", "Mpixel/s"
    );
    for &size in &sizes {
        let plan = if size == 0 { comprehensive() } else { plan(size) };
        let npix = plan.detector.fpixels * plan.detector.spixels;
        let which: Vec<Precision> = match std::env::var("BENCH_PRECISION").as_deref() {
            Ok("fast") => vec![Precision::Fast64, Precision::Fast32],
            Ok("fast64") => vec![Precision::Fast64],
            Ok("fast32") => vec![Precision::Fast32],
            Ok("exact") => vec![Precision::Exact64],
            _ => vec![Precision::Exact64, Precision::Fast64, Precision::Fast32],
        };
        for precision in which {
            let mut times: Vec<f64> = (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    let out = render_on(&plan, opts, precision, level);
                    std::hint::black_box(&out.image);
                    t.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let (med, min) = (times[times.len() / 2], times[0]);
            let mpix = npix as f64 / med / 1e6;
            let p = format!("{precision:?}");
            let name = if size == 0 { "compr".to_string() } else { size.to_string() };
            println!("{name:>6} {p:>9} {med:>10.4} {min:>10.4} {mpix:>12.1}");
        }
    }
}
