//! The binary structure factor dump (`Fdump.bin`) nanoBragg.c writes after
//! reading an hkl file and re-reads with `-dump`/when no hkl file is given.
//!
//! Layout: the text `h_min h_max k_min k_max l_min l_max`, a newline and a form
//! feed, then every value of the padded grid ([`HklGrid::data`]) as
//! little-endian `f64`, l fastest.

use super::hkl::{grid_len, try_zeros};
use super::HklGrid;
use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The header line of a dump, without the trailing newline and form feed.
fn header(grid: &HklGrid) -> String {
    format!(
        "{} {} {} {} {} {}",
        grid.h_min, grid.h_max, grid.k_min, grid.k_max, grid.l_min, grid.l_max
    )
}

/// Write `grid` as a dump file byte-identical to the C program's.
///
/// The file is written to a temporary name in the same directory and renamed
/// into place, so a reader never sees a partial dump. Fails with
/// [`Error::Invalid`] if `grid.data` does not have the size its bounds imply.
pub fn write_fdump(path: &Path, grid: &HklGrid) -> Result<()> {
    let n = grid_len(grid.h_range() as i64, grid.k_range() as i64, grid.l_range() as i64)?;
    if grid.h_range() < 1 || grid.k_range() < 1 || grid.l_range() < 1 || grid.data.len() != n {
        return Err(Error::Invalid {
            what: "Fdump",
            msg: format!(
                "grid [{}] holds {} values, its bounds need {n}",
                header(grid),
                grid.data.len()
            ),
        });
    }
    let mut bytes = Vec::with_capacity(64 + 8 * n);
    bytes.extend_from_slice(header(grid).as_bytes());
    bytes.extend_from_slice(b"\n\x0c");
    for v in &grid.data {
        bytes.extend_from_slice(&v.to_le_bytes());
    }

    let write_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Write { path: p, source }
    };
    // a device or pipe (such as /dev/null) is written in place: a rename would
    // replace it with a regular file
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(&bytes))
            .map_err(write_err(path));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(&bytes)?;
            f.sync_all()
        })
        .map_err(write_err(&tmp))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(write_err(path)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Read a dump file written by [`write_fdump`] or by nanoBragg.c.
///
/// The header must be six integers on the first line followed by a form feed;
/// the rest of the file must hold exactly the number of values the header
/// implies (C reads whatever is there, silently leaving zeros or ignoring extra
/// bytes). Any mismatch is an [`Error::Malformed`].
pub fn read_fdump(path: &Path) -> Result<HklGrid> {
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    parse_fdump(&bytes, path)
}

/// Parse the contents of a dump file (see [`read_fdump`]); `path` is only used
/// in error messages.
pub fn parse_fdump(bytes: &[u8], path: &Path) -> Result<HklGrid> {
    let bad = |msg: String| Error::Malformed { path: path.to_path_buf(), msg };
    let nl =
        bytes.iter().take(256).position(|&b| b == b'\n').ok_or_else(|| {
            bad("no header line (six integers and a newline) at the start".into())
        })?;
    let text =
        std::str::from_utf8(&bytes[..nl]).map_err(|_| bad("header line is not text".into()))?;
    let nums: Vec<i32> = text
        .split_ascii_whitespace()
        .map(|t| t.parse::<i32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad(format!("header {text:?} is not six integers")))?;
    let [h_min, h_max, k_min, k_max, l_min, l_max] = nums[..] else {
        return Err(bad(format!("header {text:?} is not six integers")));
    };
    if bytes.get(nl + 1) != Some(&0x0c) {
        return Err(bad("header line is not followed by a form feed".into()));
    }
    let range =
        [(h_min, h_max), (k_min, k_max), (l_min, l_max)].map(|(lo, hi)| hi as i64 - lo as i64 + 1);
    if range.iter().any(|&r| r < 1) {
        return Err(bad(format!("header {text:?} has a maximum below its minimum")));
    }
    let body = &bytes[nl + 2..];
    let expected = [0, 1, 2].iter().map(|&a| range[a] as u128 + 1).product::<u128>() * 8;
    if body.len() as u128 != expected {
        return Err(bad(format!(
            "header {text:?} implies {expected} bytes of values, the file has {}",
            body.len()
        )));
    }
    let n = grid_len(range[0], range[1], range[2])?;
    let mut data = try_zeros(n)?;
    for (v, chunk) in data.iter_mut().zip(body.chunks_exact(8)) {
        *v = f64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
    }
    Ok(HklGrid { h_min, h_max, k_min, k_max, l_min, l_max, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sf::hkl::read_hkl;

    /// A reference input: from the repository's `tests/golden/inputs`, else from
    /// `$NANOBRAGG_GOLDEN/inputs`; `None` (test skipped) if neither has it.
    fn golden(name: &str) -> Option<PathBuf> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
        let env = std::env::var_os("NANOBRAGG_GOLDEN").map(PathBuf::from);
        let found = [Some(repo), env]
            .into_iter()
            .flatten()
            .map(|r| r.join("inputs").join(name))
            .find(|p| p.exists());
        if found.is_none() {
            eprintln!("skipping: golden input {name} not found");
        }
        found
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nanobragg-fdump-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    fn small_grid() -> HklGrid {
        let mut g =
            HklGrid { h_min: -1, h_max: 0, k_min: 2, k_max: 2, l_min: -3, l_max: -1, data: vec![] };
        g.data = (0..3 * 2 * 4).map(|i| i as f64 * 0.5 - 1.0).collect();
        g
    }

    #[test]
    fn golden_dump_is_reproduced_byte_for_byte() {
        let (Some(hkl), Some(dump)) = (golden("p1_tric.hkl"), golden("p1_tric.Fdump.bin")) else {
            return;
        };
        let entries = read_hkl(&hkl).unwrap();
        let grid = HklGrid::from_entries(&entries, 0.0).unwrap();
        let out = scratch("p1_tric.Fdump.bin");
        write_fdump(&out, &grid).unwrap();
        let want = std::fs::read(&dump).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), want);
        assert_eq!(read_fdump(&dump).unwrap(), grid);
        std::fs::remove_file(&out).unwrap();
    }

    #[test]
    fn round_trip_and_header_format() {
        let g = small_grid();
        let out = scratch("small.bin");
        write_fdump(&out, &g).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert!(bytes.starts_with(b"-1 0 2 2 -3 -1\n\x0c"));
        assert_eq!(bytes.len(), 16 + 8 * 24);
        assert_eq!(read_fdump(&out).unwrap(), g);
        std::fs::remove_file(&out).unwrap();
    }

    #[test]
    fn rejects_bad_files() {
        let g = small_grid();
        let out = scratch("bad.bin");
        write_fdump(&out, &g).unwrap();
        let good = std::fs::read(&out).unwrap();
        let p = Path::new("x.bin");
        let malformed = |b: &[u8]| matches!(parse_fdump(b, p), Err(Error::Malformed { .. }));
        assert!(malformed(&good[..good.len() - 1]), "truncated");
        assert!(malformed(&good[..20]), "truncated");
        assert!(malformed(&[&good[..], &[0u8; 8]].concat()), "trailing values");
        assert!(malformed(b""));
        assert!(malformed(b"-1 0 2 2 -3\n\x0c"), "five numbers");
        assert!(malformed(b"-1 0 2 2 -3 x\n\x0c"), "not a number");
        assert!(malformed(&[&b"-1 0 2 2 -3 -1\n"[..], &good[16..]].concat()), "no form feed");
        assert!(malformed(b"1 0 2 2 -3 -1\n\x0c"), "max below min");
        assert!(malformed(&[0u8; 1000]), "no header");
        // A header implying an enormous grid is caught before any allocation.
        assert!(malformed(b"-2000000000 2000000000 -2000000000 2000000000 0 0\n\x0c"));
        std::fs::remove_file(&out).unwrap();
        assert!(matches!(read_fdump(Path::new("/nonexistent/Fdump.bin")), Err(Error::Io { .. })));
    }

    #[test]
    fn write_rejects_inconsistent_grid_and_unwritable_path() {
        let mut g = small_grid();
        g.data.pop();
        assert!(matches!(write_fdump(&scratch("x.bin"), &g), Err(Error::Invalid { .. })));
        let g = small_grid();
        assert!(matches!(
            write_fdump(Path::new("/nonexistent/dir/Fdump.bin"), &g),
            Err(Error::Write { .. })
        ));
    }
}
