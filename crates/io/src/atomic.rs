//! Atomic output files: the one way nanobragg writes a file.
//!
//! An output is written to a temporary file beside its target
//! (`.<name>.tmp.<pid>.<n>`, the name cut short where the whole would pass
//! 255 bytes; in the target's directory so that the rename stays on one
//! filesystem) and renamed over the target only when complete
//! ([`Pending::commit`], or [`commit_all`] for the outputs of one run). A
//! reader sees the old file or the whole new one, never a mix; an error, a
//! [`Pending`] dropped uncommitted, or a SIGINT/SIGTERM/SIGHUP/SIGABRT (see
//! [`crate::interrupt`]) removes the temporary and leaves the old file as it
//! was. A symbolic link is written through (the file it points to is
//! replaced, the link stays); a file with other hard links gets a new inode,
//! so its other names keep the old content. A device or pipe (`/dev/null`)
//! is written in place: a rename would replace it with a regular file. An
//! existing target this process may not write is refused, as nanoBragg.c's
//! `fopen` would fail on it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::IoError;

/// Distinguishes the temporaries of one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary file: removed when dropped, unless renamed into place.
struct Temp {
    /// Empty once renamed.
    path: PathBuf,
    /// Unlinks `path` if a signal stops the process first.
    _cleanup: Option<crate::interrupt::Registered>,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// An output being written: its content goes to a temporary file (or, for a
/// device or pipe, straight to the target) until [`Pending::commit`].
pub struct Pending {
    /// The file replaced on commit (symbolic links resolved).
    target: PathBuf,
    /// For a device or pipe `None` until written: opening a pipe waits for
    /// its reader, so each is opened when its turn to be written comes.
    file: Option<File>,
    /// `None`: a device or pipe, written in place.
    temp: Option<Temp>,
}

impl Pending {
    /// Starts writing `target`: creates its temporary (or opens a device or
    /// pipe for writing). The error names `target`.
    pub fn create(target: &Path) -> Result<Pending, IoError> {
        let wrap = |source| IoError::Write { path: target.to_path_buf(), source };
        let real = resolve(target);
        // nanoBragg.c's fopen fails on a file it may not write; a rename
        // would replace it all the same, so ask as that open would
        writable_if_present(&real).map_err(wrap)?;
        if writes_in_place(&real) {
            return Ok(Pending { target: real, file: None, temp: None });
        }
        let name = real.file_name().unwrap_or_default();
        let dir = match real.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(temp_name(name, std::process::id(), n));
            // registered before it exists, so that no signal finds it
            // created but unregistered (unlinking a name not yet created
            // does no harm)
            let _cleanup = crate::interrupt::register(&path);
            // read access too: a mapping for writing needs it
            match File::options().read(true).write(true).create_new(true).open(&path) {
                Ok(file) => {
                    crate::interrupt::created(&path);
                    let temp = Some(Temp { path, _cleanup });
                    return Ok(Pending { target: real, file: Some(file), temp });
                }
                // left by an earlier process of the same id
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(wrap(e)),
            }
        }
    }

    /// The file this output replaces (symbolic links resolved).
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary this output is written to until [`Self::commit`]
    /// (`None`: a device or pipe, written in place), for a writer that
    /// opens the file by name itself (HDF5).
    pub fn temp_path(&self) -> Option<&Path> {
        self.temp.as_ref().map(|t| t.path.as_path())
    }

    /// Opens a device or pipe target for writing now rather than at
    /// [`Self::write`] (a temporary is open from [`Self::create`]), so that
    /// a caller can tell a target that cannot be opened from a write that
    /// fails. Opening a pipe waits for its reader.
    pub fn open(&mut self) -> Result<(), IoError> {
        if self.file.is_none() {
            let opened = File::options().write(true).open(&self.target);
            self.file = Some(opened.map_err(|e| self.error(e))?);
        }
        Ok(())
    }

