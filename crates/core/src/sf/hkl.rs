//! Structure factors from a text `-hkl` file and the dense grid built from them.

use super::HklGrid;
use crate::error::{Error, Result};
use std::fmt;
use std::path::Path;

/// One line of an hkl file: Miller indices (as read, possibly non-integer) and
/// the structure factor amplitude.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HklEntry {
    /// Miller index h.
    pub h: f64,
    /// Miller index k.
    pub k: f64,
    /// Miller index l.
    pub l: f64,
    /// Structure factor amplitude |F|.
    pub f: f64,
}

/// Read an hkl file: one `h k l F` entry per line, whitespace separated.
///
/// Unlike nanoBragg.c, which scans numbers until the first one that does not
/// parse and silently ignores the rest of the file, blank lines and comment
/// lines (first character after any blanks `#`) are skipped and a line
/// without four numbers is an [`Error::Malformed`] naming the line (1-based).
/// Columns after the fourth are ignored (C reads 4 numbers at a time across
/// lines, so a file of 5 or 6 columns is read differently there). Numbers use Rust's float
/// syntax (`1`, `-2.5`, `1e3`); `inf` and `nan` are refused with their line.
pub fn read_hkl(path: &Path) -> Result<Vec<HklEntry>> {
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    parse_hkl(&bytes, path)
}

/// Parse the contents of an hkl file (see [`read_hkl`]); `path` is only used in
/// error messages.
pub fn parse_hkl(bytes: &[u8], path: &Path) -> Result<Vec<HklEntry>> {
    let mut entries = Vec::new();
    for (n, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = String::from_utf8_lossy(raw);
        let mut fields = line.split_ascii_whitespace();
        let Some(first) = fields.next() else { continue };
        if first.starts_with('#') {
            continue;
        }
        let mut vals = [0.0f64; 4];
        for (i, v) in vals.iter_mut().enumerate() {
            let tok = if i == 0 { Some(first) } else { fields.next() };
            let tok = tok.ok_or_else(|| Error::Malformed {
                path: path.to_path_buf(),
                msg: format!("line {}: expected h k l F, found {} number(s)", n + 1, i),
            })?;
            *v = tok.parse::<f64>().map_err(|_| Error::Malformed {
                path: path.to_path_buf(),
                msg: format!("line {}: '{}' is not a number", n + 1, crate::error::shown(tok)),
            })?;
        }
        if let Some(bad) = vals.iter().find(|v| !v.is_finite()) {
            return Err(Error::Malformed {
                path: path.to_path_buf(),
                msg: format!("line {}: {bad} is not a finite number", n + 1),
            });
        }
        let [h, k, l, f] = vals;
        entries.push(HklEntry { h, k, l, f });
    }
    Ok(entries)
}

/// A Miller index that is not an integer, which nanoBragg.c reports with
/// `WARNING: non-integer value for h (VALUE) at line N`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NonIntegerIndex {
    /// Which index: `'h'`, `'k'` or `'l'`.
    pub axis: char,
    /// Its value.
    pub value: f64,
    /// Index of the entry, counted from 0 (the C program's "line").
    pub line: usize,
}

impl NonIntegerIndex {
    /// The C program's warning text, with `value` formatted by `fmt_g` (pass a
    /// C `%g` formatter to reproduce the C output exactly).
    pub fn message(&self, fmt_g: impl Fn(f64) -> String) -> String {
        format!(
            "WARNING: non-integer value for {} ({}) at line {}",
            self.axis,
            fmt_g(self.value),
            self.line
        )
    }
}

impl fmt::Display for NonIntegerIndex {
    /// The warning text with the value in Rust's shortest form (which differs
    /// from C's `%g` for values needing more than six digits or an exponent).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message(|v| v.to_string()))
    }
}

