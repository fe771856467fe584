//! Timings of derivative images against the image alone.
//!
//! `cargo bench -p nanobragg-pipeline --bench derivatives -- [SIZE] [--threads N]
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
use nanobragg_core::render::{render, simd_level, Precision, RenderOptions};
use std::time::Instant;

/// The case's command line: `cubic` or `triclinic`, SIZE² pixels.
fn case_args(case: &str, size: i64) -> Vec<String> {
    let crystal = match case {
        "triclinic" => {
            "-cell 70 80 90 75 85 95 -mosaic 0.5 -mosaic_domains 4 -phi 10 -osc 1 -phisteps 3"
        }
        _ => "-cell 100 100 100 90 90 90",
    };
    // (no Fdump file from the working directory)
    format!("-detpixels {size} -N 5 -default_F 100 -water 10 -misset_seed 5 {crystal} -dump /nonexistent/nanobragg-bench/Fdump.bin")
        .split_whitespace()
        .map(String::from)
        .collect()
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
    // as the command line does (repeated renders keep their memory)
    nanobragg_pipeline::keep_freed_memory();
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
    let inv = nanobragg_pipeline::parse_args(&case_args(&case, size)).expect("bench arguments");
    let (plan, seeds) = inv.plan().expect("bench plan");
    let cfg = &inv.config;
    let opts = RenderOptions::default().threads(threads);
    let params: Vec<Param> =
        Param::ALL.into_iter().filter(|&p| check_param(cfg, &plan, p).is_ok()).collect();
    let threads_used = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    println!("{case}, {size}², {threads_used} threads, {:?}, best of {reps}", simd_level());
    let fast = best(reps, || drop(render::<f32>(&plan, opts)));
    let exact = if no_exact {
        f64::NAN
    } else {
        best(reps, || {
            drop(render::<f32>(&plan, RenderOptions { precision: Precision::Exact64, ..opts }))
        })
    };
    println!("{:<22} {fast:9.3} s", "image, fast f64");
    println!("{:<22} {exact:9.3} s", "image, exact f64");
    let counts = counts.unwrap_or(vec![1, 8, params.len()]);
    for &float in &floats {
        for &n in &counts {
            let n = n.min(params.len());
            let ps = &params[..n];
            let t = best(reps, || {
                drop(jacobian_in(cfg, ps, seeds.setup, opts, float).expect("jacobian"))
            });
            println!(
                "{:<22} {t:9.3} s  {:6.1}× fast  {:6.1}× exact",
                format!("{n} parameters, {float:?}"),
                t / fast,
                t / exact
            );
        }
    }
}
