//! The YAML writer: strings that YAML 1.1 or 1.2 readers would take for something else are
//! quoted, ordinary ones stay plain, real numbers and booleans stay bare, yaml_serde's
//! layout is kept, and everything reads back through yaml_serde as what was written.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde::Serialize;
use serde_json::json;

use super::implicit::is_implicit;
use super::to_string;

/// Writes `value`, reads the text back with yaml_serde, and asserts it is the same value.
fn reads_back<T: Serialize + ?Sized>(value: &T) -> String {
    let text = to_string(value).unwrap();
    let read: yaml_serde::Value = yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("unreadable ({e}):\n{text}"));
    assert_eq!(read, yaml_serde::to_value(value).unwrap(), "read back differently:\n{text}");
    text
}

/// Every form YAML 1.1 (PyYAML's resolver, the published type patterns) or YAML 1.2 gives a
/// type other than string, by kind.
const IMPLICIT: &[&[&str]] = &[
    &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE",
        "on", "On", "ON", "off", "Off", "OFF",
    ],
    &["~", "null", "Null", "NULL", ""],
    // Integers: decimal, base 60, octal, hex, binary, separators.
    &[
        "0",
        "12",
        "-12",
        "+12",
        "09",
        "190:20:30",
        "-1:30",
        "0o17",
        "017",
        "-017",
        "0x1F",
        "-0xff",
        "0b1010",
        "+0b1_0",
        "1_000",
        "1,000",
        "0x_1",
        "_1",
        "_",
    ],
    // Floats: base 60, exponents, infinities, not-a-number, YAML 1.1's loose pattern.
    &[
        "0000:18:00.0",
        "1:20.5",
        "190:20:30.15",
        "1.5",
        "-1.5",
        ".5",
        "1.",
        "6.8523015e+5",
        "685.230_15e+03",
        "1e3",
        "1E-3",
        "-1.5e3",
        ".inf",
        ".Inf",
        "-.INF",
        "+.inf",
        ".nan",
        ".NaN",
        ".NAN",
        "1.2.3",
        "10.0.0.1",
        ".",
    ],
    &[
        "2001-12-14",
        "2001-12-14t21:59:43.10-05:00",
        "2001-12-14T21:59:43.10Z",
        "2001-12-14 21:59:43.10 -5",
        "2001-12-14\t21:59:43",
        "2002-1-2 3:04:05",
    ],
    // YAML 1.1's merge and value keys.
    &["<<", "="],
];

/// Strings no reader takes for anything else.
const PLAIN: &[&str] = &[
    "nvidia.com/gpu",
    "gpu-0",
    "gpu-node-1",
    "gpu.muster.dev",
    "NVIDIA H100 80GB HBM3",
    "resource.kubernetes.io/pciBusID",
    "0000:3b:00.0",
    "pci0000:1a",
    "GPU-1d5e0c3a-8f1b-4c2e-9a7d-000000000000",
    "v1alpha1",
    "ResourceSlice",
    "80Gi",
    "500m",
    "1g.10gb",
    "yesterday",
    "nope",
    "online",
    "a:b",
    "x#y",
    "-foo",
    "--flag",
    ":x",
    "e5",
    "0x",
    "0xg",
    "1:60",
    "1:100",
    "12:3:456",
    "2001-12",
    "2001-12-14x",
    "1h30m",
    "inf",
    "NaN",
    "infinity",
    "Unset: the queue's; else none",
    "a, b and {c}",
    "jsonPath .status.phase",
];

#[test]
fn a_pci_bus_id_is_quoted() {
    assert_eq!(to_string("0000:18:00.0").unwrap(), "'0000:18:00.0'\n");
    let attribute = json!({"resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"}});
    assert_eq!(reads_back(&attribute), "resource.kubernetes.io/pciBusID:\n  string: '0000:18:00.0'\n");
}

#[test]
fn every_implicit_form_is_quoted_as_a_value_a_key_and_an_item() {
    for &s in IMPLICIT.iter().copied().flatten() {
        assert!(is_implicit(s), "{s:?}");
        // Single quotes, but for the tab, which only double quotes carry.
        let q = if s.contains('\t') { format!("\"{}\"", s.replace('\t', "\\t")) } else { format!("'{s}'") };
        assert_eq!(reads_back(s), format!("{q}\n"), "{s:?}");
        assert_eq!(reads_back(&BTreeMap::from([(s, s)])), format!("{q}: {q}\n"), "{s:?}");
        assert_eq!(reads_back(&[s]), format!("- {q}\n"), "{s:?}");
    }
}

#[test]
fn ordinary_strings_stay_plain() {
    for &s in PLAIN {
        assert!(!is_implicit(s), "{s:?}");
        let quoted = s.contains(": ");
        let text = reads_back(s);
        assert_eq!(text.starts_with('\''), quoted, "{s:?} came out as {text}");
        if !quoted {
            assert_eq!(text, format!("{s}\n"));
            assert_eq!(reads_back(&BTreeMap::from([(s, 1)])), format!("{s}: 1\n"));
        }
    }
}

