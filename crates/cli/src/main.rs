//! `nanobragg`: the nanoBragg command line, reimplemented.

mod batch;
mod flags;
mod gradient;
mod parse;
mod report;
mod run;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse::parse_args(&args).map_err(anyhow::Error::from).and_then(run::run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
