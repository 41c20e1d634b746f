//! What gang each workload kind makes of its pods, read from its spec as the kind's
//! controller creates pods: the defaults a user of that kind expects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{MIN_MEMBER_ANNOTATION, WorkloadKind};

/// What gang a workload's pods form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    /// `members` pods start together (at least `min` of them when set), described by
    /// `parts` ("1 master + 7 workers").
    Gang { members: u32, min: Option<u32>, parts: String },
    /// A LeaderWorkerSet: each of `groups` groups (a leader and `size - 1` workers) is a gang.
    Groups { size: u32, groups: u32 },
    /// Each pod alone (a work-queue Job, a Job of one pod).
    Alone,
    /// The gang is the one of the workload it creates (a TrainJob's JobSet, a RayJob's
    /// RayCluster); it may still set the gang's minimum and queue.
    Child,
    /// Its spec does not read as its kind's: its pods wait, with why.
    Unreadable(String),
}

/// A gang of `members`, or each pod alone when that is one pod and no minimum asks more.
fn gang(members: u32, min: Option<u32>, parts: String) -> Shape {
    if members <= 1 && min.is_none_or(|m| m <= 1) { Shape::Alone } else { Shape::Gang { members, min, parts } }
}

/// An optional non-negative integer field; an error names it.
/// Why a workload's spec does not read as its kind's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{field} is {value}, not a count")]
    NotACount { field: String, value: String },
    #[error("{0} is not a list")]
    NotAList(&'static str),
    #[error("{0} is not a map")]
    NotAMap(String),
}

fn count(value: &Value, field: &str) -> Result<Option<u32>, SpecError> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| SpecError::NotACount { field: field.into(), value: v.to_string() }),
    }
}

fn plural(n: u32, one: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") }
}

/// The workload's gang, from its spec; `meta` for a minimum set on it, which makes a gang
/// of a kind that would leave each pod alone.
pub fn read(kind: WorkloadKind, spec: &Value, meta: &ObjectMeta) -> Shape {
    let read = match kind {
        WorkloadKind::Job => job(spec),
        WorkloadKind::JobSet => job_set(spec),
        WorkloadKind::PyTorchJob => replicas(spec, "pytorchReplicaSpecs"),
        WorkloadKind::TFJob => replicas(spec, "tfReplicaSpecs"),
        WorkloadKind::XGBoostJob => replicas(spec, "xgbReplicaSpecs"),
        WorkloadKind::MPIJob => replicas(spec, "mpiReplicaSpecs"),
        WorkloadKind::TrainJob | WorkloadKind::RayJob => Ok(Shape::Child),
        WorkloadKind::RayCluster => ray_cluster(spec),
        WorkloadKind::LeaderWorkerSet => leader_worker_set(spec),
    };
    let shape = read.unwrap_or_else(|why| Shape::Unreadable(format!("{} spec: {why}", kind.name())));
    let asks = [&meta.annotations, &meta.labels]
        .iter()
        .any(|m| m.as_ref().is_some_and(|m| m.contains_key(MIN_MEMBER_ANNOTATION)));
    match shape {
        // A minimum on a Job that would leave its pods alone: its parallelism is the gang.
        Shape::Alone if asks && kind == WorkloadKind::Job => {
            let p = count(spec, "parallelism").ok().flatten().unwrap_or(1);
            Shape::Gang { members: p, min: None, parts: plural(p, "pod") }
        }
        shape => shape,
    }
}

/// Indexed, or parallel with as many completions as its parallelism: its parallelism
/// (bounded by its completions); otherwise (a work queue) each pod alone.
fn job(spec: &Value) -> Result<Shape, SpecError> {
    let parallelism = count(spec, "parallelism")?.unwrap_or(1);
    let completions = count(spec, "completions")?;
    let indexed = spec.get("completionMode").and_then(Value::as_str) == Some("Indexed");
    Ok(if indexed {
        let members = completions.map_or(parallelism, |c| c.min(parallelism));
        gang(members, None, format!("{} (indexed)", plural(members, "pod")))
    } else if parallelism > 1 && completions == Some(parallelism) {
        gang(parallelism, None, plural(parallelism, "pod"))
    } else {
        Shape::Alone
    })
}

