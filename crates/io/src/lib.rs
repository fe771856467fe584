//! File formats and text formatting for nanobragg.
//!
//! * [`cfmt`]: C `printf`-compatible number formatting (`%g`, `%f`, `%e`, ...),
//!   so that console output and SMV headers match the original program byte for byte.
//! * [`smv`]: SMV (ADSC) images: the one SMV writer and the one header reader (the
//!   geometry a header gives).
//! * [`float`]: raw little-endian `f32` images.
//! * [`le`]: little-endian byte views of pixel slices (no copy on little-endian hosts).
//! * [`expt`]: DIALS experiment lists (beam, panels, crystal) for `-expt`.
//! * [`crystfel`]: CrystFEL geometry files (panels) for `-geom`.
//! * [`stol`]: nonBragg's `.stol` tables (F against sin(θ)/λ).
//! * [`mx`]: int32 panels with their geometry and the experiment's values, what
//!   [`cbf`] (miniCBF) and [`nxmx`] (NXmx in HDF5, pure Rust) write.
//! * [`nxmx_series`]: many shots in one NXmx file, written a frame at a time (a
//!   dataset's output, with each shot's metadata, [`shot_record`]).
//! * [`read_image`]: SMV, miniCBF and NXmx frames read back, ours or other
//!   writers' (`refine -observed`).
//! * [`pgm`]: binary PGM (`P5`) preview images and the integer image conversion.
//! * [`atomic`]: every output goes to a temporary file beside its target, renamed over
//!   the target when complete: a failed or interrupted run leaves the old file as it was;
//!   the outputs of one run are renamed all together or not at all.
//! * [`temp_names`]: the names of those temporaries (host and process id in them), and
//!   the removal of those a killed process left.
//!
//! * [`image_writer`]: the one writer of image files: an image in its format (raw
//!   float, SMV 16/32-bit, PGM, miniCBF, NXmx, an NXmx series) written into an output.
//!
//! All fallible operations return [`IoError`], whose variants carry the path involved.

#![warn(missing_docs)]

pub mod atomic;
pub mod cbf;
pub mod cfmt;
pub mod crystfel;
pub mod expt;
pub mod float;
mod h5;
pub mod image_writer;
mod interrupt;
pub mod le;
pub mod mx;
pub mod nxmx;
pub mod nxmx_series;
pub mod pgm;
pub mod read_image;
pub mod shot_record;
pub mod smv;
pub mod stol;
pub mod temp_names;

use std::path::PathBuf;

/// Errors of the file readers and writers; every variant names the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The file to read does not exist.
    #[error("{}: file not found", path.display())]
    NotFound {
        /// The file that was looked for.
        path: PathBuf,
    },
    /// Reading the file failed at the operating-system level.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file being read.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the file (or its temporary, or the final rename) failed.
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        /// The target file being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is shorter than the minimum its format allows.
    #[error("{}: file is {len} bytes long, shorter than the minimum of {min} bytes for {what}", path.display())]
    TooShort {
        /// The file being read.
        path: PathBuf,
        /// Actual length in bytes.
        len: u64,
        /// Minimum length in bytes.
        min: u64,
        /// Which format or part of a file needed the bytes.
        what: &'static str,
    },
    /// The file does not start like an SMV header (`{\nHEADER_BYT`).
    #[error("{}: not an SMV image (the file does not start with \"{{\\nHEADER_BYTES\")", path.display())]
    NotSmv {
        /// The file being read.
        path: PathBuf,
    },
    /// The SMV header is present but unusable (missing or invalid key).
    #[error("{}: invalid SMV header: {reason}", path.display())]
    BadHeader {
        /// The file being read.
        path: PathBuf,
        /// What is wrong with the header.
        reason: String,
    },
    /// The file ends before all the pixels it announces.
    #[error("{}: truncated: {what} needs {expected} bytes but the file has {actual}", path.display())]
    Truncated {
        /// The file being read.
        path: PathBuf,
        /// What was being read.
        what: &'static str,
        /// Bytes required.
        expected: u64,
        /// Bytes available.
        actual: u64,
    },
    /// The file size does not match the expected number of values.
    #[error("{}: {what}: expected {expected} bytes, the file has {actual}", path.display())]
    LengthMismatch {
        /// The file being read.
        path: PathBuf,
        /// Description of the expected content.
        what: String,
        /// Expected length in bytes.
        expected: u64,
        /// Actual length in bytes.
        actual: u64,
    },
    /// The data handed to a writer is inconsistent (e.g. wrong number of pixels).
    #[error("{}: {reason}", path.display())]
    InvalidInput {
        /// The file that was to be written.
        path: PathBuf,
        /// What is inconsistent.
        reason: String,
    },
    /// A text input (a `.stol` table) holds something its format does not allow.
    #[error("{}: {reason}", path.display())]
    Malformed {
        /// The file being read.
        path: PathBuf,
        /// What is wrong, with the line number.
        reason: String,
    },
}

/// An error unless `path` is a regular file (a FIFO would block a reader,
/// `/dev/zero` never end); a missing file is [`IoError::NotFound`].
pub(crate) fn regular_file(path: &std::path::Path) -> Result<(), IoError> {
    let meta = std::fs::metadata(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => IoError::NotFound { path: path.to_path_buf() },
        _ => IoError::Read { path: path.to_path_buf(), source },
    })?;
    match meta.is_file() {
        true => Ok(()),
        false => Err(IoError::InvalidInput {
            path: path.to_path_buf(),
            reason: "not a regular file".into(),
        }),
    }
}

/// Reads a whole file, mapping a missing file to [`IoError::NotFound`].
pub(crate) fn read_all(path: &std::path::Path) -> Result<Vec<u8>, IoError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            IoError::NotFound { path: path.to_path_buf() }
        } else {
            IoError::Read { path: path.to_path_buf(), source }
        }
    })
}
