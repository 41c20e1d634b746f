//! Reads a cluster from files or folders of ordinary multi-document Kubernetes YAML, and
//! checks it as the API server would: parsable, typed, no object twice, known priority classes.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::api::scheduling::v1beta1::PodGroup as KubernetesPodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use thiserror::Error;
use yaml_serde::Value;

use crate::api::foreign::PodGroup as PluginPodGroup;
use crate::api::kai::{PodGroup as KaiPodGroup, Queue as KaiQueue};
use crate::api::kueue::{ClusterQueue, Cohort};
use crate::api::pod_group::PodGroup as MusterPodGroup;
use crate::api::queue::Queue as MusterQueue;
use crate::convert::assemble::ClusterObjects;
use crate::convert::kinds::object_kinds;
use crate::convert::workloads::{Workload, WorkloadKind};
use crate::sim::api_rules::{check_claim_spec, check_selectors, check_slice, is_kind, is_known, is_namespaced};
use crate::sim::expand;

#[derive(Debug, Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: document {document} is not valid YAML: {source}")]
    Yaml { path: String, document: usize, source: yaml_serde::Error },
    #[error("{path}: document {document} has no {field}")]
    Missing { path: String, document: usize, field: &'static str },
    #[error("{path}: {object}: {problem}")]
    Invalid { path: String, object: String, problem: String },
    #[error("{path}: {object} is defined twice (first in {first})")]
    Duplicate { path: String, object: String, first: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A cluster as read from YAML.
#[derive(Clone, Debug, Default)]
pub struct LoadedCluster {
    pub objects: ClusterObjects,
    /// Documents skipped because they play no part in scheduling, one line each.
    pub notes: Vec<String>,
}

/// Where the creation times the loader gives objects that have none start (see `stamp`).
const EPOCH_SECONDS: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

fn yaml_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let read = |source| Error::Read { path: path.display().to_string(), source };
    if path.is_dir() {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(path).map_err(read)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for entry in entries {
            if entry.is_dir() || entry.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                yaml_files(&entry, out)?;
            }
        }
    } else {
        std::fs::metadata(path).map_err(read)?;
        out.push(path.to_path_buf());
    }
    Ok(())
}

struct Loader {
    cluster: LoadedCluster,
    seen: HashMap<(String, String, String, String), String>,
    /// Unix seconds of the last creation time read or given, in document order.
    clock: i64,
    /// The file each pod came from, for errors found after loading.
    pod_files: Vec<String>,
    /// Workloads read, in document order, to expand into pods at the end (with their file
    /// and how errors name them), unless the files hold what they own.
    expandable: Vec<(WorkloadKind, serde_json::Value, String, String)>,
    /// Whether what is read now was made by expanding a workload (and is not expanded again).
    expanding: bool,
}

/// Reads every file or folder in `paths`.
pub fn load(paths: &[PathBuf]) -> Result<LoadedCluster> {
    let mut files = Vec::new();
    for path in paths {
        yaml_files(path, &mut files)?;
    }
    let mut loader = Loader {
        cluster: LoadedCluster::default(),
        seen: HashMap::new(),
        clock: EPOCH_SECONDS - 1,
        pod_files: Vec::new(),
        expandable: Vec::new(),
        expanding: false,
    };
    for file in &files {
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(file).map_err(|source| Error::Read { path: shown.clone(), source })?;
        loader.load_text(&text, &shown)?;
    }
    loader.finish()
}

/// Reads one YAML stream, as if it were a file named `path`.
pub fn load_str(text: &str, path: &str) -> Result<LoadedCluster> {
    let mut loader = Loader {
        cluster: LoadedCluster::default(),
        seen: HashMap::new(),
        clock: EPOCH_SECONDS - 1,
        pod_files: Vec::new(),
        expandable: Vec::new(),
        expanding: false,
    };
    loader.load_text(text, path)?;
    loader.finish()
}

