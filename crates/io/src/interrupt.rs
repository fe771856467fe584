//! A run stopped by a signal removes its temporaries.
//!
//! Outputs are written under temporary names beside their targets and renamed
//! into place when complete (see [`crate::atomic`]). A run stopped by SIGINT,
//! SIGTERM or SIGHUP meanwhile would leave those temporaries behind:
//! [`register`] names one; the signal handler unlinks every registered file
//! (`unlink` is async-signal-safe) and then lets the signal take its default
//! course, so the exit status still tells of the signal. A signal the parent
//! told us to ignore (`nohup`) stays ignored.

#[cfg(unix)]
mod imp {
    use std::ffi::{c_char, CString};
    use std::path::Path;
    use std::ptr::null_mut;
    use std::sync::atomic::{AtomicPtr, Ordering};
    use std::sync::Once;

    /// Paths to unlink on a signal (null: a free slot). A path, once
    /// registered, is never freed: the handler may be reading it on another
    /// thread at the moment it is unregistered.
    static SLOTS: [AtomicPtr<c_char>; 16] = [const { AtomicPtr::new(null_mut()) }; 16];
    static INSTALL: Once = Once::new();
    const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

    extern "C" fn on_signal(sig: libc::c_int) {
        for slot in &SLOTS {
            let p = slot.load(Ordering::SeqCst);
            if !p.is_null() {
                // SAFETY: a leaked NUL-terminated path (see SLOTS)
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
                libc::sigaction(sig, &new, std::ptr::null_mut());
            }
        }
    }

    /// A registered path; dropping it unregisters the path.
    pub struct Registered(*mut c_char);

    /// Removes `path` if the process is interrupted before the returned
    /// guard drops (`None`: all slots taken, or a path with a NUL byte).
    pub fn register(path: &Path) -> Option<Registered> {
        INSTALL.call_once(install);
        let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
        let p = c.into_raw();
        for slot in &SLOTS {
            if slot.compare_exchange(null_mut(), p, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                return Some(Registered(p));
            }
        }
        // SAFETY: `p` came from into_raw above and was never shared
        drop(unsafe { CString::from_raw(p) });
        None
    }

    impl Drop for Registered {
        fn drop(&mut self) {
            for slot in &SLOTS {
                if slot
                    .compare_exchange(self.0, null_mut(), Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    return;
                }
            }
        }
    }
}

#[cfg(not(unix))]
mod imp {
    /// A registered path (no signals to catch here).
    pub struct Registered;

    /// Nothing to do where there are no signals.
    pub fn register(_path: &std::path::Path) -> Option<Registered> {
        None
    }
}

pub use imp::{register, Registered};
