//! Atomic output files: the one way nanobragg writes a file.
//!
//! An output is written to a temporary file beside its target
//! (`.<name>.tmp.<host>.<pid>.<n>`, see [`crate::temp_names`]; in the
//! target's directory so that the rename stays on one filesystem) and
//! renamed over the target only when complete ([`Pending::commit`], or
//! [`commit_all`] for the outputs of one run, all of them or none). A reader
//! sees the old file or the whole new one, never a mix; an error, a
//! [`Pending`] dropped uncommitted, or a SIGINT/SIGTERM/SIGHUP/SIGABRT (see
//! [`crate::interrupt`]) removes the temporary and leaves the old file as it
//! was. A symbolic link is written through (the file it points to is
//! replaced, the link stays); a file with other hard links gets a new inode,
//! so its other names keep the old content. A device or pipe (`/dev/null`)
//! is written in place: a rename would replace it with a regular file. An
//! existing target this process may not write is refused, as nanoBragg.c's
//! `fopen` would fail on it, and so is a name that ends in `/`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::temp_names::{hidden_name, host_name, Kind};
use crate::IoError;

/// Distinguishes the temporaries and backups of one process.
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
        names_a_file(target).map_err(wrap)?;
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
            let path = dir.join(hidden_name(name, Kind::Temporary, host_name(), pid(), n));
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

/// Commits the outputs of one run, after all of them are written: all of
/// them or none. Each comes with a key (say, its flag) that an error is
/// returned with. Where two name the same file, the last one wins (the
/// earlier temporary is removed), as when nanoBragg.c writes one file twice.
///
/// Each existing target is first kept aside under a hidden name beside it
/// (a hard link, so that the target never goes missing; a rename where the
/// filesystem has no hard links), then each temporary is renamed over its
/// target in order. Should one rename fail, the targets already replaced
/// get their old files back (the same inodes), those that did not exist are
/// removed, and every temporary goes: the outputs are as they were before
/// the call. On success the old files kept aside are removed. Devices and
/// pipes, written in place, are not undone.
pub fn commit_all<K>(files: Vec<(K, Pending)>) -> Result<(), (K, IoError)> {
    let last: Vec<bool> = (0..files.len())
        .map(|i| files[i + 1..].iter().all(|(_, f)| f.target != files[i].1.target))
        .collect();
    let mut renamed: Vec<(K, Pending)> = Vec::with_capacity(files.len());
    for ((key, file), last) in files.into_iter().zip(last) {
        // (dropping an earlier one of the same target removes its temporary)
        if last && file.temp.is_some() {
            renamed.push((key, file));
        }
    }
    // a single rename is all or nothing by itself
    if renamed.len() <= 1 {
        return match renamed.pop() {
            Some((key, file)) => file.commit().map_err(|e| (key, e)),
            None => Ok(()),
        };
    }
    // a signal meanwhile takes its course once every output is in place
    // or every old file is back
    let _deferred = crate::interrupt::defer();
    let mut aside: Vec<Aside> = Vec::with_capacity(renamed.len());
    for i in 0..renamed.len() {
        match Aside::keep(&renamed[i].1.target) {
            Ok(a) => aside.push(a),
            Err(source) => {
                let error = renamed[i].1.error(source);
                restore(&mut aside, &renamed, 0);
                return Err((renamed.swap_remove(i).0, error));
            }
        }
    }
    for i in 0..renamed.len() {
        let file = &mut renamed[i].1;
        let temp = file.temp.as_mut().expect("only outputs with a temporary are renamed");
        if let Err(source) = std::fs::rename(&temp.path, &file.target) {
            let error = file.error(source);
            restore(&mut aside, &renamed, i);
            return Err((renamed.swap_remove(i).0, error));
        }
        // renamed: nothing to remove when it drops
        temp.path = PathBuf::new();
    }
    for a in &mut aside {
        a.discard();
    }
    Ok(())
}

/// An existing target kept aside while the outputs of a run are renamed
/// into place (see [`commit_all`]).
struct Aside {
    /// The hidden name of the old file (empty: the target did not exist,
    /// or the old file is back or gone).
    path: PathBuf,
    /// Whether the old file was renamed away (the target is missing until
    /// its output is renamed in) rather than linked.
    moved: bool,
}

impl Aside {
    /// Keeps the old file of `target`, if there is one, under a hidden name
    /// beside it. A directory in the output's place is refused untouched.
    fn keep(target: &Path) -> std::io::Result<Aside> {
        let none = Aside { path: PathBuf::new(), moved: false };
        match std::fs::symlink_metadata(target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(none),
            Err(e) => return Err(e),
            Ok(m) if m.is_dir() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::IsADirectory,
                    "a directory is in its place",
                ))
            }
            Ok(_) => {}
        }
        let name = target.file_name().unwrap_or_default();
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(hidden_name(name, Kind::Backup, host_name(), pid(), n));
            match std::fs::hard_link(target, &path) {
                Ok(()) => return Ok(Aside { path, moved: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                // no hard links here (or not to this file): move it aside
                Err(_) => {}
            }
            if std::fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            std::fs::rename(target, &path)?;
            return Ok(Aside { path, moved: true });
        }
    }

    /// Puts the old file back over `target` (which its output may have
    /// replaced), or removes the output where there was none.
    fn put_back(&mut self, target: &Path, replaced: bool) {
        if self.path.as_os_str().is_empty() {
            if replaced {
                let _ = std::fs::remove_file(target);
            }
            return;
        }
        if replaced || self.moved {
            if std::fs::rename(&self.path, target).is_ok() {
                self.path = PathBuf::new();
            }
        } else {
            // (a rename onto another link of the same file does nothing)
            self.discard();
        }
    }

    /// Removes the old file's hidden name (a link: the file itself is gone
    /// with its last name).
    fn discard(&mut self) {
        if !self.path.as_os_str().is_empty() && std::fs::remove_file(&self.path).is_ok() {
            self.path = PathBuf::new();
        }
    }
}

