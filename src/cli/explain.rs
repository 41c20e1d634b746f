//! `muster explain`: why a pod or a PodGroup waits, in the words its events carry, and the
//! placement that comes nearest to fitting ("rack r3 has 14 of the 16 GPUs needed").
//!
//! The cluster is read once; the snapshot is assembled and scheduled by the very code the
//! scheduler runs (`assemble` and the engine), so the answer is the scheduler's own.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use thiserror::Error;

use crate::config::Config;
use crate::convert::assemble::{ClusterObjects, assemble, gang_key};
use crate::convert::workloads::resolve::pod_spec;
use crate::convert::workloads::{Workload, WorkloadKind};
use crate::engine::model::{GangKey, GangKind, NodeIdx, Snapshot};
use crate::engine::schedule;

#[derive(Debug, Error)]
pub enum Error {
    #[error(
        "unknown resource {0:?}: use pod, podgroup (podgroups.muster.dev, podgroups.scheduling.k8s.io, podgroups.scheduling.x-k8s.io) or queue"
    )]
    UnknownResource(String),
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("failed to read {what} from the API server: {source}")]
    Read { what: String, source: kube::Error },
    #[error(transparent)]
    Discovery(#[from] crate::k8s::store::discovery::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to explain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Pod {
        namespace: String,
        name: String,
    },
    /// A PodGroup; `kind` None: whichever kind has one of that name (Kubernetes', then
    /// Muster's, then scheduler-plugins', the order gangs are read in).
    PodGroup {
        kind: Option<GangKind>,
        namespace: String,
        name: String,
    },
    /// A Muster Queue (cluster-scoped).
    Queue {
        name: String,
    },
}

/// Reads a resource name as kubectl does: `pod`/`pods`/`po`; `podgroup`/`podgroups`/`pg`
/// (any kind), `mpg` or `podgroups.muster.dev` (Muster's), `podgroups.scheduling.k8s.io`,
/// `podgroups.scheduling.x-k8s.io`, `podgroups.scheduling.run.ai`.
pub fn target(resource: &str, namespace: &str, name: &str) -> Result<Target> {
    let resource = resource.to_ascii_lowercase();
    let (plural, group) = resource.split_once('.').map_or((resource.as_str(), None), |(p, g)| (p, Some(g)));
    let (namespace, name) = (namespace.to_string(), name.to_string());
    match (plural, group) {
        ("pod" | "pods" | "po", None | Some("")) => Ok(Target::Pod { namespace, name }),
        ("mpg", None) => Ok(Target::PodGroup { kind: Some(GangKind::Muster), namespace, name }),
        ("queue" | "queues" | "mq", None) | ("queue" | "queues", Some("muster.dev")) => Ok(Target::Queue { name }),
        ("podgroup" | "podgroups" | "pg", group) => {
            let kind = match group {
                None => None,
                Some("muster.dev") | Some("v1alpha1.muster.dev") => Some(GangKind::Muster),
                Some("scheduling.k8s.io") | Some("v1beta1.scheduling.k8s.io") => Some(GangKind::Kubernetes),
                Some("scheduling.x-k8s.io") | Some("v1alpha1.scheduling.x-k8s.io") => Some(GangKind::SchedulerPlugins),
                Some("scheduling.run.ai") | Some("v2alpha2.scheduling.run.ai") => Some(GangKind::Kai),
                Some(_) => return Err(Error::UnknownResource(resource.clone())),
            };
            Ok(Target::PodGroup { kind, namespace, name })
        }
        _ => Err(Error::UnknownResource(resource.clone())),
    }
}

async fn list<K>(api: Api<K>, what: &str) -> Result<Vec<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|source| Error::Read { what: what.to_string(), source })
}

