//! Timings of derivative images against the image alone.
//!
//! `cargo bench -p nanobragg-core --bench derivatives -- [SIZE] [--threads N]
//! [--reps N] [--case cubic|triclinic] [--no-exact] [--counts 1,8,26] [--float f64|f32]`: renders a SIZE² image (default
//! 1024) of the case with the default (fast SIMD) and the exact f64 kernel,
//! then the derivative images by 1, 8 and every applicable parameter
//! ([`diff::jacobian_with`], f64 and f32: dual numbers over SIMD lanes on
//! AVX2 / AVX-512, `NANOBRAGG_SIMD=scalar` for the scalar duals), and prints
//! the best of `reps` times with the ratios to both images. `cubic`: 100 Å cell, N = 5,
//! default_F, 10 µm water; `triclinic`: 70 80 90 75 85 95, 3 phi steps × 4
//! mosaic domains (square spots, default_F).

use nanobragg_core::diff::leaves::check_param;
use nanobragg_core::diff::{jacobian_in, Param};
use nanobragg_core::render::{render, render_exact, simd_level, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::SimConfig;
use std::time::Instant;

const SEEDS: SetupSeeds = SetupSeeds { misset_idum: -5 };

fn config(case: &str, size: i64) -> SimConfig {
    let mut cfg = SimConfig::default();
    (cfg.detector.fpixels, cfg.detector.spixels) = (size, size);
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 5.0, 5.0);
    cfg.sf.default_f = 100.0;
    cfg.sampling.water_um = 10.0;
    if case == "triclinic" {
        cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
        cfg.crystal.mosaic_deg = 0.5;
        cfg.crystal.mosaic_domains = 4;
        cfg.crystal.phi0_deg = 10.0;
        cfg.crystal.osc_deg = 1.0;
        cfg.crystal.phisteps = 3;
    }
    cfg
}

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let (mut size, mut threads, mut reps, mut case) =
        (1024i64, 0usize, 1usize, "cubic".to_string());
    let mut no_exact = false;
    let (mut counts, mut floats): (Option<Vec<usize>>, Vec<Precision>) =
        (None, vec![Precision::Fast64, Precision::Fast32]);
    while let Some(a) = args.next() {
        let mut next = || args.next().expect("a value after the flag");
        match a.as_str() {
            "--threads" => threads = next().parse().expect("--threads N"),
            "--reps" => reps = next().parse().expect("--reps N"),
            "--case" => case = next(),
            "--no-exact" => no_exact = true,
            "--counts" => {
                counts = Some(next().split(',').map(|n| n.parse().expect("--counts N,M")).collect())
            }
            "--float" => {
                floats = match next().as_str() {
                    "f64" => vec![Precision::Fast64],
                    "f32" => vec![Precision::Fast32],
                    f => panic!("--float f64|f32, not {f}"),
                }
            }
            s => size = s.parse().expect("SIZE"),
        }
    }
    let cfg = config(&case, size);
    let plan = Plan::new(&cfg, SEEDS).expect("bench plan");
    let opts = RenderOptions { threads };
    let params: Vec<Param> =
        Param::ALL.into_iter().filter(|&p| check_param(&cfg, &plan, p).is_ok()).collect();
    let threads_used = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    println!("{case}, {size}², {threads_used} threads, {:?}, best of {reps}", simd_level());
    let fast = best(reps, || drop(render(&plan, opts)));
    let exact = if no_exact { f64::NAN } else { best(reps, || drop(render_exact(&plan, opts))) };
    println!("{:<22} {fast:9.3} s", "image, fast f64");
    println!("{:<22} {exact:9.3} s", "image, exact f64");
    let counts = counts.unwrap_or(vec![1, 8, params.len()]);
    for &float in &floats {
        for &n in &counts {
            let n = n.min(params.len());
            let ps = &params[..n];
            let t =
                best(reps, || drop(jacobian_in(&cfg, ps, SEEDS, opts, float).expect("jacobian")));
            println!(
                "{:<22} {t:9.3} s  {:6.1}× fast  {:6.1}× exact",
                format!("{n} parameters, {float:?}"),
                t / fast,
                t / exact
            );
        }
    }
}
