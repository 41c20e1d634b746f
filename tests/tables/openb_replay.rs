//! `muster simulate --openb DIR` on a small trace in the openb format: pods arrive once,
//! never leave, are skipped when they do not fit, and the report gives the share of GPUs
//! allocated at 100% and 130% of arrived requests beside published results found next to
//! the trace.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn write_trace(dir: &Path, pods: &[(u32, u32)]) {
    let csv = dir.join("csv");
    std::fs::create_dir_all(&csv).unwrap();
    std::fs::write(
        csv.join("openb_node_list_gpu_node.csv"),
        "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,T4\nn-1,64000,262144,2,T4\n",
    )
    .unwrap();
    let mut text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n".to_string();
    for (i, (gpus, milli)) in pods.iter().enumerate() {
        text.push_str(&format!("p-{i:04},1000,1024,{gpus},{milli},,LS,Running,{i},100000,{i}\n"));
    }
    std::fs::write(csv.join("openb_pod_list_default.csv"), text).unwrap();
    let published = dir.join("published_results");
    std::fs::create_dir_all(&published).unwrap();
    let columns: Vec<String> = (0..=130).map(|c| c.to_string()).collect();
    let values: Vec<String> = (0..=130).map(|c| format!("{}.5", c.min(90))).collect();
    std::fs::write(
        published.join("analysis_allo_discrete.csv"),
        format!(
            "workload,sc_policy,tune,seed,total_gpus,{}\nopenb_pod_list_default,05-BestFit,1.3,42,4,{}\n",
            columns.join(","),
            values.join(",")
        ),
    )
    .unwrap();
}

fn replay(dir: &Path) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["simulate", "--openb", dir.to_str().unwrap(), "--seeds", "1-2", "--output", "json"])
        .output()
        .expect("muster runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("muster-openb-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

#[test]
fn halves_fill_every_gpu_and_the_pods_beyond_capacity_are_skipped() {
    let dir = scratch("halves");
    // Eight halves ask for the cluster's four GPUs; more are drawn up to 130% (5.2 GPUs).
    write_trace(&dir, &[(1, 500); 8]);
    let report = replay(&dir);
    assert_eq!(report["gpus"], 4);
    for seed in report["perSeed"].as_array().unwrap() {
        assert_eq!(seed["arrivals"], 10, "{seed}");
        assert_eq!(seed["placed"], 8, "two halves to a GPU: {seed}");
        assert_eq!(seed["skipped"], 2, "{seed}");
        assert_eq!(seed["allocatedAt100"], 100.0, "{seed}");
        assert_eq!(seed["allocatedAt130"], 100.0, "{seed}");
    }
    assert_eq!(report["muster"]["allocatedAt130"], 100.0);
    // The published figures found beside the trace, seed means per policy.
    let published = &report["published"][0];
    assert_eq!(published["policy"], "05-BestFit");
    assert_eq!(published["allocatedAt130"], 90.5);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_whole_gpu_pod_finds_a_whole_gpu_because_shares_were_packed() {
    let dir = scratch("packing");
    // Two halves, then two whole GPUs, then a second pair of halves: packed two to a GPU,
    // the halves leave three GPUs whole, and all six pods fit on the four GPUs.
    write_trace(&dir, &[(1, 500), (1, 500), (1, 1000), (1, 1000), (1, 500), (1, 500)]);
    let report = replay(&dir);
    for seed in report["perSeed"].as_array().unwrap() {
        assert_eq!(seed["allocatedAt100"], 100.0, "{seed}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
