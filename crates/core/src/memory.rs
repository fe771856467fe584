//! How much memory this process may still allocate.
//!
//! Physical memory alone is the wrong yardstick: under an address-space
//! limit (`ulimit -v`, `prlimit --as`) or a cgroup memory limit (containers,
//! batch schedulers) an allocation fails, and Rust aborts the process, long
//! before the machine runs out. [`available_bytes`] takes the least of every
//! limit that applies, read from `/proc` and the cgroup filesystem (Linux);
//! where none can be read, the physical memory is the answer.

use std::path::{Path, PathBuf};

/// Where nothing can be read (not Linux): assumed physical memory.
const FALLBACK_BYTES: u128 = 16 << 30;

/// What each thread may map besides the arrays setup counts: glibc gives
/// every thread that allocates its own malloc arena, which reserves 64 MiB
/// of address space, and Rust threads have 2 MiB stacks (the main thread's
/// 8 MiB is mapped already).
const AS_PER_THREAD: u128 = 66 << 20;

/// Memory actually used per thread (stack pages touched, arena in use,
/// per-thread buffers of the renderers), a generous estimate.
const RSS_PER_THREAD: u128 = 8 << 20;

/// Kept free in every case: the libraries' own allocations, output buffers,
/// the report and statistics passes.
const BASE_RESERVE: u128 = 64 << 20;

/// Bytes this process may still allocate: the least of the address-space
/// limit (`RLIMIT_AS`) less the process's current size, the cgroup memory
/// limit less the cgroup's usage (v2 `memory.max`, v1
/// `memory.limit_in_bytes`, for the process's cgroup and each one above
/// it), and the memory the kernel reports available (`MemAvailable` plus
/// `SwapFree`). Limits that are not set or cannot be read do not count;
/// with none readable, the physical memory (16 GiB where unknown).
pub fn available_bytes() -> u128 {
    headroom(&Sources::this_process()).least()
}

/// [`available_bytes`] less a reserve for the threads' stacks and malloc
/// arenas and the small allocations of a run: the most that the arrays a
/// run allocates up front may take together.
pub fn budget_bytes() -> u128 {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u128 + 1;
    headroom(&Sources::this_process()).budget(threads)
}

/// Requests of at most this many bytes are not checked: the budget keeps
/// [`BASE_RESERVE`] free for a run's small allocations in any case, and
/// reading the limits (`/proc`, the cgroup files, about 0.1 ms) takes
/// longer than a small render.
pub const UNCHECKED_BYTES: u128 = BASE_RESERVE;

/// [`budget_bytes`] where `bytes` is more than [`UNCHECKED_BYTES`], else
/// no limit (`u128::MAX`): what a request of `bytes` is checked against.
pub fn budget_for(bytes: u128) -> u128 {
    if bytes <= UNCHECKED_BYTES {
        u128::MAX
    } else {
        budget_bytes()
    }
}

/// The readings [`available_bytes`] combines (bytes; `None`: no such limit,
/// or not readable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Headroom {
    /// `RLIMIT_AS` less the current `VmSize`.
    address_space: Option<u128>,
    /// The tightest cgroup limit less that cgroup's usage.
    cgroup: Option<u128>,
    /// `MemAvailable + SwapFree`.
    available: Option<u128>,
    /// `MemTotal`.
    physical: Option<u128>,
}

impl Headroom {
    /// The least of the limits that apply.
    fn least(&self) -> u128 {
        self.budget(0)
    }

    /// The least of the limits, each less the reserve it needs for
    /// `threads` threads (an address-space limit counts reserved mappings,
    /// the others only memory in use).
    fn budget(&self, threads: u128) -> u128 {
        let reserve = |per_thread: u128| {
            if threads == 0 {
                0
            } else {
                BASE_RESERVE + threads * per_thread
            }
        };
        let limits = [
            self.address_space.map(|b| b.saturating_sub(reserve(AS_PER_THREAD))),
            self.cgroup.map(|b| b.saturating_sub(reserve(RSS_PER_THREAD))),
            self.available.map(|b| b.saturating_sub(reserve(RSS_PER_THREAD))),
        ];
        limits.into_iter().flatten().min().unwrap_or_else(|| {
            self.physical.unwrap_or(FALLBACK_BYTES).saturating_sub(reserve(RSS_PER_THREAD))
        })
    }
}

