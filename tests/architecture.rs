//! Architecture invariants, as tests that read the code's parsed paths (not its text): the
//! engine and the conversion are pure, each layer imports only the layers below it, no two
//! files and no two folders import each other round a circle, no source file outgrows one
//! purpose, and every folder of `src/` is on the map (docs/ARCHITECTURE.md).

#[path = "architecture/source.rs"]
mod source;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use source::{Crate, rust_files};

/// The most lines a file in src/ may have.
const MAX_LINES: usize = 500;

/// The most lines a function in src/ may have, from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 120;

/// The layers, each a top-level folder of `src/` (or a file beside them), and what each
/// must never import: the engine below everything; the API types and the pure conversion
/// below the shell; the simulator beside the shell, never on it; the node agent beside the
/// scheduler, sharing neither its engine nor its shell.
const LAYERS: &[(&str, &[&str])] = &[
    ("engine", &["api", "convert", "k8s", "sim", "agent", "metrics", "figures", "ui", "report", "cli", "config"]),
    ("quantity", &["api", "convert", "k8s", "sim", "agent", "metrics", "figures", "ui", "report", "cli", "engine"]),
    ("config", &["api", "convert", "k8s", "sim", "agent", "figures", "ui", "report", "cli"]),
    ("api", &["engine", "convert", "k8s", "sim", "agent", "metrics", "figures", "ui", "report", "cli"]),
    ("convert", &["k8s", "sim", "agent", "metrics", "figures", "ui", "report", "cli"]),
    ("figures", &["k8s", "sim", "agent", "ui", "report", "cli"]),
    ("ui", &["k8s", "sim", "agent", "report", "cli"]),
    ("sim", &["k8s", "agent", "cli", "report", "ui"]),
    ("report", &["k8s", "agent", "cli"]),
    ("metrics", &["k8s", "sim", "agent", "convert", "figures", "ui", "report", "cli"]),
    ("agent", &["engine", "api", "convert", "k8s", "sim", "figures", "ui", "report", "cli"]),
    ("k8s", &["sim", "agent", "report", "cli"]),
];

/// Paths into other crates that do I/O, keep time or run tasks; written anywhere in a
/// file of a pure layer (a `use` or inline), they break the layer's purity.
const IMPURE: &[&[&str]] = &[
    &["kube", "Api"],
    &["kube", "Client"],
    &["kube", "runtime"],
    &["kube", "api", "Api"],
    &["kube", "api", "Patch"],
    &["kube", "api", "PatchParams"],
    &["kube", "api", "ListParams"],
    &["kube", "api", "PostParams"],
    &["kube", "api", "DeleteParams"],
    &["tokio"],
    &["futures"],
    &["hyper"],
    &["reqwest"],
    &["std", "fs"],
    &["std", "net"],
    &["std", "process"],
    &["std", "env"],
    &["std", "thread"],
    &["std", "time", "Instant"],
    &["std", "time", "SystemTime"],
    &["std", "time", "UNIX_EPOCH"],
];

/// What the engine may not name besides [`IMPURE`]: any Kubernetes type, logging, a clock.
const ENGINE_ALSO: &[&[&str]] = &[&["kube"], &["k8s_openapi"], &["tracing"], &["std", "time"]];

/// Macros that write to the terminal: only the binary and the shell's commands print.
const PRINTING: &[&str] = &["println", "eprintln", "print", "eprint", "dbg"];

#[test]
fn the_engine_does_no_io_and_knows_no_kubernetes_types() {
    let crate_ = Crate::read();
    let engine: Vec<_> =
        crate_.files.iter().filter(|f| in_layer(&f.path, "engine") || in_layer(&f.path, "quantity")).collect();
    assert!(engine.len() >= 5, "src/engine went missing");
    let forbidden: Vec<&[&str]> = IMPURE.iter().chain(ENGINE_ALSO).copied().collect();
    let offences = impure_paths(&engine, &forbidden);
    assert!(offences.is_empty(), "the engine must stay pure:\n{}", offences.join("\n"));
}

#[test]
fn the_conversion_does_no_io() {
    let crate_ = Crate::read();
    let convert: Vec<_> = crate_.files.iter().filter(|f| in_layer(&f.path, "convert")).collect();
    assert!(convert.len() >= 10, "src/convert went missing");
    let offences = impure_paths(&convert, IMPURE);
    assert!(
        offences.is_empty(),
        "the conversion must stay pure (no client, no runtime, no clock):\n{}",
        offences.join("\n")
    );
}

