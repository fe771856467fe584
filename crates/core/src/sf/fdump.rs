//! The binary structure factor dump (`Fdump.bin`) nanoBragg.c writes after
//! reading an hkl file and re-reads with `-dump`/when no hkl file is given.
//! Only the format lives here: the command line writes the file (atomically,
//! see `nanobragg_io::atomic`) through [`write_fdump_to`].
//!
//! Layout: the text `h_min h_max k_min k_max l_min l_max`, a newline and a form
//! feed, then every value of the padded grid ([`HklGrid::data`]) as
//! little-endian `f64`, l fastest.

use super::hkl::grid_len;
use super::HklGrid;
use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::Arc;

/// The header line of a dump, without the trailing newline and form feed.
fn header(grid: &HklGrid) -> String {
    format!(
        "{} {} {} {} {} {}",
        grid.h_min, grid.h_max, grid.k_min, grid.k_max, grid.l_min, grid.l_max
    )
}

/// Values converted per write: a grid of gigabytes goes out in pieces,
/// never whole in a second buffer.
const CHUNK: usize = 8192;

/// Writes `grid` as a dump byte-identical to the C program's to `w`,
/// streaming its values. A grid whose `data` does not have the size its
/// bounds imply is an [`std::io::ErrorKind::InvalidInput`] error, before
/// anything is written.
pub fn write_fdump_to(w: &mut impl Write, grid: &HklGrid) -> std::io::Result<()> {
    let ranges = [grid.h_range(), grid.k_range(), grid.l_range()];
    let n = ranges.iter().map(|&r| (r as i128 + 1).max(0) as u128).product::<u128>();
    if ranges.iter().any(|&r| r < 1) || grid.data.len() as u128 != n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "grid [{}] holds {} values, its bounds need {n}",
                header(grid),
                grid.data.len()
            ),
        ));
    }
    w.write_all(header(grid).as_bytes())?;
    w.write_all(b"\n\x0c")?;
    let mut buf = vec![0u8; 8 * CHUNK];
    for values in grid.data.chunks(CHUNK) {
        for (b, v) in buf.chunks_exact_mut(8).zip(values) {
            b.copy_from_slice(&v.to_le_bytes());
        }
        w.write_all(&buf[..8 * values.len()])?;
    }
    Ok(())
}

/// Read a dump file written by [`write_fdump_to`] or by nanoBragg.c,
/// streaming its values into the grid (the file is not held in memory).
///
/// The header must be six integers on the first line followed by a form feed;
/// the rest of the file must hold exactly the number of values the header
/// implies (C reads whatever is there, silently leaving zeros or ignoring extra
/// bytes). Any mismatch is an [`Error::Malformed`]; a grid larger than the
/// memory this process may still allocate is an [`Error::TooLarge`].
pub fn read_fdump(path: &Path) -> Result<HklGrid> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len() as u128);
    read_from(BufReader::with_capacity(1 << 20, file), len, path)
}

/// Parse the contents of a dump file (see [`read_fdump`]); `path` is only used
/// in error messages.
pub fn parse_fdump(bytes: &[u8], path: &Path) -> Result<HklGrid> {
    read_from(bytes, Some(bytes.len() as u128), path)
}