fn typed<T: serde::de::DeserializeOwned>(value: Value, path: &str, object: &str) -> Result<T> {
    yaml_serde::from_value(value).map_err(|e| Error::Invalid {
        path: path.into(),
        object: object.into(),
        problem: e.to_string(),
    })
}

/// What names one object read: its kind and API, its name and namespace (filled in with
/// `default` for a namespaced kind that has none), and how errors show it.
struct Header {
    kind: String,
    api_version: String,
    /// The API group: empty for the core API.
    group: String,
    name: String,
    /// None for a cluster-scoped kind.
    namespace: Option<String>,
    /// `Kind namespace/name`, or `Kind name` for a cluster-scoped kind.
    object: String,
}

impl Header {
    /// Reads the name (refusing an empty one, as the API server does) and the namespace,
    /// writing `default` into the object's metadata where a namespaced kind has none.
    fn of(value: &mut Value, kind: String, api_version: String, path: &str, document: usize) -> Result<Header> {
        // The API server refuses an empty name as it refuses none.
        let name = value.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str);
        let name = name.filter(|n| !n.is_empty()).map(str::to_string);
        let name = name.ok_or(Error::Missing { path: path.into(), document, field: "metadata.name" })?;
        let group = api_version.split_once('/').map_or("", |(g, _)| g).to_string();
        let namespace = is_namespaced(&group, &kind).then(|| {
            let ns = value
                .get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string();
            if let Some(meta) = value.get_mut("metadata").and_then(Value::as_mapping_mut) {
                meta.insert("namespace".into(), ns.clone().into());
            }
            ns
        });
        let object = match &namespace {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        Ok(Header { kind, api_version, group, name, namespace, object })
    }
}

impl Loader {
    fn load_text(&mut self, text: &str, path: &str) -> Result<()> {
        for (i, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
            let value = <Value as serde::Deserialize>::deserialize(document).map_err(|source| Error::Yaml {
                path: path.into(),
                document: i + 1,
                source,
            })?;
            self.load_value(value, path, i + 1)?;
        }
        Ok(())
    }

    /// Reads one document: a list's items one by one, or one object, named, checked as
    /// known and not seen before, then stored as a workload or as the object it is.
    fn load_value(&mut self, value: Value, path: &str, document: usize) -> Result<()> {
        if value.is_null() {
            return Ok(());
        }
        let field = |name: &'static str| value.get(name).and_then(Value::as_str).map(str::to_string);
        let kind = field("kind").ok_or(Error::Missing { path: path.into(), document, field: "kind" })?;
        let api_version =
            field("apiVersion").ok_or(Error::Missing { path: path.into(), document, field: "apiVersion" })?;
        if kind == "List" || kind.ends_with("List") && value.get("items").is_some() {
            let items = value.get("items").and_then(Value::as_sequence).cloned().unwrap_or_default();
            for item in items {
                self.load_value(item, path, document)?;
            }
            return Ok(());
        }
        let mut value = value;
        let header = Header::of(&mut value, kind, api_version, path, document)?;
        let workload = WorkloadKind::from_name(&header.kind)
            .filter(|k| k.api().0 == header.group && k.api().1.iter().any(|v| k.api_version(v) == header.api_version));
        if workload.is_none() && !is_known(&header.api_version, &header.kind) {
            let (object, api_version) = (&header.object, &header.api_version);
            self.cluster
                .notes
                .push(format!("{path}: skipped {object} ({api_version}): it plays no part in scheduling"));
            return Ok(());
        }
        let namespace = header.namespace.clone().unwrap_or_default();
        let identity = (header.group.clone(), header.kind.clone(), namespace, header.name.clone());
        if let Some(first) = self.seen.insert(identity, path.to_string()) {
            return Err(Error::Duplicate { path: path.into(), object: header.object, first });
        }
        match workload {
            Some(kind) => self.load_workload(kind, &value, header, path),
            None => self.store(value, &header.api_version, &header.kind, path, header.object),
        }
    }

