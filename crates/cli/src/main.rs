//! `nanobragg`: the nanoBragg command line, reimplemented.

use std::process::ExitCode;

fn main() -> ExitCode {
    nanobragg_pipeline::keep_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match nanobragg_pipeline::main_with_args(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