#[test]
fn each_layer_imports_only_the_layers_below_it() {
    let crate_ = Crate::read();
    let mut offences = Vec::new();
    for (layer, forbidden) in LAYERS {
        offences.extend(in_words(imports_of(&crate_, |path| in_layer(path, layer), forbidden)));
    }
    assert!(offences.is_empty(), "imports against the layering (docs/ARCHITECTURE.md):\n{}", offences.join("\n"));
}

/// Whether the file at `path` (`src/engine/model.rs`) is part of the top-level `layer`
/// (`engine`: `src/engine.rs` or anything under `src/engine/`).
fn in_layer(path: &str, layer: &str) -> bool {
    path == format!("src/{layer}.rs") || path.starts_with(&format!("src/{layer}/"))
}

/// Each path in `files` that starts with one of `forbidden`, or a printing macro, in words.
fn impure_paths(files: &[&source::SourceFile], forbidden: &[&[&str]]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        for path in &file.external {
            if let Some(prefix) =
                forbidden.iter().find(|p| path.len() >= p.len() && path.iter().zip(p.iter()).all(|(a, b)| a == b))
            {
                found.push(format!("{} names `{}` ({})", file.path, path.join("::"), prefix.join("::")));
            }
        }
        for name in file.macros.iter().filter(|m| PRINTING.contains(&m.as_str())) {
            found.push(format!("{} calls `{name}!`", file.path));
        }
    }
    found.sort();
    found.dedup();
    found
}

/// No import circle among the library's modules.
///
/// Granularity: one node per file, that is per module (a folder module is its `mod.rs`, and
/// an inline `mod tests { .. }` belongs to its file). `src/main.rs` is the binary, another
/// crate, and is left out. There is an edge from A to B when A's code (a `use` item, or a
/// path written inline) names, through `crate::`, `super::` or `self::`, an item that B
/// defines. A path through a `pub use` re-export counts for the file that defines the item,
/// so a circle cannot hide behind a parent's re-export. Edges from a module to its own
/// submodules are left out: a parent declares and re-exports its children, and a child's
/// use of its parent is the direction that counts.
#[test]
fn no_import_circle_among_modules() {
    let crate_ = Crate::read();
    let graph = room_graph(&crate_, &crate_.dependencies(), usize::MAX);
    let circles = circles(&graph);
    assert!(
        circles.is_empty(),
        "modules import each other in a circle; move what both need into a module below both:\n{}",
        circles.join("\n\n")
    );
}

/// No import circle among folders either, at any depth: for each depth, every file counts
/// as part of its folder that deep (`src/engine/place/shapes.rs` is `src/engine/place/` at
/// depth 2 and `src/engine/` at depth 1), a file shallower than that as itself, and the
/// rooms so made import one way. Prints the graph of the top-level rooms and of each
/// folder's rooms (`cargo test --test architecture folders -- --nocapture`).
#[test]
fn no_import_circle_among_folders() {
    let crate_ = Crate::read();
    let dependencies = crate_.dependencies();
    let deepest = crate_.files.iter().map(|f| f.path.matches('/').count()).max().unwrap_or(1);
    let mut found = Vec::new();
    for depth in 1..deepest {
        let graph = room_graph(&crate_, &dependencies, depth);
        print_rooms(&graph, depth);
        found.extend(circles(&graph));
    }
    assert!(
        found.is_empty(),
        "folders import each other in a circle; move what both need into a room below both:\n{}",
        found.join("\n\n")
    );
}

/// The rooms at `depth` (see [`room`]) and which imports which, each edge with the first
/// import that makes it.
fn room_graph(crate_: &Crate, dependencies: &[(usize, usize, String)], depth: usize) -> DiGraph<String, String> {
    let mut graph = DiGraph::<String, String>::new();
    let mut index: HashMap<String, NodeIndex> = HashMap::new();
    let mut seen = HashSet::new();
    for (from, to, written) in dependencies {
        let (a, b) = (room(&crate_.files[*from].path, depth), room(&crate_.files[*to].path, depth));
        if a == b {
            continue;
        }
        let [na, nb] = [a, b].map(|r| *index.entry(r.clone()).or_insert_with(|| graph.add_node(r)));
        if seen.insert((na, nb)) {
            graph.add_edge(na, nb, format!("{} imports `{written}`", crate_.files[*from].path));
        }
    }
    graph
}

/// Every circle of `graph`, in words: its rooms, then the shortest way round, one import a
/// line.
fn circles(graph: &DiGraph<String, String>) -> Vec<String> {
    tarjan_scc(graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let names: Vec<&str> = component.iter().map(|n| graph[*n].as_str()).collect();
            format!("{}:\n{}", names.join(" <-> "), room_circle(graph, &component))
        })
        .collect()
}

