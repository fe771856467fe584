//! nanobragg's pipeline as a library: an argument list becomes an
//! [`parse::Invocation`], which renders (with outputs and statistics),
//! refines or runs a batch. The `nanobragg` binary is a thin `main` over
//! [`main_with_args`]; tests, benches and bindings go through the same calls.

pub mod batch;
pub mod flags;
pub mod gradient;
pub mod parse;
pub mod refine;
pub mod report;
pub mod run;

/// Runs the command line `args` (without the program name): `refine ...`
/// fits parameters to an observed image, anything else renders.
pub fn main_with_args(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("refine") => refine::main(&args[1..]),
        _ => parse::parse_args(args).map_err(anyhow::Error::from).and_then(run::run),
    }
}
