//! core is layered downward only: a module may name modules of its own layer
//! or below, never one above. This test reads every source file of the crate
//! and fails, naming file and line, at each `crate::<module>` reference (a
//! `use` or a path) that points upward. Comments and `#[cfg(test)]` items are
//! not looked at: doc links and tests may name any module.

use std::path::{Path, PathBuf};

/// Layers, low to high. `sf` sits below `config` because a configuration holds
/// the structure factors it was given (an `-hkl` file's entries, an Fdump grid).
const LAYERS: &[&[&str]] = &[
    &["units", "error", "real", "vec3", "rng", "param", "memory"],
    &["physics", "psf", "sf", "amorphous"],
    &["config"],
    &["geometry", "crystal", "source"],
    &["setup"],
    &["render", "stats", "noise", "response"],
    &["diff"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under `src` belongs to (`None` for lib.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib").then_some(name)
}

/// The lines of `text` with comments blanked and `#[cfg(test)]` items
/// (attribute through the end of the item's braces) dropped, numbered from 1.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i64> = None;
    let mut pending_test = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("");
        let opens = line.matches('{').count() as i64;
        let closes = line.matches('}').count() as i64;
        if let Some(depth) = skip_depth.as_mut() {
            *depth += opens - closes;
            if *depth <= 0 {
                skip_depth = None;
            }
            continue;
        }
        if line.trim() == "#[cfg(test)]" {
            pending_test = true;
            continue;
        }
        if pending_test {
            if line.trim_start().starts_with("#[") {
                continue;
            }
            pending_test = false;
            let depth = opens - closes;
            if depth > 0 {
                skip_depth = Some(depth);
            }
            continue;
        }
        out.push((i + 1, line.to_string()));
    }
    out
}

/// The modules `line` names as `crate::<module>`, including each name of a
/// `crate::{a, b::c}` group.
fn referenced(line: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
    };
    let mut names = Vec::new();
    for (at, _) in line.match_indices("crate::") {
        // `crate::` inside another identifier (`foo_crate::`) is not the crate
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &line[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        names.push(ident(&group[j..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
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
