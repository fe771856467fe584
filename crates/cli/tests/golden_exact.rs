//! `-exact`: every golden case rendered with the reference f64 path must give
//! the C program's float image bit for bit.

mod common;

use common::{cases, run_case, Case};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

fn check(case: &Case) -> Result<(), String> {
    let mut exact = case.clone();
    exact.args.push_str(" -exact");
    let run = run_case(&exact);
    if let Some(e) = &run.error {
        return Err(e.clone());
    }
    let ours = run.file("float.bin")?;
    let theirs = case.golden_file("float.bin")?;
    if ours == theirs.as_slice() {
        Ok(())
    } else {
        let differ = ours.chunks(4).zip(theirs.chunks(4)).filter(|(a, b)| a != b).count();
        Err(format!("{differ} pixels differ"))
    }
}

#[test]
fn exact_path_is_bit_identical() {
    let selected: Vec<&Case> = cases().iter().filter(|c| c.has_output("float.bin")).collect();
    assert!(!selected.is_empty());
    let jobs = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(case) = selected.get(i) else { break };
                if let Err(e) = check(case) {
                    failures.lock().unwrap().push(format!("{}: {e}", case.id));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    eprintln!(
        "-exact: {}/{} golden float images bit-identical",
        selected.len() - failures.len(),
        selected.len()
    );
    assert!(failures.is_empty(), "not bit-identical: {failures:?}");
}
