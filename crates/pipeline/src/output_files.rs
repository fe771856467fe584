//! The output files of a command, named by their flags: each opened under
//! a temporary name beside its target before anything is rendered (so that
//! a name that cannot be written is refused first), written, and all of a
//! run's renamed into place together or not at all (see
//! [`nanobragg_io::atomic`]). Every error names the flag and the file once.

use anyhow::{anyhow, bail, Result};
use nanobragg_io::atomic::Pending;
use nanobragg_io::IoError;
use std::path::{Path, PathBuf};

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

/// `name` with `_<tag>` before its extension (`d/s.nxs`, `00012`:
/// `d/s_00012.nxs`): the names of shots, series images and blocks.
pub fn tagged(name: &Path, tag: &str) -> PathBuf {
    let stem = name.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let file = match name.extension() {
        Some(ext) => format!("{stem}_{tag}.{}", ext.to_string_lossy()),
        None => format!("{stem}_{tag}"),
    };
    name.with_file_name(file)
}

/// Refuses, before any shot is rendered, shots that cannot be written
/// whole: a file that is a directory or may not be written, a directory
/// that does not exist or may not be written, or a filesystem with less
/// free space than the shots need. `shots`: each shot's files, with their
/// flags and sizes (bytes), in the order they are written; `what` names
/// the command in the message.
pub fn check_shots(what: &str, shots: Vec<Vec<(&str, PathBuf, u64)>>) -> Result<()> {
    use std::collections::BTreeMap;
    // bytes written and freed (old files replaced) per filesystem, and
    // the most needed at one time: a shot's new files are all written
    // before its old ones go
    #[derive(Default)]
    struct Use {
        dir: PathBuf,
        net: i128,
        peak: i128,
    }
    let mut by_fs: BTreeMap<u64, Use> = BTreeMap::new();
    let mut probed = std::collections::BTreeSet::new();
    let count = shots.len();
    for files in shots {
        let mut shot: BTreeMap<u64, (i128, i128)> = BTreeMap::new();
        for (flag, path, size) in files {
            if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                bail!("{flag}: cannot write '{}': it is a directory", path.display());
            }
            let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
            let dir = match real.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
            if probed.insert(dir.clone()) {
                // a temporary made and removed: the directory exists
                // and may be written
                drop(open_output(flag, &path)?);
            }
            nanobragg_io::atomic::check_writable(&path).map_err(|e| write_error(flag, e))?;
            let (dev, old) = fs_and_freed(&dir, &real);
            by_fs.entry(dev).or_insert_with(|| Use { dir, ..Use::default() });
            let e = shot.entry(dev).or_default();
            // rounded up to whole blocks (4 KiB on most filesystems)
            e.0 += i128::from(size.div_ceil(4096) * 4096);
            e.1 += i128::from(old);
        }
        for (dev, (new, old)) in shot {
            let u = by_fs.entry(dev).or_default();
            u.peak = u.peak.max(u.net + new);
            u.net += new - old;
        }
    }
    for u in by_fs.values() {
        let Some(free) = nanobragg_io::atomic::available_bytes(&u.dir) else { continue };
        if u.peak > i128::from(free) {
            let mb = |b: i128| b as f64 / 1e6;
            bail!(
                "{what}: the {count} shots need {:.1} MB in '{}' but only {:.1} MB are free",
                mb(u.peak),
                u.dir.display(),
                mb(i128::from(free))
            );
        }
    }
    Ok(())
}

/// The filesystem of `dir` (its device number), and the bytes freed when
/// `file`, an existing output with no other hard link, is replaced.
fn fs_and_freed(dir: &Path, file: &Path) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).map(|m| m.dev()).unwrap_or(0);
        let old = match std::fs::metadata(file) {
            Ok(m) if m.is_file() && m.nlink() == 1 => m.blocks() * 512,
            _ => 0,
        };
        (dev, old)
    }
    #[cfg(not(unix))]
    {
        let _ = (dir, file);
        (0, 0)
    }
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