/// The room of the file at `path` at `depth`: its folder that deep, or the file itself.
fn room(path: &str, depth: usize) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    if depth < usize::MAX && parts.len() - 1 > depth {
        format!("{}/", parts[..=depth].join("/"))
    } else {
        path.to_string()
    }
}

/// Prints which rooms each room imports, folders only, grouped by the folder they are in.
fn print_rooms(graph: &DiGraph<String, String>, depth: usize) {
    let mut lines: Vec<String> = graph
        .node_indices()
        .filter(|n| graph[*n].ends_with('/'))
        .map(|n| {
            let mut to: Vec<&str> = graph.edges(n).map(|e| graph[e.target()].as_str()).collect();
            to.sort();
            format!("  {} -> {}", graph[n], if to.is_empty() { "nothing".to_string() } else { to.join(", ") })
        })
        .collect();
    lines.sort();
    if !lines.is_empty() {
        println!("rooms at depth {depth}:\n{}", lines.join("\n"));
    }
}

/// The shortest circle through the first room of `component`, one import a line.
fn room_circle(graph: &DiGraph<String, String>, component: &[NodeIndex]) -> String {
    let start = component[0];
    let mut came_from: HashMap<NodeIndex, (NodeIndex, String)> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    'search: while let Some(node) = queue.pop_front() {
        for edge in graph.edges(node) {
            let next = edge.target();
            if !component.contains(&next) || came_from.contains_key(&next) {
                continue;
            }
            came_from.insert(next, (node, edge.weight().clone()));
            if next == start {
                break 'search;
            }
            queue.push_back(next);
        }
    }
    let mut steps = Vec::new();
    let mut node = start;
    while let Some((previous, written)) = came_from.get(&node) {
        steps.push(format!("  {} -> {}: {written}", graph[*previous], graph[node]));
        node = *previous;
        if node == start {
            break;
        }
    }
    steps.reverse();
    steps.join("\n")
}

/// The engine's cycle functions: outside the engine a cycle runs only through
/// `engine::drive::Engine`, whose loop the scheduler and the simulators drive.
const CYCLES: &[&str] = &["schedule", "schedule_with", "schedule_remembering"];

/// The one room outside the engine that may ask it one cycle directly: `muster explain`
/// answers one question about one moment, with no loop.
const ONE_QUESTION: &str = "cli";