    /// Stores a workload as read (with a uid and creation time, as the API server gives
    /// them), and keeps it to be expanded at the end unless it was itself made by expanding.
    fn load_workload(&mut self, kind: WorkloadKind, value: &Value, header: Header, path: &str) -> Result<()> {
        let Header { name, namespace, object, .. } = header;
        let invalid = |problem: String| Error::Invalid { path: path.into(), object: object.clone(), problem };
        let mut json = serde_json::to_value(value).map_err(|e| invalid(e.to_string()))?;
        // As the API server would: a uid, and the time it was applied.
        if json["metadata"].get("uid").is_none_or(|u| !u.is_string()) {
            json["metadata"]["uid"] =
                format!("sim-{}-{kind:?}-{name}", namespace.as_deref().unwrap_or_default()).into();
        }
        let mut read = Workload::read(kind, &json).map_err(|e| invalid(e.to_string()))?;
        read.metadata = stamp(read.metadata, &mut self.clock);
        json["metadata"]["creationTimestamp"] =
            serde_json::to_value(&read.metadata.creation_timestamp).unwrap_or_default();
        self.cluster.objects.workloads.push(read);
        if !self.expanding {
            self.expandable.push((kind, json, path.to_string(), object));
        }
        Ok(())
    }

    /// Stores an object of a known kind that is not a workload in the cluster's lists, typed,
    /// stamped with a creation time where its kind keeps one, and checked as the API server
    /// would; the DRA kinds go to [`Loader::store_dra`].
    fn store(&mut self, value: Value, api_version: &str, kind: &str, path: &str, object: String) -> Result<()> {
        let c = &mut self.cluster;
        match (api_version, kind) {
            ("v1", "Node") => c.objects.nodes.push(self_stamp(typed(value, path, &object)?, &mut self.clock)),
            ("v1", "Pod") => self.store_pod(typed(value, path, &object)?, path, object)?,
            ("muster.dev/v1alpha1", "Queue") => {
                let mut q: MusterQueue = typed(value, path, &object)?;
                q.metadata = stamp(q.metadata, &mut self.clock);
                c.objects.queues.push(q);
            }
            ("scheduling.run.ai/v2", "Queue") => {
                let mut q: KaiQueue = typed(value, path, &object)?;
                q.metadata = stamp(q.metadata, &mut self.clock);
                c.objects.kai_queues.push(q);
            }
            (_, "ClusterQueue") => {
                let mut q: ClusterQueue = typed(value, path, &object)?;
                q.metadata = stamp(q.metadata, &mut self.clock);
                c.objects.cluster_queues.push(q);
            }
            (_, "Cohort") => {
                let mut q: Cohort = typed(value, path, &object)?;
                q.metadata = stamp(q.metadata, &mut self.clock);
                c.objects.cohorts.push(q);
            }
            ("kueue.x-k8s.io/v1beta1", _) => return self.store(value, "kueue.x-k8s.io/v1beta2", kind, path, object),
            ("scheduling.k8s.io/v1beta1", "PodGroup") => {
                let mut g: KubernetesPodGroup = typed(value, path, &object)?;
                g.metadata = stamp(g.metadata, &mut self.clock);
                c.objects.kubernetes_groups.push(g);
            }
            ("muster.dev/v1alpha1", "PodGroup") => {
                let mut g: MusterPodGroup = typed(value, path, &object)?;
                if g.spec.min_member < 1 {
                    return Err(Error::Invalid {
                        path: path.into(),
                        object,
                        problem: "spec.minMember must be at least 1".into(),
                    });
                }
                g.metadata = stamp(g.metadata, &mut self.clock);
                c.objects.muster_groups.push(g);
            }
            ("scheduling.x-k8s.io/v1alpha1", "PodGroup") => {
                let mut g: PluginPodGroup = typed(value, path, &object)?;
                g.metadata = stamp(g.metadata, &mut self.clock);
                c.objects.plugin_groups.push(g);
            }
            ("scheduling.run.ai/v2alpha2", "PodGroup") => {
                let mut g: KaiPodGroup = typed(value, path, &object)?;
                g.metadata = stamp(g.metadata, &mut self.clock);
                c.objects.kai_groups.push(g);
            }
            ("resource.k8s.io/v1", "ResourceSlice" | "DeviceClass" | "ResourceClaim" | "ResourceClaimTemplate") => {
                self.store_dra(value, kind, path, object)?
            }
            _ => store_listed(&mut c.objects, value, api_version, kind, path, object)?,
        }
        Ok(())
    }

