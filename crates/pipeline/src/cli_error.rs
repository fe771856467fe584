//! The command line's errors: one line each, naming the flag, value or file.

use nanobragg_core::error::shown;
use std::path::PathBuf;

/// A command-line error; its `Display` is one line without an `error:` prefix.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// An argument starting with `-` that is no flag.
    #[error("unknown flag {} ({})", shown(flag), match suggestion {
        Some(s) => format!("did you mean {s}?"),
        None => "run nanobragg -h for the list of flags".to_string(),
    })]
    UnknownFlag {
        /// The argument as typed.
        flag: String,
        /// The closest flag name, if one is close enough.
        suggestion: Option<&'static str>,
    },
    /// An argument that is neither a flag nor the value of one.
    #[error("unexpected argument '{}' ({})", shown(arg), if arg.starts_with('-') {
        "a number where a flag should be; note that -cell stops at the first value starting with '-'"
    } else {
        "not a flag, and no flag before it takes a value here"
    })]
    Unexpected {
        /// The argument as typed.
        arg: String,
    },
    /// A flag is missing some or all of its values.
    #[error("{flag} needs {what}")]
    MissingValue {
        /// The flag as typed.
        flag: String,
        /// What it needs, e.g. `a value (mm)`.
        what: String,
    },
    /// A value that should be a number is not one.
    #[error("{flag}: '{}' is not a number", shown(value))]
    NotANumber {
        /// The flag as typed.
        flag: String,
        /// The offending value.
        value: String,
    },
    /// A value that should be an integer is not one.
    #[error("{flag}: '{}' is not an integer", shown(value))]
    NotAnInteger {
        /// The flag as typed.
        flag: String,
        /// The offending value.
        value: String,
    },
    /// A number outside the range that makes sense for the flag.
    #[error("{flag}: '{}' is not allowed ({why})", shown(value))]
    OutOfRange {
        /// The flag as typed.
        flag: String,
        /// The offending value (or values).
        value: String,
        /// The rule it breaks, e.g. `must be > 0`.
        why: String,
    },
    /// A word that is not one of the flag's choices.
    #[error("{flag}: '{}' is not one of {choices}", shown(value))]
    BadChoice {
        /// The flag as typed.
        flag: String,
        /// The offending value.
        value: String,
        /// The accepted words, comma separated.
        choices: String,
    },
    /// An input file that does not exist or is not a regular file.
    #[error("{flag}: cannot open '{}': {why}", shown(&path.display().to_string()))]
    MissingFile {
        /// The flag naming the file (or `Fdump` for the default dump file).
        flag: String,
        /// The file.
        path: PathBuf,
        /// `no such file` or `not a regular file`.
        why: &'static str,
    },
    /// An input file that exists but could not be read or parsed.
    #[error("{flag}: {error}")]
    Input {
        /// The flag naming the file.
        flag: String,
        /// The reader's error (it names the file). Not exposed as an error
        /// source: the message already includes it.
        error: nanobragg_core::Error,
    },
    /// A table given to `-stol` (`-4stol`, `-Q`) that could not be read.
    #[error("{flag}: {error}")]
    Table {
        /// The flag naming the file.
        flag: String,
        /// The reader's error (it names the file and line).
        error: nanobragg_io::IoError,
    },
    /// Flags that only mean something with another one that is missing.
    #[error("{what}")]
    Unused {
        /// What is missing.
        what: String,
    },
    /// A value in an `-img`/`-mask` SMV header that the flag it stands for
    /// would refuse.
    #[error("{flag} {}: header {} is not allowed ({why}, as for {stands_for})",
        shown(&path.display().to_string()), shown(entry))]
    HeaderValue {
        /// `-img` or `-mask`.
        flag: &'static str,
        /// The image file.
        path: PathBuf,
        /// The header key and the value read, `KEY=VALUE`.
        entry: String,
        /// The flag the key stands for.
        stands_for: &'static str,
        /// The rule it breaks, e.g. `must be > 0`.
        why: String,
    },
    /// An SMV image given to `-img` or `-mask` that could not be read.
    #[error("{flag}: {error}")]
    Image {
        /// `-img` or `-mask`.
        flag: String,
        /// The reader's error (it names the file). Not exposed as an error
        /// source: the message already includes it.
        error: nanobragg_io::IoError,
    },
}
