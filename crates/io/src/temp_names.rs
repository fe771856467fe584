//! The names of the hidden files an output passes through, and the removal
//! of those a killed process left.
//!
//! A temporary is `.<name>.tmp.<host>.<pid>.<n>` and the old file kept aside
//! while the outputs of a run are renamed into place is
//! `.<name>.old.<host>.<pid>.<n>` (see [`crate::atomic::commit_all`]), both
//! beside the target. The host and process id say whose a file is: a
//! SIGKILLed process cannot remove its own, and on a filesystem that several
//! hosts share (a cluster's) only the host that made a file can tell whether
//! its process is gone ([`remove_stale_temporaries`]).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The longest file name most filesystems take (`NAME_MAX`).
pub(crate) const NAME_MAX: usize = 255;

/// The most bytes of the host name a file name carries.
const HOST_MAX: usize = 64;

/// What a hidden file beside an output holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The new content, until it is renamed over its target.
    Temporary,
    /// The old content, kept aside until every output of a run is in place.
    Backup,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Temporary => "tmp",
            Kind::Backup => "old",
        }
    }
}

/// This host's name as file names carry it: what `gethostname` gives, at
/// most [`HOST_MAX`] bytes, with any byte a file name should not hold (`/`,
/// control characters, white space) replaced by `_`; `localhost` where
/// there is none.
pub fn host_name() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| clean_host(&raw_host_name()))
}

#[cfg(unix)]
fn raw_host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    if !ok {
        return String::new();
    }
    // (a name that fills the buffer may come without its NUL)
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(not(unix))]
fn raw_host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}

fn clean_host(raw: &str) -> String {
    let mut host: String = raw
        .chars()
        .map(|c| if c == '/' || c.is_control() || c.is_whitespace() { '_' } else { c })
        .collect();
    let mut cut = host.len().min(HOST_MAX);
    while !host.is_char_boundary(cut) {
        cut -= 1;
    }
    host.truncate(cut);
    if host.is_empty() {
        host = "localhost".into();
    }
    host
}

/// The hidden name of a file of `kind` for an output named `name`, made by
/// process `pid` on `host` (the `n`th of that process): `.<name>.<tag>.<host>.<pid>.<n>`,
/// with `name` cut short where the whole would pass [`NAME_MAX`] (the host,
/// process id and counter keep it unique).
pub(crate) fn hidden_name(name: &OsStr, kind: Kind, host: &str, pid: u32, n: u64) -> OsString {
    let suffix = format!(".{}.{host}.{pid}.{n}", kind.tag());
    let room = NAME_MAX - 1 - suffix.len();
    let mut out = OsString::from(".");
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let bytes = name.as_bytes();
        let mut cut = bytes.len().min(room);
        // not inside a UTF-8 character: the name stays text where it was
        while cut > 0 && cut < bytes.len() && bytes[cut] & 0xC0 == 0x80 {
            cut -= 1;
        }
        out.push(OsStr::from_bytes(&bytes[..cut]));
    }
    #[cfg(not(unix))]
    {
        let name = name.to_string_lossy();
        let mut cut = name.len().min(room);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(&name[..cut]);
    }
    out.push(suffix);
    out
}

/// The process id in `file`, where `file` is the name of a temporary that
/// a process of `host` made (`None` otherwise, backups included).
fn temporary_of(file: &str, host: &str) -> Option<u32> {
    let rest = file.strip_prefix('.')?;
    let (rest, n) = rest.rsplit_once('.')?;
    let (rest, pid) = rest.rsplit_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(n) || !digits(pid) {
        return None;
    }
    let name = rest.strip_suffix(host)?.strip_suffix(".tmp.")?;
    if name.is_empty() {
        return None;
    }
    pid.parse().ok()
}

/// Whether no process of id `pid` runs on this host (a process of another
/// user counts as running).
#[cfg(unix)]
fn is_gone(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return true };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 checks that the process exists and sends nothing
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn is_gone(_pid: u32) -> bool {
    false
}

/// Removes, in `dir`, the temporaries that processes of this host left
/// behind and that are gone (a SIGKILLed run's: any other way of stopping
/// removes its own); returns those removed, sorted. A temporary of another
/// host, of a process still running, or a file kept aside while a run's
/// outputs were renamed (`.old.`) stays.
pub fn remove_stale_temporaries(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let host = host_name();
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| temporary_of(n, host)) else { continue };
        if pid == std::process::id() || !is_gone(pid) {
            continue;
        }
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed.push(entry.path()),
            // (another process cleaned up first)
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_for_their_host_only() {
        let made = hidden_name("run_00001.nxs".as_ref(), Kind::Temporary, "node7.lab", 4321, 3);
        let made = made.to_str().unwrap();
        assert_eq!(made, ".run_00001.nxs.tmp.node7.lab.4321.3");
        assert_eq!(temporary_of(made, "node7.lab"), Some(4321));
        assert_eq!(temporary_of(made, "lab"), None);
        assert_eq!(temporary_of(made, "node8.lab"), None);
        let backup = hidden_name("x.bin".as_ref(), Kind::Backup, "h", 9, 0);
        assert_eq!(temporary_of(backup.to_str().unwrap(), "h"), None);
        for stray in [".x.tmp.h.12", "x.tmp.h.1.2", ".x.tmp.h.a.1", ".tmp.h.1.2", ".x.tmp.h.1."] {
            assert_eq!(temporary_of(stray, "h"), None, "{stray}");
        }
    }

    #[test]
    fn host_names_are_file_name_safe() {
        assert_eq!(clean_host("a/b c\n"), "a_b_c_");
        assert_eq!(clean_host(""), "localhost");
        assert_eq!(clean_host(&"é".repeat(40)).len(), 64);
        assert!(!host_name().is_empty() && !host_name().contains('/'));
    }

    #[cfg(unix)]
    #[test]
    fn only_the_temporaries_of_gone_processes_of_this_host_are_removed() {
        let dir = std::env::temp_dir().join(format!("nanobragg-io-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // no process has an id at or above pid_max
        let gone: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4_194_304);
        let host = host_name();
        let file = |kind, host: &str, pid| {
            let name = hidden_name("out.bin".as_ref(), kind, host, pid, 0);
            std::fs::write(dir.join(&name), b"x").unwrap();
            dir.join(name)
        };
        let stale = file(Kind::Temporary, host, gone);
        let kept = [
            file(Kind::Temporary, host, std::process::id()),
            file(Kind::Temporary, &format!("other-{host}"), gone),
            file(Kind::Backup, host, gone),
        ];
        assert_eq!(remove_stale_temporaries(&dir).unwrap(), std::slice::from_ref(&stale));
        assert!(!stale.exists());
        assert!(kept.iter().all(|p| p.exists()), "{kept:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
