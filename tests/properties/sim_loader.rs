//! The simulator's loader on mutated versions of the test clusters (tests/sim/*.yaml and
//! the example manifests): a field deleted, a value of another type, a quantity or a
//! string replaced with garbage, a document duplicated or dropped, the text cut short. It
//! never panics; an error names the file and the object (its kind and name, which the text
//! has) or the document; a cluster it accepts is simulated for a few cycles without a panic.

use std::path::PathBuf;

use muster::config::{Config, QueueImport, Queues};
use muster::quantity::Quantity;
use muster::sim::load::{Error, load_str};
use muster::sim::run::{SimOptions, run_with};
use proptest::prelude::*;
use yaml_serde::Value;

const SOURCE: &str = "mutated.yaml";

/// The clusters the simulator's tests and the guide use.
fn clusters() -> &'static [(String, String)] {
    static CLUSTERS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    CLUSTERS.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<PathBuf> = ["tests/sim", "manifests/examples"]
            .iter()
            .flat_map(|dir| std::fs::read_dir(root.join(dir)).expect("a folder of clusters"))
            .map(|entry| entry.expect("a readable folder").path())
            .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.push(root.join("manifests/deviceclasses.yaml"));
        files.sort();
        files
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path).expect("a readable cluster");
                (path.strip_prefix(&root).unwrap().display().to_string(), text)
            })
            .collect()
    })
}

fn documents(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("the test clusters are valid YAML"))
        .collect()
}

fn write(documents: &[Value]) -> String {
    documents.iter().map(|d| yaml_serde::to_string(d).expect("serialisable")).collect::<Vec<_>>().join("---\n")
}

/// A step down into a document: a map's key or a list's index.
#[derive(Clone, Debug)]
enum Step {
    Key(Value),
    Index(usize),
}

