//! Typed errors of the library.

use std::path::PathBuf;

/// Everything that can go wrong while reading inputs or resolving a plan.
#[derive(Debug)]
pub enum Error {
    /// A file could not be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file could not be written.
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file's contents do not parse.
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line number where known.
        msg: String,
    },
    /// A parameter value makes no physical sense.
    Invalid {
        /// The parameter (named like its flag).
        what: &'static str,
        /// Why.
        msg: String,
    },
    /// An array would not fit in the memory this process may still allocate
    /// (see [`crate::memory::available_bytes`]).
    TooLarge {
        /// What was being allocated.
        what: String,
        /// How many bytes it needs.
        bytes: u128,
    },
}

// Written out rather than derived: a derive macro would make this crate's
// build depend on the features of `syn` that the rest of a build enables,
// so `cargo build -p nanobragg-cli` and `cargo test --workspace` would each
// compile the kernels again.
impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Error::Write { path, source } => write!(f, "cannot write {}: {source}", path.display()),
            Error::Malformed { path, msg } => write!(f, "{}: {msg}", path.display()),
            Error::Invalid { what, msg } => write!(f, "invalid {what}: {msg}"),
            Error::TooLarge { what, bytes } => write!(
                f,
                "{what} needs {}, more memory than this process can allocate (free memory, cgroup and address-space limits)",
                human_bytes(*bytes)
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Write { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A byte count for messages: `512 bytes`, `3.2 GiB`, `1.0e3 TiB`.
fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut x = bytes as f64;
    let mut unit = "bytes";
    for u in UNITS {
        if x < 1024.0 {
            break;
        }
        x /= 1024.0;
        unit = u;
    }
    format!("{x:.1} {unit}")
}

/// Most characters of a value [`shown`] echoes before shortening it.
pub const SHOWN_CHARS: usize = 60;

/// A value from the command line or a file as error messages echo it: control
/// characters escaped as Rust writes them (`\n`, `\u{1b}`), invisible ones
/// (a byte-order mark, zero-width or direction marks) as `\u{feff}`, so that
/// nothing in it acts on the terminal or hides; longer than [`SHOWN_CHARS`]
/// characters, its start with `…` and the full length, so that a huge token
/// gives a short line.
pub fn shown(value: &str) -> String {
    let mut out = String::new();
    let total = value.chars().count();
    for (count, c) in value.chars().enumerate() {
        if count == SHOWN_CHARS {
            out.push_str(&format!("… ({total} characters)"));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else if is_invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that print as nothing (format characters, unusual spaces):
/// echoed escaped so that a value that looks empty or equal to another says
/// what it holds.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00a0}'
            | '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180e}'
            | '\u{2000}'..='\u{200f}'
            | '\u{2028}'..='\u{202f}'
            | '\u{205f}'..='\u{206f}'
            | '\u{3000}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// Result with the library error.
pub type Result<T> = std::result::Result<T, Error>;

/// Non-fatal conditions nanoBragg.c reports on stdout while setting up.
/// The CLI prints them with the C program's wording and number formats.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// `-odet_vector` was not a unit vector; replaced by unit(f × s).
    AutoOdetVector,
    /// Sensor thickness given without attenuation depth: mu set to this (1/m).
    AttenuationDepth(f64),
    /// Sample taller than the beam: clipped (sample_y m, beam m).
    ClipSampleHigh(f64, f64),
    /// Sample wider than the beam: clipped (sample_z m, beam m).
    ClipSampleWide(f64, f64),
    /// Mosaic spread without a domain count: 10 domains used.
    MosaicTenDomains,
    /// Domain count without a spread: one domain used.
    MosaicNoSpread,
    /// Zero spread: one domain used.
    MosaicZeroSpread,
    /// Unit cell volume is impossible.
    ImpossibleCellVolume(f64),
    /// Reciprocal cell lengths are impossible.
    ImpossibleReciprocalLengths([f64; 3]),
    /// Sub-pixel sampling coarser than recommended: (xtal size Å, reciprocal pixel Å, recommended).
    Undersampled(f64, f64, i64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_and_shortens() {
        assert_eq!(shown("1.5"), "1.5");
        assert_eq!(shown("Å µm"), "Å µm");
        assert_eq!(shown("\u{feff}"), "\\u{feff}");
        assert_eq!(shown("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
        assert_eq!(shown("x\u{200b}\u{7f}"), "x\\u{200b}\\u{7f}");
        let long = "7".repeat(1 << 20);
        let s = shown(&long);
        assert_eq!(s, format!("{}… (1048576 characters)", "7".repeat(SHOWN_CHARS)));
        assert_eq!(shown(&"8".repeat(SHOWN_CHARS)), "8".repeat(SHOWN_CHARS));
    }
}
