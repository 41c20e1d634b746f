//! Which APIs the cluster serves: the PodGroup kinds, DRA, queues, topology objects and the
//! workloads pods are grouped by. Sources that are not served are switched off, with one
//! log line each.

use thiserror::Error;

use crate::convert::workloads::WorkloadKind;
use crate::k8s::client::{
    request,
    request::{Operation, RequestError, Retry},
};

#[derive(Debug, Error)]
#[error("failed to ask the API server which PodGroup and DRA APIs it serves: {0}")]
pub struct Error(#[source] pub RequestError);

/// Which PodGroup APIs the cluster serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources {
    pub kubernetes: bool,
    pub muster: bool,
    pub scheduler_plugins: bool,
    /// Muster's Queue (muster.dev/v1alpha1 queues).
    pub muster_queues: bool,
    /// KAI Scheduler's queues: served, and imported by the configuration.
    pub kai_queues: bool,
    /// KAI Scheduler's PodGroups (scheduling.run.ai/v2alpha2): served, and KAI imported.
    pub kai_groups: bool,
    /// Kueue's ClusterQueues, Cohorts and LocalQueues: the version served (v1beta2
    /// preferred), when the configuration imports them.
    pub kueue: Option<KueueVersion>,
    /// Whether the configuration imports Kueue: when not, pods Kueue admits are placed
    /// outside Muster's queues (Kueue keeps their quota).
    pub kueue_imported: bool,
    /// Whether that version serves Cohort objects too (Kueue 0.11 and later).
    pub kueue_cohorts: bool,
    /// resource.k8s.io/v1: ResourceSlices, DeviceClasses, ResourceClaims (Kubernetes 1.34+).
    pub dra: bool,
    pub device_taint_rules: bool,
    /// Kueue's Topology objects: the version served (read whether or not Kueue's queues
    /// are imported; they only describe the nodes).
    pub kueue_topologies: Option<KueueVersion>,
    /// KAI Scheduler's Topology objects (kai.scheduler/v1alpha1).
    pub kai_topologies: bool,
    /// The workloads pods are grouped by: the version read of each kind of
    /// [`WorkloadKind::ALL`], None when not served or not listable.
    pub workload_versions: [Option<&'static str>; WorkloadKind::ALL.len()],
}

impl Sources {
    /// The workload kinds read, with the version read.
    pub fn workloads(&self) -> impl Iterator<Item = (WorkloadKind, &'static str)> + '_ {
        WorkloadKind::ALL.into_iter().zip(self.workload_versions).filter_map(|(kind, v)| Some((kind, v?)))
    }
}

/// The version of each workload kind to read: the newest served that this scheduler may
/// list; one log line for each kind left unread.
async fn workload_versions(
    client: &kube::Client,
    retry: Retry,
) -> Result<[Option<&'static str>; WorkloadKind::ALL.len()], Error> {
    let mut versions = [None; WorkloadKind::ALL.len()];
    for (i, kind) in WorkloadKind::ALL.into_iter().enumerate() {
        let (group, served) = kind.api();
        let plural = kind.plural();
        for &version in served {
            if serves(client, retry, &kind.api_version(version), &plural).await? {
                if may_list(client, retry, &kind.api_version(version), &plural).await? {
                    versions[i] = Some(version);
                }
                break;
            }
        }
        if versions[i].is_none() {
            tracing::info!(
                "{}s ({plural}.{group}) are not read: their pods are gangs only by a PodGroup or by the workload's labels",
                kind.name()
            );
        }
    }
    Ok(versions)
}

/// Which version of Kueue's API is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KueueVersion {
    V1beta2,
    V1beta1,
}

impl KueueVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            KueueVersion::V1beta2 => "kueue.x-k8s.io/v1beta2",
            KueueVersion::V1beta1 => "kueue.x-k8s.io/v1beta1",
        }
    }
}

async fn serves(client: &kube::Client, retry: Retry, group_version: &str, plural: &str) -> Result<bool, Error> {
    match request::retry(retry, Operation::Idempotent, || client.list_api_group_resources(group_version)).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(Error(e)),
    }
}

/// The newest version of Kueue's API that serves `plural`.
async fn kueue_serving(client: &kube::Client, retry: Retry, plural: &str) -> Result<Option<KueueVersion>, Error> {
    for version in [KueueVersion::V1beta2, KueueVersion::V1beta1] {
        if serves(client, retry, version.api_version(), plural).await? {
            return Ok(Some(version));
        }
    }
    Ok(None)
}

