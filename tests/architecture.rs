//! Architecture invariants, as tests: the engine is pure.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

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
