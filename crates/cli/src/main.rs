//! `nanobragg`: the nanoBragg command line, reimplemented.

use std::process::ExitCode;

fn main() -> ExitCode {
    nanobragg_pipeline::keep_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match nanobragg_pipeline::main_with_args(&args) {
        Ok(()) => ExitCode::SUCCESS,
        // a reader that went away (`nanobragg -printout | head`): end
        // quietly, as nanoBragg.c does when SIGPIPE stops it (128 + 13, the
        // status a shell shows for that)
        Err(e) if nanobragg_pipeline::is_broken_stdout(&e) => ExitCode::from(141),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
