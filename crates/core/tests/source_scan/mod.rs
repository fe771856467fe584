//! Reading a crate's sources for its layering test (core's and
//! pipeline's): the `.rs` files, the module each belongs to, the lines of
//! code (comments blanked, `#[cfg(test)]` items dropped) and the
//! `crate::<name>` references of a line.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, appended to `out`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
pub fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib").then_some(name)
}

/// The lines of `text` with comments blanked and `#[cfg(test)]` items
/// (attribute through the end of the item's braces) dropped, numbered from 1.
pub fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i64> = None;
    let mut pending_test = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("");
        let depth_change = line.matches('{').count() as i64 - line.matches('}').count() as i64;
        if let Some(depth) = skip_depth.as_mut() {
            *depth += depth_change;
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
            if depth_change > 0 {
                skip_depth = Some(depth_change);
            }
            continue;
        }
        out.push((i + 1, line.to_string()));
    }
    out
}

/// The names `line` reaches as `crate::<name>`, including each name of a
/// `crate::{a, b::c}` group.
pub fn referenced(line: &str) -> Vec<String> {
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
        let Some(group) = rest.strip_prefix('{') else {
            names.push(ident(rest));
            continue;
        };
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
    }
    names.retain(|n| !n.is_empty());
    names
}