/// Where the readings come from: the files of this process, or (in tests)
/// sample texts.
struct Sources {
    /// `/proc/self/limits`.
    limits: Option<String>,
    /// `/proc/self/status`.
    status: Option<String>,
    /// `/proc/meminfo`.
    meminfo: Option<String>,
    /// `/proc/self/cgroup`.
    cgroup: Option<String>,
    /// `/proc/self/mountinfo`.
    mountinfo: Option<String>,
    /// Reads a file of the cgroup filesystem.
    read: fn(&Path) -> Option<String>,
}

impl Sources {
    fn this_process() -> Sources {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        Sources {
            limits: read("/proc/self/limits"),
            status: read("/proc/self/status"),
            meminfo: read("/proc/meminfo"),
            cgroup: read("/proc/self/cgroup"),
            mountinfo: read("/proc/self/mountinfo"),
            read: |p| std::fs::read_to_string(p).ok(),
        }
    }
}

fn headroom(s: &Sources) -> Headroom {
    let address_space = s.limits.as_deref().and_then(address_space_limit).map(|limit| {
        let used = s.status.as_deref().and_then(|t| kib_field(t, "VmSize:")).unwrap_or(0);
        limit.saturating_sub(used)
    });
    let meminfo = s.meminfo.as_deref();
    let field = |key| meminfo.and_then(|t| kib_field(t, key));
    let available = field("MemAvailable:").map(|a| a + field("SwapFree:").unwrap_or(0));
    let cgroup = match (s.cgroup.as_deref(), s.mountinfo.as_deref()) {
        (Some(cg), Some(mi)) => cgroup_headroom(cg, mi, s.read),
        _ => None,
    };
    Headroom { address_space, cgroup, available, physical: field("MemTotal:") }
}

/// A `Key:   N kB` line of `/proc/meminfo` or `/proc/self/status`, in bytes.
fn kib_field(text: &str, key: &str) -> Option<u128> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.trim();
        let kib: u128 = rest.strip_suffix("kB").unwrap_or(rest).trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// The soft address-space limit of `/proc/self/limits` (`Max address space
/// <soft> <hard> bytes`); `None` when unlimited.
fn address_space_limit(text: &str) -> Option<u128> {
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..].split_whitespace().next()?.parse().ok()
}

/// A cgroup limit file's value: `None` for `max` (v2) or a value so large
/// it means no limit (v1 writes `PAGE_COUNTER_MAX` pages).
fn limit_value(text: &str) -> Option<u128> {
    let v: u128 = text.trim().parse().ok()?;
    (v < 1 << 62).then_some(v)
}

/// A cgroup hierarchy this process belongs to: where it is mounted and the
/// process's cgroup directory in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hierarchy {
    /// The mount point (`/sys/fs/cgroup`, `/sys/fs/cgroup/memory`, ...).
    mount: PathBuf,
    /// The process's cgroup, a directory under `mount`.
    dir: PathBuf,
    /// v2 (`memory.max`, `memory.current`) or v1 (`memory.limit_in_bytes`,
    /// `memory.usage_in_bytes`).
    v2: bool,
}

impl Hierarchy {
    /// The limit and usage files.
    fn files(&self) -> (&'static str, &'static str) {
        if self.v2 {
            ("memory.max", "memory.current")
        } else {
            ("memory.limit_in_bytes", "memory.usage_in_bytes")
        }
    }
}

/// The memory hierarchies of this process from `/proc/self/cgroup`
/// (`0::/path` for v2, `N:...memory...:/path` for v1) and
/// `/proc/self/mountinfo` (where each is mounted, and which of its
/// directories the mount shows as its root).
fn hierarchies(cgroup: &str, mountinfo: &str) -> Vec<Hierarchy> {
    let mut out = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let v2 = id == "0" && controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "memory") {
            continue;
        }
        let Some((root, mount)) = cgroup_mount(mountinfo, v2) else { continue };
        // the mount shows the hierarchy from `root` down; a cgroup outside
        // it (another namespace's view) is not reachable
        let Some(rel) = Path::new(path).strip_prefix(&root).ok() else { continue };
        out.push(Hierarchy { dir: mount.join(rel), mount, v2 });
    }
    out
}

