//! Output files filled in place through a shared memory mapping.
//!
//! A large image written with `write()` is copied into the page cache page by
//! page; rendering straight into a mapping of the output file skips that copy
//! and the separate image buffer (at 4096² this is most of the time nanobragg
//! spends outside the render).
//!
//! The file is created unnamed (Linux `O_TMPFILE`) in the target's directory,
//! so a run that is interrupted, however long its render, leaves nothing
//! behind; [`MappedFile::persist`] gives it a name once it is complete. Its
//! space is reserved with `posix_fallocate` first, so a full disk is an error
//! here and never a `SIGBUS` later. Where any of this is not possible (not
//! Linux, a filesystem without `O_TMPFILE` or fallocate),
//! [`MappedFile::create_unnamed`] returns `None` and the caller writes the
//! file the usual way.
//!
//! [`MappedFile::reuse`] instead maps an existing file (an old output that
//! the caller renamed to its temporary name) and overwrites it in place,
//! which spares the page cache a new file's pages and the freeing of the old.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::IoError;

/// A file of fixed length mapped for writing: a new unnamed one (zero-filled)
/// or a reused one (holding its old bytes until overwritten).
pub struct MappedFile {
    map: memmap2::MmapMut,
    file: File,
    /// The name the file already has (one opened by [`MappedFile::reuse`]).
    named: Option<std::path::PathBuf>,
}

impl MappedFile {
    /// An unnamed file of `len` zero bytes in the directory of `target`,
    /// mapped for writing. `Ok(None)` where that is not possible (`len` 0,
    /// not Linux, a filesystem without unnamed files or space reservation);
    /// an error, naming `target`, when the space is not there.
    pub fn create_unnamed(target: &Path, len: usize) -> Result<Option<MappedFile>, IoError> {
        if len == 0 {
            return Ok(None);
        }
        let Some(file) = unnamed_file(target) else { return Ok(None) };
        let wrap = |source| IoError::Write { path: target.to_path_buf(), source };
        if !reserve(&file, len).map_err(wrap)? {
            return Ok(None);
        }
        // SAFETY: the file has no name, so no other process can open, change
        // or truncate it while it is mapped, and its space is reserved.
        match unsafe { memmap2::MmapMut::map_mut(&file) } {
            Ok(map) => {
                huge_pages(&map);
                Ok(Some(MappedFile { map, file, named: None }))
            }
            Err(_) => Ok(None),
        }
    }

    /// The existing file at `path`, given the length `len` and mapped for
    /// writing in place. Its old bytes stay until overwritten: the caller
    /// writes every byte. Meant for a caller's own temporary, such as an old
    /// output renamed aside: its pages are already in the page cache, so
    /// filling them skips allocating and zeroing new pages, and replacing the
    /// old file skips freeing its pages (together about a third of a fast
    /// 4096² run). `Ok(None)` where `path` is not a regular file with a
    /// single link or cannot be opened, mapped or reserved in place (then
    /// the caller writes a new file, over this one); an error, naming
    /// `path`, when the space is not there.
    pub fn reuse(path: &Path, len: usize) -> Result<Option<MappedFile>, IoError> {
        if len == 0 {
            return Ok(None);
        }
        let Some(file) = open_in_place(path) else { return Ok(None) };
        let wrap = |source| IoError::Write { path: path.to_path_buf(), source };
        let Ok(meta) = file.metadata() else { return Ok(None) };
        if !reusable_file(&meta) {
            return Ok(None);
        }
        if meta.len() != len as u64 {
            file.set_len(len as u64).map_err(wrap)?;
        }
        if !reserve(&file, len).map_err(wrap)? {
            return Ok(None);
        }
        // SAFETY: the caller's own temporary (see above), reserved in full.
        match unsafe { memmap2::MmapMut::map_mut(&file) } {
            // old pages not in the page cache would be read from the disk
            // before being overwritten: a new file is cheaper then (the
            // part past the old length is a hole, read as zeros)
            Ok(map) if cached(&file, &map, meta.len().min(len as u64) as usize) => {
                huge_pages(&map);
                Ok(Some(MappedFile { map, file, named: Some(path.to_path_buf()) }))
            }
            _ => Ok(None),
        }
    }

    /// [`Self::reuse`] where `path` can be reused, else
    /// [`Self::create_unnamed`] (a new file, to replace `path` when persisted).
    pub fn reuse_or_create(path: &Path, len: usize) -> Result<Option<MappedFile>, IoError> {
        match MappedFile::reuse(path, len)? {
            Some(m) => Ok(Some(m)),
            None => MappedFile::create_unnamed(path, len),
        }
    }

