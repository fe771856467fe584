//! `nanobragg`: the nanoBragg command line, reimplemented.

mod batch;
mod flags;
mod gradient;
mod interrupt;
mod parse;
mod refine;
mod report;
mod run;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `nanobragg refine ...`: fit the model of the other flags to an image
    let result = match args.first().map(String::as_str) {
        Some("refine") => refine::main(&args[1..]),
        _ => parse::parse_args(&args).map_err(anyhow::Error::from).and_then(run::run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
