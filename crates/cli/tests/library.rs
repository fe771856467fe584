//! The pipeline as a library: an argument list rendered into memory
//! (`Invocation::render`) gives the binary's float file bit for bit, and
//! with `-exact` the C program's.

mod common;

use common::{all_cases, run_case, Case};

/// A golden case that reads no input file: a triclinic crystal with a misset
/// and phi under the MOSFLM convention.
fn case() -> Case {
    all_cases().into_iter().find(|c| c.id == "conv-mosflm-128").expect("golden case")
}

/// The library's image of `args`, as the bytes of a float file.
fn library_image(args: &str) -> Vec<u8> {
    // no Fdump file from the working directory: the binary runs in an empty one
    let args = format!("{args} -dump /nonexistent/nanobragg-library/Fdump.bin");
    let args: Vec<String> = args.split_whitespace().map(String::from).collect();
    let inv = nanobragg_pipeline::parse_args(&args).expect("parse");
    let r = inv.render().expect("render");
    let d = &r.plan.detector;
    assert_eq!(r.image.len(), d.fpixels * d.spixels);
    r.image.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn render_to_memory_equals_the_binary() {
    let golden = case();
    for precision in ["", " -exact", " -dtype float32"] {
        let mut c = golden.clone();
        c.args.push_str(precision);
        let run = run_case(&c);
        assert!(run.error.is_none(), "{precision}: {:?}", run.error);
        let ours = library_image(&c.args);
        assert!(ours == run.file("float.bin").unwrap(), "{precision}: library and binary differ");
        if precision == " -exact" {
            assert!(ours == golden.golden_file("float.bin").unwrap(), "-exact differs from C");
        }
    }
}