    /// Stores a pod, stamped, with a uid made from its name where it has none (claims made
    /// for it are owned by that uid), refusing one without a spec.
    fn store_pod(&mut self, mut pod: Pod, path: &str, object: String) -> Result<()> {
        pod.metadata = stamp(pod.metadata, &mut self.clock);
        // As the API server would: claims made for the pod are owned by its uid.
        if pod.metadata.uid.is_none() {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            pod.metadata.uid = Some(format!("sim-{namespace}-Pod-{}", pod.metadata.name.as_deref().unwrap_or("")));
        }
        if pod.spec.is_none() {
            return Err(Error::Invalid { path: path.into(), object, problem: "has no spec".into() });
        }
        self.cluster.objects.pods.push(pod);
        self.pod_files.push(path.to_string());
        Ok(())
    }

    /// Stores a DRA object the API server checks (a slice, class, claim or, for any other
    /// kind, claim template) with a resourceVersion, after the checks it makes.
    fn store_dra(&mut self, value: Value, kind: &str, path: &str, object: String) -> Result<()> {
        let objects = &mut self.cluster.objects;
        let invalid = |object: String| move |problem: String| Error::Invalid { path: path.into(), object, problem };
        match kind {
            "ResourceSlice" => {
                let slice: ResourceSlice = typed(value, path, &object)?;
                check_slice(&slice).map_err(invalid(object))?;
                objects.resource_slices.push(versioned(slice));
            }
            "DeviceClass" => {
                let class: DeviceClass = typed(value, path, &object)?;
                let selectors = class.spec.as_ref().and_then(|s| s.selectors.as_ref());
                check_selectors(selectors.into_iter().flatten()).map_err(invalid(object))?;
                objects.device_classes.push(versioned(class));
            }
            "ResourceClaim" => {
                let claim: ResourceClaim = typed(value, path, &object)?;
                if let Some(spec) = &claim.spec {
                    check_claim_spec(&object, spec).map_err(invalid(object))?;
                }
                objects.resource_claims.push(versioned(claim));
            }
            _ => {
                let template: ResourceClaimTemplate = typed(value, path, &object)?;
                if let Some(spec) = template.spec.as_ref().and_then(|t| t.spec.as_ref()) {
                    check_claim_spec(&object, spec).map_err(invalid(object))?;
                }
                objects.resource_claim_templates.push(versioned(template));
            }
        }
        Ok(())
    }

    /// Checks what the API server would, and puts pods in the gangs their owners make (an
    /// owner not in the files groups nothing: the files may hold the pods alone).
    fn finish(mut self) -> Result<LoadedCluster> {
        self.expand()?;
        self.check_priority_classes()?;
        let objects = &mut self.cluster.objects;
        crate::convert::workloads::resolve::mark_all(&mut objects.pods, &objects.workloads, Default::default());
        Ok(self.cluster)
    }

