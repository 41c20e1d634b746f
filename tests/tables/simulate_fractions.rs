//! `muster simulate` with GPU fractions written as KAI Scheduler's users write them
//! (`gpu-fraction`, `gpu-memory`, `gpu-fraction-num-devices`), served as shares of GPUs
//! that allow several allocations, packed onto partly shared GPUs first.

use serde_json::Value;

use crate::simulated::{fixture, pod, simulate};

/// The (node, device, memory consumed in MiB) of each device the pod holds.
fn shares(report: &Value, name: &str) -> Vec<(String, String, i64)> {
    let pod = pod(report, name);
    pod["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let bytes: i64 = d["consumed"]["memory"].as_str().expect("a share names its memory").parse().unwrap();
            (pod["node"].as_str().unwrap().to_string(), d["device"].as_str().unwrap().to_string(), bytes >> 20)
        })
        .collect()
}

/// The pod is not placed, and its reason says `words`.
fn waits_saying(report: &Value, name: &str, words: &str) {
    let pod = pod(report, name);
    assert_eq!(pod["node"], Value::Null, "{pod}");
    let reason = pod["reason"].as_str().unwrap();
    assert!(reason.contains(words), "{reason}");
}

#[test]
fn four_quarters_share_one_gpu_and_a_fifth_opens_a_second() {
    let report = simulate(&fixture("gpu-fractions.yaml"));
    let quarters: Vec<_> = (1..=4).map(|i| shares(&report, &format!("quarter-{i}"))).collect();
    for held in &quarters {
        assert_eq!(held.len(), 1, "one GPU each: {held:?}");
        // A quarter of 81,559 MiB, rounded down to the device's 1Gi steps: 19Gi.
        assert_eq!(held[0].2, 19 * 1024);
        assert_eq!((&held[0].0, &held[0].1), (&quarters[0][0].0, &quarters[0][0].1), "all on one GPU");
    }
    let fifth = shares(&report, "quarter-5");
    assert_eq!(fifth.len(), 1);
    assert_ne!((&fifth[0].0, &fifth[0].1), (&quarters[0][0].0, &quarters[0][0].1), "the full GPU is not used");
    assert_eq!(fifth[0].2, 19 * 1024);
}

#[test]
fn a_fraction_of_several_gpus_takes_a_share_of_each() {
    let report = simulate(&fixture("gpu-fractions.yaml"));
    let held = shares(&report, "two-halves");
    assert_eq!(held.len(), 2, "{held:?}");
    assert_ne!(held[0].1, held[1].1, "two different GPUs");
    assert!(held.iter().all(|(node, _, mib)| node == "node-b" && *mib == 39 * 1024), "{held:?}");
}

#[test]
fn gpu_memory_beyond_every_gpu_waits_saying_so() {
    let report = simulate(&fixture("gpu-fractions.yaml"));
    waits_saying(
        &report,
        "too-big",
        "gpu-memory asks for 200000 MiB of one GPU, more than any shareable GPU can give (the largest has 81559 MiB)",
    );
}

#[test]
fn an_annotation_that_is_no_fraction_waits_naming_it() {
    let report = simulate(&fixture("gpu-fractions.yaml"));
    waits_saying(&report, "misspelt", r#"annotation gpu-fraction: "half" is not a number above 0 and at most 1"#);
}

#[test]
fn without_a_shareable_gpu_a_fraction_waits_saying_so() {
    // The same cluster with GPUs that do not allow several allocations.
    let text = std::fs::read_to_string(fixture("gpu-fractions.yaml")).unwrap();
    let exclusive = text.replace("allowMultipleAllocations: true", "allowMultipleAllocations: false");
    let dir = std::env::temp_dir().join(format!("muster-fractions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("exclusive.yaml");
    std::fs::write(&path, exclusive).unwrap();
    let report = simulate(&path);
    waits_saying(&report, "quarter-1", "a GPU fraction needs a GPU that allows several allocations");
    std::fs::remove_dir_all(&dir).ok();
}

/// A queue's figures for `nvidia.com/gpu` in the report.
fn gpu_figures<'a>(report: &'a Value, queue: &str) -> &'a Value {
    let queues = report["queues"].as_array().unwrap();
    let found = queues.iter().find(|q| q["name"] == queue).unwrap_or_else(|| panic!("no queue {queue}"));
    &found["resources"]["nvidia.com/gpu"]
}

#[test]
fn queues_count_fractions_of_gpus_two_halves_are_one() {
    let report = simulate(&fixture("gpu-fraction-quota.yaml"));
    for name in ["half-1", "half-2"] {
        assert_eq!(shares(&report, name).len(), 1, "{name} runs on a share");
    }
    let notebooks = gpu_figures(&report, "notebooks");
    assert_eq!(notebooks["allocated"], "1", "two halves are one GPU: {notebooks}");
    assert_eq!(notebooks["quota"], "1", "{notebooks}");
    // A third half would take the queue to 1.5 GPUs, past its limit of 1.
    waits_saying(&report, "half-3", "limit");
    assert_eq!(notebooks["requested"], "0.5", "{notebooks}");
    // gpu-memory counts the part of the GPU it holds: 20Gi of 81,559 MiB, rounded up.
    let labs = gpu_figures(&report, "labs");
    assert_eq!((labs["allocated"].as_str(), labs["quota"].as_str()), (Some("0.252"), Some("0.5")), "{labs}");
}