    /// Writes the content through `fill` (buffered).
    pub fn write<F>(&mut self, fill: F) -> Result<(), IoError>
    where
        F: FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
    {
        self.open()?;
        let Some(file) = &self.file else { unreachable!("opened above") };
        let mut w = BufWriter::with_capacity(1 << 20, file);
        fill(&mut w).and_then(|()| w.flush()).map_err(|source| self.error(source))
    }

    /// The temporary given the length `len` and mapped for writing (zeros),
    /// so that an image is rendered or converted straight into the file's
    /// pages: no image buffer and no copy through `write()`. `Ok(None)`
    /// where that cannot be (a device or pipe, a big-endian host, a
    /// filesystem that cannot reserve the space): the caller then uses
    /// [`Self::write`]. An error when the space is not there.
    pub fn map(&mut self, len: usize) -> Result<Option<memmap2::MmapMut>, IoError> {
        let (Some(file), Some(_)) = (&self.file, &self.temp) else { return Ok(None) };
        if len == 0 || cfg!(target_endian = "big") {
            return Ok(None);
        }
        if !reserve(file, len).map_err(|e| self.error(e))? {
            return Ok(None);
        }
        // SAFETY: the file is this process's own temporary, created
        // exclusively under a hidden name, and its whole length is reserved
        // on the disk: no write through the mapping can fault for want of
        // space, and nothing else truncates it while it is mapped.
        let Ok(map) = (unsafe { memmap2::MmapMut::map_mut(file) }) else { return Ok(None) };
        huge_pages(&map);
        Ok(Some(map))
    }

    /// Renames the temporary over the target.
    pub fn commit(mut self) -> Result<(), IoError> {
        let Some(mut temp) = self.temp.take() else { return Ok(()) };
        std::fs::rename(&temp.path, &self.target).map_err(|e| self.error(e))?;
        temp.path = PathBuf::new();
        Ok(())
    }

    fn error(&self, source: std::io::Error) -> IoError {
        IoError::Write { path: self.target.clone(), source }
    }
}

/// Commits the outputs of one run in order, after all of them are written;
/// each comes with a key (say, its flag) that an error is returned with.
/// Where two name the same file, the last one wins (the earlier temporary is
/// removed), as when nanoBragg.c writes one file twice. On an error the
/// outputs not yet renamed keep their old content.
pub fn commit_all<K>(files: Vec<(K, Pending)>) -> Result<(), (K, IoError)> {
    let last: Vec<bool> = (0..files.len())
        .map(|i| files[i + 1..].iter().all(|(_, f)| f.target != files[i].1.target))
        .collect();
    for ((key, file), last) in files.into_iter().zip(last) {
        if last {
            file.commit().map_err(|e| (key, e))?;
        }
    }
    Ok(())
}

/// Writes `path` atomically through `fill` (see [`Pending`]).
pub fn write_atomic<F>(path: &Path, fill: F) -> Result<(), IoError>
where
    F: FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
{
    let mut file = Pending::create(path)?;
    file.write(fill)?;
    file.commit()
}

/// Writes `bytes` to `path` atomically (see [`Pending`]).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    write_atomic(path, |w| w.write_all(bytes))
}

