//! The invariants ARCHITECTURE.md states about the code's shape, checked on the sources: file
//! sizes, crate boundaries, and the server's module graph (shared modules never import a route
//! module; no import circle among modules).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository root")
}

/// Every file under `dir` whose name ends with one of `extensions`, skipping build output,
/// dependencies, vendored code and hidden folders (virtual environments, `.git`).
fn files(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    const SKIPPED: [&str; 3] = ["target", "node_modules", "vendor"];
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a folder entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
            if path.is_dir() {
                if !SKIPPED.contains(&name.as_str()) && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if extensions.iter().any(|e| name.ends_with(e)) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A Rust file's lines before its inline test module (`#[cfg(test)]` then `mod tests`).
fn code_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let tests = lines.windows(2).position(|w| w[0] == "#[cfg(test)]" && w[1].starts_with("mod tests"));
    tests.unwrap_or(lines.len())
}

#[test]
fn no_rust_file_is_over_1000_lines_besides_its_tests() {
    let root = root();
    let mut over = Vec::new();
    for path in files(&root, &[".rs"]) {
        let n = code_lines(&read(&path));
        if n > 1000 {
            over.push(format!("{} ({n} lines)", path.strip_prefix(&root).unwrap_or(&path).display()));
        }
    }
    assert!(over.is_empty(), "split these: {over:?}");
}

#[test]
fn no_ui_file_is_over_800_lines() {
    let root = root();
    let ui = root.join("ui");
    let mut over = Vec::new();
    for path in files(&ui, &[".js", ".mjs", ".css", ".html"]) {
        if path.starts_with(ui.join("tests")) {
            continue;
        }
        let n = read(&path).lines().count();
        if n > 800 {
            over.push(format!("{} ({n} lines)", path.strip_prefix(&root).unwrap_or(&path).display()));
        }
    }
    assert!(over.is_empty(), "split these: {over:?}");
}

/// The names in a manifest's `[dependencies]` table (not dev or build dependencies).
fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in read(manifest).lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_table = line == "[dependencies]";
        } else if in_table && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            names.insert(name.trim().to_owned());
        }
    }
    names
}

#[test]
fn crates_keep_their_boundaries() {
    let root = root();
    let schema = dependencies(&root.join("schema/Cargo.toml"));
    for io in ["tokio", "object_store", "rusqlite", "postgres", "reqwest", "actix-web", "parquet"] {
        assert!(!schema.contains(io), "schema does no IO, yet depends on {io}");
    }
    for path in files(&root.join("schema/src"), &[".rs"]) {
        let text = read(&path);
        for io in ["std::fs", "std::net", "std::process"] {
            assert!(!text.contains(io), "{}: schema does no IO, yet names {io}", path.display());
        }
    }
    for store in ["tracking-server/meta", "tracking-server/store"] {
        assert!(!dependencies(&root.join(store).join("Cargo.toml")).contains("actix-web"), "{store} depends on actix");
        for path in files(&root.join(store).join("src"), &[".rs"]) {
            let text = read(&path);
            assert!(
                !text.contains("actix_web::") && !text.contains("use actix"),
                "{}: the stores never import actix",
                path.display()
            );
        }
    }
    let sdk = dependencies(&root.join("client-rs/Cargo.toml"));
    for server in ["trainlog-server", "trainlog-meta", "trainlog-store", "trainlog-sweep"] {
        assert!(!sdk.contains(server), "the SDK depends on schema, never on the server, yet on {server}");
    }
    let server = dependencies(&root.join("tracking-server/server/Cargo.toml"));
    assert!(!server.contains("trainlog"), "the server never depends on the SDK");
    const DRIVERS: [&str; 8] = [
        "rusqlite",
        "use postgres",
        "postgres::Client",
        "postgres::types",
        "postgres::NoTls",
        "postgres::Config",
        "postgres::Error",
        "r2d2",
    ];
    let speaks_sql = ["lib.rs", "db.rs", "postgres.rs", "migrate.rs", "copy.rs"];
    let meta = root.join("tracking-server/meta/src");
    for path in files(&meta, &[".rs"]) {
        let name = path.strip_prefix(&meta).unwrap_or(&path).to_string_lossy().into_owned();
        let text = read(&path);
        let code: Vec<&str> = text.lines().take(code_lines(&text)).collect();
        let test_only = text.lines().any(|l| l.starts_with("#![cfg(test)]")) || declared_for_tests(&path);
        let names_a_driver = !test_only && code.iter().any(|l| DRIVERS.iter().any(|d| l.contains(d)));
        assert!(!names_a_driver || speaks_sql.contains(&name.as_str()), "{name}: only `Db` speaks to the database");
    }
}

/// Whether a module file is declared `#[cfg(test)] mod name;` by its parent, so built for tests only.
fn declared_for_tests(path: &Path) -> bool {
    let (Some(stem), Some(dir)) = (path.file_stem().and_then(|s| s.to_str()), path.parent()) else { return false };
    ["mod.rs", "lib.rs"].iter().map(|parent| dir.join(parent)).filter(|parent| parent != path).any(|parent| {
        std::fs::read_to_string(parent).is_ok_and(|text| text.contains(&format!("#[cfg(test)]\nmod {stem};")))
    })
}