/// The non-integer Miller indices among `entries`, in the order nanoBragg.c
/// warns about them (per entry: h, k, l). An index counts as non-integer when
/// `x != ceil(x - 0.4)`, C's test (so NaN is reported too).
pub fn non_integer_warnings(entries: &[HklEntry]) -> Vec<NonIntegerIndex> {
    let mut out = Vec::new();
    for (line, e) in entries.iter().enumerate() {
        for (axis, value) in [('h', e.h), ('k', e.k), ('l', e.l)] {
            if value != (value - 0.4).ceil() {
                out.push(NonIntegerIndex { axis, value, line });
            }
        }
    }
    out
}

/// Number of values in a grid with the given ranges (each padded by one), after
/// checking that it is addressable and fits in the memory this process may
/// still allocate ([`crate::memory::budget_bytes`]).
pub(crate) fn grid_len(h_range: i64, k_range: i64, l_range: i64) -> Result<usize> {
    let n = padded_len(h_range, k_range, l_range);
    let bytes = n.saturating_mul(8);
    if usize::try_from(n).is_err() || bytes > crate::memory::budget_for(bytes) {
        return Err(Error::TooLarge { what: "structure factor grid".into(), bytes });
    }
    Ok(n as usize)
}

/// Number of values in a grid with the given ranges, each padded by one.
fn padded_len(h_range: i64, k_range: i64, l_range: i64) -> u128 {
    [h_range, k_range, l_range].iter().map(|&r| (r as i128 + 1).max(0) as u128).product()
}

/// Allocate `n` zeros without aborting on failure.
pub(crate) fn try_zeros(n: usize) -> Result<Vec<f64>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::TooLarge {
        what: "structure factor grid".into(),
        bytes: n as u128 * 8,
    })?;
    v.resize(n, 0.0);
    Ok(v)
}

/// The smallest and largest (truncated) h, k, l of `entries`; the errors of
/// [`HklGrid::from_entries`] for no entries or an unusable index.
fn bounds(entries: &[HklEntry]) -> Result<([i32; 3], [i32; 3])> {
    if entries.is_empty() {
        return Err(Error::Invalid { what: "hkl", msg: "not enough HKL indices".into() });
    }
    let (mut lo, mut hi) = ([i32::MAX; 3], [i32::MIN; 3]);
    for (n, e) in entries.iter().enumerate() {
        let hkl = [index_i32(e.h, n)?, index_i32(e.k, n)?, index_i32(e.l, n)?];
        for a in 0..3 {
            lo[a] = lo[a].min(hkl[a]);
            hi[a] = hi[a].max(hkl[a]);
        }
    }
    Ok((lo, hi))
}

/// Bytes the grid [`HklGrid::from_entries`] builds from `entries` takes
/// (padding included), and those of its build's index list: what setup
/// checks against the memory budget before building it.
pub(crate) fn grid_bytes(entries: &[HklEntry]) -> Result<u128> {
    let (lo, hi) = bounds(entries)?;
    let range = [0, 1, 2].map(|a| hi[a] as i64 - lo[a] as i64 + 1);
    let values = padded_len(range[0], range[1], range[2]);
    Ok(values.saturating_mul(8).saturating_add(entries.len() as u128 * 12))
}

/// A Miller index as the C program stores it in an `int`: truncated toward zero.
fn index_i32(x: f64, entry: usize) -> Result<i32> {
    let t = x.trunc();
    if t.is_finite() && t >= i32::MIN as f64 && t <= i32::MAX as f64 {
        Ok(t as i32)
    } else {
        Err(Error::Invalid {
            what: "hkl",
            msg: format!("Miller index {x} of entry {entry} is not a usable integer"),
        })
    }
}