/// Every replicated job's replicas times its pods (its parallelism).
fn job_set(spec: &Value) -> Result<Shape, SpecError> {
    let jobs = spec.get("replicatedJobs").and_then(Value::as_array).ok_or(SpecError::NotAList("replicatedJobs"))?;
    let (mut members, mut parts) = (0u32, Vec::new());
    for job in jobs {
        let name = job.get("name").and_then(Value::as_str).unwrap_or("?");
        let replicas = count(job, "replicas")?.unwrap_or(1);
        let template = job.get("template").and_then(|t| t.get("spec")).unwrap_or(&Value::Null);
        let pods = count(template, "parallelism")?.unwrap_or(1);
        members = members.saturating_add(replicas.saturating_mul(pods));
        parts.push(format!("{name}: {} × {}", plural(replicas, "job"), plural(pods, "pod")));
    }
    Ok(gang(members, None, parts.join(" + ")))
}

/// Kubeflow's training jobs: every replica of every role, or the scheduling policy's
/// `minAvailable`.
fn replicas(spec: &Value, field: &str) -> Result<Shape, SpecError> {
    let roles = spec.get(field).and_then(Value::as_object).ok_or_else(|| SpecError::NotAMap(field.into()))?;
    let mut counted = Vec::with_capacity(roles.len());
    for (role, replica) in roles {
        counted.push((role.to_lowercase(), count(replica, "replicas")?.unwrap_or(1)));
    }
    // The coordinating role first, as people say it: "1 master + 7 workers".
    let first = |r: &str| !matches!(r, "master" | "chief" | "launcher");
    counted.sort_by(|a, b| (first(&a.0), &a.0).cmp(&(first(&b.0), &b.0)));
    let members = counted.iter().map(|(_, n)| n).fold(0u32, |a, n| a.saturating_add(*n));
    let policy = spec.get("runPolicy").and_then(|p| p.get("schedulingPolicy")).unwrap_or(&Value::Null);
    let min = count(policy, "minAvailable")?;
    let parts = counted.iter().map(|(role, n)| plural(*n, role)).collect::<Vec<_>>().join(" + ");
    Ok(gang(members, min, parts))
}

/// The head and the minimum of each worker group (times its hosts).
fn ray_cluster(spec: &Value) -> Result<Shape, SpecError> {
    let mut workers = 0u32;
    for group in spec.get("workerGroupSpecs").and_then(Value::as_array).into_iter().flatten() {
        let min = count(group, "minReplicas")?.unwrap_or(0);
        let hosts = count(group, "numOfHosts")?.unwrap_or(1).max(1);
        workers = workers.saturating_add(min.saturating_mul(hosts));
    }
    let parts = format!("1 head + {} (minimum)", plural(workers, "worker"));
    Ok(gang(workers.saturating_add(1), None, parts))
}

