//! Converts Kubernetes objects into the engine's compact model.
//!
//! Pure functions over k8s-openapi types, shared by the scheduler's cache and the
//! simulator, so both hand the engine exactly the same snapshot for the same objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thiserror::Error;

use super::quantity;
use crate::engine::model::{
    LabelRequirement, Node as EngineNode, NodeConstraints, SelectorOperator, Taint, TaintEffect, Toleration,
    TolerationOperator,
};
use crate::engine::resources::{Capacity, Demand, ResourceId, ResourceNames};

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("{object}: {source}")]
    Quantity { object: String, source: quantity::Error },
    #[error("{object}: unknown {what} {value:?}")]
    Unknown { object: String, what: &'static str, value: String },
    /// A pod asks for a resource that no node offers and no DeviceClass serves: it fits
    /// nowhere, and the name is not added to anything.
    #[error("no node offers {resource}")]
    NotOffered { resource: String },
    #[error("{object}: more than 65,535 distinct resource names in the cluster")]
    TooManyNames { object: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// "Pod ns/name", "Node name": how errors name an object.
pub fn describe(kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{kind} {ns}/{}", meta.name.as_deref().unwrap_or("")),
        None => format!("{kind} {}", meta.name.as_deref().unwrap_or("")),
    }
}

/// Where a resource name gets its id: a node adds the names it offers; a pod only looks
/// names up (those of nodes, or of DeviceClasses that serve extended resources, which
/// `served` lists), so no pod can grow the table whatever it asks for.
enum Names<'a> {
    Offer(&'a mut ResourceNames),
    Ask(&'a mut ResourceNames, &'a dyn Fn(&str) -> bool),
}

fn amount(names: &mut Names<'_>, object: &str, resource: &str, q: &Quantity) -> Result<Option<(ResourceId, i64)>> {
    let parse = |cpu: bool| if cpu { quantity::parse_milli(&q.0) } else { quantity::parse_units(&q.0) };
    let id = match names {
        Names::Offer(names) => names.try_intern(resource),
        Names::Ask(names, served) => match names.get(resource) {
            Some(id) => Some(id),
            None if served(resource) => names.try_intern(resource),
            None => {
                let asked = parse(false).map_err(|source| Error::Quantity { object: object.to_string(), source })?;
                if asked == 0 {
                    return Ok(None);
                }
                return Err(Error::NotOffered { resource: resource.to_string() });
            }
        },
    };
    let id = id.ok_or_else(|| Error::TooManyNames { object: object.to_string() })?;
    let value = parse(id == ResourceId::CPU);
    value.map(|v| Some((id, v))).map_err(|source| Error::Quantity { object: object.to_string(), source })
}

/// A node's allocatable capacity, labels, taints and cordon.
pub fn node(node: &Node, names: &mut ResourceNames) -> Result<EngineNode> {
    let object = describe("Node", &node.metadata);
    let mut allocatable = Capacity::default();
    let status = node.status.as_ref();
    let resources = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    let mut names = Names::Offer(names);
    for (resource, q) in resources.into_iter().flatten() {
        if let Some((id, v)) = amount(&mut names, &object, resource, q)? {
            allocatable.set(id, v);
        }
    }
    let spec = node.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| {
            Ok(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: effect(&object, &t.effect)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(EngineNode {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: std::sync::Arc::new(node.metadata.labels.clone().unwrap_or_default()),
        taints: std::sync::Arc::new(taints),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        allocatable,
        requested: Capacity::default(),
    })
}

fn effect(object: &str, effect: &str) -> Result<TaintEffect> {
    match effect {
        "NoSchedule" => Ok(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
        "NoExecute" => Ok(TaintEffect::NoExecute),
        other => Err(Error::Unknown { object: object.to_string(), what: "taint effect", value: other.to_string() }),
    }
}

fn container_requests(
    names: &mut Names<'_>,
    object: &str,
    container: &Container,
    into: &mut BTreeMap<ResourceId, i64>,
) -> Result<()> {
    let resources = container.resources.as_ref();
    let requests = resources.and_then(|r| r.requests.as_ref());
    // As the API server defaults them: a limit without a request is the request.
    let limits = resources.and_then(|r| r.limits.as_ref());
    for (resource, q) in limits.into_iter().flatten() {
        if requests.is_none_or(|r| !r.contains_key(resource))
            && let Some((id, v)) = amount(names, object, resource, q)?
        {
            *into.entry(id).or_default() += v;
        }
    }
    for (resource, q) in requests.into_iter().flatten() {
        if let Some((id, v)) = amount(names, object, resource, q)? {
            *into.entry(id).or_default() += v;
        }
    }
    Ok(())
}

/// What a pod asks of a node, as kube-scheduler computes it: the sum of its containers and
/// restartable init containers (sidecars), or the largest regular init container if more,
/// plus the pod overhead, plus one pod.
/// Names no node offers are looked up in `served` (resources DeviceClasses serve through
/// DRA); any other is [`Error::NotOffered`], and adds nothing to `names`.
pub fn pod_demand(pod: &Pod, names: &mut ResourceNames, served: &dyn Fn(&str) -> bool) -> Result<Demand> {
    let names = &mut Names::Ask(names, served);
    let object = describe("Pod", &pod.metadata);
    let Some(spec) = pod.spec.as_ref() else { return Ok(Demand::new(vec![(ResourceId::PODS, 1)])) };
    let mut total = BTreeMap::new();
    for c in &spec.containers {
        container_requests(names, &object, c, &mut total)?;
    }
    // Sidecars (restartable init containers) run beside everything after them; a regular
    // init container runs beside the sidecars started before it.
    let mut sidecars: BTreeMap<ResourceId, i64> = BTreeMap::new();
    let mut init_peak: BTreeMap<ResourceId, i64> = BTreeMap::new();
    for init in spec.init_containers.iter().flatten() {
        let mut one = BTreeMap::new();
        container_requests(names, &object, init, &mut one)?;
        let sidecar = init.restart_policy.as_deref() == Some("Always");
        for (id, v) in one {
            let with_earlier_sidecars = v + sidecars.get(&id).copied().unwrap_or(0);
            let peak = init_peak.entry(id).or_default();
            *peak = (*peak).max(with_earlier_sidecars);
            if sidecar {
                *sidecars.entry(id).or_default() += v;
            }
        }
    }
    for (id, v) in &sidecars {
        *total.entry(*id).or_default() += v;
    }
    for (id, peak) in init_peak {
        let entry = total.entry(id).or_default();
        *entry = (*entry).max(peak);
    }
    for (resource, q) in spec.overhead.iter().flatten() {
        if let Some((id, v)) = amount(names, &object, resource, q)? {
            *total.entry(id).or_default() += v;
        }
    }
    let mut entries: Vec<(ResourceId, i64)> = total.into_iter().collect();
    entries.push((ResourceId::PODS, 1));
    Ok(Demand::new(entries))
}

fn operator(object: &str, op: &str) -> Result<SelectorOperator> {
    Ok(match op {
        "In" => SelectorOperator::In,
        "NotIn" => SelectorOperator::NotIn,
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        "Gt" => SelectorOperator::Gt,
        "Lt" => SelectorOperator::Lt,
        other => {
            return Err(Error::Unknown { object: object.into(), what: "node selector operator", value: other.into() });
        }
    })
}

pub(crate) fn requirement(object: &str, r: &NodeSelectorRequirement) -> Result<LabelRequirement> {
    Ok(LabelRequirement {
        key: r.key.clone(),
        operator: operator(object, &r.operator)?,
        values: r.values.clone().unwrap_or_default(),
    })
}

/// Where the pod may run apart from capacity: nodeSelector, required and preferred node
/// affinity, tolerations; an error naming what cannot be read.
pub fn pod_constraints(pod: &Pod) -> Result<NodeConstraints> {
    let object = describe("Pod", &pod.metadata);
    let Some(spec) = pod.spec.as_ref() else { return Ok(NodeConstraints::default()) };
    constraints_of(&object, spec)
}

fn constraints_of(object: &str, spec: &PodSpec) -> Result<NodeConstraints> {
    let node_selector = spec.node_selector.clone().unwrap_or_default().into_iter().collect();
    let node_affinity = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref());
    let required = node_affinity.and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref());
    let affinity_terms = required
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|term| term_requirements(object, term))
        .collect::<Result<Vec<_>>>()?;
    let preferred = node_affinity
        .and_then(|na| na.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|p| Ok((p.weight, term_requirements(object, &p.preference)?)))
        .collect::<Result<Vec<_>>>()?;
    let tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| {
            Ok(Toleration {
                key: t.key.clone().unwrap_or_default(),
                operator: match t.operator.as_deref() {
                    Some("Exists") => TolerationOperator::Exists,
                    None | Some("Equal") => TolerationOperator::Equal,
                    Some(other) => {
                        return Err(Error::Unknown {
                            object: object.into(),
                            what: "toleration operator",
                            value: other.into(),
                        });
                    }
                },
                value: t.value.clone().unwrap_or_default(),
                effect: match t.effect.as_deref() {
                    None | Some("") => None,
                    Some(e) => Some(effect(object, e)?),
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(NodeConstraints {
        node_selector,
        affinity_terms,
        preferred,
        tolerations,
        volume_terms: Vec::new(),
        volume_zones: Vec::new(),
        delayed: Vec::new(),
    })
}

/// A node selector term's requirements: its expressions, and its fields (only
/// metadata.name, a requirement on the node's name).
fn term_requirements(object: &str, term: &NodeSelectorTerm) -> Result<Vec<LabelRequirement>> {
    let fields = term.match_fields.iter().flatten();
    term.match_expressions.iter().flatten().chain(fields).map(|r| requirement(object, r)).collect()
}

/// Node constraints shared by the pods that have equal ones.
pub type ConstraintsInterner = super::interner::Interner<NodeConstraints>;

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU and GPUs asked, where some node offers GPUs.
    fn demand_of(spec: serde_json::Value) -> (i64, i64) {
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
        let mut names = ResourceNames::default();
        let gpu = names.intern("nvidia.com/gpu");
        let demand = pod_demand(&pod, &mut names, &|_| false).unwrap();
        (demand.get(ResourceId::CPU), demand.get(gpu))
    }

    fn container(name: &str, cpu: &str) -> serde_json::Value {
        serde_json::json!({"name": name, "image": "i", "resources": {"requests": {"cpu": cpu}}})
    }

    #[test]
    fn requests_are_counted_as_kube_scheduler_counts_them() {
        // Containers add up; a bigger regular init container sets the floor.
        let (cpu, _) = demand_of(serde_json::json!({"containers": [container("a", "1"), container("b", "500m")],
                                                      "initContainers": [container("init", "2")]}));
        assert_eq!(cpu, 2000);
        // A sidecar runs beside the containers and beside the init containers after it, but
        // not beside those before it: init 4, then sidecar 1, then container 1 → 4.
        let mut sidecar = container("sidecar", "1");
        sidecar["restartPolicy"] = "Always".into();
        let (cpu, _) = demand_of(serde_json::json!({"containers": [container("main", "1")],
                                                      "initContainers": [container("init", "4"), sidecar.clone()]}));
        assert_eq!(cpu, 4000);
        // Sidecar first: it runs beside the later init container (1 + 4) and the container (1 + 1).
        let (cpu, _) = demand_of(serde_json::json!({"containers": [container("main", "1")],
                                                      "initContainers": [sidecar, container("init", "4")]}));
        assert_eq!(cpu, 5000);
        // A limit without a request is the request; overhead is added.
        let (_, gpus) = demand_of(
            serde_json::json!({"containers": [{"name": "g", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}),
        );
        assert_eq!(gpus, 2);
    }

    #[test]
    fn a_pod_asking_for_a_resource_nobody_offers_fits_nowhere_and_adds_no_name() {
        let mut names = ResourceNames::default();
        let before = names.len();
        let ask = |resources: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "namespace": "ml"},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}))
            .unwrap()
        };
        for i in 0..1000 {
            let pod = ask(serde_json::json!({"limits": {format!("example.com/r{i}"): "1"}}));
            let error = pod_demand(&pod, &mut names, &|_| false).unwrap_err();
            assert_eq!(error.to_string(), format!("no node offers example.com/r{i}"));
        }
        assert_eq!(names.len(), before, "nothing a pod asks for grows the table");
        // Asking for none of it is no demand; a name a DeviceClass serves is known.
        let pod = ask(serde_json::json!({"requests": {"example.com/zero": "0"}}));
        assert!(pod_demand(&pod, &mut names, &|_| false).is_ok());
        let pod = ask(serde_json::json!({"limits": {"example.com/gpu": "2"}}));
        let demand = pod_demand(&pod, &mut names, &|r| r == "example.com/gpu").unwrap();
        assert_eq!(demand.get(names.get("example.com/gpu").unwrap()), 2);
        // Nodes add what they offer, up to the table's size, then say so.
        let mut full = ResourceNames::default();
        while full.try_intern(&format!("n/{}", full.len())).is_some() {}
        assert_eq!(full.len(), 65_535);
        let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "big"},
            "status": {"allocatable": {"example.com/one-more": "1"}}}))
        .unwrap();
        let error = super::node(&node, &mut full).unwrap_err().to_string();
        assert!(error.contains("Node big: more than 65,535 distinct resource names"), "{error}");
    }
}