/// Reads every object a snapshot is made of, once, from the API server.
pub async fn read_cluster(client: &kube::Client, config: &Config) -> Result<ClusterObjects> {
    let retry = crate::k8s::client::request::Retry::new(std::time::Duration::from_secs(config.request_timeout_seconds));
    let sources = crate::k8s::store::discovery::imported(
        crate::k8s::store::discovery::discover(client, retry).await?,
        &config.queues,
    );
    let mut objects = ClusterObjects { kueue_imported: sources.kueue_imported, ..Default::default() };
    for read in crate::k8s::store::reads::reads(&sources) {
        read.list(client, &mut objects).await.map_err(|source| Error::Read { what: read.name(), source })?;
    }
    for (kind, version) in sources.workloads() {
        objects.workloads.extend(list_workloads(client, kind, version).await?);
    }
    let read: std::collections::BTreeSet<_> = sources.workloads().map(|(kind, _)| kind).collect();
    crate::convert::workloads::resolve::mark_all(&mut objects.pods, &objects.workloads, read);
    // Only the nodes this scheduler manages, as its cache keeps them.
    objects.nodes.retain(|node| {
        let labels = node.metadata.labels.as_ref();
        config.node_selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    });
    Ok(objects)
}

/// Every workload of `kind`, as the cache keeps them.
async fn list_workloads(client: &kube::Client, kind: WorkloadKind, version: &str) -> Result<Vec<Workload>> {
    let what = format!("{}.{}", kind.plural(), kind.api().0);
    let listed =
        list(Api::<kube::api::DynamicObject>::all_with(client.clone(), &kind.api_resource(version)), &what).await?;
    Ok(listed.iter().filter_map(|o| serde_json::to_value(o).ok().and_then(|v| Workload::read(kind, &v).ok())).collect())
}

/// Reads the cluster and explains `target`.
pub async fn explain(client: &kube::Client, config: &Config, target: &Target) -> Result<String> {
    let objects = read_cluster(client, config).await?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    explain_objects(&objects, config, target, now)
}

fn kind_name(kind: GangKind) -> &'static str {
    match kind {
        GangKind::Kubernetes => "podgroups.scheduling.k8s.io",
        GangKind::Muster => "podgroups.muster.dev",
        GangKind::SchedulerPlugins => "podgroups.scheduling.x-k8s.io",
        GangKind::Kai => "podgroups.scheduling.run.ai",
        GangKind::Single => "pod",
        GangKind::Workload => "no PodGroup",
    }
}