    /// Every workload that owns nothing in the files (no pod, no child workload) becomes
    /// what its controllers would create (`expand`), read as if it followed it in its file.
    fn expand(&mut self) -> Result<()> {
        let objects = &self.cluster.objects;
        let owner = |meta: &ObjectMeta| {
            let reference = crate::convert::workloads::controller_of(meta)?;
            Some((meta.namespace.clone().unwrap_or_default(), reference.kind.clone(), reference.name.clone()))
        };
        let owners: HashSet<(String, String, String)> = objects
            .pods
            .iter()
            .map(|p| &p.metadata)
            .chain(objects.workloads.iter().map(|w| &w.metadata))
            .filter_map(owner)
            .collect();
        self.expanding = true;
        for (kind, json, path, object) in std::mem::take(&mut self.expandable) {
            let namespace = json["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
            let name = json["metadata"]["name"].as_str().unwrap_or_default().to_string();
            if owners.contains(&(namespace, kind.name().to_string(), name)) {
                continue;
            }
            let made = expand::children(kind, &json);
            let pods = made.iter().filter(|o| o["kind"] == "Pod").count();
            for child in made {
                let value = yaml_serde::to_value(child).map_err(|e| Error::Invalid {
                    path: path.clone(),
                    object: object.clone(),
                    problem: format!("could not be expanded: {e}"),
                })?;
                // What it makes is not in the files: an error names the workload.
                self.load_value(value, &path, 0).map_err(|e| {
                    let problem = match e {
                        Error::Invalid { object: made, problem, .. } => format!("it makes {made}: {problem}"),
                        Error::Duplicate { object: made, first, .. } => {
                            format!("it makes {made}, which is also defined in {first}")
                        }
                        other => format!("it makes what does not read: {other}"),
                    };
                    Error::Invalid { path: path.clone(), object: object.clone(), problem }
                })?;
            }
            self.cluster.notes.push(format!("{path}: {object} makes {pods} pod(s), as its controller would"));
        }
        self.expanding = false;
        Ok(())
    }

    /// The API server rejects a pod whose priorityClassName names no PriorityClass, except
    /// the two built-in system classes.
    fn check_priority_classes(&self) -> Result<()> {
        let objects = &self.cluster.objects;
        for (pod, path) in objects.pods.iter().zip(&self.pod_files) {
            let Some(class) = pod.spec.as_ref().and_then(|s| s.priority_class_name.as_ref()) else { continue };
            let builtin = class == "system-cluster-critical" || class == "system-node-critical";
            if !builtin && !objects.priority_classes.iter().any(|c| c.metadata.name.as_ref() == Some(class)) {
                return Err(Error::Invalid {
                    path: path.clone(),
                    object: crate::convert::core::describe("Pod", &pod.metadata),
                    problem: format!("no PriorityClass with name {class} was found"),
                });
            }
        }
        Ok(())
    }
}

/// Stores an object of a kind of the list scheduling reads that the simulator takes as
/// written (it makes no check of its own and keeps no creation time for it).
fn store_listed(
    objects: &mut ClusterObjects,
    value: Value,
    api_version: &str,
    kind: &str,
    path: &str,
    object: String,
) -> Result<()> {
    macro_rules! store {
        ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
            $(store!(@one $field, $kind);)*
        };
        (@one workloads, $kind:ty) => {};
        (@one $field:ident, $kind:ty) => {
            if is_kind::<$kind>(api_version, kind) {
                objects.$field.push(versioned(typed(value, path, &object)?));
                return Ok(());
            }
        };
    }
    object_kinds!(store);
    Err(Error::Invalid {
        path: path.into(),
        object,
        problem: format!("{kind} ({api_version}) is not a kind scheduling reads"),
    })
}

/// Objects the simulator never changes carry a resourceVersion, as they would on a real
/// API server, so conversions of them are kept from one cycle to the next.
fn versioned<K: kube::Resource>(mut object: K) -> K {
    object.meta_mut().resource_version.get_or_insert_with(|| "1".into());
    object
}

/// An object's creation time: its own, or one second after the object read before it (in
/// document order, across files), as an API server stamps objects applied one after
/// another into a cluster holding those that carry their own.
fn stamp(mut meta: ObjectMeta, clock: &mut i64) -> ObjectMeta {
    match &meta.creation_timestamp {
        Some(at) => *clock = (*clock).max(at.0.as_second()),
        None => {
            *clock += 1;
            let at = k8s_openapi::jiff::Timestamp::from_second(*clock).expect("valid time");
            meta.creation_timestamp = Some(Time(at));
        }
    }
    meta
}

fn self_stamp(mut node: Node, clock: &mut i64) -> Node {
    node.metadata = stamp(node.metadata, clock);
    node
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