/// Every node of `value`, as the steps that reach it.
fn paths(value: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(here.clone());
    match value {
        Value::Mapping(map) => {
            for (k, v) in map {
                here.push(Step::Key(k.clone()));
                paths(v, here, out);
                here.pop();
            }
        }
        Value::Sequence(items) => {
            for (i, v) in items.iter().enumerate() {
                here.push(Step::Index(i));
                paths(v, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node<'v>(value: &'v mut Value, path: &[Step]) -> &'v mut Value {
    path.iter().fold(value, |v, step| match (step, v) {
        (Step::Key(k), Value::Mapping(map)) => map.get_mut(k).expect("a path of this document"),
        (Step::Index(i), Value::Sequence(items)) => &mut items[*i],
        _ => unreachable!("a path of this document"),
    })
}

/// One mutation; the numbers pick documents and nodes by position.
#[derive(Clone, Debug)]
enum Mutation {
    /// Removes a field (or list item).
    Delete(usize, usize),
    /// Gives a node a value of another type.
    Retype(usize, usize, u8),
    /// Replaces a quantity (a string the quantity parser accepts) with garbage.
    Quantity(usize, String),
    /// Replaces a string with another.
    Text(usize, usize, String),
    Duplicate(usize),
    Drop(usize),
}

fn garbage_quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(
            &["", "-1", "-8Gi", "12XB", "Gi", "1e40", "8Ei", "99999999999999999999999", "0.0000000001", "1.2.3", "+"][..]
        )
        .prop_map(String::from),
        "[-+0-9.eEKMGTPi]{0,12}",
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let any_string = prop_oneof![
        proptest::sample::select(
            &["", "x", "default", "muster", "v1", "Pod", "gpu.nvidia.com", "device.driver ==", "true", "1"][..]
        )
        .prop_map(String::from),
        "\\PC{0,16}",
    ];
    prop_oneof![
        3 => (any::<usize>(), any::<usize>()).prop_map(|(d, n)| Mutation::Delete(d, n)),
        3 => (any::<usize>(), any::<usize>(), any::<u8>()).prop_map(|(d, n, t)| Mutation::Retype(d, n, t)),
        3 => (any::<usize>(), garbage_quantity()).prop_map(|(n, q)| Mutation::Quantity(n, q)),
        2 => (any::<usize>(), any::<usize>(), any_string).prop_map(|(d, n, s)| Mutation::Text(d, n, s)),
        1 => any::<usize>().prop_map(Mutation::Duplicate),
        1 => any::<usize>().prop_map(Mutation::Drop),
    ]
}

/// A value unlike `old`: a string for a number, a number for a string, a scalar for a map.
fn retyped(old: &Value, choice: u8) -> Value {
    let others: [Value; 5] = [
        Value::String("x".into()),
        Value::Number((-1).into()),
        Value::Bool(true),
        Value::Sequence(vec![Value::Null]),
        Value::Mapping([(Value::String("a".into()), Value::Number(1.into()))].into_iter().collect()),
    ];
    let candidates: Vec<&Value> = others
        .iter()
        .filter(|v| std::mem::discriminant(*v) != std::mem::discriminant(old))
        .chain(std::iter::once(&Value::Null))
        .collect();
    candidates[choice as usize % candidates.len()].clone()
}

fn mutate(docs: &mut Vec<Value>, mutation: &Mutation) {
    if docs.is_empty() {
        return;
    }
    let count = docs.len();
    let nodes_of = |doc: &Value| {
        let mut out = Vec::new();
        paths(doc, &mut Vec::new(), &mut out);
        out
    };
    match mutation {
        Mutation::Delete(d, n) => {
            let doc = &mut docs[d % count];
            let all = nodes_of(doc);
            let path = &all[n % all.len()];
            if let Some((last, parent)) = path.split_last() {
                match (last, node(doc, parent)) {
                    (Step::Key(k), Value::Mapping(map)) => {
                        map.remove(k);
                    }
                    (Step::Index(i), Value::Sequence(items)) => {
                        items.remove(*i);
                    }
                    _ => {}
                }
            }
        }
        Mutation::Retype(d, n, t) => {
            let doc = &mut docs[d % count];
            let all = nodes_of(doc);
            let target = node(doc, &all[n % all.len()]);
            *target = retyped(target, *t);
        }
        Mutation::Quantity(n, garbage) => {
            // Quantities anywhere in the cluster.
            let mut found = Vec::new();
            for (d, doc) in docs.iter().enumerate() {
                for path in nodes_of(doc) {
                    let mut doc = doc.clone();
                    if node(&mut doc, &path).as_str().is_some_and(|s| Quantity::parse(s).is_ok()) {
                        found.push((d, path));
                    }
                }
            }
            if !found.is_empty() {
                let (d, path) = &found[n % found.len()];
                *node(&mut docs[*d], path) = Value::String(garbage.clone());
            }
        }
        Mutation::Text(d, n, text) => {
            let doc = &mut docs[d % count];
            let strings: Vec<Vec<Step>> = nodes_of(doc)
                .into_iter()
                .filter(|p| {
                    let mut copy = doc.clone();
                    node(&mut copy, p).is_string()
                })
                .collect();
            if !strings.is_empty() {
                *node(doc, &strings[n % strings.len()]) = Value::String(text.clone());
            }
        }
        Mutation::Duplicate(d) => {
            let copy = docs[d % count].clone();
            docs.insert(d % count, copy);
        }
        Mutation::Drop(d) => {
            docs.remove(d % count);
        }
    }
}

/// Whether a document of `text` has `name` as its name, as YAML reads it: a name written
/// quoted (`'it''s'`) is not in the text as the loader reports it.
fn has_name(text: &str, name: &str) -> bool {
    text.split("\n---")
        .filter_map(|doc| yaml_serde::from_str::<Value>(doc).ok())
        .any(|doc| doc.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str) == Some(name))
}

/// The loader's properties on one text: no panic (a panic fails the case); an error names
/// the source and an object the text has, or a document it has; an accepted cluster is
/// simulated without a panic.
fn check(text: &str, import_queues: bool) -> Result<(), TestCaseError> {
    match load_str(text, SOURCE) {
        Err(error) => {
            let shown = error.to_string();
            prop_assert!(shown.starts_with(&format!("{SOURCE}: ")), "{}", shown);
            let documents = text.matches("\n---").count() + 1;
            match &error {
                Error::Yaml { document, .. } | Error::Missing { document, .. } => {
                    prop_assert!((1..=documents).contains(document), "{} of {} documents", shown, documents);
                }
                Error::Invalid { object, .. } | Error::Duplicate { object, .. } => {
                    // "Kind name" or "Kind namespace/name". Mutated text may put a '/' in
                    // either (a name "/" of a cluster-scoped object, a namespace "/"), so
                    // the name is what follows any '/' of it, or all of it.
                    let (kind, named) = object.split_once(' ').unwrap_or((object, ""));
                    let names = std::iter::once(named)
                        .chain(named.match_indices('/').map(|(i, _)| &named[i + 1..]))
                        .filter(|n| !n.is_empty());
                    prop_assert!(!kind.is_empty() && !named.is_empty(), "{}", shown);
                    prop_assert!(
                        text.contains(kind) && names.clone().any(|n| text.contains(n) || has_name(text, n)),
                        "{} names no object of the text",
                        shown
                    );
                    prop_assert!(shown.contains(object.as_str()), "{}", shown);
                }
                Error::Read { .. } => prop_assert!(false, "nothing is read from disk: {}", shown),
            }
        }
        Ok(mut cluster) => {
            let mut config = Config::default();
            if import_queues {
                config.queues = Queues { import: vec![QueueImport::Kai, QueueImport::Kueue] };
            }
            run_with(&mut cluster.objects, &config, &SimOptions { now: None, cycles: 3 });
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(super::cases(400))]

    #[test]
    fn mutated_clusters_load_or_say_which_object_is_wrong(
        file in any::<usize>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
        import_queues in any::<bool>(),
    ) {
        let (_, text) = &clusters()[file % clusters().len()];
        let mut docs = documents(text);
        for mutation in &mutations {
            mutate(&mut docs, mutation);
        }
        check(&write(&docs), import_queues)?;
    }

    #[test]
    fn clusters_cut_short_or_spliced_load_or_say_where(file in any::<usize>(), at in any::<usize>(), insert in "\\PC{0,3}") {
        let (_, text) = &clusters()[file % clusters().len()];
        let mut at = at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        check(&text[..at], false)?;
        check(&format!("{}{insert}{}", &text[..at], &text[at..]), false)?;
    }
}

/// The clusters load unchanged, so the mutations above start from valid input.
#[test]
fn the_clusters_load() {
    for (path, text) in clusters() {
        load_str(text, path).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn an_error_naming_an_object_whose_name_yaml_must_quote_still_names_it() {
    // Found by the property above: a name with a backtick and a quote is written quoted,
    // so it is not in the text as the error reports it.
    let text = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: '`'' '\nspec:\n  selectors:\n  - cel:\n      expression: ''\n";
    let error = load_str(text, SOURCE).expect_err("an empty CEL expression is refused");
    assert!(error.to_string().contains("DeviceClass `' "), "{error}");
    check(text, false).expect("the error names the object the text has");
}

#[test]
fn an_error_naming_an_object_in_a_namespace_written_with_a_slash_still_names_it() {
    // Found by the property above: a namespace "/" makes the object "//big-gpu".
    let text = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: big-gpu\n  namespace: /\nspec: -1\n";
    let error = load_str(text, SOURCE).expect_err("a spec that is a number is refused");
    assert!(error.to_string().contains("ResourceClaimTemplate //big-gpu"), "{error}");
    check(text, false).expect("the error names the object the text has");
}