    /// The whole file.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// The file from byte `offset` on as `T` values (the host's byte order,
    /// little-endian wherever mapping is used). Panics if `offset` breaks
    /// `T`'s alignment or the rest is not a whole number of `T`.
    pub fn values_mut<T: crate::le::LePixel>(&mut self, offset: usize) -> &mut [T] {
        let bytes = &mut self.map[offset..];
        assert_eq!(bytes.len() % T::SIZE, 0, "mapped file: a partial value at the end");
        // SAFETY: f32, u16 and u8 accept any bit pattern; the mapping is
        // page-aligned and the assertion below rejects a misaligned offset.
        let (head, values, tail) = unsafe { bytes.align_to_mut::<T>() };
        assert!(head.is_empty() && tail.is_empty(), "mapped file: misaligned offset");
        values
    }

    /// The file from byte `offset` on as `T` values (see [`Self::values_mut`]).
    pub fn values<T: crate::le::LePixel>(&self, offset: usize) -> &[T] {
        let bytes = &self.map[offset..];
        assert_eq!(bytes.len() % T::SIZE, 0, "mapped file: a partial value at the end");
        // SAFETY: as in `values_mut`.
        let (head, values, tail) = unsafe { bytes.align_to::<T>() };
        assert!(head.is_empty() && tail.is_empty(), "mapped file: misaligned offset");
        values
    }

    /// Unmaps the file and puts it in place of `path` in one rename, as
    /// [`crate::atomic::write_atomic`] does (where the system refuses to name
    /// an unnamed file, its bytes are written through that function instead).
    pub fn persist(self, path: &Path) -> Result<(), IoError> {
        let MappedFile { map, file, named } = self;
        let wrap = |source| IoError::Write { path: path.to_path_buf(), source };
        if let Some(named) = named {
            drop(map);
            return if named == path {
                Ok(())
            } else {
                std::fs::rename(&named, path).map_err(wrap)
            };
        }
        let tmp = crate::atomic::temp_path(path);
        if link(&file, &tmp).is_ok() {
            drop(map);
            return std::fs::rename(&tmp, path).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                wrap(e)
            });
        }
        crate::atomic::write_atomic(path, |w| w.write_all(&map))
    }
}

/// Ask for transparent huge pages in the mapping: where the filesystem keeps
/// large folios (ext4 from Linux 6.16), the page cache then takes one fault
/// per 2 MiB instead of one per 4 KiB page, which is most of the cost of
/// filling a large mapped file on a virtual machine (64 MiB: 26 ms → 14 ms
/// here). Only a hint: refused or ignored elsewhere.
fn huge_pages(map: &memmap2::MmapMut) {
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

/// `open(dir, O_TMPFILE)` in the directory of `target`.
#[cfg(target_os = "linux")]
fn unnamed_file(target: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::options().read(true).write(true).custom_flags(libc::O_TMPFILE).mode(0o666).open(dir).ok()
}

#[cfg(not(target_os = "linux"))]
fn unnamed_file(_target: &Path) -> Option<File> {
    None
}

/// Whether every page of the first `len` bytes of `file` (mapped as `map`)
/// is in the page cache: `cachestat` (Linux 6.5, one step per folio), else
/// `mincore` (one per page).
#[cfg(target_os = "linux")]
fn cached(file: &File, map: &memmap2::MmapMut, len: usize) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain query.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let Ok(page) = usize::try_from(page) else { return false };
    if page == 0 {
        return false;
    }
    let len = len.min(map.len());
    let pages = len.div_ceil(page);
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Cachestat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // the same number on every Linux architecture
    const SYS_CACHESTAT: libc::c_long = 451;
    if len == 0 {
        return true;
    }
    let range = Range { off: 0, len: len as u64 };
    let mut stat = Cachestat::default();
    // SAFETY: the kernel reads `range` and writes `stat`, both live and of
    // the layout it expects; an older kernel answers ENOSYS.
    let rc = unsafe {
        libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range as *const Range, &mut stat, 0u32)
    };
    if rc == 0 {
        return stat.nr_cache >= pages as u64;
    }
    let mut resident = vec![0u8; pages];
    // SAFETY: the mapping is page-aligned, `len` lies inside it and
    // `resident` has one byte per page of it.
    let rc =
        unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, len, resident.as_mut_ptr()) };
    rc == 0 && resident.iter().all(|&r| r & 1 == 1)
}

#[cfg(not(target_os = "linux"))]
fn cached(_file: &File, _map: &memmap2::MmapMut, _len: usize) -> bool {
    false
}

/// `path` opened for reading and writing, not following a final symlink.
#[cfg(target_os = "linux")]
fn open_in_place(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path).ok()
}

#[cfg(not(target_os = "linux"))]
fn open_in_place(_path: &Path) -> Option<File> {
    None
}

/// Whether `path` names a file [`MappedFile::reuse`] may overwrite in place
/// (a caller checks this before renaming an old output aside for it).
pub fn reusable(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| reusable_file(&m))
}

