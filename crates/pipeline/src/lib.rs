//! nanobragg's pipeline as a library: an argument list becomes an
//! [`Invocation`] ([`parse_args`]), which renders into memory
//! ([`Invocation::render`]), runs with its output files ([`dispatch::run`]),
//! refines, renders a batch or a dataset, or writes gradients. The
//! `nanobragg` binary is a thin `main` over [`main_as`]; tests, benches and
//! bindings go through the same calls.
//!
//! Modules point downward only, in layers (checked by
//! `tests/layering.rs`, which also refuses any cycle of imports):
//! plain data and helpers ([`cli_error`], [`memory`], [`progress`],
//! [`output_files`]); the command line ([`expt`] ← [`invocation`] ←
//! [`flags`] ← [`parse`]); a model and its render ([`parameters`],
//! [`render`], its command line ([`command_line`]), [`spots`], [`panels`]); what a render writes
//! ([`detector_response`], [`image_headers`], [`report`], [`traces`],
//! [`image_outputs`]); the drivers, which choose what to write
//! ([`gradient`]; then [`run`], [`batch`], [`dataset`], [`refine`],
//! [`noisify`], [`nonbragg`], [`add`]); and [`dispatch`], which picks the
//! driver of a command line. Every file is written through
//! [`nanobragg_io::image_writer`].

pub mod add;
pub mod batch;
pub mod cli_error;
pub mod command_line;
pub mod dataset;
pub mod detector_response;
pub mod dispatch;
pub mod expt;
pub mod flags;
pub mod gradient;
pub mod image_headers;
pub mod image_outputs;
pub mod invocation;
pub mod memory;
pub mod model;
pub mod noisify;
pub mod nonbragg;
pub mod output_files;
pub mod panels;
pub mod parameters;
pub mod parse;
pub mod progress;
pub mod refine;
pub mod render;
pub mod report;
pub mod run;
pub mod series;
pub mod sf;
pub mod spots;
pub mod traces;

pub use dispatch::{main_as, main_with_args};
pub use invocation::{Curvatures, Device, Invocation, Outputs};
pub use memory::keep_freed_memory;
pub use parameters::{Parameters, Target};
pub use parse::{parse_args, CliError};
pub use render::{Rendered, Seeds};

/// Whether `e` is a failed write to stdout because its reader went away (a
/// broken pipe). Output files' errors are never this: they name their flag
/// and file.
pub fn is_broken_stdout(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}
