//! The configuration loader on generated YAML (documents over the configuration's own
//! field names and values, at any depth, with scalars of every type) and on mutations of
//! the repository's real files (manifests/scheduler/config.yaml and
//! scheduler-config/default.yaml): it never panics; an error names the file; a
//! configuration it accepts gives the engine its settings, and written out and read again
//! it is the same configuration.

use muster::config::Config;
use proptest::prelude::*;
use yaml_serde::{Mapping, Value};

const SOURCE: &str = "generated.yaml";

fn real_files() -> Vec<(&'static str, String)> {
    ["manifests/scheduler/config.yaml", "scheduler-config/default.yaml"]
        .into_iter()
        .map(|path| {
            let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            (path, std::fs::read_to_string(full).expect("the repository's configuration files"))
        })
        .collect()
}

/// Every field name the configuration has, at any depth, and a few it does not.
fn field_names() -> Vec<String> {
    fn collect(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Mapping(map) => {
                for (k, v) in map {
                    if let Some(k) = k.as_str() {
                        out.push(k.to_string());
                    }
                    collect(v, out);
                }
            }
            Value::Sequence(items) => items.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut names = Vec::new();
    collect(&yaml_serde::to_value(Config::default()).expect("the default serialises"), &mut names);
    names.extend(["schedulerNmae", "", "import", "<<", "name", "nodeLabel"].map(String::from));
    names.sort();
    names.dedup();
    names
}

/// Scalars of every type: the configuration's own values, and values of the wrong type,
/// out of range, or not numbers at all.
fn scalar() -> BoxedStrategy<Value> {
    let words = proptest::sample::select(
        &[
            "muster",
            "BinPack",
            "Spread",
            "Backfill",
            "StrictFIFO",
            "BestEffortFIFO",
            "BestFit",
            "FirstFit",
            "lca",
            "queue",
            "kai",
            "kueue",
            "auto",
            "0s",
            "10m",
            "1h30m",
            "-5m",
            "soon",
            "0.0.0.0:10251",
            "[::1]:80",
            "localhost",
            "",
            " ",
            "null",
            "~",
            "true",
            "1e3",
            ".nan",
            "-.inf",
            "0x10",
            "0o7",
        ][..],
    );
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| Value::Number(i.into())),
        any::<u64>().prop_map(|u| Value::Number(u.into())),
        (0u64..20).prop_map(|u| Value::Number(u.into())),
        prop_oneof![any::<f64>(), Just(f64::NAN), Just(f64::INFINITY), Just(0.5), Just(1.5)]
            .prop_map(|f| Value::Number(f.into())),
        words.prop_map(|w| Value::String(w.to_string())),
        "\\PC{0,20}".prop_map(Value::String),
    ]
    .boxed()
}

/// Documents of maps and lists over the configuration's field names, a few levels deep.
fn document() -> impl Strategy<Value = Value> {
    let names = field_names();
    let key = prop_oneof![
        4 => proptest::sample::select(names).prop_map(Value::String),
        1 => scalar(),
    ];
    scalar().prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            2 => proptest::collection::vec((key.clone(), inner.clone()), 0..6)
                .prop_map(|entries| Value::Mapping(entries.into_iter().collect::<Mapping>())),
            1 => proptest::collection::vec(inner, 0..4).prop_map(Value::Sequence),
        ]
    })
}

