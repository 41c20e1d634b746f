//! How YAML is read, pinned: what a cluster file means must not change with the YAML crate
//! underneath (YAML 1.1 words and octal-looking numbers stay strings, as kubectl reads
//! them; a key given twice is refused, as kubectl refuses it).

use super::*;

const NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: n1
  labels:
    feature.example.com/gpu: yes
    feature.example.com/mode: on
    feature.example.com/perm: 0755
    feature.example.com/big: 1_000
";

#[test]
fn yaml_1_1_words_and_octal_looking_numbers_are_strings() {
    let loaded = load_str(NODE, "node.yaml").expect("a node whose labels look like YAML 1.1 scalars loads");
    let labels = loaded.objects.nodes[0].metadata.labels.clone().unwrap_or_default();
    let label = |k: &str| labels.get(&format!("feature.example.com/{k}")).cloned();
    assert_eq!(
        (label("gpu"), label("mode"), label("perm"), label("big")),
        (Some("yes".into()), Some("on".into()), Some("0755".into()), Some("1_000".into()))
    );
}

#[test]
fn a_key_given_twice_is_refused_with_its_document() {
    let twice = format!("{NODE}---\n{}", NODE.replace("  name: n1\n", "  name: n2\n  name: n3\n"));
    let Err(error) = load_str(&twice, "twice.yaml") else { panic!("a duplicated key is refused") };
    let error = error.to_string();
    assert!(error.contains("twice.yaml") && error.contains("document 2") && error.contains("duplicate"), "{error}");
}