fn leader_worker_set(spec: &Value) -> Result<Shape, SpecError> {
    let template = spec.get("leaderWorkerTemplate").unwrap_or(&Value::Null);
    let size = count(template, "size")?.unwrap_or(1).max(1);
    Ok(Shape::Groups { size, groups: count(spec, "replicas")?.unwrap_or(1) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shape(kind: WorkloadKind, spec: Value) -> Shape {
        read(kind, &spec, &ObjectMeta::default())
    }

    fn members(shape: &Shape) -> (u32, Option<u32>, &str) {
        match shape {
            Shape::Gang { members, min, parts } => (*members, *min, parts),
            other => panic!("not a gang: {other:?}"),
        }
    }

    #[test]
    fn a_jobs_gang_is_its_parallelism_when_indexed_or_complete_at_once_and_none_for_a_work_queue() {
        let indexed =
            shape(WorkloadKind::Job, json!({"parallelism": 8, "completions": 8, "completionMode": "Indexed"}));
        assert_eq!(members(&indexed), (8, None, "8 pods (indexed)"));
        let bounded =
            shape(WorkloadKind::Job, json!({"parallelism": 8, "completions": 3, "completionMode": "Indexed"}));
        assert_eq!(members(&bounded).0, 3, "never more than its completions at once");
        assert_eq!(members(&shape(WorkloadKind::Job, json!({"parallelism": 4, "completions": 4}))).0, 4);
        assert_eq!(shape(WorkloadKind::Job, json!({"parallelism": 4})), Shape::Alone, "a work queue");
        assert_eq!(shape(WorkloadKind::Job, json!({"parallelism": 4, "completions": 20})), Shape::Alone);
        assert_eq!(shape(WorkloadKind::Job, json!({})), Shape::Alone, "one pod");
        let asked = ObjectMeta {
            annotations: Some([(MIN_MEMBER_ANNOTATION.to_string(), "4".to_string())].into()),
            ..Default::default()
        };
        let work_queue = read(WorkloadKind::Job, &json!({"parallelism": 8}), &asked);
        assert_eq!(members(&work_queue).0, 8, "a minimum on it makes its parallelism a gang");
    }

    #[test]
    fn a_jobsets_gang_is_every_replicated_jobs_pods() {
        let spec = json!({"replicatedJobs": [
            {"name": "driver", "template": {"spec": {"parallelism": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}},
        ]});
        assert_eq!(
            members(&shape(WorkloadKind::JobSet, spec)),
            (9, None, "driver: 1 job × 1 pod + workers: 2 jobs × 4 pods")
        );
    }

    #[test]
    fn a_training_jobs_gang_is_every_replica_or_its_min_available() {
        let spec = json!({"pytorchReplicaSpecs": {"Worker": {"replicas": 7}, "Master": {"replicas": 1}}});
        assert_eq!(members(&shape(WorkloadKind::PyTorchJob, spec)), (8, None, "1 master + 7 workers"));
        let spec = json!({"mpiReplicaSpecs": {"Launcher": {}, "Worker": {"replicas": 4}},
                          "runPolicy": {"schedulingPolicy": {"minAvailable": 3}}});
        assert_eq!(members(&shape(WorkloadKind::MPIJob, spec)), (5, Some(3), "1 launcher + 4 workers"));
        let bad = shape(WorkloadKind::TFJob, json!({"tfReplicaSpecs": {"Worker": {"replicas": "many"}}}));
        assert!(matches!(&bad, Shape::Unreadable(why) if why.contains("TFJob spec: replicas is \"many\"")), "{bad:?}");
    }

    #[test]
    fn a_ray_clusters_gang_is_its_head_and_each_groups_minimum() {
        let spec = json!({"headGroupSpec": {}, "workerGroupSpecs": [
            {"groupName": "a", "minReplicas": 2, "replicas": 4},
            {"groupName": "b", "minReplicas": 1, "numOfHosts": 2},
        ]});
        assert_eq!(members(&shape(WorkloadKind::RayCluster, spec)), (5, None, "1 head + 4 workers (minimum)"));
        assert_eq!(shape(WorkloadKind::RayJob, json!({})), Shape::Child);
        assert_eq!(shape(WorkloadKind::TrainJob, json!({})), Shape::Child);
    }

    #[test]
    fn a_leader_worker_set_makes_one_gang_per_group() {
        let spec = json!({"replicas": 2, "leaderWorkerTemplate": {"size": 4}});
        assert_eq!(shape(WorkloadKind::LeaderWorkerSet, spec), Shape::Groups { size: 4, groups: 2 });
    }
}
