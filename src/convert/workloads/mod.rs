//! Gangs from the workloads users submit: a pod of Muster that names no PodGroup belongs to
//! the gang its owners imply (the pods of an indexed Job, of a PyTorchJob, of one
//! LeaderWorkerSet group). Owners are read, never written, and kept as [`Workload`]s: what
//! the gang needs of them and nothing else, so a Job's status changing moves nothing.
//!
//! - [`shape`]: what gang each kind makes of its pods, read from its spec;
//! - [`resolve`]: which gang a pod belongs to, walking its owners, and each gang's spec;
//! - [`read`]: a workload as the API server serves it, kept as little as a gang needs;
//! - [`owners`]: which pods the cache must resolve again when an owner changes.

pub mod owners;
pub mod read;
pub mod resolve;
pub mod shape;

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Serialize};

pub use resolve::{Resolution, resolve};
pub use shape::Shape;

/// Owners followed up from a pod or workload at most (a loop of owner references ends here).
pub const MAX_DEPTH: usize = 8;

/// The annotation (or label) on a workload that sets its gang's minimum.
pub const MIN_MEMBER_ANNOTATION: &str = "muster.dev/min-member";

/// The kinds whose pods make gangs, in the order discovery reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WorkloadKind {
    Job,
    JobSet,
    PyTorchJob,
    TFJob,
    XGBoostJob,
    MPIJob,
    TrainJob,
    RayCluster,
    RayJob,
    LeaderWorkerSet,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 10] = [
        WorkloadKind::Job,
        WorkloadKind::JobSet,
        WorkloadKind::PyTorchJob,
        WorkloadKind::TFJob,
        WorkloadKind::XGBoostJob,
        WorkloadKind::MPIJob,
        WorkloadKind::TrainJob,
        WorkloadKind::RayCluster,
        WorkloadKind::RayJob,
        WorkloadKind::LeaderWorkerSet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Job => "Job",
            WorkloadKind::JobSet => "JobSet",
            WorkloadKind::PyTorchJob => "PyTorchJob",
            WorkloadKind::TFJob => "TFJob",
            WorkloadKind::XGBoostJob => "XGBoostJob",
            WorkloadKind::MPIJob => "MPIJob",
            WorkloadKind::TrainJob => "TrainJob",
            WorkloadKind::RayCluster => "RayCluster",
            WorkloadKind::RayJob => "RayJob",
            WorkloadKind::LeaderWorkerSet => "LeaderWorkerSet",
        }
    }

    pub fn from_name(kind: &str) -> Option<WorkloadKind> {
        WorkloadKind::ALL.into_iter().find(|k| k.name() == kind)
    }

    /// The API group and the versions read, newest first.
    pub fn api(self) -> (&'static str, &'static [&'static str]) {
        match self {
            WorkloadKind::Job => ("batch", &["v1"]),
            WorkloadKind::JobSet => ("jobset.x-k8s.io", &["v1alpha2"]),
            WorkloadKind::PyTorchJob | WorkloadKind::TFJob | WorkloadKind::XGBoostJob => ("kubeflow.org", &["v1"]),
            WorkloadKind::MPIJob => ("kubeflow.org", &["v2beta1", "v1"]),
            WorkloadKind::TrainJob => ("trainer.kubeflow.org", &["v1alpha1"]),
            WorkloadKind::RayCluster | WorkloadKind::RayJob => ("ray.io", &["v1"]),
            WorkloadKind::LeaderWorkerSet => ("leaderworkerset.x-k8s.io", &["v1"]),
        }
    }

    pub fn plural(self) -> String {
        self.name().to_lowercase() + "s"
    }

    /// `group/version`, as an apiVersion says it.
    pub fn api_version(self, version: &str) -> String {
        let (group, _) = self.api();
        if group == "batch" && version == "v1" { "batch/v1".into() } else { format!("{group}/{version}") }
    }

    /// Where the API server serves this kind at `version`, for a dynamic client.
    pub fn api_resource(self, version: &str) -> kube::api::ApiResource {
        kube::api::ApiResource {
            group: self.api().0.into(),
            version: version.into(),
            api_version: self.api_version(version),
            kind: self.name().into(),
            plural: self.plural(),
        }
    }

    /// Whether an ownerReference's apiVersion is of this kind's group.
    pub fn owns(self, reference: &OwnerReference) -> bool {
        reference.kind == self.name() && reference.api_version.split('/').next() == Some(self.api().0)
    }
}

/// What the scheduler keeps of a workload: the store key is its kind and name
/// (`metadata.name` is `Kind/name`, since two kinds may share a name), its controller
/// owner, the labels and annotations a gang reads, and its [`Shape`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub metadata: ObjectMeta,
    pub kind: WorkloadKind,
    pub shape: Shape,
    /// Its `activeDeadlineSeconds` (a Job's or a RayJob's spec, a training job's
    /// `runPolicy`): how long its pods run at most.
    pub deadline: Option<i64>,
}

/// The store key of a workload of `kind` named `name`.
pub fn key(kind: WorkloadKind, name: &str) -> String {
    format!("{}/{name}", kind.name())
}

impl Workload {
    /// Its own name (the store key without the kind).
    pub fn name(&self) -> &str {
        let key = self.metadata.name.as_deref().unwrap_or_default();
        key.split_once('/').map_or(key, |(_, name)| name)
    }

    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// Its controller: the owner whose controller it is.
    pub fn controller(&self) -> Option<&OwnerReference> {
        controller_of(&self.metadata)
    }

    /// A label or annotation it carries (labels first).
    pub fn marked(&self, key: &str) -> Option<&str> {
        fn from<'m>(m: &'m Option<BTreeMap<String, String>>, key: &str) -> Option<&'m str> {
            m.as_ref()?.get(key).map(String::as_str)
        }
        from(&self.metadata.labels, key).or_else(|| from(&self.metadata.annotations, key)).filter(|v| !v.is_empty())
    }
}

/// The ownerReference marked as the object's controller.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true))
}

/// Kept in the scheduler's cache like the objects it reads: a namespaced object of its own
/// kind, keyed by `Kind/name`. Never sent to the API server.
impl kube::Resource for Workload {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Workload".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "muster.dev".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "internal".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "workloads".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
