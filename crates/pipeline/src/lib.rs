//! nanobragg's pipeline as a library: an argument list becomes an
//! [`Invocation`] ([`parse_args`]), which renders into memory
//! ([`Invocation::render`]), runs with its output files ([`run::run`]),
//! refines or runs a batch. The `nanobragg` binary is a thin `main` over
//! [`main_with_args`]; tests, benches and bindings go through the same calls.
//!
//! Modules point downward: [`invocation`] (plain data) ← [`flags`] (the flag
//! table) ← [`parse`] (the argument list); [`render`] resolves and renders an
//! invocation; run, batch, gradient and refine build on those.

pub mod add;
pub mod batch;
pub mod dataset;
pub mod expt;
pub mod flags;
pub mod gradient;
pub mod invocation;
pub mod memory;
pub mod noisify;
pub mod nonbragg;
pub mod panels;
pub mod parameters;
pub mod parse;
pub mod refine;
pub mod render;
pub mod report;
pub mod run;
pub mod spots;

pub use invocation::{Curvatures, Device, Invocation, Outputs};
pub use memory::keep_freed_memory;
pub use parameters::{Parameters, Target};
pub use parse::{parse_args, CliError};
pub use render::{Rendered, Seeds};

/// Runs the program as invoked: under the name `noisify` (a link to the
/// binary) or `nonBragg` as that program, else as `nanobragg` (see [`main_with_args`]).
pub fn main_as(program: &str, args: &[String]) -> anyhow::Result<()> {
    let name = std::path::Path::new(program).file_name().and_then(|n| n.to_str());
    match name {
        Some("noisify") => noisify::run(args, &mut std::io::stdout().lock()),
        Some("nonBragg") => nonbragg::run(args, &mut std::io::stdout().lock()),
        _ => main_with_args(args),
    }
}

/// Runs the command line `args` (without the program name): a render, or
/// the subcommands `refine`, `dataset`, `noisify`, `nonbragg` and `add`.
pub fn main_with_args(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("refine") => refine::main(&args[1..]),
        Some("dataset") => dataset::main(&args[1..]),
        Some("noisify") => noisify::run(&args[1..], &mut std::io::stdout().lock()),
        Some("add") => add::run(&args[1..], &mut std::io::stdout().lock()),
        Some("nonbragg") => nonbragg::run(&args[1..], &mut std::io::stdout().lock()),
        _ => parse_args(args).map_err(anyhow::Error::from).and_then(run::run),
    }
}

/// Whether `e` is a failed write to stdout because its reader went away (a
/// broken pipe). Output files' errors are never this: they name their flag
/// and file.
pub fn is_broken_stdout(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}
