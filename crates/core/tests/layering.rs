//! core is layered downward only: a module may name modules of its own layer
//! or below, never one above. This test reads every source file of the crate
//! and fails, naming file and line, at each `crate::<module>` reference (a
//! `use` or a path) that points upward. Comments and `#[cfg(test)]` items are
//! not looked at: doc links and tests may name any module.

mod source_scan;

use source_scan::{code_lines, module_of, referenced, rust_files};
use std::path::Path;

/// Layers, low to high. `sf` sits below `config` because a configuration holds
/// the structure factors it was given (an `-hkl` file's entries, an Fdump grid).
const LAYERS: &[&[&str]] = &[
    &["units", "error", "real", "vec3", "rng", "philox", "param", "memory"],
    &["physics", "psf", "psf_convolution", "sf", "amorphous", "noise_stream"],
    &["config"],
    &["geometry", "crystal", "source", "model"],
    &["setup", "experiment"],
    &["render", "stats", "noise", "response"],
    &["diff"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every upward reference in the crate's sources, as "file:line: ..." lines.
fn upward_references(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let Some(module) = module_of(src, &file) else { continue };
        let shown = file.strip_prefix(src.parent().unwrap_or(src)).unwrap_or(&file).display();
        let Some(own) = layer(&module) else {
            found.push(format!("{shown}: module `{module}` has no layer in tests/layering.rs"));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in code_lines(&text) {
            for target in referenced(&line) {
                match layer(&target) {
                    Some(t) if t > own => found.push(format!(
                        "{shown}:{n}: `{module}` (layer {own}) names `crate::{target}` (layer {t}): {}",
                        line.trim()
                    )),
                    Some(_) => {}
                    // re-exports at the crate root (`crate::Real`) and macros
                    None if target.starts_with(|c: char| c.is_ascii_uppercase()) => {}
                    None => found.push(format!(
                        "{shown}:{n}: `crate::{target}` is not a module with a layer"
                    )),
                }
            }
        }
    }
    found
}

#[test]
fn core_modules_only_reference_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = upward_references(&src);
    assert!(found.is_empty(), "upward references in core:\n{}", found.join("\n"));
}

#[test]
fn references_are_found_in_uses_groups_and_paths() {
    assert_eq!(referenced("use crate::diff::{rotate_xyz, Deltas};"), ["diff"]);
    assert_eq!(
        referenced("use crate::{geometry::Detector, setup::{Plan, SetupSeeds}};"),
        ["geometry", "setup"]
    );
    assert_eq!(referenced("let x = crate::setup::BYTES_PER_PIXEL * 2;"), ["setup"]);
    assert_eq!(referenced("use nanobragg_crate::setup;"), Vec::<String>::new());
    let text = "use crate::real::Real; // crate::diff\n#[cfg(test)]\nmod tests {\n    use crate::diff::Param;\n}\nfn f() { crate::render::x() }\n";
    let lines = code_lines(text);
    assert_eq!(lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 6]);
    assert_eq!(referenced(&lines[0].1), ["real"]);
}
