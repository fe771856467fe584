//! Stopping CPU renders early: a request any thread may make (Python's
//! Ctrl-C, seen by the binding's waiting thread), which the row loops look
//! at before each row. Rows after the request are left unrendered, so a
//! long render stops within a row of it; the caller that asked throws the
//! image away. The request is process-wide: every render running then
//! stops, until [`clear`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
/// Rows left unrendered since the last [`clear`].
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Asks every running CPU render to stop before its next row.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Withdraws the request (renders started from now on run to the end) and
/// returns how many rows it left unrendered.
pub fn clear() -> u64 {
    REQUESTED.store(false, Ordering::SeqCst);
    SKIPPED.swap(0, Ordering::SeqCst)
}

/// Whether a stop was asked: counts the row the caller then leaves out.
#[inline]
pub(crate) fn skip_row() -> bool {
    let stop = REQUESTED.load(Ordering::Relaxed);
    if stop {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
    }
    stop
}
