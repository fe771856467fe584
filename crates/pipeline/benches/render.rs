//! Render-only timings of the CPU kernel (no setup, no output files).
//!
//! `cargo bench -p nanobragg-pipeline --bench render -- [SIZE ...] [--threads N]
//! [--reps N] [--level scalar|avx2|avx512]`: renders the bench crystal of
//! `scripts/bench.sh` (`-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2
//! -N 5 -distance 100 -detpixels SIZE`) in every precision and prints the
//! median time and pixels per second. `comprehensive` as a size renders the
//! golden case of that name; `hkl_spectrum` the dataset's load (an `-hkl`
//! table, 100 wavelengths × 25 mosaic domains at 256², [`HKL_SPECTRUM`]),
//! where float32 must stay faster than float64 (it once took 3.3× f64's
//! time on AVX-512: every lane's structure-factor lookup stored the h, k, l
//! vectors again). For whole-program timings against
//! nanoBragg.c use `scripts/bench.sh`. Plans come from argument lists
//! through the pipeline's parser, as the binary's do.

use nanobragg_core::render::{render, simd_level, Precision, RenderOptions, SimdLevel};
use nanobragg_core::setup::Plan;
use std::time::Instant;

/// The plan of a nanobragg command line, through the pipeline's parser.
fn plan(args: &str) -> Plan {
    // (no Fdump file from the working directory)
    let args = format!("{args} -dump /nonexistent/nanobragg-bench/Fdump.bin");
    let args: Vec<String> = args.split_whitespace().map(String::from).collect();
    let inv = nanobragg_pipeline::parse_args(&args).expect("bench arguments");
    inv.plan().expect("bench plan").0
}

/// The arguments of the golden case `comprehensive` (tests/golden/cases.toml).
fn comprehensive_args() -> String {
    let cases = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/golden/cases.toml");
    let text = std::fs::read_to_string(cases).expect("tests/golden/cases.toml");
    let after = text.split("id = \"comprehensive\"").nth(1).expect("case comprehensive");
    let line = after.lines().find(|l| l.starts_with("args = ")).expect("its args");
    line.trim_start_matches("args = ").trim_matches('"').to_string()
}

/// The dataset's load: structure factors from an `-hkl` table, many sources
/// and domains (the golden inputs' triclinic table).
const HKL_SPECTRUM: &str = "-hkl tests/golden/inputs/p1_tric.hkl -cell 67.2 59.8 47.2 90 110.3 90 \
    -N 20 -lambda 1.3 -distance 150 -detpixels 256 -pixel 0.11 -oversample 1 -dispersion 0.3 \
    -dispsteps 100 -mosaic 0.05 -mosaic_domains 25";

/// The bench crystal of `scripts/bench.sh`, without its size.
const BENCH: &str = "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100";

fn main() {
    // as the command line does
    nanobragg_pipeline::keep_freed_memory();
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
            "hkl_spectrum" => sizes.push(-1),
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
    let opts = RenderOptions::default().threads(threads);
    println!("level {level:?} (best on this CPU: {:?}), threads {threads} (0 = all)", simd_level());
    println!(
        "{:>6} {:>9} {:>10} {:>10} {:>12}",
        "size", "precision", "median s", "min s", "Mpixel/s"
    );
    let mut seconds = Vec::new();
    for &size in &sizes {
        let plan = plan(&if size == 0 {
            comprehensive_args()
        } else if size == -1 {
            let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
            HKL_SPECTRUM.replace("tests/", &format!("{root}tests/"))
        } else {
            format!("{BENCH} -detpixels {size}")
        });
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
                    let out = render::<f32>(&plan, RenderOptions { precision, ..opts }.simd(level));
                    std::hint::black_box(&out.image);
                    t.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let (med, min) = (times[times.len() / 2], times[0]);
            let mpix = npix as f64 / med / 1e6;
            let p = format!("{precision:?}");
            let name = match size {
                0 => "compr".to_string(),
                -1 => "hklspec".to_string(),
                n => n.to_string(),
            };
            println!("{name:>6} {p:>9} {med:>10.4} {min:>10.4} {mpix:>12.1}");
            seconds.push((size, precision, med));
        }
    }
    // float32 against float64 on the same plan, side by side in this run
    for &(size, p, t32) in seconds.iter().filter(|s| s.1 == Precision::Fast32) {
        if let Some(&(_, _, t64)) = seconds.iter().find(|s| s.0 == size && s.1 == Precision::Fast64)
        {
            let verdict = if t32 <= 0.7 * t64 { "ok" } else { "SLOW (limit 0.7)" };
            println!("size {size}: {p:?} / Fast64 = {:.2} {verdict}", t32 / t64);
        }
    }
}
