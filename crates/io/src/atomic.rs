//! Atomic file replacement.
//!
//! Output is first written to a hidden temporary file in the target's directory
//! (`.<name>.tmp.<pid>.<n>`), flushed and synced, then renamed over the target. A
//! reader therefore sees either the old file or the complete new one, and a failed
//! write removes its temporary file instead of leaving a truncated output behind.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::IoError;

/// Distinguishes temporaries of concurrent writes from the same process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Name of the temporary file used while writing `path`.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".to_string());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp_name = format!(".{name}.tmp.{}.{n}", std::process::id());
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(tmp_name),
        _ => PathBuf::from(tmp_name),
    }
}

/// Whether `path` is an existing device, pipe or socket (written in place).
pub(crate) fn is_special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Writes `path` atomically: `fill` writes the content into a buffered temporary file,
/// which then replaces `path` by a rename.
///
/// On any error (from `fill`, flushing, syncing or renaming) the temporary file is
/// removed and an [`IoError::Write`] naming `path` is returned.
pub fn write_atomic<F>(path: &Path, fill: F) -> Result<(), IoError>
where
    F: FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
{
    let wrap = |source| IoError::Write { path: path.to_path_buf(), source };
    // a device or pipe (such as /dev/null) is written in place: a rename would
    // replace it with a regular file
    if is_special(path) {
        let file = std::fs::OpenOptions::new().write(true).open(path).map_err(wrap)?;
        let mut writer = BufWriter::with_capacity(1 << 20, file);
        return fill(&mut writer).and_then(|()| writer.flush()).map_err(wrap);
    }
    let tmp = temp_path(path);
    let file = File::create(&tmp).map_err(wrap)?;
    let result = (|| {
        let mut writer = BufWriter::with_capacity(1 << 20, file);
        fill(&mut writer)?;
        // no fsync: like the C program we leave durability to the OS; the
        // rename still guarantees no reader ever sees a half-written file
        drop(writer.into_inner().map_err(|e| e.into_error())?);
        std::fs::rename(&tmp, path)
    })();
    if let Err(source) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(wrap(source));
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically (see [`write_atomic`]).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    write_atomic(path, |w| w.write_all(bytes))
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

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect()
    }

    #[test]
    fn replaces_existing_file() {
        let dir = scratch("replace");
        let p = dir.join("out.bin");
        std::fs::write(&p, b"old content that is longer").unwrap();
        write_bytes_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(leftovers(&dir).is_empty());
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
        assert!(leftovers(&dir).is_empty());
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
        assert!(leftovers(&dir).is_empty());
        std::fs::remove_dir_all(&dir).ok();
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
