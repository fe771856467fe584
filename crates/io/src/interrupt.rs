//! A run stopped by a signal removes its temporaries.
//!
//! Outputs are written under temporary names beside their targets and renamed
//! into place when complete (see [`crate::atomic`]). A run stopped by SIGINT,
//! SIGTERM, SIGHUP or SIGABRT (an `abort()`, such as a failed allocation)
//! meanwhile would leave those temporaries behind: [`register`] names one; the
//! signal handler unlinks every registered file (`unlink` is
//! async-signal-safe) and then lets the signal take its default course, so
//! the exit status still tells of the signal. A signal the parent told us to
//! ignore (`nohup`) stays ignored. Any number of paths can be registered.
//!
//! A signal may be handled on any thread while others go on: a path is
//! registered before its file is created, and [`created`] after it, so that
//! no file is created where a running handler can no longer see it.
//!
//! While the outputs of a run are being renamed into place ([`defer`]),
//! SIGINT, SIGTERM and SIGHUP wait: the handler notes the signal and
//! returns, and it takes its course when the renames are done, so that a
//! run stopped then has replaced all of its outputs or none (SIGABRT, which
//! `abort()` raises again at once, does not wait).

#[cfg(unix)]
mod imp {
    use std::ffi::{c_char, CString};
    use std::path::Path;
    use std::ptr::null_mut;
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};
    use std::sync::Once;

    /// One registered path (null: a free slot). Slots are never freed, so
    /// that the handler can walk the list while other threads add to it;
    /// a free one is reused, so there are as many as paths registered at
    /// one time.
    struct Slot {
        path: AtomicPtr<c_char>,
        next: *mut Slot,
    }

    /// The newest slot; each points to the one added before it.
    static HEAD: AtomicPtr<Slot> = AtomicPtr::new(null_mut());
    /// Set by the handler before it reads any path: from then on a path
    /// unregistered is leaked rather than freed (the handler may hold it).
    static IN_HANDLER: AtomicBool = AtomicBool::new(false);
    /// How many [`Deferred`] guards are alive.
    static DEFERRING: AtomicUsize = AtomicUsize::new(0);
    /// A signal that came while [`DEFERRING`] (0: none).
    static PENDING: AtomicI32 = AtomicI32::new(0);
    static INSTALL: Once = Once::new();
    const SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGABRT];

    /// The slots, newest first.
    fn slots() -> impl Iterator<Item = &'static Slot> {
        let mut p = HEAD.load(Ordering::SeqCst);
        std::iter::from_fn(move || {
            // SAFETY: slots are leaked boxes, never freed, and `next` is
            // set before a slot is published
            let slot = unsafe { p.as_ref() }?;
            p = slot.next;
            Some(slot)
        })
    }

    extern "C" fn on_signal(sig: libc::c_int) {
        if sig != libc::SIGABRT && DEFERRING.load(Ordering::SeqCst) > 0 {
            PENDING.store(sig, Ordering::SeqCst);
            // a guard dropped before the store above has not seen it: then
            // the signal takes its course here
            if DEFERRING.load(Ordering::SeqCst) > 0 {
                return;
            }
        }
        end_with(sig);
    }

    /// Removes every registered file and ends the process with `sig`
    /// (async-signal-safe).
    fn end_with(sig: libc::c_int) {
        IN_HANDLER.store(true, Ordering::SeqCst);
        for slot in slots() {
            let p = slot.path.load(Ordering::SeqCst);
            if !p.is_null() {
                // SAFETY: a NUL-terminated path not freed once IN_HANDLER is set
                unsafe { libc::unlink(p) };
            }
        }
        // SAFETY: async-signal-safe calls; the default action ends the process
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }

    fn install() {
        for sig in SIGNALS {
            // SAFETY: plain sigaction calls with zeroed (valid) structs
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                    || old.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut new.sa_mask);
                // (a deferred signal's handler returns: calls it cut short go on)
                new.sa_flags = libc::SA_RESTART;
                libc::sigaction(sig, &new, std::ptr::null_mut());
            }
        }
    }

    /// Holds SIGINT, SIGTERM and SIGHUP back until it drops (see [`defer`]).
    pub struct Deferred(());

    /// Makes SIGINT, SIGTERM and SIGHUP wait until the returned guard drops,
    /// then take their course: for work that must not stop half done.
    pub fn defer() -> Deferred {
        INSTALL.call_once(install);
        DEFERRING.fetch_add(1, Ordering::SeqCst);
        Deferred(())
    }

    impl Drop for Deferred {
        fn drop(&mut self) {
            if DEFERRING.fetch_sub(1, Ordering::SeqCst) == 1 {
                let sig = PENDING.swap(0, Ordering::SeqCst);
                if sig != 0 {
                    end_with(sig);
                }
            }
        }
    }

    /// A registered path; dropping it unregisters the path.
    pub struct Registered {
        slot: &'static Slot,
        path: *mut c_char,
    }

    /// Removes `path` if the process is interrupted before the returned
    /// guard drops (`None`: a path with a NUL byte, which cannot be a file).
    pub fn register(path: &Path) -> Option<Registered> {
        INSTALL.call_once(install);
        let p = CString::new(path.as_os_str().as_encoded_bytes()).ok()?.into_raw();
        for slot in slots() {
            if slot.path.compare_exchange(null_mut(), p, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            {
                return Some(Registered { slot, path: p });
            }
        }
        let slot = Box::leak(Box::new(Slot { path: AtomicPtr::new(p), next: null_mut() }));
        let mut head = HEAD.load(Ordering::SeqCst);
        loop {
            slot.next = head;
            match HEAD.compare_exchange(head, slot, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(Registered { slot, path: p }),
                Err(now) => head = now,
            }
        }
    }

    /// Called after a registered file is created: where a handler on
    /// another thread has started meanwhile (its walk may have passed the
    /// path before the file existed), removes the file and waits for the
    /// handler to end the process; otherwise returns at once.
    pub fn created(path: &Path) {
        // A handler whose IN_HANDLER store comes after this load walks the
        // slots after it, so after the file was created: it removes it.
        if IN_HANDLER.load(Ordering::SeqCst) {
            let _ = std::fs::remove_file(path);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }

    impl Drop for Registered {
        fn drop(&mut self) {
            self.slot.path.store(null_mut(), Ordering::SeqCst);
            // A handler that set IN_HANDLER after this load reads the slot
            // after the store above (one total order of SeqCst operations),
            // so it cannot see the path: free it. Otherwise leak it.
            if !IN_HANDLER.load(Ordering::SeqCst) {
                // SAFETY: from into_raw in register, and no longer reachable
                drop(unsafe { CString::from_raw(self.path) });
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// More paths than any fixed table held are all registered, and a
        /// freed slot is reused.
        #[test]
        fn any_number_of_paths() {
            let paths: Vec<_> =
                (0..100).map(|i| Path::new("/nonexistent").join(format!("p{i}"))).collect();
            let guards: Vec<_> = paths.iter().map(|p| register(p).unwrap()).collect();
            let registered = |p: &Path| {
                slots().any(|s| {
                    let q = s.path.load(Ordering::SeqCst);
                    // SAFETY: a live registered path (this test holds its guard)
                    !q.is_null()
                        && unsafe { std::ffi::CStr::from_ptr(q) }.to_bytes()
                            == p.as_os_str().as_encoded_bytes()
                })
            };
            assert!(paths.iter().all(|p| registered(p)));
            let count = slots().count();
            drop(guards);
            assert!(!paths.iter().any(|p| registered(p)));
            let again: Vec<_> = paths.iter().map(|p| register(p).unwrap()).collect();
            // (other tests may register a few paths meanwhile)
            assert!(slots().count() < count + 50, "the freed slots are not reused");
            drop(again);
        }
    }
}

#[cfg(not(unix))]
mod imp {
    /// A registered path (no signals to catch here).
    pub struct Registered;

    /// Holds nothing back (no signals here).
    pub struct Deferred;

    /// Nothing to hold back where there are no signals.
    pub fn defer() -> Deferred {
        Deferred
    }

    /// Nothing to do where there are no signals.
    pub fn register(_path: &std::path::Path) -> Option<Registered> {
        None
    }

    /// Nothing to do where there are no signals.
    pub fn created(_path: &std::path::Path) {}
}

pub use imp::{created, defer, register, Registered};
