//! f32 parity: every golden case that writes a float image is run again with `-dtype float32`
//! appended, and its float image must stay close to the C program's (f64) image:
//! Pearson correlation ≥ 0.9999 and max |ours − C| ≤ 1e-3 · max |C|.
//!
//! Uses the golden harness of `tests/common` (the same knobs: `GOLDEN_CASES`, `GOLDEN_JOBS`,
//! `GOLDEN_TIMEOUT`, `NANOBRAGG_BIN`). Run: `cargo test --release -p nanobragg-cli --test
//! golden_f32`. The table goes to stderr.

mod common;

use common::{agreement, cases, f32_image, report, run_case, Case};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Minimum Pearson correlation with the C image.
const MIN_CORR: f64 = 0.9999;
/// Maximum |ours - C| relative to max |C|.
const MAX_REL_DIFF: f64 = 1e-3;

/// (correlation, max|d|/max|C|) of two images, or why they cannot be compared.
fn compare(ours: &[f32], theirs: &[f32]) -> Result<(f64, f64), String> {
    if ours.len() != theirs.len() {
        return Err(format!("{} pixels, C has {}", ours.len(), theirs.len()));
    }
    if let Some(i) = ours.iter().position(|v| !v.is_finite()) {
        return Err(format!("non-finite pixel {i}: {}", ours[i]));
    }
    let (corr, rel, _) = agreement(ours, theirs, MAX_REL_DIFF);
    Ok((corr, rel))
}

/// Run one case in f32 and compare its float image.
fn check(case: &Case) -> Result<(f64, f64), String> {
    let mut f32_case = case.clone();
    f32_case.args.push_str(" -dtype float32");
    let run = run_case(&f32_case);
    if let Some(e) = &run.error {
        return Err(e.clone());
    }
    let ours = f32_image(run.file("float.bin")?);
    let theirs = f32_image(&case.golden_file("float.bin")?);
    compare(&ours, &theirs)
}

#[test]
fn float32_parity() {
    let mut selected: Vec<&Case> = cases().iter().filter(|c| c.has_output("float.bin")).collect();
    if selected.is_empty() {
        report("golden f32: no case selected\n");
        return;
    }
    selected.sort_by_key(|c| std::cmp::Reverse(c.npix()));
    let jobs = std::env::var("GOLDEN_JOBS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(2)
        .clamp(1, selected.len());
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(case) = selected.get(i) else { break };
                let r = check(case);
                results.lock().unwrap().push((case.id.clone(), r));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out =
        format!("==== golden float.bin with -dtype float32: {} cases ====\n", results.len());
    let mut failing = Vec::new();
    let (mut worst_corr, mut worst_rel) = (1f64, 0f64);
    for (id, r) in &results {
        match r {
            Ok((corr, rel)) => {
                let pass = *corr >= MIN_CORR && *rel <= MAX_REL_DIFF;
                worst_corr = worst_corr.min(*corr);
                worst_rel = worst_rel.max(*rel);
                out.push_str(&format!(
                    "{id:<28} {}  corr={corr:.9}  max|d|/max={rel:.3e}\n",
                    if pass { "PASS" } else { "FAIL" }
                ));
                if !pass {
                    failing.push(id.clone());
                }
            }
            Err(e) => {
                out.push_str(&format!("{id:<28} FAIL  {e}\n"));
                failing.push(id.clone());
            }
        }
    }
    out.push_str(&format!(
        "golden f32: {}/{} cases pass; worst corr {worst_corr:.9}, worst max|d|/max {worst_rel:.3e} \
         (bounds {MIN_CORR}, {MAX_REL_DIFF:e})\n",
        results.len() - failing.len(),
        results.len()
    ));
    report(&out);
    assert!(failing.is_empty(), "golden f32: failing cases: {}", failing.join(", "));
}
