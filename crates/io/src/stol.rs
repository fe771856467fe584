//! `.stol` tables: structure factor F of an amorphous material against
//! sin(θ)/λ (nonBragg's `-stol`, `-4stol` and `-Q` files).
//!
//! One row per line, `x F`, the columns separated by any run of space, tab,
//! `,`, `;`, `:` or `!`; blank lines are skipped and columns after the second
//! are ignored. The reference reads a field that is not a number as 0, so a
//! comment line (first field starting with `#`) becomes a row `0 0`; those
//! rows are kept here too, because
//! they take part in the interpolation and in the row count the reference
//! prints. Any other field that is not a finite number is an error naming the
//! file and the line, as is a table with no row or with no F at all.

use std::path::Path;

use crate::smv::atof;
use crate::{read_all, IoError};

/// Column separators of the reference's text reader (line ends aside).
const DELIMITERS: &[u8] = b" \t,;:!";
/// Characters the reference's reader skips as "part of a number" after
/// reading one with `atof`.
const NUMBER_CHARS: &[u8] = b"0123456789-+.EGeg";

/// Reads a `.stol` file into rows `[x, F]` in file order (F is NaN where a
/// row has no second column).
pub fn read_stol(path: &Path) -> Result<Vec<[f64; 2]>, IoError> {
    let bytes = read_all(path)?;
    parse_stol(&bytes).map_err(|reason| IoError::Malformed { path: path.to_path_buf(), reason })
}

/// Parses the text of a `.stol` table (see the module documentation); the
/// error names the offending line.
pub fn parse_stol(text: &[u8]) -> Result<Vec<[f64; 2]>, String> {
    let mut rows = Vec::new();
    for (lineno, line) in text.split_inclusive(|&b| b == b'\n').enumerate() {
        let Some(row) = c_columns::<2>(line) else { continue };
        let fields: Vec<&[u8]> = line
            .split(|b| DELIMITERS.contains(b) || b"\r\n".contains(b))
            .filter(|t| !t.is_empty())
            .collect();
        let comment = fields.first().is_some_and(|t| t.starts_with(b"#"));
        if !comment {
            for (col, field) in fields.iter().take(2).enumerate() {
                let ok = std::str::from_utf8(field)
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .is_some_and(f64::is_finite);
                if !ok {
                    return Err(format!(
                        "line {}: {} '{}' is not a finite number (columns: x F)",
                        lineno + 1,
                        if col == 0 { "x" } else { "F" },
                        String::from_utf8_lossy(field).escape_debug()
                    ));
                }
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err("no rows: the table needs lines 'x F'".into());
    }
    if rows.iter().all(|r| r[1].is_nan()) {
        return Err("no F values: every row lacks the second column".into());
    }
    Ok(rows)
}

/// One line as the reference's text reader splits it into `N` columns:
/// `None` for a line of nothing but separators; a column the line does not
/// reach is NaN, and a field that is not a number reads as 0.
fn c_columns<const N: usize>(line: &[u8]) -> Option<[f64; N]> {
    let span = |from: usize, set: &[u8]| {
        from + line[from..].iter().take_while(|b| set.contains(b)).count()
    };
    let cspan = |from: usize, set: &[u8]| {
        from + line[from..].iter().take_while(|b| !set.contains(b)).count()
    };
    let at_line_end = |at: usize| &line[at..] == b"\n";
    let mut at = span(0, DELIMITERS);
    if at_line_end(at) {
        return None;
    }
    let mut row = [f64::NAN; N];
    let mut col = 0;
    loop {
        row[col] = atof(&String::from_utf8_lossy(&line[at..]));
        at = span(at, NUMBER_CHARS);
        if at_line_end(at) {
            break;
        }
        at = span(cspan(at, DELIMITERS), DELIMITERS);
        if at_line_end(at) {
            break;
        }
        col += 1;
        if col >= N {
            break;
        }
    }
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &[[f64; 2]], b: &[[f64; 2]]) -> bool {
        a.len() == b.len()
            && a.iter()
                .flatten()
                .zip(b.iter().flatten())
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn rows_separators_and_comments() {
        let nan = f64::NAN;
        let rows = parse_stol(
            b"#Curve 0, 1000 points\n#x y type\n\n \t,\n0 1.34812 i\n0.002;0.48!junk\n0.5\n#\n1,2",
        )
        .unwrap();
        let want = [
            [0.0, 0.0],
            [0.0, 0.0],
            [0.0, 1.34812],
            [0.002, 0.48],
            [0.5, nan],
            [0.0, 0.0],
            [1.0, 2.0],
        ];
        assert!(same(&rows, &want), "{rows:?}");
    }

    #[test]
    fn malformed_tables_name_the_line() {
        let err = parse_stol(b"0 1\n0.1 abc\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("abc"), "{err}");
        let err = parse_stol(b"0 1\nwater 2\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("water"), "{err}");
        assert!(parse_stol(b"0 inf\n").unwrap_err().contains("line 1"));
        assert!(parse_stol(b"\n  \n").unwrap_err().contains("no rows"));
        assert!(parse_stol(b"0\n0.1\n").unwrap_err().contains("no F"));
    }
}
