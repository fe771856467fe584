//! The output files of a command, named by their flags: each opened under
//! a temporary name beside its target before anything is rendered (so that
//! a name that cannot be written is refused first), written, and all of a
//! run's renamed into place together or not at all (see
//! [`nanobragg_io::atomic`]). Every error names the flag and the file once.

use anyhow::{anyhow, bail, Result};
use nanobragg_io::atomic::Pending;
use nanobragg_io::IoError;
use std::path::Path;

/// Starts writing the output `path` of `flag` (its temporary, beside it).
pub fn open_output(flag: &str, path: &Path) -> Result<Pending> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        bail!("{flag}: the file name is empty");
    }
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        bail!("{flag}: cannot write '{shown}': it is a directory");
    }
    Pending::create(path).map_err(|e| {
        let IoError::Write { source, .. } = e else { return anyhow!("{flag}: {e}") };
        if source.kind() == std::io::ErrorKind::IsADirectory {
            return anyhow!("{flag}: cannot write '{shown}': {source}");
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        match std::fs::metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow!(
                "{flag}: cannot write '{shown}': directory '{}' does not exist",
                dir.display()
            ),
            Ok(m) if !m.is_dir() => {
                anyhow!("{flag}: cannot write '{shown}': '{}' is not a directory", dir.display())
            }
            _ => anyhow!("{flag}: cannot write '{shown}': {source}"),
        }
    })
}

/// A writer's error, naming the flag and the file (the operating system's
/// reason once: the error carries no source of its own).
pub fn write_error(flag: &str, e: IoError) -> anyhow::Error {
    match e {
        IoError::Write { path, source } => {
            anyhow!("{flag}: cannot write '{}': {source}", path.display())
        }
        other => anyhow!("{flag}: {other}"),
    }
}

/// Renames the outputs `files`, each keyed by its flag, into place: all of
/// them, or (on an error, which names the flag and the file) none.
pub fn commit(files: Vec<(&str, Pending)>) -> Result<()> {
    nanobragg_io::atomic::commit_all(files).map_err(|(flag, e)| write_error(flag, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritable_names_are_refused() {
        let dir = std::env::temp_dir().join(format!("nanobragg-writable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = open_output("-floatfile", &dir.join("x.bin")).unwrap();
        let e = open_output("-intfile", &dir.join("no/x.img")).err().unwrap().to_string();
        assert!(e.starts_with("-intfile: cannot write") && e.contains("does not exist"), "{e}");
        let e = open_output("-pgmfile", &dir).err().unwrap().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = open_output("-intfile", &dir.join("nodir/")).err().unwrap().to_string();
        assert!(e.contains("-intfile: cannot write") && e.contains("names a directory"), "{e}");
        assert!(open_output("-noisefile", Path::new("")).is_err());
        // an output not committed leaves nothing behind
        drop(file);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).ok();
    }
}