/// The server's modules as nodes: each top-level module of `src/`, and each resource under
/// `src/routes/` (its folder or file); a file belongs to the deepest node holding it.
fn node_of(path: &Path, src: &Path) -> String {
    let relative = path.strip_prefix(src).expect("a server source");
    let parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .filter(|p| p != "mod")
        .collect();
    match parts.as_slice() {
        [first, second, ..] if first == "routes" => format!("routes/{second}"),
        [first, ..] => first.clone(),
        [] => "lib".to_owned(),
    }
}

/// The nodes a server source names, outside its inline tests: `crate::a::b` (and `super::`
/// paths, resolved from the file's own place) mapped to nodes.
fn named_nodes(path: &Path, src: &Path) -> BTreeSet<String> {
    let text = read(path);
    let code: String = text.lines().take(code_lines(&text)).collect::<Vec<_>>().join("\n");
    let relative = path.strip_prefix(src).expect("a server source");
    // The module path of this file, as `crate::…` segments.
    let mut here: Vec<String> =
        relative.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
    if here.last().is_some_and(|l| l == "mod" || l == "lib") {
        here.pop();
    }
    // `use crate::{a, b::c}` names `crate::a` and `crate::b::c`; `mod child;` names the child.
    let mut code = expand_groups(&code);
    for line in text.lines().take(code_lines(&text)) {
        let line = line.trim_start().trim_start_matches("pub(super) ").trim_start_matches("pub(crate) ");
        if let Some(child) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
            code.push_str(&format!(" self::{child} "));
        }
    }
    let mut named = BTreeSet::new();
    let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
    for word in words.filter(|w| w.starts_with("crate::") || w.starts_with("super::") || w.starts_with("self::")) {
        let mut segments: Vec<String> = Vec::new();
        let mut base = here.clone();
        let mut rest = word.strip_prefix("self::").unwrap_or(word);
        if let Some(r) = rest.strip_prefix("crate::") {
            base.clear();
            rest = r;
        }
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        segments.extend(base);
        segments.extend(rest.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
        let target = match segments.as_slice() {
            [first, second, ..]
                if first == "routes"
                    && (src.join("routes").join(format!("{second}.rs")).exists()
                        || src.join("routes").join(second).is_dir()) =>
            {
                format!("routes/{second}")
            }
            [first, ..] if src.join(format!("{first}.rs")).exists() || src.join(first).is_dir() => first.clone(),
            _ => continue,
        };
        named.insert(target);
    }
    named
}

/// `crate::{a, b::c}` (and `super::{…}`) written out as `crate::a crate::b::c`.
fn expand_groups(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(open) = rest.find("::{") {
        let prefix_start =
            rest[..open].rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).map_or(0, |i| i + 1);
        let Some(close) = rest[open..].find('}') else { break };
        let prefix = &rest[prefix_start..open];
        out.push_str(&rest[..prefix_start]);
        for item in rest[open + 3..open + close].split(',') {
            let item = item.trim().split(" as ").next().unwrap_or_default();
            if !item.is_empty() && item != "self" {
                out.push_str(&format!(" {prefix}::{item} "));
            } else if item == "self" {
                out.push_str(&format!(" {prefix} "));
            }
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

fn server_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = root().join("tracking-server/server/src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in files(&src, &[".rs"]) {
        let node = node_of(&path, &src);
        let named = named_nodes(&path, &src);
        graph.entry(node.clone()).or_default().extend(named.into_iter().filter(|n| *n != node));
    }
    graph
}

#[test]
fn shared_server_modules_import_no_route_module() {
    let graph = server_graph();
    assert!(graph.contains_key("routes/runs") && graph.contains_key("state"), "{graph:?}");
    for (node, named) in &graph {
        if node.starts_with("routes") || node == "lib" || node == "startup" {
            continue;
        }
        let routes: Vec<&String> = named.iter().filter(|n| n.starts_with("routes")).collect();
        assert!(routes.is_empty(), "the shared module {node} imports route modules {routes:?}");
    }
}

#[test]
fn server_modules_import_in_no_circle() {
    let graph = server_graph();
    // Depth-first search; a node met again while still on the stack closes a circle.
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(node) {
            return;
        }
        if let Some(at) = stack.iter().position(|n| *n == node) {
            panic!("import circle: {:?} -> {node}", &stack[at..]);
        }
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done);
        }
        stack.pop();
        done.insert(node);
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_module_graph_sees_the_imports_it_checks() {
    let graph = server_graph();
    let named = |from: &str, to: &str| graph.get(from).is_some_and(|n| n.contains(to));
    assert!(named("routes/runs", "lookup"), "{graph:?}");
    assert!(named("routes/mlflow", "routes/artifacts"), "{graph:?}");
    assert!(named("routes", "routes/runs"), "{graph:?}");
    assert!(named("lookup", "state"), "{graph:?}");
    assert!(named("startup", "routes") && named("lib", "startup"), "{graph:?}");
}