/// Whether `plural` of `group_version` can be listed. For the kinds read whenever they are
/// served (a cluster's Topology objects), a role from before they were read, or a broken
/// definition of theirs, would otherwise leave a watch whose first list never succeeds, and
/// the caches never filled: such a kind is left off instead, with a warning (for a refusal,
/// naming the rule to add).
async fn may_list(client: &kube::Client, retry: Retry, group_version: &str, plural: &str) -> Result<bool, Error> {
    let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
    let resource = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: group_version.into(),
        kind: String::new(),
        plural: plural.into(),
    };
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), &resource);
    let probe = kube::api::ListParams::default().limit(1);
    match request::retry(retry, Operation::Idempotent, || api.list_metadata(&probe)).await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some(403) => {
            tracing::warn!(
                "{plural}.{group} are served but this scheduler may not list them: they are not read \
                 (grant get, list and watch on {plural} in {group}, as manifests/scheduler/clusterrole.yaml does)"
            );
            Ok(false)
        }
        Err(e) => {
            tracing::warn!(error = %e, "{plural}.{group} are served but could not be listed: they are not read");
            Ok(false)
        }
    }
}

/// Keeps the foreign queue sources the configuration imports, with one log line for each
/// that is served but not imported, or imported but not served.
pub fn imported(mut sources: Sources, queues: &crate::config::Queues) -> Sources {
    let kai = queues.imports(crate::config::QueueImport::Kai);
    match (sources.kai_queues, kai) {
        (true, false) => tracing::info!(
            "KAI Scheduler's Queues (scheduling.run.ai/v2) exist but are not read: add kai to queues.import to use them as Muster's queues"
        ),
        (false, true) => tracing::warn!(
            "queues.import names kai, but the API server does not serve scheduling.run.ai/v2 queues: no KAI queue is read"
        ),
        _ => {}
    }
    sources.kai_queues &= kai;
    sources.kai_groups &= kai;
    let kueue = queues.imports(crate::config::QueueImport::Kueue);
    match (sources.kueue, kueue) {
        (Some(_), false) => tracing::info!(
            "Kueue's ClusterQueues exist but are not read: Kueue keeps their quota, and Muster places the pods Kueue admits outside its own queues (add kueue to queues.import to use them as Muster's queues)"
        ),
        (None, true) => tracing::warn!(
            "queues.import names kueue, but the API server does not serve kueue.x-k8s.io clusterqueues: no Kueue queue is read"
        ),
        _ => {}
    }
    sources.kueue_imported = kueue;
    if !kueue {
        sources.kueue = None;
        sources.kueue_cohorts = false;
    }
    sources
}

/// Asks the API server which sources exist; logs one line for each that is off.
pub async fn discover(client: &kube::Client, retry: Retry) -> Result<Sources, Error> {
    let sources = Sources {
        kubernetes: serves(client, retry, "scheduling.k8s.io/v1beta1", "podgroups").await?,
        muster: serves(client, retry, "muster.dev/v1alpha1", "podgroups").await?,
        scheduler_plugins: serves(client, retry, "scheduling.x-k8s.io/v1alpha1", "podgroups").await?,
        muster_queues: serves(client, retry, "muster.dev/v1alpha1", "queues").await?,
        kai_queues: serves(client, retry, "scheduling.run.ai/v2", "queues").await?,
        kai_groups: serves(client, retry, "scheduling.run.ai/v2alpha2", "podgroups").await?,
        kueue: kueue_serving(client, retry, "clusterqueues").await?,
        kueue_imported: false,
        kueue_cohorts: false,
        dra: serves(client, retry, "resource.k8s.io/v1", "resourceslices").await?,
        device_taint_rules: serves(client, retry, "resource.k8s.io/v1", "devicetaintrules").await?,
        kueue_topologies: kueue_serving(client, retry, "topologies").await?,
        kai_topologies: serves(client, retry, "kai.scheduler/v1alpha1", "topologies").await?,
        workload_versions: workload_versions(client, retry).await?,
    };
    let off = |on: bool, what: &str, why: &str| {
        if !on {
            tracing::info!("PodGroup source {what} is off: {why}");
        }
    };
    off(
        sources.kubernetes,
        "scheduling.k8s.io/v1beta1",
        "the API server does not serve it (Kubernetes before 1.37, or the GenericWorkload feature off)",
    );
    off(sources.muster, "muster.dev/v1alpha1", "its CRD is not installed (muster crds | kubectl apply -f -)");
    if !sources.muster_queues {
        tracing::info!(
            "Queues are off: the muster.dev/v1alpha1 Queue CRD is not installed (muster crds | kubectl apply -f -)"
        );
    }
    off(sources.scheduler_plugins, "scheduling.x-k8s.io/v1alpha1", "the scheduler-plugins CRD is not installed");
    if !sources.dra {
        tracing::info!("DRA is off: the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34)");
    } else if !sources.device_taint_rules {
        tracing::info!("DeviceTaintRules are off: the API server does not serve them");
    }
    let mut sources = sources;
    if let Some(version) = sources.kueue_topologies
        && !may_list(client, retry, version.api_version(), "topologies").await?
    {
        sources.kueue_topologies = None;
    }
    sources.kai_topologies =
        sources.kai_topologies && may_list(client, retry, "kai.scheduler/v1alpha1", "topologies").await?;
    sources.kueue_cohorts = match sources.kueue {
        Some(version) => serves(client, retry, version.api_version(), "cohorts").await?,
        None => false,
    };
    Ok(sources)
}