/// A regular file with one name (another name would see it change in place).
#[cfg(unix)]
fn reusable_file(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.is_file() && meta.nlink() == 1
}

#[cfg(not(unix))]
fn reusable_file(_meta: &std::fs::Metadata) -> bool {
    false
}

/// Reserves `len` bytes of disk for `file` (which also sets its length).
/// `Ok(false)` where the filesystem cannot.
#[cfg(target_os = "linux")]
fn reserve(file: &File, len: usize) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(len) else { return Ok(false) };
    // SAFETY: a plain syscall on a descriptor we own.
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

/// Gives the unnamed `file` the name `path` (`linkat` through /proc).
#[cfg(target_os = "linux")]
fn link(file: &File, path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let from = format!("/proc/self/fd/{}", file.as_raw_fd());
    let from = std::ffi::CString::new(from).map_err(std::io::Error::other)?;
    let to = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(std::io::Error::other)?;
    // SAFETY: both paths are valid NUL-terminated strings for the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn link(_file: &File, _path: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other("unnamed files are Linux only"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty directory of this test process.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("nanobragg-io-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn mapped_values_reach_the_file() {
        let dir = scratch("mapped");
        let path = dir.join("m.bin");
        let Some(mut m) = MappedFile::create_unnamed(&path, 512 + 6).unwrap() else {
            eprintln!("skipped: this system cannot map unnamed output files");
            return;
        };
        // nothing is visible before persist
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        m.bytes_mut()[..3].copy_from_slice(b"abc");
        m.values_mut::<u16>(512).copy_from_slice(&[1, 0x0203, 0xffff]);
        m.persist(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 518);
        assert_eq!(&bytes[..4], b"abc\0");
        assert!(bytes[4..512].iter().all(|&b| b == 0));
        assert_eq!(&bytes[512..], &[1, 0, 3, 2, 0xff, 0xff]);
        assert!(MappedFile::create_unnamed(&path, 0).unwrap().is_none());
        // an unfinished one vanishes
        drop(MappedFile::create_unnamed(&dir.join("gone.bin"), 4096).unwrap());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reused file keeps its inode, takes the new length (shorter or
    /// longer) and holds exactly what was written; a file with a second
    /// name or a symlink is not reused.
    #[cfg(target_os = "linux")]
    #[test]
    fn reused_files_are_overwritten_in_place() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch("reuse");
        let (tmp, out) = (dir.join(".t.partial"), dir.join("t.bin"));
        for len in [10_000usize, 3, 70_000] {
            std::fs::write(&tmp, vec![7u8; 5000]).unwrap();
            let ino = std::fs::metadata(&tmp).unwrap().ino();
            let mut m = MappedFile::reuse(&tmp, len).unwrap().expect("reused");
            let new: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            m.bytes_mut().copy_from_slice(&new);
            m.persist(&out).unwrap();
            assert!(!tmp.exists());
            assert_eq!(std::fs::read(&out).unwrap(), new);
            assert_eq!(std::fs::metadata(&out).unwrap().ino(), ino, "len {len}");
        }
        // persisted under its own name: nothing to rename
        std::fs::rename(&out, &tmp).unwrap();
        MappedFile::reuse(&tmp, 4).unwrap().unwrap().persist(&tmp).unwrap();
        assert_eq!(std::fs::metadata(&tmp).unwrap().len(), 4);
        // a second name would see the file change: not reused
        std::fs::hard_link(&tmp, &out).unwrap();
        assert!(MappedFile::reuse(&tmp, 4).unwrap().is_none());
        std::fs::remove_file(&out).unwrap();
        std::os::unix::fs::symlink(&tmp, &out).unwrap();
        assert!(MappedFile::reuse(&out, 4).unwrap().is_none());
        assert!(MappedFile::reuse(&dir.join("absent"), 4).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file whose pages have left the page cache is not reused: mapping
    /// it for writing would first read every page back from the disk.
    #[cfg(target_os = "linux")]
    #[test]
    fn files_out_of_the_page_cache_are_not_reused() {
        use std::os::fd::AsRawFd;
        let dir = scratch("evict");
        let path = dir.join(".t.partial");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        assert!(MappedFile::reuse(&path, 1 << 20).unwrap().is_some(), "just written: cached");
        // written back and dropped from the cache
        let f = File::open(&path).unwrap();
        f.sync_all().unwrap();
        // SAFETY: a plain syscall on a descriptor we own.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        let mut resident = vec![0u8; (1usize << 20).div_ceil(4096)];
        unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, 1 << 20, resident.as_mut_ptr()) };
        drop(map);
        if resident.iter().any(|&r| r & 1 == 1) {
            // a filesystem that keeps its pages (tmpfs): nothing to test
            eprintln!("skipped: the pages stayed in memory");
        } else {
            assert!(MappedFile::reuse(&path, 1 << 20).unwrap().is_none());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