/// Explains `target` over objects already read: pure, for tests and the command alike.
pub fn explain_objects(objects: &ClusterObjects, config: &Config, target: &Target, now: i64) -> Result<String> {
    let ours = |pod: &Pod| pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(&config.scheduler_name);
    let named = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, ns: &str, name: &str| {
        meta.namespace.as_deref() == Some(ns) && meta.name.as_deref() == Some(name)
    };
    let mut out = String::new();
    let gang = match target {
        Target::Queue { name } => {
            return super::explain_queue::explain_queue(objects, config, name, now)
                .ok_or_else(|| Error::NotFound { what: format!("queue {name}") });
        }
        Target::Pod { namespace, name } => {
            let pod = objects
                .pods
                .iter()
                .find(|p| named(&p.metadata, namespace, name))
                .ok_or_else(|| Error::NotFound { what: format!("pod {namespace}/{name}") })?;
            if !ours(pod) {
                let theirs = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler");
                return Ok(format!(
                    "pod {namespace}/{name} is not Muster's: its schedulerName is {theirs:?}, not {:?}\n",
                    config.scheduler_name
                ));
            }
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
                writeln!(out, "pod {namespace}/{name} is bound to node {node} (phase {phase}).").ok();
            }
            gang_key(pod)
        }
        Target::PodGroup { kind, namespace, name } => {
            let found = |k: GangKind| match k {
                GangKind::Kubernetes => objects.kubernetes_groups.iter().any(|g| named(&g.metadata, namespace, name)),
                GangKind::Muster => objects.muster_groups.iter().any(|g| named(&g.metadata, namespace, name)),
                GangKind::SchedulerPlugins => objects.plugin_groups.iter().any(|g| named(&g.metadata, namespace, name)),
                GangKind::Kai => objects.kai_groups.iter().any(|g| named(&g.metadata, namespace, name)),
                GangKind::Single | GangKind::Workload => false,
            };
            let kinds = [GangKind::Kubernetes, GangKind::Muster, GangKind::SchedulerPlugins, GangKind::Kai];
            let candidates: Vec<GangKind> = kinds.into_iter().filter(|k| kind.is_none_or(|want| want == *k)).collect();
            let Some(&chosen) = candidates.iter().find(|k| found(**k)) else {
                let what = kind.map_or("podgroup", kind_name);
                return Err(Error::NotFound { what: format!("{what} {namespace}/{name}") });
            };
            let others: Vec<&str> =
                candidates.iter().filter(|k| **k != chosen && found(**k)).map(|k| kind_name(*k)).collect();
            if !others.is_empty() {
                writeln!(
                    out,
                    "note: {} also exist(s) with this name; showing {} (name the resource to choose)",
                    others.join(", "),
                    kind_name(chosen)
                )
                .ok();
            }
            GangKey { kind: chosen, namespace: namespace.clone(), name: name.clone() }
        }
    };

    let assembled = assemble(objects, config, now);
    if let Target::Pod { namespace, name } = target {
        let key = crate::engine::model::PodKey { namespace: namespace.clone(), name: name.clone() };
        if let Some(rejected) = assembled.rejected_pods.get(&key) {
            writeln!(out, "pod {key} cannot be scheduled: {}", rejected.why).ok();
            return Ok(out);
        }
    }
    let group = assembled.groups.iter().find(|g| g.key == gang);
    if gang.kind == GangKind::Workload {
        let members: Vec<&Pod> = objects.pods.iter().filter(|p| ours(p) && gang_key(p) == gang).collect();
        let spec = assembled.specs.get(&gang).cloned().or_else(|| pod_spec(&gang, &members));
        match spec.as_ref().and_then(|s| s.source.as_deref().map(|source| (s.min_member, source))) {
            Some((min, source)) => writeln!(out, "gang of {min} from {source}").ok(),
            None => writeln!(out, "{gang} is not read yet; its pods wait for it.").ok(),
        };
    }
    if let Some(group) = group {
        writeln!(
            out,
            "{gang} ({}): {} of its {} minMember pods bound.",
            kind_name(gang.kind),
            group.bound,
            group.min_member
        )
        .ok();
    }
    let Some(pending) = assembled.snapshot.gangs.iter().find(|g| g.key == gang) else {
        if out.is_empty() || group.is_some() {
            writeln!(out, "{gang} has no pod waiting for a node.").ok();
        }
        return Ok(out);
    };
    let outcome = schedule(&assembled.snapshot, &config.cycle());
    if let Some(placement) = outcome.placements.iter().find(|p| p.gang == gang) {
        writeln!(
            out,
            "{gang} fits now: {} pod(s) would be placed, on {}. The scheduler binds it in its next cycle; if it stays pending, check that a scheduler named {:?} is running and leading.",
            placement.pods.len(),
            nodes_of(&assembled.snapshot, placement.pods.iter().map(|(_, n)| *n)),
            config.scheduler_name
        )
        .ok();
        return Ok(out);
    }
    if let Some(waiting) = outcome.waiting.iter().find(|w| w.gang == gang) {
        writeln!(out, "It waits: {waiting}").ok();
    }
    if let Some(nearest) = crate::figures::nearest::nearest(&assembled.snapshot, pending) {
        writeln!(out, "Nearest: {nearest}").ok();
    }
    Ok(out)
}

fn nodes_of(snapshot: &Snapshot, nodes: impl Iterator<Item = NodeIdx>) -> String {
    let mut names: Vec<&str> = nodes.map(|n| snapshot.nodes[n as usize].name.as_str()).collect();
    names.sort();
    names.dedup();
    names.join(", ")
}
