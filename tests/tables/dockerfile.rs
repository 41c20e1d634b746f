//! What can be checked of the container image without a container engine: the Dockerfile
//! builds the one `muster` binary from the locked dependencies, runs it as a non-root user,
//! copies everything the build needs, and the manifests name the image the kustomization sets.

use std::path::{Path, PathBuf};

use serde::Deserialize;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()))
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn instructions() -> Vec<(String, String)> {
    let text = read(&root().join("Dockerfile"));
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(part) = line.strip_suffix('\\') {
            current.push_str(part);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, rest) = current.trim().split_once(' ').unwrap_or((current.trim(), ""));
        out.push((keyword.to_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    out
}

/// The instructions of each stage, from its FROM on.
fn stages() -> Vec<Vec<(String, String)>> {
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for (keyword, rest) in instructions() {
        if keyword == "FROM" {
            stages.push(Vec::new());
        }
        stages.last_mut().expect("the Dockerfile starts with FROM").push((keyword, rest));
    }
    stages
}

#[test]
fn the_build_stage_builds_the_muster_binary_from_the_lock_file() {
    let stages = stages();
    assert!(stages.len() >= 2, "a multi-stage build: a builder and a small runtime image");
    let builder = &stages[0];
    let from = &builder[0].1;
    assert!(from.starts_with("rust:"), "the builder is a Rust image: {from}");
    let build = builder
        .iter()
        .find(|(k, rest)| k == "RUN" && rest.contains("cargo build"))
        .expect("the builder runs cargo build");
    for flag in ["--release", "--locked", "--bin muster"] {
        assert!(build.1.contains(flag), "cargo build lacks {flag}: {}", build.1);
    }
    // The toolchain is at least the crate's rust-version.
    let wanted = read(&root().join("Cargo.toml"))
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = ").map(|v| v.trim_matches('"').to_string()))
        .expect("Cargo.toml sets rust-version");
    let image_version: String = from["rust:".len()..].split(['-', ' ']).next().unwrap_or_default().to_string();
    let parse = |v: &str| v.split('.').map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    assert!(parse(&image_version) >= parse(&wanted), "rust:{image_version} is older than rust-version {wanted}");
}

#[test]
fn the_build_stage_copies_everything_cargo_needs_and_dockerignore_keeps_it() {
    let copied: Vec<String> = stages()[0]
        .iter()
        .filter(|(k, _)| k == "COPY")
        .flat_map(|(_, rest)| {
            let parts: Vec<&str> = rest.split_whitespace().filter(|p| !p.starts_with("--")).collect();
            parts[..parts.len() - 1].iter().map(|p| p.trim_end_matches('/').to_string()).collect::<Vec<_>>()
        })
        .collect();
    let cargo = read(&root().join("Cargo.toml"));
    let mut needed = vec!["Cargo.toml".to_string(), "Cargo.lock".to_string(), "src".to_string()];
    if root().join("build.rs").exists() {
        needed.push("build.rs".into());
    }
    if root().join("proto").exists() {
        needed.push("proto".into());
    }
    // Targets Cargo.toml declares must exist for it to load.
    if cargo.contains("[[bench]]") {
        needed.push("benches".into());
    }
    for path in &needed {
        assert!(copied.contains(path), "the build stage does not copy {path} (copies {copied:?})");
        assert!(root().join(path).exists(), "{path} is copied but does not exist");
    }
    let ignored: Vec<String> = read(&root().join(".dockerignore"))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .map(|l| l.trim_end_matches('/').to_string())
        .collect();
    for path in &needed {
        assert!(!ignored.contains(path), ".dockerignore excludes {path}, which the build needs");
    }
    assert!(ignored.iter().any(|l| l == "target"), ".dockerignore keeps target/ out of the build context");
}

#[test]
fn the_runtime_image_runs_the_binary_as_a_non_root_user() {
    let stages = stages();
    let runtime = stages.last().expect("a runtime stage");
    let user =
        runtime.iter().rev().find(|(k, _)| k == "USER").map(|(_, u)| u.clone()).expect("the runtime stage sets USER");
    let name = user.split(':').next().unwrap_or_default();
    assert!(!matches!(name, "root" | "0" | ""), "the runtime runs as root: USER {user}");
    assert!(
        runtime.iter().any(|(k, rest)| k == "COPY" && rest.contains("--from=") && rest.contains("muster")),
        "the runtime stage copies the built binary"
    );
    let entrypoint = runtime.iter().find(|(k, _)| k == "ENTRYPOINT").map(|(_, e)| e.clone()).expect("an ENTRYPOINT");
    assert!(entrypoint.contains("/muster\""), "the entrypoint is the muster binary: {entrypoint}");
    assert!(!runtime.iter().any(|(k, rest)| k == "RUN" && rest.contains("cargo")), "no toolchain in the runtime image");
}

/// `image:` values of the workloads, and the kustomization's image names.
#[test]
fn the_workloads_name_the_image_the_kustomization_sets() {
    let kustomization: yaml_serde::Value =
        yaml_serde::from_str(&read(&root().join("manifests/kustomization.yaml"))).expect("kustomization.yaml");
    let images = kustomization["images"].as_sequence().expect("the kustomization has images:");
    assert_eq!(images.len(), 1, "one image for everything");
    let name = images[0]["name"].as_str().expect("images[0].name");
    assert!(images[0]["newTag"].as_str().is_some_and(|t| !t.is_empty()), "the kustomization pins a tag");
    let resources: Vec<String> = kustomization["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .filter_map(|r| r.as_str().map(String::from))
        .collect();
    let mut seen = 0;
    for resource in &resources {
        for document in yaml_serde::Deserializer::from_str(&read(&root().join("manifests").join(resource))) {
            let object = yaml_serde::Value::deserialize(document).expect("YAML");
            let containers = &object["spec"]["template"]["spec"]["containers"];
            for container in containers.as_sequence().into_iter().flatten() {
                let image = container["image"].as_str().unwrap_or_default();
                assert_eq!(image, name, "{resource} names image {image:?}, not the kustomization's {name:?}");
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 2, "the scheduler Deployment and the agent DaemonSet");
}
