//! Node labels as GPU feature discovery writes them, for clusters that still schedule on
//! `nvidia.com/gpu` and node selectors.

use std::collections::BTreeMap;

use super::gpu::Gpu;

/// The label GPU feature discovery keeps on the nodes it labels; where it is, the agent
/// leaves the GPU labels to it.
pub const GFD_MARKER: &str = "nvidia.com/gfd.timestamp";

/// Every label the agent manages; the ones a node's GPUs do not call for are removed.
pub const MANAGED: &[&str] = &[
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.family",
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
];

/// The labels for a node's GPUs: product and memory (MiB) of the first GPU, as GPU feature
/// discovery does, and the count. `None` for a label to remove.
pub fn node_labels(gpus: &[Gpu]) -> BTreeMap<String, Option<String>> {
    let mut labels: BTreeMap<String, Option<String>> = MANAGED.iter().map(|k| (k.to_string(), None)).collect();
    let Some(first) = gpus.first() else { return labels };
    let (major, minor) = first.cuda_compute_capability.split_once('.').unwrap_or((&first.cuda_compute_capability, "0"));
    let values = [
        ("nvidia.com/gpu.product", label_value(&first.product_name)),
        ("nvidia.com/gpu.memory", (first.memory_bytes >> 20).to_string()),
        ("nvidia.com/gpu.count", gpus.len().to_string()),
        ("nvidia.com/gpu.family", label_value(&first.architecture.to_ascii_lowercase())),
        ("nvidia.com/gpu.compute.major", label_value(major)),
        ("nvidia.com/gpu.compute.minor", label_value(minor)),
    ];
    for (key, value) in values {
        if !value.is_empty() {
            labels.insert(key.to_string(), Some(value));
        }
    }
    labels
}

/// A label value: spaces become dashes ("NVIDIA-H100-80GB-HBM3"), other characters a label
/// may not hold are dropped, at most 63 characters, alphanumeric at both ends.
pub fn label_value(text: &str) -> String {
    let mut value: String = text
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') => Some(c),
            _ => None,
        })
        .collect();
    value.truncate(63);
    value.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string()
}