impl HklGrid {
    /// Build the dense grid from hkl entries as nanoBragg.c does.
    ///
    /// The bounds are the extreme indices truncated toward zero; the grid has
    /// `(range + 1)` slots per axis, all 0, except that a non-zero `default_f`
    /// fills the `range^3` slots that correspond to indices (not the padding).
    /// Each entry then stores its F at its truncated indices; a later entry
    /// overwrites an earlier one with the same indices.
    ///
    /// Errors: no entries ([`Error::Invalid`], C's "not enough HKL indices"), an
    /// index that is not finite or does not fit in an `i32` ([`Error::Invalid`]),
    /// or a grid larger than the memory this process may still allocate
    /// ([`Error::TooLarge`]).
    ///
    /// C reads the values in a second pass with an integer format, which stops
    /// at the first index written with a decimal point or exponent; this port
    /// instead truncates every index.
    pub fn from_entries(entries: &[HklEntry], default_f: f64) -> Result<HklGrid> {
        let (lo, hi) = bounds(entries)?;
        let idx = entries
            .iter()
            .enumerate()
            .map(|(n, e)| Ok([index_i32(e.h, n)?, index_i32(e.k, n)?, index_i32(e.l, n)?]))
            .collect::<Result<Vec<_>>>()?;
        let range = [0, 1, 2].map(|a| hi[a] as i64 - lo[a] as i64 + 1);
        let n = grid_len(range[0], range[1], range[2])?;
        let mut data = try_zeros(n)?;
        let nk = range[1] as usize + 1;
        let nl = range[2] as usize + 1;
        if default_f != 0.0 {
            for h in 0..range[0] as usize {
                for k in 0..range[1] as usize {
                    let row = (h * nk + k) * nl;
                    data[row..row + range[2] as usize].fill(default_f);
                }
            }
        }
        for (e, hkl) in entries.iter().zip(&idx) {
            let [dh, dk, dl] = [0, 1, 2].map(|a| (hkl[a] as i64 - lo[a] as i64) as usize);
            data[(dh * nk + dk) * nl + dl] = e.f;
        }
        Ok(HklGrid {
            h_min: lo[0],
            h_max: hi[0],
            k_min: lo[1],
            k_max: hi[1],
            l_min: lo[2],
            l_max: hi[2],
            data: std::sync::Arc::new(data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn p() -> PathBuf {
        PathBuf::from("test.hkl")
    }

    #[test]
    fn parses_lines_skipping_blanks_comments_and_extra_columns() {
        let text = b"# h k l F\n1 2 3 10.5\n\n  \r\n  #comment 1 2 3 4\n-1 0 +2 1e2 extra 7\r\n0.5 -0.0 2 3\n";
        let e = parse_hkl(text, &p()).unwrap();
        assert_eq!(
            e,
            vec![
                HklEntry { h: 1.0, k: 2.0, l: 3.0, f: 10.5 },
                HklEntry { h: -1.0, k: 0.0, l: 2.0, f: 100.0 },
                HklEntry { h: 0.5, k: -0.0, l: 2.0, f: 3.0 },
            ]
        );
    }

    #[test]
    fn malformed_lines_name_the_line() {
        for (text, line) in [
            (&b"1 2 3 4\n1 2 3\n"[..], "line 2:"),
            (b"1 2 3 4\n\n1 2 x 4\n", "line 3:"),
            (b"1,2,3,4\n", "line 1:"),
            (b"1 2 3 4\n0 0 0 nan\n", "line 2: NaN is not a finite number"),
            (b"1 2 inf 4\n", "line 1: inf is not a finite number"),
        ] {
            match parse_hkl(text, &p()) {
                Err(Error::Malformed { path, msg }) => {
                    assert_eq!(path, p());
                    assert!(msg.starts_with(line), "{msg}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(parse_hkl(b"", &p()).unwrap().is_empty());
        assert!(matches!(read_hkl(Path::new("/nonexistent/x.hkl")), Err(Error::Io { .. })));
    }

    #[test]
    fn non_integer_warnings_follow_c_test() {
        let e = [
            HklEntry { h: 1.0, k: 2.5, l: -3.0, f: 1.0 },
            HklEntry { h: 0.7, k: -0.0, l: 1.6, f: 1.0 },
            HklEntry { h: f64::NAN, k: 0.6, l: -0.6, f: 1.0 },
        ];
        let w = non_integer_warnings(&e);
        let got: Vec<(char, usize)> = w.iter().map(|w| (w.axis, w.line)).collect();
        // ceil(x - 0.4) == x fails for every non-integer (and NaN).
        assert_eq!(got, vec![('k', 0), ('h', 1), ('l', 1), ('h', 2), ('k', 2), ('l', 2)]);
        assert_eq!(w[0].to_string(), "WARNING: non-integer value for k (2.5) at line 0");
        assert_eq!(
            w[1].message(|v| format!("<{v}>")),
            "WARNING: non-integer value for h (<0.7>) at line 1"
        );
    }

    #[test]
    fn grid_layout_default_fill_and_truncation() {
        let e = [
            HklEntry { h: -1.0, k: 0.0, l: 2.0, f: 5.0 },
            HklEntry { h: 1.0, k: 1.0, l: 3.0, f: 7.0 },
            // Truncated to (0, 0, 2): -0.9 → 0, 2.9 → 2.
            HklEntry { h: -0.9, k: 0.2, l: 2.9, f: 9.0 },
        ];
        let g = HklGrid::from_entries(&e, 0.0).unwrap();
        assert_eq!((g.h_min, g.h_max, g.k_min, g.k_max, g.l_min, g.l_max), (-1, 1, 0, 1, 2, 3));
        assert_eq!(g.data.len(), 4 * 3 * 3);
        assert_eq!(g.at(0, 0, 0), 5.0);
        assert_eq!(g.at(2, 1, 1), 7.0);
        assert_eq!(g.at(1, 0, 0), 9.0);
        assert_eq!(g.data.iter().filter(|&&v| v != 0.0).count(), 3);

        let g = HklGrid::from_entries(&e, 2.5).unwrap();
        for h in 0..4 {
            for k in 0..3 {
                for l in 0..3 {
                    let v = g.at(h, k, l);
                    let padding = h == 3 || k == 2 || l == 2;
                    match (h, k, l) {
                        (0, 0, 0) => assert_eq!(v, 5.0),
                        (2, 1, 1) => assert_eq!(v, 7.0),
                        (1, 0, 0) => assert_eq!(v, 9.0),
                        _ if padding => assert_eq!(v, 0.0),
                        _ => assert_eq!(v, 2.5),
                    }
                }
            }
        }
    }

    #[test]
    fn grid_errors() {
        assert!(matches!(HklGrid::from_entries(&[], 1.0), Err(Error::Invalid { .. })));
        let bad = [HklEntry { h: f64::NAN, k: 0.0, l: 0.0, f: 1.0 }];
        assert!(matches!(HklGrid::from_entries(&bad, 0.0), Err(Error::Invalid { .. })));
        let bad = [HklEntry { h: 1e12, k: 0.0, l: 0.0, f: 1.0 }];
        assert!(matches!(HklGrid::from_entries(&bad, 0.0), Err(Error::Invalid { .. })));
        let huge = [
            HklEntry { h: -2e9, k: -2e9, l: -2e9, f: 1.0 },
            HklEntry { h: 2e9, k: 2e9, l: 2e9, f: 1.0 },
        ];
        match HklGrid::from_entries(&huge, 0.0) {
            Err(Error::TooLarge { bytes, .. }) => assert!(bytes > 1u128 << 90),
            other => panic!("{other:?}"),
        }
        let big = [
            HklEntry { h: 0.0, k: 0.0, l: 0.0, f: 1.0 },
            HklEntry { h: 5e4, k: 5e4, l: 5e4, f: 1.0 },
        ];
        assert!(matches!(HklGrid::from_entries(&big, 0.0), Err(Error::TooLarge { .. })));
    }
}
