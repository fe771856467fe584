//! Spectrum files (`-spectrum`), as simtbx/diffBragg write them.
//!
//! One spectral line per line: wavelength (Å) and weight, separated by a
//! comma and/or blanks (diffBragg's `save_spectra_file` writes
//! `# wavelengths, weights` and then `λ,w` lines with numpy's `savetxt`).
//! Blank lines and comment lines (first character after any blanks `#`) are
//! skipped, and so is a first non-blank line that does not start with a
//! number (a header written without `#`: diffBragg's reader skips the first
//! row whatever it holds). Columns after the second are ignored.
//!
//! The weights are relative: the render normalises them by their sum, so
//! they are fractions of the fluence. Every line must have a finite,
//! positive wavelength and a finite, non-negative weight, and at least one
//! weight must be positive; otherwise the error names the file and line.

use std::path::Path;

use crate::error::{Error, Result};

/// Reads a spectrum file into `[wavelength (Å), weight]` lines.
pub fn read_spectrum_file(path: &Path) -> Result<Vec<[f64; 2]>> {
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    parse_spectrum(&String::from_utf8_lossy(&bytes))
        .map_err(|msg| Error::Malformed { path: path.to_path_buf(), msg })
}

/// Parses the text of a spectrum file; the error is a message with the line
/// number.
pub fn parse_spectrum(text: &str) -> std::result::Result<Vec<[f64; 2]>, String> {
    let mut lines = Vec::new();
    let mut first = true;
    for (lineno, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let tokens: Vec<&str> =
            t.split(|c: char| c == ',' || c.is_whitespace()).filter(|s| !s.is_empty()).collect();
        let header = first && tokens.first().is_some_and(|s| s.parse::<f64>().is_err());
        first = false;
        if header {
            continue;
        }
        let at =
            |msg: String| format!("line {}: {msg} (columns: wavelength_A, weight)", lineno + 1);
        if tokens.len() < 2 {
            return Err(at("needs a wavelength and a weight".into()));
        }
        let mut v = [0.0; 2];
        for (x, tok) in v.iter_mut().zip(&tokens) {
            *x = match tok.parse::<f64>() {
                Ok(x) if x.is_finite() => x,
                _ => {
                    return Err(at(format!(
                        "'{}' is not a finite number",
                        crate::error::shown(tok)
                    )))
                }
            };
        }
        if v[0] <= 0.0 {
            return Err(at(format!("wavelength {} Å is not positive", v[0])));
        }
        if v[1] < 0.0 {
            return Err(at(format!("weight {} is negative", v[1])));
        }
        lines.push(v);
    }
    if lines.is_empty() {
        return Err("no spectral lines: the file has no wavelength, weight lines".into());
    }
    if lines.iter().all(|l| l[1] == 0.0) {
        return Err("every weight is 0: the spectrum has no intensity".into());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simtbx_format_comments_and_separators() {
        // as diffBragg's save_spectra_file writes it (numpy savetxt, header with '#')
        let text = "# wavelengths, weights\n1.000000000000000000e+00,2.500000000000000000e-01\n\
                    1.010000000000000000e+00,7.500000000000000000e-01\n";
        assert_eq!(parse_spectrum(text).unwrap(), [[1.0, 0.25], [1.01, 0.75]]);
        // a header without '#', blanks, comments, spaces and extra columns
        let text = "wavelength weight\n\n  # a comment\n1.2 3\n\t1.3 , 0 , extra\r\n";
        assert_eq!(parse_spectrum(text).unwrap(), [[1.2, 3.0], [1.3, 0.0]]);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_spectrum("# h\n1.0, 1\n1.1, x\n").unwrap_err();
        assert!(e.contains("line 3") && e.contains("'x'"), "{e}");
        // only the first line may be a header
        let e = parse_spectrum("1.0 1\nfoo bar\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("'foo'"), "{e}");
        let e = parse_spectrum("1.0 1\n-1.0 1\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("not positive"), "{e}");
        let e = parse_spectrum("1.0 1\n0 1\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("not positive"), "{e}");
        let e = parse_spectrum("1.0 -0.5\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("negative"), "{e}");
        let e = parse_spectrum("1.0 inf\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("finite"), "{e}");
        let e = parse_spectrum("1.0\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("weight"), "{e}");
        assert!(parse_spectrum("1.0 0\n1.1 0\n").unwrap_err().contains("every weight is 0"));
        assert!(parse_spectrum("# only\n\n").unwrap_err().contains("no spectral lines"));
    }

    #[test]
    fn reads_file_and_names_it() {
        let dir = std::env::temp_dir().join(format!("nanobragg-spectrum-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("spec.lam");
        std::fs::write(&p, "# wavelengths, weights\n1.0,1\n").unwrap();
        assert_eq!(read_spectrum_file(&p).unwrap(), [[1.0, 1.0]]);
        std::fs::write(&p, "1.0,-1\n").unwrap();
        let e = read_spectrum_file(&p).unwrap_err().to_string();
        assert!(e.contains("spec.lam") && e.contains("line 1"), "{e}");
        let e = read_spectrum_file(&dir.join("none.lam")).unwrap_err().to_string();
        assert!(e.contains("none.lam"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
