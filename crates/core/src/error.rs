//! Typed errors of the library.

use std::path::PathBuf;

/// Everything that can go wrong while reading inputs or resolving a plan.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file's contents do not parse.
    #[error("{path}: {msg}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line number where known.
        msg: String,
    },
    /// A parameter value makes no physical sense.
    #[error("invalid {what}: {msg}")]
    Invalid {
        /// The parameter (named like its flag).
        what: &'static str,
        /// Why.
        msg: String,
    },
    /// An array would not fit in the memory this process may still allocate
    /// (see [`crate::memory::available_bytes`]).
    #[error(
        "{what} needs {}, more memory than this process can allocate (free memory, cgroup and address-space limits)",
        human_bytes(*bytes)
    )]
    TooLarge {
        /// What was being allocated.
        what: String,
        /// How many bytes it needs.
        bytes: u128,
    },
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
