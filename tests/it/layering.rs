//! The code reads in one direction: HTTP surfaces → domain → provider knowledge and outbound
//! calls → storage → foundation. This test reads every `crate::` path in `src/` and fails on an
//! import against that order, on an import cycle between top-level modules, and on axum below
//! the surfaces.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. A module may use its own layer (without a cycle) and the layers below it.
const LAYERS: &[(&str, &[&str])] = &[
    // Wires everything together: the library root, the binary, the operator commands, the demo.
    ("composition", &["lib", "main", "cli", "demo", "app"]),
    // HTTP: the JSON API, the browser pages, the edge; `state` is the state they share
    // (`crate::AppState`).
    ("surfaces", &["api", "web", "server", "state"]),
    ("domain", &["connect", "grants", "signals", "error"]),
    ("providers and outbound", &["providers", "outbound"]),
    ("storage", &["db"]),
    (
        "foundation",
        &[
            "config", "crypto", "ids", "names", "time", "i18n", "branding", "metrics",
        ],
    ),
];

/// Names the crate root exports that belong to a layer other than the root's own.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("AppState", "state"),
    ("AppInner", "state"),
    ("Application", "lib"),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The code of a file without its comments (`//` to the end of the line; doc comments too).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
}

/// The top-level modules a line names through `crate::`: `crate::db::x`, and each item of
/// `crate::{db, ids::Subject}`.
fn targets(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
        rest = after;
    }
    found
        .into_iter()
        .map(|n| {
            ROOT_ITEMS
                .iter()
                .find(|(item, _)| *item == n)
                .map_or(n.clone(), |(_, m)| (*m).to_owned())
        })
        .collect()
}

struct Findings {
    /// `file:line: from -> to`, for imports against the order.
    upward: Vec<String>,
    /// Module → modules it uses, with one place for each.
    edges: BTreeMap<String, BTreeMap<String, String>>,
    /// Files below the surfaces that use axum outside their tests.
    axum_below: Vec<String>,
}

fn read(src: &Path) -> Findings {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut f = Findings {
        upward: Vec::new(),
        edges: BTreeMap::new(),
        axum_below: Vec::new(),
    };
    for file in &files {
        let from = module_of(src, file);
        let from_layer =
            layer_of(&from).unwrap_or_else(|| panic!("module {from} is in no layer: add it"));
        let text = std::fs::read_to_string(file).unwrap();
        // A `tests.rs` file, or a `tests/` folder, is a module of unit tests.
        let mut in_tests = file.file_stem().is_some_and(|s| s == "tests")
            || file.components().any(|c| c.as_os_str() == "tests");
        for (n, line) in code_lines(&text) {
            if line.trim_start().starts_with("mod tests") {
                in_tests = true;
            }
            let place = format!("{}:{n}", file.display());
            if !in_tests && from_layer > 1 && line.contains("axum") {
                f.axum_below.push(place.clone());
            }
            for to in targets(line) {
                if to == from || to == "self" || to == "super" {
                    continue;
                }
                let Some(to_layer) = layer_of(&to) else {
                    panic!("{place}: crate::{to} is in no layer: add it")
                };
                if to_layer < from_layer {
                    f.upward.push(format!("{place}: {from} -> {to}"));
                }
                f.edges
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert(place.clone());
            }
        }
    }
    f
}

/// One cycle between top-level modules, if there is one (the shared state and the root that
/// wires everything are left out: handlers take the state that holds their parts).
fn a_cycle(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    let skip = |m: &str| matches!(m, "lib" | "state");
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        skip: &dyn Fn(&str) -> bool,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cycle = path[at..].to_vec();
            cycle.push(m.to_owned());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for next in edges.get(m).into_iter().flat_map(|e| e.keys()) {
            if skip(next) {
                continue;
            }
            if let Some(c) = visit(next, edges, skip, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for m in edges.keys().filter(|m| !skip(m)) {
        if let Some(c) = visit(m, edges, &skip, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_code_imports_only_downward_and_without_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let f = read(&src);
    assert!(
        f.upward.is_empty(),
        "imports against the order {:?}:\n{}",
        LAYERS.iter().map(|(l, _)| l).collect::<Vec<_>>(),
        f.upward.join("\n")
    );
    if let Some(cycle) = a_cycle(&f.edges) {
        let places: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("{} -> {} at {}", w[0], w[1], f.edges[&w[0]][&w[1]]))
            .collect();
        panic!("an import cycle between modules:\n{}", places.join("\n"));
    }
    assert!(
        f.axum_below.is_empty(),
        "axum below the surfaces (render errors in api/ or web/):\n{}",
        f.axum_below.join("\n")
    );
}

#[test]
fn the_reader_sees_imports_in_paths_and_groups() {
    assert_eq!(targets("use crate::db::Db;"), ["db"]);
    assert_eq!(
        targets("use crate::{config::Config, ids::Subject};"),
        ["config", "ids"]
    );
    assert_eq!(
        targets("let x = crate::web::ui::Ui::plain(); crate::AppState"),
        ["web", "state"]
    );
    let mut edges = BTreeMap::new();
    edges.insert(
        "a".to_owned(),
        BTreeMap::from([("b".to_owned(), "x:1".to_owned())]),
    );
    edges.insert(
        "b".to_owned(),
        BTreeMap::from([("a".to_owned(), "y:2".to_owned())]),
    );
    assert_eq!(
        a_cycle(&edges),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
