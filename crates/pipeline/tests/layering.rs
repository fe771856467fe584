//! The pipeline is layered downward only, and its modules import each other
//! in no cycle: a module may name modules of its own layer or below, never
//! one above, and no chain of references leads from a module back to
//! itself. This test reads every source file of the crate and fails, naming
//! file and line, at each `crate::<name>` reference (a `use` or a path) that
//! points upward, and names every cycle. A name the crate root re-exports
//! (`crate::parse_args`) counts as its module. Comments and `#[cfg(test)]`
//! items are not looked at: doc links and tests may name any module.

#[path = "../../core/tests/source_scan/mod.rs"]
mod source_scan;

use source_scan::{code_lines, module_of, referenced, rust_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers, low to high. The drivers (which choose what a command writes)
/// come after everything that writes; `gradient` sits below the others
/// because a render writes its derivative images, and `dispatch`, which
/// picks the driver of a command line, on top.
const LAYERS: &[&[&str]] = &[
    &["cli_error", "memory", "progress", "output_files"],
    &["expt", "model"],
    &["invocation"],
    &["flags"],
    &["parse"],
    &["parameters", "render", "command_line"],
    &["spots", "panels", "detector_response", "image_headers"],
    &["report"],
    &["traces", "image_outputs"],
    &["gradient"],
    &["run", "batch", "series", "dataset", "refine", "noisify", "nonbragg", "add", "sf"],
    &["dispatch"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The names the crate root re-exports (`pub use module::{a, b};`), each
/// with its module.
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for (_, line) in code_lines(lib) {
        let Some(rest) = line.trim().strip_prefix("pub use ") else { continue };
        let Some((module, items)) = rest.trim_end_matches(';').split_once("::") else { continue };
        for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = item.trim().rsplit(" as ").next().unwrap_or("").trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.to_string());
            }
        }
    }
    map
}

/// Every module's references to other modules, each with the first file
/// and line that makes it, and every reference that is to no module.
#[allow(clippy::type_complexity)]
fn references(src: &Path) -> (BTreeMap<String, BTreeMap<String, String>>, Vec<String>) {
    let exports = root_exports(&std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut strays = Vec::new();
    for file in files {
        let Some(module) = module_of(src, &file) else { continue };
        let shown = file.strip_prefix(src.parent().unwrap_or(src)).unwrap_or(&file).display();
        let edges = graph.entry(module.clone()).or_default();
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in code_lines(&text) {
            for name in referenced(&line) {
                let target = exports.get(&name).cloned().unwrap_or(name.clone());
                if layer(&target).is_none() {
                    strays.push(format!(
                        "{shown}:{n}: `crate::{name}` is not a module with a layer: {}",
                        line.trim()
                    ));
                    continue;
                }
                if target != module {
                    let at = format!("{shown}:{n}: {}", line.trim());
                    edges.entry(target).or_insert(at);
                }
            }
        }
    }
    (graph, strays)
}

/// Every upward reference in the crate's sources, as "file:line: ..." lines,
/// and the modules without a layer.
fn upward_references(src: &Path) -> Vec<String> {
    let (graph, mut found) = references(src);
    for (module, edges) in &graph {
        let Some(own) = layer(module) else {
            found.push(format!("module `{module}` has no layer in tests/layering.rs"));
            continue;
        };
        for (target, at) in edges {
            let t = layer(target).expect("references to modules with a layer only");
            if t > own {
                found.push(format!("{at}  (`{module}`, layer {own}, names `{target}`, layer {t})"));
            }
        }
    }
    found
}

/// The cycles of `graph` (module → modules it names), each as the modules
/// along it from its least one, found once.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        path: &mut Vec<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        let last = path.last().expect("a path starts at its module").clone();
        for next in graph.get(&last).into_iter().flatten() {
            if next == start {
                found.push(path.clone());
            } else if next.as_str() > start && !path.contains(next) {
                path.push(next.clone());
                walk(graph, start, path, found);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for start in graph.keys() {
        walk(graph, start, &mut vec![start.clone()], &mut found);
    }
    found
}

#[test]
fn pipeline_modules_only_reference_lower_layers() {
    let found = upward_references(&src());
    assert!(found.is_empty(), "upward references in the pipeline:\n{}", found.join("\n"));
}

#[test]
fn pipeline_modules_import_each_other_in_no_cycle() {
    let (graph, _) = references(&src());
    let edges: BTreeMap<String, BTreeSet<String>> =
        graph.iter().map(|(m, e)| (m.clone(), e.keys().cloned().collect())).collect();
    let found: Vec<String> = cycles(&edges)
        .into_iter()
        .map(|c| {
            let steps: Vec<String> = c
                .iter()
                .zip(c.iter().cycle().skip(1))
                .map(|(a, b)| format!("  {a} -> {b}: {}", graph[a][b]))
                .collect();
            format!("{} -> {}\n{}", c.join(" -> "), c[0], steps.join("\n"))
        })
        .collect();
    assert!(found.is_empty(), "import cycles in the pipeline:\n{}", found.join("\n"));
}

#[test]
fn references_are_found_in_uses_groups_paths_and_re_exports() {
    assert_eq!(referenced("use crate::run::{write_images, ImageFiles};"), ["run"]);
    assert_eq!(
        referenced("use crate::{invocation::Invocation, render::{explain, Seeds}};"),
        ["invocation", "render"]
    );
    assert_eq!(referenced("let inv = crate::parse_args(&args)?;"), ["parse_args"]);
    assert_eq!(referenced("use nanobragg_crate::run;"), Vec::<String>::new());
    let text = "use crate::report; // crate::run\n#[cfg(test)]\nmod tests {\n    use crate::run::x;\n}\nfn f() { crate::render::x() }\n";
    let lines = code_lines(text);
    assert_eq!(lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 6]);
    assert_eq!(referenced(&lines[0].1), ["report"]);
    let exports = root_exports("pub use parse::{parse_args, CliError};\npub use memory::keep;\n");
    assert_eq!(exports["parse_args"], "parse");
    assert_eq!(exports["keep"], "memory");
}

#[test]
fn cycles_are_found_once_each() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", &["b"][..]), ("b", &["a", "c"]), ("c", &["a"]), ("d", &["d", "a"])]
            .into_iter()
            .map(|(m, e)| (m.to_string(), e.iter().map(|s| s.to_string()).collect()))
            .collect();
    let found = cycles(&graph);
    assert_eq!(found, [vec!["a", "b"], vec!["a", "b", "c"], vec!["d"]]);
}
