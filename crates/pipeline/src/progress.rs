//! The progress spinner of a long render.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How long a render runs before the progress spinner appears.
pub(crate) const PROGRESS_DELAY: Duration = Duration::from_secs(1);

/// Runs `work` on a worker thread. When `show` and it takes longer than
/// `delay`, shows `what` with a spinner and the elapsed time on stderr until
/// it ends (when stderr is not a terminal: a line before and one after).
pub(crate) fn with_progress<T: Send>(
    show: bool,
    delay: Duration,
    what: &str,
    work: impl FnOnce() -> T + Send,
) -> T {
    if !show {
        return work();
    }
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = scope.spawn(move || {
            let out = work();
            let _ = tx.send(());
            out
        });
        let start = Instant::now();
        if rx.recv_timeout(delay).is_err() {
            if std::io::stderr().is_terminal() {
                let bar = indicatif::ProgressBar::new_spinner().with_elapsed(start.elapsed());
                if let Ok(style) =
                    indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]")
                {
                    bar.set_style(style);
                }
                bar.set_message(what.to_string());
                bar.enable_steady_tick(Duration::from_millis(120));
                let _ = rx.recv();
                bar.finish_and_clear();
            } else {
                eprintln!("{what}");
                let _ = rx.recv();
                eprintln!("done in {:.1} s", start.elapsed().as_secs_f64());
            }
        }
        match worker.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_wraps_the_work() {
        let slow = || {
            std::thread::sleep(Duration::from_millis(60));
            42
        };
        assert_eq!(with_progress(true, Duration::from_millis(5), "slow work", slow), 42);
        assert_eq!(with_progress(true, Duration::from_secs(5), "quick work", || 7), 7);
        assert_eq!(with_progress(false, Duration::ZERO, "hidden", || "x"), "x");
    }

    #[test]
    #[should_panic(expected = "worker failed")]
    fn progress_passes_on_a_panic() {
        with_progress(true, Duration::from_millis(1), "failing work", || -> u8 {
            panic!("worker failed")
        });
    }
}
