//! Allocator tuning for processes that render again and again.
//!
//! glibc returns freed memory at the top of its heap to the system and maps
//! (and on free unmaps) blocks above a threshold it adjusts as it goes.
//! Whether a render's freed planes stay in the process then depends on
//! which small allocations happen to lie above them, and a process that
//! renders repeatedly (`refine`, `-batch`, derivatives) can fault every
//! plane in again on every iteration: on `refine` at 512², 0.8 s of a 3.7 s
//! run went to the kernel. [`keep_freed_memory`] keeps freed memory in the
//! process instead (peak memory is unchanged; it is not given back early).

/// Keep freed heap memory in the process and serve blocks up to 32 MiB from
/// the heap (glibc on Linux; elsewhere this does nothing). Call once, early
/// in `main`.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: i32, value: i32) -> i32;
        }
        const M_TRIM_THRESHOLD: i32 = -1;
        const M_MMAP_THRESHOLD: i32 = -3;
        // SAFETY: mallopt only changes glibc's tuning parameters (valid
        // values: 32 MiB is glibc's largest mmap threshold on 64-bit); it
        // takes the allocator's lock, so it is safe at any time.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, 32 << 20);
            mallopt(M_TRIM_THRESHOLD, i32::MAX);
        }
    }
}