/// One change to a real file's text.
#[derive(Clone, Debug)]
enum Edit {
    DeleteLine(usize),
    DuplicateLine(usize),
    /// Replaces what follows the first `:` on a line.
    ReplaceValue(usize, String),
    Insert(usize, char),
    Truncate(usize),
    Indent(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let garbage = prop_oneof![
        proptest::sample::select(
            &[" ", " -1", " 0", " 18446744073709551616", " [a, b]", " {a: 1}", " \"", " *x", " &x y", " !!binary x"][..]
        )
        .prop_map(String::from),
        "[ -~]{0,12}",
    ];
    prop_oneof![
        any::<usize>().prop_map(Edit::DeleteLine),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), garbage).prop_map(|(l, g)| Edit::ReplaceValue(l, g)),
        (any::<usize>(), prop_oneof![Just(':'), Just('-'), Just(' '), Just('\t'), Just('{'), Just('"'), any::<char>()])
            .prop_map(|(at, c)| Edit::Insert(at, c)),
        any::<usize>().prop_map(Edit::Truncate),
        any::<usize>().prop_map(Edit::Indent),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let count = lines.len().max(1);
    let line = |i: usize| i % count;
    let boundary = |at: usize, text: &str| {
        let mut at = at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    match edit {
        _ if lines.is_empty() => return text.to_string(),
        Edit::DeleteLine(i) => {
            lines.remove(line(*i));
        }
        Edit::DuplicateLine(i) => {
            let i = line(*i);
            lines.insert(i, lines[i].clone());
        }
        Edit::ReplaceValue(i, value) => {
            let i = line(*i);
            if let Some((key, _)) = lines[i].split_once(':') {
                lines[i] = format!("{key}:{value}");
            }
        }
        Edit::Indent(i) => {
            let i = line(*i);
            lines[i].insert_str(0, "  ");
        }
        Edit::Insert(at, c) => {
            let mut text = text.to_string();
            text.insert(boundary(*at, &text), *c);
            return text;
        }
        Edit::Truncate(at) => return text[..boundary(*at, text)].to_string(),
    }
    lines.join("\n") + "\n"
}

/// The loader's properties on one text: no panic (a panic fails the case), errors that
/// name the source, and accepted configurations that work and round-trip.
fn check(text: &str, source: &str) -> Result<(), TestCaseError> {
    match Config::parse(text, source) {
        Err(e) => {
            let shown = e.to_string();
            prop_assert!(shown.contains(source), "the error does not name {}: {}", source, shown);
        }
        Ok(config) => {
            let _ = config.cycle();
            let _ = config.request_timeout();
            let written = yaml_serde::to_string(&config).expect("a configuration serialises");
            let again = Config::parse(&written, "written.yaml")
                .map_err(|e| TestCaseError::fail(format!("{e}\nwritten from {text:?} as:\n{written}")))?;
            prop_assert_eq!(again, config);
        }
    }
    Ok(())
}

/// Sets (or, with None, removes) a field of `config`, or a field of one of its sections:
/// `field` and `inner` pick them by position.
fn change(config: &mut Value, field: usize, inner: Option<usize>, value: Option<Value>) {
    let Value::Mapping(map) = config else { return };
    let key = map.keys().nth(field % map.len().max(1)).cloned();
    let Some(key) = key else { return };
    let (map, key) = match (inner, map.get_mut(&key)) {
        (Some(inner), Some(Value::Mapping(section))) if !section.is_empty() => {
            let nested = section.keys().nth(inner % section.len()).cloned().expect("not empty");
            (section, nested)
        }
        _ => (map, key),
    };
    match value {
        Some(value) => map.insert(key, value),
        None => map.remove(&key),
    };
}

proptest! {
    #![proptest_config(super::cases(1_000))]

    /// The defaults, written out, with fields set to other values (often valid ones) or
    /// removed: the checks behind the parser are reached, not only its type errors.
    #[test]
    fn the_defaults_with_fields_changed_never_panic(
        changes in proptest::collection::vec(
            (any::<usize>(), proptest::option::of(any::<usize>()), proptest::option::weighted(0.8, scalar())),
            1..4,
        ),
    ) {
        let mut config = yaml_serde::to_value(Config::default()).expect("the default serialises");
        for (field, inner, value) in changes {
            change(&mut config, field, inner, value);
        }
        check(&yaml_serde::to_string(&config).expect("serialises"), SOURCE)?;
    }

    #[test]
    fn generated_documents_never_panic_and_errors_name_the_file(document in document()) {
        let text = yaml_serde::to_string(&document).expect("a generated document serialises");
        check(&text, SOURCE)?;
    }

    #[test]
    fn the_real_files_mutated_never_panic_and_errors_name_the_file(
        file in 0usize..2,
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let (path, text) = &real_files()[file];
        let mutated = edits.iter().fold(text.clone(), |text, edit| apply(&text, edit));
        check(&mutated, path)?;
    }

    #[test]
    fn arbitrary_text_never_panics(text in prop_oneof!["\\PC{0,200}", any::<String>(), "[a-zA-Z:{}\\[\\], \\n-]{0,120}"]) {
        check(&text, SOURCE)?;
    }
}

/// The real files load, so the mutations above start from valid configurations.
#[test]
fn the_real_files_load() {
    for (path, text) in real_files() {
        Config::parse(&text, path).unwrap_or_else(|e| panic!("{e}"));
    }
}
