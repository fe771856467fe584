//! `nanobragg`: the nanoBragg command line, reimplemented.

use std::process::ExitCode;

fn main() -> ExitCode {
    nanobragg_pipeline::keep_freed_memory();
    let mut args = std::env::args();
    let program = args.next().unwrap_or_default();
    let args: Vec<String> = args.collect();
    match nanobragg_pipeline::main_as(&program, &args) {
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
