//! Source definition files (`-sourcefile`).
//!
//! One source per line with up to five columns: position X, Y, Z (m), weight,
//! wavelength (m). Columns are separated by any run of space, tab, `,`, `;`,
//! `:` or `!` (as nanoBragg.c's text reader does); lines holding nothing but
//! separators, and comment lines (first character after any blanks `#`, which
//! nanoBragg.c cannot read), are skipped; columns after the fifth are ignored. A missing
//! trailing column, or the word `nan`, is NaN, which the source setup replaces
//! by the default (position on the beam axis at the source distance, weight 1,
//! the `-lambda` wavelength).
//!
//! Unlike nanoBragg.c, which reads a non-numeric token as 0, a token that is not
//! a number is an error naming the file and line, and so is a file with no
//! sources.

use std::path::Path;

use crate::error::{Error, Result};

/// Column separators, besides line ends.
const DELIMITERS: &[char] = &[' ', '\t', ',', ';', ':', '!', '\r'];

/// Reads a source file into rows of `[X, Y, Z, weight, lambda]`, NaN where a
/// column is missing.
pub fn read_source_file(path: &Path) -> Result<Vec<[f64; 5]>> {
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    parse_sources(&String::from_utf8_lossy(&bytes))
        .map_err(|msg| Error::Malformed { path: path.to_path_buf(), msg })
}

/// Parses the text of a source file; the error is a message with the line number.
pub fn parse_sources(text: &str) -> std::result::Result<Vec<[f64; 5]>, String> {
    let mut rows = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let mut row = [f64::NAN; 5];
        let mut n = 0;
        for token in line.split(DELIMITERS).filter(|t| !t.is_empty()).take(5) {
            row[n] = match token.parse::<f64>() {
                Ok(v) if !v.is_infinite() => v,
                _ => {
                    return Err(format!(
                        "line {}: '{}' is not a number (columns: X Y Z weight lambda)",
                        lineno + 1,
                        crate::error::shown(token)
                    ))
                }
            };
            n += 1;
        }
        if n > 0 {
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return Err("no sources: the file has no lines with numbers".to_string());
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: [f64; 5], b: [f64; 5]) -> bool {
        a.iter().zip(&b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn columns_and_separators() {
        let nan = f64::NAN;
        let rows = parse_sources(
            "# X Y Z weight lambda\n-10 0 0 1 1e-10\n\n  ,; \t\n-10,0.1;0:2!1.1e-10 99 junk\r\n  # 2\n-10\t0.2\nnan 1 2 nan 3",
        )
        .unwrap();
        assert_eq!(rows.len(), 4);
        assert!(same(rows[0], [-10.0, 0.0, 0.0, 1.0, 1e-10]));
        assert!(same(rows[1], [-10.0, 0.1, 0.0, 2.0, 1.1e-10]));
        assert!(same(rows[2], [-10.0, 0.2, nan, nan, nan]));
        assert!(same(rows[3], [nan, 1.0, 2.0, nan, 3.0]));
    }

    #[test]
    fn errors() {
        let e = parse_sources("1 2 3\n4 five 6\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("'five'"), "{e}");
        assert!(parse_sources("1 inf 3\n").unwrap_err().contains("line 1"));
        assert!(parse_sources("").unwrap_err().contains("no sources"));
        assert!(parse_sources("\n \n,,\n").unwrap_err().contains("no sources"));
    }

    #[test]
    fn reads_file_and_names_it() {
        let dir = std::env::temp_dir().join(format!("nanobragg-sourcefile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("src.txt");
        std::fs::write(&p, "0 0 -10 1 1e-10\n").unwrap();
        assert_eq!(read_source_file(&p).unwrap().len(), 1);
        std::fs::write(&p, "").unwrap();
        let e = read_source_file(&p).unwrap_err().to_string();
        assert!(e.contains("src.txt") && e.contains("no sources"), "{e}");
        let e = read_source_file(&dir.join("none.txt")).unwrap_err().to_string();
        assert!(e.contains("none.txt"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