/// Undoes a [`commit_all`] that failed: `aside[i]` holds the old file of
/// output `files[i]`, and the first `replaced` outputs are in place.
fn restore<K>(aside: &mut [Aside], files: &[(K, Pending)], replaced: usize) {
    for (i, (a, (_, file))) in aside.iter_mut().zip(files).enumerate() {
        a.put_back(&file.target, i < replaced);
    }
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

/// This process's id, which the hidden names carry.
fn pid() -> u32 {
    std::process::id()
}

/// An error unless `path` names a file: a name that ends in `/` (or is
/// `.` or `..`) names a directory, which no output can replace (its
/// temporary would be made beside the directory and the rename refused only
/// after the render, once the outputs before it are replaced).
fn names_a_file(path: &Path) -> std::io::Result<()> {
    let bytes = path.as_os_str().as_encoded_bytes();
    let ends_as_dir = bytes.ends_with(b"/")
        || bytes.ends_with(b"/.")
        || bytes == b"."
        || path.file_name().is_none();
    if ends_as_dir {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "the name ends in '/' or '.': it names a directory, not a file",
        ));
    }
    Ok(())
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
    use crate::temp_names::NAME_MAX;

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
        let name = |n| hidden_name(long.as_ref(), Kind::Temporary, &"h".repeat(64), 4_000_000, n);
        let (a, b) = (name(0), name(u64::MAX));
        assert!(a.len() <= NAME_MAX && a != b && a.to_string_lossy().starts_with(".nnn"), "{a:?}");
        assert!(b.len() <= NAME_MAX, "{b:?}");
        // a multi-byte character is not split
        let wide = "é".repeat(127);
        assert!(hidden_name(wide.as_ref(), Kind::Backup, "h", 7, 7).to_str().is_some());
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

    /// A name that ends in `/` is refused when the output is opened (its
    /// temporary would otherwise be made, and the rename refused only at
    /// the end).
    #[test]
    fn names_of_directories_are_refused_at_once() {
        let dir = scratch("slash");
        for name in ["nodir/", "sub/.", ".", "..", "sub/.."] {
            let err = Pending::create(&dir.join(name)).err().unwrap_or_else(|| panic!("{name}"));
            assert!(err.to_string().contains("names a directory"), "{name}: {err}");
        }
        assert!(names(&dir).is_empty(), "{:?}", names(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Old files and what became of them: (name, bytes, inode).
    #[cfg(unix)]
    fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u64)> {
        names(dir)
            .into_iter()
            .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap(), inode(&dir.join(n))))
            .collect()
    }

    /// A rename that fails after others succeeded puts every old file back
    /// (bytes and inode), removes the outputs that were new and every
    /// temporary: all of the outputs or none.
    #[cfg(unix)]
    #[test]
    fn a_failed_commit_changes_nothing() {
        let dir = scratch("undo");
        let (a, b, c, d) =
            (dir.join("a.bin"), dir.join("b.bin"), dir.join("c.bin"), dir.join("d.bin"));
        std::fs::write(&a, b"old a").unwrap();
        std::fs::write(&c, b"old c").unwrap();
        let before = snapshot(&dir);
        let mut files = Vec::new();
        for (key, p) in [("a", &a), ("b", &b), ("c", &c), ("d", &d)] {
            let mut f = Pending::create(p).unwrap();
            f.write(|w| w.write_all(b"new")).unwrap();
            files.push((key, f));
        }
        // c's temporary gone: its rename fails after a's and b's are done
        std::fs::remove_file(files[2].1.temp_path().unwrap()).unwrap();
        let (key, err) = commit_all(files).unwrap_err();
        assert_eq!(key, "c");
        assert!(err.to_string().contains("c.bin"), "{err}");
        assert_eq!(snapshot(&dir), before);
        // a directory made in an output's place: refused before anything moves
        let mut files = Vec::new();
        for (key, p) in [("a", &a), ("c", &c), ("d", &d)] {
            let mut f = Pending::create(p).unwrap();
            f.write(|w| w.write_all(b"new")).unwrap();
            files.push((key, f));
        }
        std::fs::create_dir(&d).unwrap();
        let (key, err) = commit_all(files).unwrap_err();
        assert_eq!(key, "d");
        assert!(err.to_string().contains("directory"), "{err}");
        std::fs::remove_dir(&d).unwrap();
        assert_eq!(snapshot(&dir), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A successful commit leaves the outputs and nothing else: no old file
    /// kept aside, no temporary.
    #[test]
    fn a_commit_leaves_no_hidden_file() {
        let dir = scratch("clean");
        let (a, b) = (dir.join("a.bin"), dir.join("b.bin"));
        std::fs::write(&a, b"old a").unwrap();
        let mut files = Vec::new();
        for (key, p, content) in [(1, &a, b"new a"), (2, &b, b"new b")] {
            let mut f = Pending::create(p).unwrap();
            f.write(|w| w.write_all(content)).unwrap();
            files.push((key, f));
        }
        commit_all(files).unwrap();
        assert_eq!(names(&dir), ["a.bin", "b.bin"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"new a");
        assert_eq!(std::fs::read(&b).unwrap(), b"new b");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