/// A dump from `r`, whose length (where known) is checked against the
/// header before the grid is allocated.
fn read_from(mut r: impl BufRead, len: Option<u128>, path: &Path) -> Result<HklGrid> {
    let bad = |msg: String| Error::Malformed { path: path.to_path_buf(), msg };
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut line = Vec::new();
    (&mut r).take(256).read_until(b'\n', &mut line).map_err(io)?;
    if line.pop() != Some(b'\n') {
        return Err(bad("no header line (six integers and a newline) at the start".into()));
    }
    let text = std::str::from_utf8(&line).map_err(|_| bad("header line is not text".into()))?;
    let nums: Vec<i32> = text
        .split_ascii_whitespace()
        .map(|t| t.parse::<i32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad(format!("header {text:?} is not six integers")))?;
    let [h_min, h_max, k_min, k_max, l_min, l_max] = nums[..] else {
        return Err(bad(format!("header {text:?} is not six integers")));
    };
    let mut ff = [0u8; 1];
    if r.read(&mut ff).map_err(io)? != 1 || ff[0] != 0x0c {
        return Err(bad("header line is not followed by a form feed".into()));
    }
    let range =
        [(h_min, h_max), (k_min, k_max), (l_min, l_max)].map(|(lo, hi)| hi as i64 - lo as i64 + 1);
    if range.iter().any(|&r| r < 1) {
        return Err(bad(format!("header {text:?} has a maximum below its minimum")));
    }
    let expected = [0, 1, 2].iter().map(|&a| range[a] as u128 + 1).product::<u128>() * 8;
    let body = len.map(|l| l.saturating_sub(line.len() as u128 + 2));
    let wrong_size = |found: String| {
        bad(format!("header {text:?} implies {expected} bytes of values, the file has {found}"))
    };
    if let Some(body) = body.filter(|&b| b != expected) {
        return Err(wrong_size(body.to_string()));
    }
    let n = grid_len(range[0], range[1], range[2])?;
    let mut data = Vec::new();
    data.try_reserve_exact(n)
        .map_err(|_| Error::TooLarge { what: "structure factor grid".into(), bytes: expected })?;
    let mut buf = vec![0u8; 8 * CHUNK];
    while data.len() < n {
        let take = (n - data.len()).min(CHUNK);
        r.read_exact(&mut buf[..8 * take]).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => wrong_size("fewer".into()),
            _ => io(e),
        })?;
        data.extend(
            buf[..8 * take]
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().expect("chunks of 8"))),
        );
    }
    if r.read(&mut ff).map_err(io)? != 0 {
        return Err(wrong_size("more".into()));
    }
    Ok(HklGrid { h_min, h_max, k_min, k_max, l_min, l_max, data: Arc::new(data) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sf::hkl::read_hkl;
    use std::path::PathBuf;

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

    fn small_grid() -> HklGrid {
        let data = (0..3 * 2 * 4).map(|i| i as f64 * 0.5 - 1.0).collect::<Vec<_>>();
        HklGrid { h_min: -1, h_max: 0, k_min: 2, k_max: 2, l_min: -3, l_max: -1, data: data.into() }
    }

    fn dump(grid: &HklGrid) -> Vec<u8> {
        let mut bytes = Vec::new();
        write_fdump_to(&mut bytes, grid).unwrap();
        bytes
    }

    #[test]
    fn golden_dump_is_reproduced_byte_for_byte() {
        let (Some(hkl), Some(path)) = (golden("p1_tric.hkl"), golden("p1_tric.Fdump.bin")) else {
            return;
        };
        let entries = read_hkl(&hkl).unwrap();
        let grid = HklGrid::from_entries(&entries, 0.0).unwrap();
        let want = std::fs::read(&path).unwrap();
        assert!(grid.data.len() > CHUNK, "the grid spans several chunks");
        assert_eq!(dump(&grid), want);
        assert_eq!(read_fdump(&path).unwrap(), grid);
    }

    #[test]
    fn round_trip_and_header_format() {
        let g = small_grid();
        let bytes = dump(&g);
        assert!(bytes.starts_with(b"-1 0 2 2 -3 -1\n\x0c"));
        assert_eq!(bytes.len(), 16 + 8 * 24);
        assert_eq!(bytes[16..24], (-1.0f64).to_le_bytes());
        assert_eq!(parse_fdump(&bytes, Path::new("x")).unwrap(), g);
        // from a file, streamed
        let d = std::env::temp_dir().join(format!("nanobragg-fdump-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let out = d.join("small.bin");
        std::fs::write(&out, &bytes).unwrap();
        assert_eq!(read_fdump(&out).unwrap(), g);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn rejects_bad_files() {
        let good = dump(&small_grid());
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
        // without a known length, a short or long body is found while reading
        let streamed = |b: &[u8]| matches!(read_from(b, None, p), Err(Error::Malformed { .. }));
        assert!(streamed(&good[..good.len() - 8]), "truncated");
        assert!(streamed(&[&good[..], &[0u8; 1]].concat()), "trailing byte");
        assert_eq!(read_from(&good[..], None, p).unwrap(), small_grid());
        assert!(matches!(read_fdump(Path::new("/nonexistent/Fdump.bin")), Err(Error::Io { .. })));
    }

    #[test]
    fn write_rejects_inconsistent_grid_and_passes_on_write_errors() {
        let mut g = small_grid();
        std::sync::Arc::make_mut(&mut g.data).pop();
        let mut out = Vec::new();
        let e = write_fdump_to(&mut out, &g).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(out.is_empty(), "nothing written");
        // a sink that fills up after 100 bytes
        let mut full = [0u8; 100];
        let e = write_fdump_to(&mut &mut full[..], &small_grid()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WriteZero);
    }
}