/// The longest file name most filesystems take (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// The hidden temporary name of an output named `name`:
/// `.<name>.tmp.<pid>.<n>`, with `name` cut short where the whole would
/// pass [`NAME_MAX`] (the process id and counter keep it unique).
fn temp_name(name: &std::ffi::OsStr, pid: u32, n: u64) -> std::ffi::OsString {
    let suffix = format!(".tmp.{pid}.{n}");
    let room = NAME_MAX - 1 - suffix.len();
    let mut out = std::ffi::OsString::from(".");
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let bytes = name.as_bytes();
        let mut cut = bytes.len().min(room);
        // not inside a UTF-8 character: the name stays text where it was
        while cut > 0 && cut < bytes.len() && bytes[cut] & 0xC0 == 0x80 {
            cut -= 1;
        }
        out.push(std::ffi::OsStr::from_bytes(&bytes[..cut]));
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

/// Whether `path` (symbolic links resolved) names a device or a pipe, which
/// an output writes in place (a rename would replace it with a regular file).
pub fn writes_in_place(path: &Path) -> bool {
    std::fs::metadata(resolve(path)).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// An error when `path` exists and this process may not write it (as
/// `access(W_OK)` with the effective ids tells; root may write anything).
#[cfg(unix)]
fn writable_if_present(path: &Path) -> std::io::Result<()> {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return Ok(()) };
    // SAFETY: a plain system call on a NUL-terminated path that outlives it
    let denied =
        unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if denied == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(std::io::Error::new(e.kind(), format!("the existing file is not writable ({e})"))),
    }
}

#[cfg(not(unix))]
fn writable_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.permissions().readonly() => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the existing file is read-only",
        )),
        _ => Ok(()),
    }
}

/// An error (naming `path`) when `path` (symbolic links resolved) exists and
/// this process may not write it, as [`Pending::create`] refuses it.
pub fn check_writable(path: &Path) -> Result<(), IoError> {
    writable_if_present(&resolve(path))
        .map_err(|source| IoError::Write { path: path.to_path_buf(), source })
}

/// Bytes free for this process on the filesystem holding `dir` (`None`
/// where that cannot be told).
#[cfg(unix)]
pub fn available_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct it is given; the path is
    // NUL-terminated and outlives the call
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Bytes free for this process on the filesystem holding `dir` (`None`
/// where that cannot be told).
#[cfg(not(unix))]
pub fn available_bytes(_dir: &Path) -> Option<u64> {
    None
}

/// The file a symbolic link points to (nanoBragg.c, which opens the path,
/// writes there), else `path`.
fn resolve(path: &Path) -> PathBuf {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        if let Ok(real) = std::fs::canonicalize(path) {
            return real;
        }
    }
    path.to_path_buf()
}