/// The (root, mount point) of the cgroup2 mount, or of the v1 mount with
/// the memory controller, from `/proc/self/mountinfo`.
fn cgroup_mount(mountinfo: &str, v2: bool) -> Option<(PathBuf, PathBuf)> {
    mountinfo.lines().find_map(|l| {
        // ID PARENT MAJ:MIN ROOT MOUNT OPTIONS [TAGS...] - TYPE SOURCE SUPER
        let (left, right) = l.split_once(" - ")?;
        let fields: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        let (root, mount) = (fields.get(3)?, fields.get(4)?);
        let fstype = *right.first()?;
        let fits = if v2 {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && right.get(2)?.split(',').any(|o| o == "memory")
        };
        fits.then(|| (PathBuf::from(unescape(root)), PathBuf::from(unescape(mount))))
    })
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) if b[i] == b'\\' => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The least `limit - usage` over the process's cgroup and the cgroups
/// above it up to the mount (a parent's limit caps its children), over
/// every memory hierarchy; `None` where no limit is set.
fn cgroup_headroom(
    cgroup: &str,
    mountinfo: &str,
    read: fn(&Path) -> Option<String>,
) -> Option<u128> {
    let mut least: Option<u128> = None;
    for h in hierarchies(cgroup, mountinfo) {
        let (limit_file, usage_file) = h.files();
        for dir in h.dir.ancestors().take_while(|d| d.starts_with(&h.mount)) {
            let Some(limit) = read(&dir.join(limit_file)).as_deref().and_then(limit_value) else {
                continue;
            };
            let usage = read(&dir.join(usage_file))
                .and_then(|t| t.trim().parse::<u128>().ok())
                .unwrap_or(0);
            let room = limit.saturating_sub(usage);
            least = Some(least.map_or(room, |l| l.min(room)));
        }
    }
    least
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small requests are not checked; larger ones against this process's
    /// readings (which leave less than everything).
    #[test]
    fn only_requests_past_the_reserve_read_the_limits() {
        assert_eq!(budget_for(0), u128::MAX);
        assert_eq!(budget_for(UNCHECKED_BYTES), u128::MAX);
        assert!(budget_for(UNCHECKED_BYTES + 1) < u128::MAX);
    }

    const MEMINFO: &str = "MemTotal:       24684092 kB\nMemFree:         1000000 kB\n\
                           MemAvailable:   19192020 kB\nBuffers:            1234 kB\n\
                           SwapTotal:       2097148 kB\nSwapFree:        1048576 kB\n";

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
                          Max cpu time              unlimited            unlimited            seconds   \n\
                          Max stack size            8388608              unlimited            bytes     \n\
                          Max address space         4294967296           unlimited            bytes     \n\
                          Max locked memory         8388608              8388608              bytes     \n";

    const STATUS: &str =
        "Name:\tnanobragg\nVmPeak:\t  200000 kB\nVmSize:\t  102400 kB\nVmRSS:\t    5000 kB\n";

    #[test]
    fn proc_fields() {
        assert_eq!(kib_field(MEMINFO, "MemAvailable:"), Some(19192020 * 1024));
        assert_eq!(kib_field(MEMINFO, "SwapFree:"), Some(1 << 30));
        assert_eq!(kib_field(MEMINFO, "Missing:"), None);
        assert_eq!(kib_field(STATUS, "VmSize:"), Some(100 << 20));
        assert_eq!(address_space_limit(LIMITS), Some(4 << 30));
        assert_eq!(address_space_limit(&LIMITS.replace("4294967296 ", "unlimited  ")), None);
        assert_eq!(address_space_limit("no such line"), None);
        assert_eq!(limit_value("max\n"), None);
        assert_eq!(limit_value("9223372036854771712\n"), None);
        assert_eq!(limit_value("536870912\n"), Some(512 << 20));
        assert_eq!(limit_value("garbage"), None);
    }

    const MOUNTS_HYBRID: &str =
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
        35 31 0:32 / /sys/fs/cgroup/memory rw,relatime master:7 - cgroup cgroup rw,memory\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    const MOUNTS_V2: &str = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
        29 22 0:26 /user.slice /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";

    #[test]
    fn cgroup_hierarchies() {
        let cg = "4:memory:/jobs/42\n1:cpu:/\n0::/\n";
        let h = hierarchies(cg, MOUNTS_HYBRID);
        assert_eq!(
            h,
            [
                Hierarchy {
                    mount: "/sys/fs/cgroup/memory".into(),
                    dir: "/sys/fs/cgroup/memory/jobs/42".into(),
                    v2: false
                },
                Hierarchy {
                    mount: "/sys/fs/cgroup/unified".into(),
                    dir: "/sys/fs/cgroup/unified".into(),
                    v2: true
                },
            ]
        );
        // the mount's root is stripped; a cgroup outside it is skipped
        let h = hierarchies("0::/user.slice/run-1.scope\n", MOUNTS_V2);
        assert_eq!(h[0].dir, PathBuf::from("/sys/fs/cgroup/run-1.scope"));
        assert!(hierarchies("0::/system.slice/x\n", MOUNTS_V2).is_empty());
        // controllers listed together
        assert_eq!(
            hierarchies("5:cpu,memory:/a\n", &MOUNTS_HYBRID.replace("rw,memory", "rw,cpu,memory"))
                .len(),
            1
        );
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
    }

    /// A fake cgroup filesystem: v2, limit 1 GiB on the job (0.25 GiB used)
    /// and 3 GiB on its parent (2.5 GiB used).
    fn fake_fs(p: &Path) -> Option<String> {
        let s = p.to_str()?;
        Some(
            match s {
                "/sys/fs/cgroup/run-1.scope/job/memory.max" => "1073741824\n",
                "/sys/fs/cgroup/run-1.scope/job/memory.current" => "268435456\n",
                "/sys/fs/cgroup/run-1.scope/memory.max" => "3221225472\n",
                "/sys/fs/cgroup/run-1.scope/memory.current" => "2684354560\n",
                "/sys/fs/cgroup/memory.max" => "max\n",
                _ => return None,
            }
            .to_string(),
        )
    }

    #[test]
    fn cgroup_limits_take_the_tightest_ancestor() {
        let room = cgroup_headroom("0::/user.slice/run-1.scope/job\n", MOUNTS_V2, fake_fs);
        assert_eq!(room, Some(512 << 20));
        // no limit anywhere: none
        assert_eq!(cgroup_headroom("0::/user.slice\n", MOUNTS_V2, fake_fs), None);
    }

    #[test]
    fn headroom_is_the_least_limit() {
        let mut s = Sources {
            limits: Some(LIMITS.into()),
            status: Some(STATUS.into()),
            meminfo: Some(MEMINFO.into()),
            cgroup: Some("0::/user.slice/run-1.scope/job\n".into()),
            mountinfo: Some(MOUNTS_V2.into()),
            read: fake_fs,
        };
        let h = headroom(&s);
        assert_eq!(h.address_space, Some((4 << 30) - (100 << 20)));
        assert_eq!(h.cgroup, Some(512 << 20));
        assert_eq!(h.available, Some(19192020 * 1024 + (1 << 30)));
        assert_eq!(h.least(), 512 << 20);
        // the reserve comes off: 64 MiB + 2 threads x 8 MiB from the cgroup's
        assert_eq!(h.budget(2), (512 << 20) - (80 << 20));
        s.cgroup = None;
        assert_eq!(headroom(&s).least(), (4 << 30) - (100 << 20));
        // the address space reserves the threads' arenas
        assert_eq!(headroom(&s).budget(2), (4 << 30) - (100 << 20) - (64 << 20) - 2 * (66 << 20));
        s.limits = None;
        assert_eq!(headroom(&s).least(), 19192020 * 1024 + (1 << 30));
        // nothing readable but the total
        s.meminfo = Some("MemTotal: 1024 kB\n".into());
        assert_eq!(headroom(&s).least(), 1 << 20);
        assert_eq!(headroom(&s).budget(1), 0);
        s.meminfo = None;
        assert_eq!(headroom(&s).least(), FALLBACK_BYTES);
    }

    /// This process's own reading is positive and at most what the kernel
    /// reports available.
    #[test]
    fn this_process() {
        let avail = available_bytes();
        assert!(avail > 0);
        assert!(budget_bytes() <= avail);
        if let Some(a) = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| Some(kib_field(&t, "MemAvailable:")? + kib_field(&t, "SwapFree:")?))
        {
            // memory may have been freed since
            assert!(avail <= a + (1 << 30), "{avail} > {a}");
        }
    }
}