#[test]
fn real_numbers_booleans_and_nulls_stay_bare() {
    let value = json!({
        "count": 2, "negative": -3, "big": u64::MAX, "small": i64::MIN, "half": 0.5, "one": 1.0, "huge": 1e20,
        "tiny": -1.5e-7, "on": true, "off": false, "unset": null,
    });
    let text = reads_back(&value);
    for line in [
        "count: 2",
        "negative: -3",
        "big: 18446744073709551615",
        "small: -9223372036854775808",
        "half: 0.5",
        "one: 1.0",
        // With a dot and a signed exponent, or YAML 1.1 reads a string.
        "huge: 1.0e+20",
        "tiny: -1.5e-7",
        // The keys are strings that YAML 1.1 would read as booleans.
        "'on': true",
        "'off': false",
        "unset: null",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
    assert_eq!(to_string(&f64::INFINITY).unwrap(), ".inf\n");
    assert_eq!(to_string(&f64::NEG_INFINITY).unwrap(), "-.inf\n");
    assert_eq!(to_string(&f64::NAN).unwrap(), ".nan\n");
    for f in [0.1, -0.0, 1e15, 1e16, 123456.789e300, f64::MIN_POSITIVE, 5e-324, f64::MAX] {
        reads_back(&f);
    }
}

/// Where nothing needs more quoting than yaml_serde gives, the text is yaml_serde's.
#[test]
fn the_layout_is_yaml_serdes() {
    let value = json!({
        "apiVersion": "v1",
        "metadata": {"name": "gpu-node-1", "labels": {}, "finalizers": []},
        "spec": {
            "devices": [
                {"name": "gpu-0", "attributes": {"index": {"int": 0}}, "taints": [{"key": "k", "effect": "NoSchedule"}]},
                [["a", "b"], []],
                "plain",
                {},
            ],
            "description": "Two lines,\nthe second: quoted.",
            "kept": "ends\n\n",
            "clipped": "ends\n",
            "note": "Unset: the default.",
            "quote": "it's",
        },
    });
    let ours = reads_back(&value);
    assert_eq!(ours, yaml_serde::to_string(&value).unwrap());
    assert_eq!(
        ours,
        "apiVersion: v1
metadata:
  finalizers: []
  labels: {}
  name: gpu-node-1
spec:
  clipped: |
    ends
  description: |-
    Two lines,
    the second: quoted.
  devices:
  - attributes:
      index:
        int: 0
    name: gpu-0
    taints:
    - effect: NoSchedule
      key: k
  - - - a
      - b
    - []
  - plain
  - {}
  kept: |+
    ends

  note: 'Unset: the default.'
  quote: it's
"
    );
}

#[test]
fn awkward_strings_read_back() {
    let awkward = [
        " leading",
        "trailing ",
        "tab\there",
        "line\r\nbreaks",
        "\nleading break",
        "  indented\nlines",
        "trailing spaces \nhere",
        "bell\u{7}",
        "nel\u{85}ls\u{2028}ps\u{2029}",
        "bom\u{feff}",
        "\u{fffe}\u{ffff}",
        "é ü 中文 🚀",
        "it's \"quoted\" \\ backslash",
        "- item",
        "? key",
        ": value",
        "-",
        "---",
        "...",
        "--- document",
        "# comment",
        "a # comment",
        "key: value",
        "ends with colon:",
        "&anchor",
        "*alias",
        "!tag",
        "|",
        ">",
        "%directive",
        "@reserved",
        "`reserved",
        "{flow}",
        "[flow]",
        ",comma",
        "\n",
        "\n\n",
        "a\n\nb\n\n\n",
        "literal\n---\n...\n# not a comment\n- not an item",
        "0000:18:00.0\n2001-12-14",
    ];
    for s in awkward {
        reads_back(s);
        reads_back(&BTreeMap::from([(s, s)]));
        reads_back(&json!([s, [s], {"k": s}, [{"k": [s]}]]));
    }
}

#[test]
fn long_and_collection_keys_are_explicit() {
    let long = "k".repeat(2000);
    let text = reads_back(&BTreeMap::from([(long.as_str(), "v")]));
    assert!(text.starts_with("? "), "{text}");
    let mut map = yaml_serde::Mapping::new();
    map.insert(yaml_serde::to_value(["a", "yes"]).unwrap(), "list".into());
    map.insert(yaml_serde::to_value(BTreeMap::from([("k", "v")])).unwrap(), nested());
    map.insert(1.into(), "one".into());
    map.insert(true.into(), "true".into());
    reads_back(&map);
}

fn nested() -> yaml_serde::Value {
    yaml_serde::to_value(BTreeMap::from([("inner", vec!["x", "on"])])).unwrap()
}

#[derive(Serialize)]
enum Variant {
    Unit,
    Newtype(String),
    Tuple(u8, String),
    Struct { name: String, values: Vec<u8> },
}

#[test]
fn enum_variants_read_back_with_their_tags() {
    let values = vec![
        Variant::Unit,
        Variant::Newtype("0000:18:00.0".into()),
        Variant::Tuple(1, "no".into()),
        Variant::Struct { name: "n".into(), values: vec![1, 2] },
        Variant::Struct { name: "yes".into(), values: vec![] },
    ];
    let text = reads_back(&values);
    assert!(text.contains("- !Newtype '0000:18:00.0'\n"), "{text}");
    reads_back(&BTreeMap::from([("k", Variant::Tuple(2, "x".into()))]));
    reads_back(&Variant::Struct { name: "top".into(), values: vec![3] });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_string_reads_back(s in any::<String>(), t in "[ -~\n]{0,12}") {
        reads_back(&s);
        reads_back(&t);
        reads_back(&BTreeMap::from([(s.as_str(), t.as_str()), (t.as_str(), s.as_str())]));
        reads_back(&json!([s, {"k": [t, s]}, [[s]]]));
    }

    #[test]
    fn numeric_looking_strings_read_back(s in "[-+]?[0-9._:,eExob]{0,10}") {
        reads_back(&s);
        reads_back(&BTreeMap::from([(s.as_str(), s.as_str())]));
    }
}