/// Asks for transparent huge pages in the mapping: where the filesystem
/// keeps large folios (ext4 from Linux 6.16), filling the page cache then
/// takes one fault per 2 MiB instead of one per 4 KiB page, most of the cost
/// of filling a large mapped file on a virtual machine. Only a hint.
fn huge_pages(map: &memmap2::MmapMut) {
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

/// Reserves `len` bytes of disk for `file` (which also sets its length), so
/// that a full disk is an error here and never a `SIGBUS` in a mapping.
/// `Ok(false)` where the filesystem cannot.
#[cfg(target_os = "linux")]
fn reserve(file: &File, len: usize) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(len) else { return Ok(false) };
    // SAFETY: a plain system call on a descriptor `file` owns.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(true),
        libc::EOPNOTSUPP | libc::EINVAL | libc::ENODEV => Ok(false),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

#[cfg(not(target_os = "linux"))]
fn reserve(_file: &File, _len: usize) -> std::io::Result<bool> {
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("nanobragg-io-atomic-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[cfg(unix)]
    fn inode(path: &Path) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap())
    }

    #[test]
    fn replaces_existing_file() {
        let dir = scratch("replace");
        let p = dir.join("out.bin");
        std::fs::write(&p, b"old content that is longer").unwrap();
        write_bytes_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(names(&dir), ["out.bin"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failure_keeps_old_file_and_removes_temp() {
        let dir = scratch("fail");
        let p = dir.join("out.bin");
        std::fs::write(&p, b"old").unwrap();
        let err = write_atomic(&p, |w| {
            w.write_all(b"partial")?;
            Err(std::io::Error::other("simulated failure"))
        })
        .unwrap_err();
        assert!(matches!(&err, IoError::Write { path, .. } if path == &p));
        assert!(err.to_string().contains("out.bin"));
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(names(&dir), ["out.bin"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Mapped or written, nothing changes before the commit; a dropped
    /// output leaves the old file (same bytes, same inode) and no temporary.
    #[cfg(unix)]
    #[test]
    fn outputs_appear_only_when_committed() {
        let dir = scratch("pending");
        let (a, b) = (dir.join("a.bin"), dir.join("b.bin"));
        std::fs::write(&b, b"old b").unwrap();
        let old_inode = inode(&b);
        let mut pa = Pending::create(&a).unwrap();
        let mut pb = Pending::create(&b).unwrap();
        let mut content = vec![0u8; 518];
        content[..3].copy_from_slice(b"abc");
        content[512..].copy_from_slice(&[1, 0, 3, 2, 255, 255]);
        match pa.map(518).unwrap() {
            Some(mut m) => {
                assert!(m.iter().all(|&x| x == 0));
                m[..3].copy_from_slice(b"abc");
                crate::le::values_mut::<u16>(&mut m[512..]).copy_from_slice(&[1, 0x0203, 0xffff]);
            }
            None => pa.write(|w| w.write_all(&content)).unwrap(),
        }
        pb.write(|w| w.write_all(b"new b")).unwrap();
        assert!(!a.exists());
        assert_eq!(std::fs::read(&b).unwrap(), b"old b");
        drop(pb);
        assert_eq!((std::fs::read(&b).unwrap(), inode(&b)), (b"old b".to_vec(), old_inode));
        assert_eq!(names(&dir).len(), 2, "{:?}", names(&dir));
        commit_all(vec![((), pa)]).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), content);
        assert_eq!(names(&dir), ["a.bin", "b.bin"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One file named twice holds the last content; a symbolic link is
    /// written through; a hard link keeps the old content.
    #[cfg(unix)]
    #[test]
    fn duplicates_and_links() {
        let dir = scratch("links");
        let (a, link, hard) = (dir.join("a.bin"), dir.join("link.bin"), dir.join("hard.bin"));
        std::fs::write(&a, b"old").unwrap();
        std::os::unix::fs::symlink(&a, &link).unwrap();
        std::fs::hard_link(&a, &hard).unwrap();
        let mut first = Pending::create(&a).unwrap();
        first.write(|w| w.write_all(b"first")).unwrap();
        let mut second = Pending::create(&link).unwrap();
        second.write(|w| w.write_all(b"second")).unwrap();
        commit_all(vec![(1, first), (2, second)]).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"second");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&hard).unwrap(), b"old");
        assert_eq!(names(&dir), ["a.bin", "hard.bin", "link.bin"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn special_files_are_written_in_place() {
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch("fifo");
        let fifo = dir.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return; // no mkfifo here
        }
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_bytes_atomic(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert_eq!(names(&dir), ["pipe"]);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A name of 255 bytes (the most a filesystem takes) is written; its
    /// temporary's name is cut short, hidden and unique.
    #[test]
    fn longest_names_work() {
        let dir = scratch("long");
        let long = "n".repeat(251) + ".bin";
        write_bytes_atomic(&dir.join(&long), b"x").unwrap();
        assert_eq!(names(&dir), std::slice::from_ref(&long));
        let (a, b) =
            (temp_name(long.as_ref(), 4_000_000, 0), temp_name(long.as_ref(), 4_000_000, 1));
        assert!(a.len() <= NAME_MAX && a != b && a.to_string_lossy().starts_with(".nnn"), "{a:?}");
        // a multi-byte character is not split
        let wide = "é".repeat(127);
        assert!(temp_name(wide.as_ref(), 7, 7).to_str().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_directory_is_an_error_naming_the_path() {
        let dir = scratch("nodir");
        let p = dir.join("no/such/dir/out.bin");
        let err = write_bytes_atomic(&p, b"x").unwrap_err();
        assert!(err.to_string().contains("no/such/dir/out.bin"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
