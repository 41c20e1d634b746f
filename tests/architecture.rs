//! Architecture invariants, as tests: the engine is pure, modules import one way (no
//! circles; the engine below its callers, metrics and the agent beside the scheduler's
//! shell, not on it), and no source file outgrows one purpose.

#[path = "architecture/source.rs"]
mod source;

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use source::{Crate, rust_files};

/// The most lines a file in src/ may have.
const MAX_LINES: usize = 600;

/// The engine's callers: the scheduler's shell, the simulator, the node agent, metrics.
const ABOVE_THE_ENGINE: &[&str] = &["k8s", "sim", "agent", "metrics"];

#[test]
fn the_engine_does_no_io_and_knows_no_kubernetes_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/engine"), &mut files);
    assert!(files.len() >= 5, "src/engine went missing");
    // The quantity parser sits at the crate root, shared with the shell and the agent; the
    // engine uses it, so it is held to the same rule.
    files.push(root.join("src/quantity.rs"));
    let forbidden = [
        "kube::",
        "k8s_openapi",
        "tokio",
        "std::fs",
        "std::net",
        "std::time",
        "std::process",
        "std::env",
        "tracing::",
        "println!",
        "eprintln!",
        "SystemTime",
        "Instant",
    ];
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        for word in forbidden {
            assert!(!text.contains(word), "{} uses `{word}`: the engine must stay pure", file.display());
        }
    }
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
    let mut graph = DiGraph::<usize, String>::new();
    let nodes: Vec<NodeIndex> = (0..crate_.files.len()).map(|i| graph.add_node(i)).collect();
    for (from, to, written) in crate_.dependencies() {
        graph.add_edge(nodes[from], nodes[to], written);
    }
    let circles: Vec<String> = tarjan_scc(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| describe_circle(&crate_, &graph, &component))
        .collect();
    assert!(
        circles.is_empty(),
        "modules import each other in a circle; move what both need into a module below both:\n{}",
        circles.join("\n\n")
    );
}

#[test]
fn no_source_file_over_600_lines() {
    let long = in_words(long_files(&Crate::read()));
    assert!(long.is_empty(), "files over {MAX_LINES} lines; split them by purpose:\n{}", long.join("\n"));
}

#[test]
fn the_engine_imports_nothing_of_the_shell_simulator_agent_or_metrics() {
    let offences = in_words(imports_of(&Crate::read(), in_engine, ABOVE_THE_ENGINE));
    assert!(offences.is_empty(), "the engine must not depend on its callers:\n{}", offences.join("\n"));
}

#[test]
fn metrics_and_the_agent_do_not_import_the_scheduler_shell() {
    let offences = in_words(imports_of(&Crate::read(), in_metrics_or_agent, &["k8s"]));
    assert!(
        offences.is_empty(),
        "metrics and the node agent must not depend on the scheduler's shell (crate::k8s):\n{}",
        offences.join("\n")
    );
}

fn in_engine(path: &str) -> bool {
    path.starts_with("src/engine/")
}

fn in_metrics_or_agent(path: &str) -> bool {
    path == "src/metrics.rs" || path.starts_with("src/metrics/") || path.starts_with("src/agent/")
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
fn imports_of(crate_: &Crate, which: fn(&str) -> bool, forbidden: &[&str]) -> Vec<(String, String)> {
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

/// The shortest circle through the first file of a strongly connected `component`, one
/// import a line.
fn describe_circle(crate_: &Crate, graph: &DiGraph<usize, String>, component: &[NodeIndex]) -> String {
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
        let (from, to) = (&crate_.files[graph[*previous]].path, &crate_.files[graph[node]].path);
        steps.push(format!("  {from} imports `{written}` ({to})"));
        node = *previous;
        if node == start {
            break;
        }
    }
    steps.reverse();
    steps.join("\n")
}
