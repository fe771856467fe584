//! MOSFLM-style orientation matrix files (`-mat`).
//!
//! The first nine numbers of the file form the matrix, read in order: line `i`
//! holds the `i`-th (x, y, z) component of a*, b* and c*. Numbers are read like
//! C `scanf("%lg")`: white space separates them, line breaks are not special,
//! and a number may run straight into the next one's sign (`0.1-0.2` is two
//! numbers, as in fixed-width Fortran output). Everything after the ninth number
//! (MOSFLM files go on with the U matrix, the cell and the misset angles) is
//! ignored.

use std::path::Path;

use crate::error::{Error, Result};

/// Reads the reciprocal vectors `[a_star, b_star, c_star]` from a matrix file.
///
/// The vectors are returned as written, still multiplied by the wavelength.
/// Fewer than nine numbers, a token that is not a number before the ninth, or
/// a non-finite value is an error naming the file and line.
pub fn read_mat(path: &Path) -> Result<[[f64; 3]; 3]> {
    let text =
        std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let text = String::from_utf8_lossy(&text);
    parse_mat(&text).map_err(|msg| Error::Malformed { path: path.to_path_buf(), msg })
}

/// Parses the text of a matrix file; the error is a message with the line number.
pub fn parse_mat(text: &str) -> std::result::Result<[[f64; 3]; 3], String> {
    let mut numbers = Vec::with_capacity(9);
    'lines: for (lineno, line) in text.lines().enumerate() {
        for token in line.split_whitespace() {
            let mut rest = token;
            while !rest.is_empty() {
                let n = number_prefix(rest);
                let value = rest[..n].parse::<f64>().ok().filter(|_| n > 0);
                match value {
                    Some(v) if v.is_finite() => numbers.push(v),
                    _ => {
                        return Err(format!(
                        "line {}: '{}' is not a number (expected 9 numbers: the matrix a* b* c*)",
                        lineno + 1,
                        crate::error::shown(token)
                    ))
                    }
                }
                if numbers.len() == 9 {
                    break 'lines;
                }
                rest = &rest[n..];
            }
        }
    }
    if numbers.len() < 9 {
        return Err(format!(
            "only {} numbers; a matrix file needs 9 (a* b* c* as three columns)",
            numbers.len()
        ));
    }
    let mut mat = [[0.0; 3]; 3];
    for (k, v) in numbers.into_iter().enumerate() {
        // number k is component k/3 of vector k%3
        mat[k % 3][k / 3] = v;
    }
    Ok(mat)
}

/// Length of the longest prefix of `s` that reads as a decimal number
/// (`[+-]digits[.digits][e[+-]digits]`, with digits on at least one side of
/// the point); 0 if there is none.
fn number_prefix(s: &str) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut digits = i - int_start;
    if i < b.len() && b[i] == b'.' {
        let frac_start = i + 1;
        let mut j = frac_start;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        digits += j - frac_start;
        if digits > 0 {
            i = j;
        }
    }
    if digits == 0 {
        return 0;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let exp_start = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > exp_start {
            i = j;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mosflm_layout() {
        let text = " -0.0128 0.0034 0.0101\n 0.0045 -0.0119 0.0062\n 0.0093 0.0071 0.0098\n\
                    0.1 0.2 0.3\n0.4 0.5 0.6\n0.7 0.8 0.9\n 78.0 78.0 37.0 90.0 90.0 90.0\n 0 0 0\n";
        let m = parse_mat(text).unwrap();
        assert_eq!(m[0], [-0.0128, 0.0045, 0.0093]); // a*
        assert_eq!(m[1], [0.0034, -0.0119, 0.0071]); // b*
        assert_eq!(m[2], [0.0101, 0.0062, 0.0098]); // c*
    }

    #[test]
    fn scanf_like_tokens() {
        // numbers running into each other, line breaks anywhere, exponents
        let m = parse_mat("1-2+3\n4e0 5.0E+0\n6. .7e1 8\n9 trailing garbage").unwrap();
        assert_eq!(m, [[1.0, 4.0, 7.0], [-2.0, 5.0, 8.0], [3.0, 6.0, 9.0]]);
    }

    #[test]
    fn errors() {
        let e = parse_mat("1 2 3\n4 5 6\n").unwrap_err();
        assert!(e.contains("only 6 numbers"), "{e}");
        let e = parse_mat("1 2 3\n4 x 6\n7 8 9\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("'x'"), "{e}");
        let e = parse_mat("1 2 3\n4 5 6\n7 8 1e999\n").unwrap_err();
        assert!(e.contains("line 3"), "{e}");
        assert!(parse_mat("").is_err());
    }

    #[test]
    fn reads_file_and_names_it() {
        let dir = std::env::temp_dir().join(format!("nanobragg-matfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.mat");
        std::fs::write(&p, "1 0 0\n0 1 0\n0 0 1\n").unwrap();
        assert_eq!(read_mat(&p).unwrap(), [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]);
        std::fs::write(&p, "1 0 0\n").unwrap();
        let e = read_mat(&p).unwrap_err().to_string();
        assert!(e.contains("x.mat"), "{e}");
        let e = read_mat(&dir.join("missing.mat")).unwrap_err().to_string();
        assert!(e.contains("missing.mat"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
