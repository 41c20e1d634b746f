//! KAI Scheduler's Queue read as an engine queue spec (QUEUES.md §3.2), losslessly: GPUs
//! in thousandths (a quota of 0.5 is half a GPU, as in KAI), CPU in millicores, memory
//! in MB (10^6 bytes); quota -1 is unlimited; limit -1 or unset is no limit, and limit 0
//! allows nothing, as in KAI.

use crate::api::kai::{KaiResource, Queue};
use crate::config::parse_duration;
use crate::convert::groups::created;
use crate::engine::queues::{DEFAULT_PRIORITY, GPU_MILLI, GPU_RESOURCE, QueueSpec, ResourceRule};
use crate::engine::resources::{ResourceId, ResourceNames};

/// A KAI queue as an engine queue spec. KAI's `limit: 0` (nothing may be allocated) is
/// kept, and said in `notes`.
pub fn kai_queue_spec(queue: &Queue, names: &mut ResourceNames) -> QueueSpec {
    let mut spec = QueueSpec::new(queue.metadata.name.as_deref().unwrap_or_default());
    spec.parent = queue.spec.parent_queue.clone().filter(|p| !p.is_empty());
    spec.priority = queue.spec.priority.unwrap_or(DEFAULT_PRIORITY);
    spec.created = created(&queue.metadata);
    spec.origin = Some("KAI Scheduler's scheduling.run.ai/v2 Queue".into());
    let mut problems = Vec::new();
    if let Some(resources) = &queue.spec.resources {
        // GPUs in thousandths, CPU in millicores (the engine's units), memory in MB.
        let keys: [(&str, &Option<KaiResource>, f64); 3] = [
            (GPU_RESOURCE, &resources.gpu, GPU_MILLI as f64),
            ("cpu", &resources.cpu, 1.0),
            ("memory", &resources.memory, 1_000_000.0),
        ];
        for (key, resource, unit) in keys {
            let Some(r) = resource else { continue };
            let id: ResourceId = names.intern(key);
            let amount = |v: f64| (v * unit).ceil() as i64;
            let weight = r.over_quota_weight.unwrap_or(1.0);
            if weight < 0.0 {
                problems.push(format!("resources.{}.overQuotaWeight is negative", short(key)));
            }
            let quota = match r.quota {
                Some(q) if q < 0.0 => None,
                Some(q) => Some(amount(q)),
                None => Some(0),
            };
            let limit = match r.limit {
                Some(l) if l < 0.0 => None,
                Some(l) => Some(amount(l)),
                None => None,
            };
            if limit == Some(0) {
                spec.notes
                    .push(format!("{key}: limit 0 allows nothing, as in KAI (set -1 or leave it out for no limit)"));
            }
            let rule = ResourceRule {
                quota,
                weight_milli: (weight.max(0.0) * 1000.0).round() as u64,
                limit,
                lending_limit: None,
            };
            spec.resources.push((id, rule));
        }
    }
    for (field, text) in
        [("reclaimMinRuntime", &queue.spec.reclaim_min_runtime), ("preemptMinRuntime", &queue.spec.preempt_min_runtime)]
    {
        let Some(text) = text else { continue };
        match parse_duration(text) {
            Ok(seconds) if field == "reclaimMinRuntime" => spec.preemption.reclaim_min_runtime = Some(seconds),
            Ok(seconds) => spec.preemption.preempt_min_runtime = Some(seconds),
            Err(why) => problems.push(format!("{field}: {why}")),
        }
    }
    if !problems.is_empty() {
        spec.problem = Some(problems.join("; "));
    }
    spec
}

fn short(key: &str) -> &str {
    key.strip_prefix("nvidia.com/").unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(yaml: &str) -> Queue {
        yaml_serde::from_str(yaml).unwrap()
    }

    #[test]
    fn a_kai_queue_keeps_its_quotas_weights_limits_and_runtimes() {
        let q = queue(
            "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  parentQueue: org\n  priority: 150\n  reclaimMinRuntime: 10m\n  resources:\n    gpu: {quota: 2.5, overQuotaWeight: 2, limit: -1}\n    cpu: {quota: 4000, limit: 8000}\n    memory: {quota: 4096, limit: 0}\n",
        );
        let mut names = ResourceNames::default();
        let spec = kai_queue_spec(&q, &mut names);
        assert_eq!((spec.parent.as_deref(), spec.priority, spec.problem.as_deref()), (Some("org"), 150, None));
        let rule = |key: &str| spec.resources.iter().find(|(id, _)| names.name(*id) == key).unwrap().1;
        let gpu = rule("nvidia.com/gpu");
        assert_eq!((gpu.quota, gpu.weight_milli, gpu.limit), (Some(2500), 2000, None));
        assert_eq!((rule("cpu").quota, rule("cpu").limit), (Some(4000), Some(8000)));
        assert_eq!((rule("memory").quota, rule("memory").limit), (Some(4_096_000_000), Some(0)));
        assert_eq!(spec.preemption.reclaim_min_runtime, Some(600));
        assert_eq!(spec.notes, ["memory: limit 0 allows nothing, as in KAI (set -1 or leave it out for no limit)"]);
    }

    #[test]
    fn an_unlimited_kai_quota_is_imported_as_unlimited() {
        let q = queue(
            "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: all}\nspec:\n  resources:\n    gpu: {quota: -1}\n",
        );
        let mut names = ResourceNames::default();
        assert_eq!(kai_queue_spec(&q, &mut names).resources[0].1.quota, None);
    }
}
