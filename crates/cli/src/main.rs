//! `nanobragg`: the nanoBragg command line, reimplemented.

use std::process::ExitCode;

fn main() -> ExitCode {
    nanobragg_pipeline::keep_freed_memory();
    let mut args = std::env::args();
    let program = args.next().unwrap_or_default();
    let args: Vec<String> = args.collect();
    match nanobragg_pipeline::main_as(&program, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
