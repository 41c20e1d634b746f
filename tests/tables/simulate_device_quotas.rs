//! `muster simulate` with quota keys on devices: `deviceclass/<class>` (GPUs of one kind)
//! and `memory.deviceclass/<class>` (GPU memory), charged on the device actually
//! allocated, estimated conservatively for pods still pending, and reclaimed whole.

use std::process::Command;

use serde_json::{Value, json};

use crate::simulated::{fixture, pod, simulate};

fn figures<'a>(report: &'a Value, queue: &str, key: &str) -> &'a Value {
    let queues = report["queues"].as_array().unwrap();
    &queues.iter().find(|q| q["name"] == queue).unwrap_or_else(|| panic!("no queue {queue}"))["resources"][key]
}

const H100: &str = "deviceclass/h100.gpu.nvidia.com";
const GPU_MEMORY: &str = "memory.deviceclass/gpu.nvidia.com";

#[test]
fn a_limit_per_gpu_type_admits_one_h100_and_the_second_pod_waits_naming_the_key() {
    let report = simulate(&fixture("device-quotas.yaml"));
    assert_eq!(pod(&report, "a-big-1")["node"], "node-h");
    assert_eq!(pod(&report, "a-big-2")["node"], Value::Null);
    let reason = pod(&report, "a-big-2")["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        "queue team-a would exceed its limit of 1 deviceclass/h100.gpu.nvidia.com (1 allocated, the gang needs 1)"
    );
    // The second H100 stays free: the limit, not the cluster, holds the pod back.
    assert_eq!(figures(&report, "team-a", H100)["allocated"], "1");
}

#[test]
fn a_gpu_memory_limit_counts_the_memory_of_the_devices_allocated() {
    let report = simulate(&fixture("device-quotas.yaml"));
    assert_eq!(pod(&report, "b-small-1")["node"], "node-a");
    assert_eq!(pod(&report, "b-small-2")["node"], "node-a");
    assert_eq!(pod(&report, "b-small-3")["node"], Value::Null);
    assert_eq!(
        pod(&report, "b-small-3")["reason"],
        "queue team-b would exceed its limit of 100Gi memory.deviceclass/gpu.nvidia.com (80Gi allocated, the gang needs 40Gi)"
    );
    assert_eq!(
        figures(&report, "team-b", GPU_MEMORY),
        &json!({"quota": "0", "limit": "100Gi", "fairShare": "100Gi", "allocated": "80Gi", "requested": "40Gi"})
    );
}

#[test]
fn a_pod_that_could_have_taken_an_h100_is_charged_none_once_it_holds_an_a100() {
    let report = simulate(&fixture("device-quotas.yaml"));
    let c = pod(&report, "c-any");
    assert_eq!(c["node"], "node-a");
    assert_eq!(c["devices"][0]["pool"], "node-a");
    assert_eq!(figures(&report, "team-c", H100)["allocated"], "0");
    // The class exists: nothing to note.
    assert!(report.get("notes").is_none(), "{report}");
}

#[test]
fn a_queue_within_its_h100_quota_reclaims_the_newest_h100_borrowed_by_another_team() {
    let report = simulate(&fixture("device-quota-reclaim.yaml"));
    let evictions = report["evictions"].as_array().unwrap();
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    assert_eq!(
        evictions[0],
        json!({"namespace": "ml", "name": "a-2", "gang": "ml/a-2", "reason": "Reclaimed", "preemptor": "ml/b-1", "cycle": 1})
    );
    // b-1 gets the H100 a-2 held; a-2, made again by its controller, takes an A100 (its
    // claim asks for any GPU) and team-a keeps the H100 of its older pod.
    let b = pod(&report, "b-1");
    assert_eq!((b["node"].as_str(), b["devices"][0]["device"].as_str()), (Some("node-h"), Some("gpu-1")));
    assert_eq!(pod(&report, "a-2")["node"], "node-a");
    assert_eq!(pod(&report, "a-1")["node"], "node-h");
    assert_eq!(figures(&report, "team-a", H100)["allocated"], "1");
    assert_eq!(figures(&report, "team-b", H100)["allocated"], "1");
}

#[test]
fn a_key_whose_device_class_does_not_exist_counts_nothing_and_says_so() {
    let text = std::fs::read_to_string(fixture("device-quotas.yaml")).unwrap().replace(
        "deviceclass/h100.gpu.nvidia.com: {quota: \"0\", limit: \"1\"}",
        "deviceclass/h200.gpu.nvidia.com: {quota: \"0\", limit: \"1\"}",
    );
    let dir = std::env::temp_dir().join(format!("muster-devq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("missing-class.yaml");
    std::fs::write(&path, text).unwrap();
    let report = simulate(&path);
    // Nothing is an H200: team-a's limit holds nobody back, and the note names the class.
    assert_eq!(pod(&report, "a-big-1")["node"], "node-h");
    assert_eq!(pod(&report, "a-big-2")["node"], "node-h");
    assert_eq!(
        report["notes"],
        json!(["quota key on devices: device class h200.gpu.nvidia.com does not exist; it counts none"])
    );
}

#[test]
fn a_share_of_a_gpu_charges_the_memory_it_consumes_as_the_device_rounds_it() {
    let report = simulate(&fixture("device-quota-shared.yaml"));
    assert_eq!(pod(&report, "notebook-1")["node"], "node-s");
    assert_eq!(pod(&report, "notebook-2")["node"], "node-s");
    // Asked 15Gi each, consumed 20Gi each (the device's step): 40Gi of 50Gi, no room for 20Gi more.
    assert_eq!(
        pod(&report, "notebook-3")["reason"],
        "queue team-n would exceed its limit of 50Gi memory.deviceclass/gpu.nvidia.com (40Gi allocated, the gang needs 20Gi)"
    );
    assert_eq!(figures(&report, "team-n", GPU_MEMORY)["allocated"], "40Gi");
}

#[test]
fn a_device_freed_beyond_the_gangs_need_stays_with_the_exiting_pod_in_the_cycle_of_the_eviction() {
    let path = fixture("device-reclaim-leftover.yaml");
    let first = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["simulate", "--output", "json", "--cycles", "1", "--cluster", path.to_str().unwrap()])
        .output()
        .expect("muster runs");
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let first: Value = serde_json::from_slice(&first.stdout).unwrap();
    // a-1 still holds both GPUs while it exits: c-1 gets neither in this cycle.
    assert_eq!(first["evictions"][0]["preemptor"], "ml/b-1");
    assert_eq!(pod(&first, "c-1")["node"], Value::Null);
    assert!(pod(&first, "c-1")["reason"].as_str().unwrap().contains("0 of 2 devices"), "{first}");
    // Once it is gone, b-1 takes the GPU freed for it and c-1 the other.
    let last = simulate(&path);
    assert_eq!(pod(&last, "b-1")["node"], "node-h");
    assert_eq!(pod(&last, "c-1")["node"], "node-h");
    assert_eq!(last["evictions"].as_array().unwrap().len(), 1);
}