#[test]
fn one_loop_drives_the_engine() {
    let crate_ = Crate::read();
    let mut offences = Vec::new();
    for file in crate_.files.iter().filter(|f| !in_layer(&f.path, "engine") && !in_layer(&f.path, ONE_QUESTION)) {
        for import in &file.imports {
            let path = &import.absolute;
            let in_engine = path.first().is_some_and(|m| m == "engine");
            if in_engine && path.last().is_some_and(|name| CYCLES.contains(&name.as_str())) {
                offences.push(format!("{} runs a cycle itself: `{}`", file.path, import.written));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "outside the engine, cycles run through engine::drive::Engine (a clock, a source, a sink):\n{}",
        offences.join("\n")
    );
}

#[test]
fn no_source_file_over_500_lines() {
    let crate_ = Crate::read();
    let long: Vec<String> = long_files(&crate_).into_iter().map(|(_, what)| what).collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines; split them by purpose:\n{}", long.join("\n"));
}

#[test]
fn no_function_over_120_lines() {
    let crate_ = Crate::read();
    let mut long = Vec::new();
    for file in &crate_.files {
        for (name, line, lines) in file.functions.iter().filter(|f| f.2 > MAX_FUNCTION_LINES) {
            long.push(format!("{}:{line} `{name}` has {lines} lines", file.path));
        }
    }
    assert!(crate_.files.iter().map(|f| f.functions.len()).sum::<usize>() > 1000, "functions went unseen");
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines; make them a few named steps:\n{}",
        long.join("\n")
    );
}

/// One name per concept: no two public types in `src/` share a name, except each module's
/// own `Error` and `Result` (STYLE.md).
#[test]
fn no_two_public_types_share_a_name() {
    let crate_ = Crate::read();
    let mut by_name: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for file in &crate_.files {
        for name in &file.types {
            by_name.entry(name.as_str()).or_default().push(file.path.as_str());
        }
    }
    assert!(by_name.len() > 300, "public types went unseen");
    let shared: Vec<String> = by_name
        .iter()
        .filter(|(name, files)| files.len() > 1 && !matches!(**name, "Error" | "Result"))
        .map(|(name, files)| format!("`{name}` in {}", files.join(", ")))
        .collect();
    assert!(shared.is_empty(), "public types that share a name; name each for what it is:\n{}", shared.join("\n"));
}

/// The kinds of object scheduling reads are listed once (`object_kinds!` in
/// src/convert/kinds.rs), and whatever must name every kind is made from that list: no other
/// file writes half of the kinds' fields itself, as a struct of every kind would.
#[test]
fn object_kinds_are_listed_once() {
    let list = std::fs::read_to_string("src/convert/kinds.rs").expect("src/convert/kinds.rs");
    let kinds: Vec<&str> = list
        .lines()
        .filter_map(|line| line.trim().split_once(": "))
        .filter(|(field, rest)| {
            let change = rest.rsplit_once(" => ").map(|(_, change)| change);
            field.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                && matches!(change, Some("pods," | "nodes," | "groups," | "others,"))
        })
        .map(|(field, _)| field)
        .collect();
    assert!(kinds.len() >= 20 && kinds.contains(&"nodes"), "the list of kinds went unseen: {kinds:?}");
    assert!(!kinds.contains(&"field"), "a comment was read as a kind: {kinds:?}");
    let crate_ = Crate::read();
    let mut offences = Vec::new();
    for file in crate_.files.iter().filter(|f| f.path != "src/convert/kinds.rs") {
        let text = std::fs::read_to_string(&file.path).expect("source file");
        let fields = source::fields_named(&text);
        let named: Vec<&str> = kinds.iter().copied().filter(|kind| fields.contains(*kind)).collect();
        if named.len() * 2 >= kinds.len() {
            offences.push(format!(
                "{} writes {} of the {} kinds' fields: {}",
                file.path,
                named.len(),
                kinds.len(),
                named.join(", ")
            ));
        }
    }
    assert!(
        offences.is_empty(),
        "a list of every kind beside src/convert/kinds.rs; make it from object_kinds! instead:\n{}",
        offences.join("\n")
    );
}

/// The engine and the conversion fail with typed errors (`thiserror`) that say what went
/// wrong, never with bare text: no `Result<_, String>` there.
#[test]
fn the_engine_and_the_conversion_fail_with_typed_errors() {
    let crate_ = Crate::read();
    let mut offences = Vec::new();
    let mut seen = 0;
    for file in crate_.files.iter().filter(|f| in_layer(&f.path, "engine") || in_layer(&f.path, "convert")) {
        seen += 1;
        let text = std::fs::read_to_string(&file.path).expect("source file");
        let found = source::string_results(&text);
        if found > 0 {
            offences.push(format!("{} writes Result<_, String> {found} times", file.path));
        }
    }
    assert!(seen > 80, "the engine's and the conversion's files went unseen");
    assert!(offences.is_empty(), "failures as bare text; give them an error type:\n{}", offences.join("\n"));
}

/// Files over [`MAX_LINES`], as (file, offence in words).
fn long_files(crate_: &Crate) -> Vec<(String, String)> {
    crate_
        .files
        .iter()
        .filter(|f| f.lines > MAX_LINES)
        .map(|f| (f.path.clone(), format!("{} has {} lines", f.path, f.lines)))
        .collect()
}

/// Paths into the top-level modules `forbidden` in the files `which` selects, as (file,
/// offence in words).
fn imports_of(crate_: &Crate, which: impl Fn(&str) -> bool, forbidden: &[&str]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for file in crate_.files.iter().filter(|f| which(&f.path)) {
        for import in &file.imports {
            if import.absolute.first().is_some_and(|m| forbidden.contains(&m.as_str())) {
                found.push((file.path.clone(), format!("{} imports `{}`", file.path, import.written)));
            }
        }
    }
    found
}

/// The offences, in words.
fn in_words(offences: Vec<(String, String)>) -> Vec<String> {
    offences.into_iter().map(|(_, what)| what).collect()
}

#[test]
fn every_folder_of_src_is_on_the_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut missing: Vec<String> = files
        .iter()
        .filter_map(|f| f.parent())
        .filter(|d| *d != root.join("src"))
        .map(|d| format!("{}/", d.strip_prefix(root).expect("under the crate").to_string_lossy().replace('\\', "/")))
        .filter(|folder| !map.contains(&format!("`{folder}`")))
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "folders of src/ with no line in docs/ARCHITECTURE.md's code map:\n{}",
        missing.join("\n")
    );
}
