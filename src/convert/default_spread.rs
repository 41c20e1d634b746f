//! PodTopologySpread's default constraints, for pods that set none, as kube-scheduler 1.37
//! gives them: the configured constraints (`plugins.podTopologySpread`), each with a
//! selector made from the Services that select the pod (their selectors merged) and the
//! ReplicaSet, StatefulSet or ReplicationController that controls it. A pod nothing selects
//! gets none. kube-scheduler's own defaults (`System`) are left off pods that ask for an
//! accelerator: Muster's packing places those (decision 0101).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::core::{Result, describe};
use super::pod_rules::selector;
use super::view::ClusterView;
use crate::config::{DefaultConstraint, DefaultingType, PodTopologySpreadArgs};
use crate::engine::model::{LabelRequirement, SelectorOperator};
use crate::engine::pods::SpreadRule;

/// The constraints pods that set none get, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadDefaults {
    pub constraints: Vec<DefaultConstraint>,
    /// kube-scheduler's own (`System`): left off accelerator pods, and nodes without a
    /// constraint's key still count for the others.
    pub system: bool,
}

impl SpreadDefaults {
    pub fn new(args: &PodTopologySpreadArgs) -> SpreadDefaults {
        SpreadDefaults { constraints: args.constraints(), system: args.defaulting_type == DefaultingType::System }
    }
}

impl Default for SpreadDefaults {
    fn default() -> Self {
        SpreadDefaults::new(&PodTopologySpreadArgs::default())
    }
}

/// The selectors a pod's fellows are found by, per namespace, made once per snapshot.
pub struct SpreadOwners<'a> {
    services: HashMap<&'a str, Vec<&'a BTreeMap<String, String>>>,
    /// By (kind, namespace, name): the controllers' selectors.
    controllers: HashMap<(&'static str, &'a str, &'a str), Controller<'a>>,
}

enum Controller<'a> {
    Labels(&'a BTreeMap<String, String>),
    Selector(&'a LabelSelector),
}

impl<'a> SpreadOwners<'a> {
    pub fn new(view: &ClusterView<'a>) -> SpreadOwners<'a> {
        let mut services: HashMap<&'a str, Vec<_>> = HashMap::new();
        for s in &view.services {
            if let Some(selector) = s.spec.as_ref().and_then(|spec| spec.selector.as_ref()) {
                services.entry(s.metadata.namespace.as_deref().unwrap_or("default")).or_default().push(selector);
            }
        }
        let mut controllers = HashMap::new();
        let mut add = |kind: &'static str, meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, c| {
            if let Some(name) = meta.name.as_deref() {
                controllers.insert((kind, meta.namespace.as_deref().unwrap_or("default"), name), c);
            }
        };
        for rc in &view.replication_controllers {
            if let Some(labels) = rc.spec.as_ref().and_then(|s| s.selector.as_ref()) {
                add("ReplicationController", &rc.metadata, Controller::Labels(labels));
            }
        }
        for rs in &view.replica_sets {
            add("ReplicaSet", &rs.metadata, Controller::Selector(&rs.spec.selector));
        }
        for ss in &view.stateful_sets {
            add("StatefulSet", &ss.metadata, Controller::Selector(&ss.spec.selector));
        }
        SpreadOwners { services, controllers }
    }

    /// The selector of the pods `pod` spreads among; None when nothing selects it.
    fn selector(&self, pod: &Pod) -> Result<Option<Vec<LabelRequirement>>> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let labels = pod.metadata.labels.as_ref();
        let mut merged: BTreeMap<&str, &str> = BTreeMap::new();
        for service in self.services.get(namespace).into_iter().flatten() {
            if service.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v)) {
                merged.extend(service.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            }
        }
        let controller = pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
        let owner = controller.and_then(|o| {
            let kind = ["ReplicationController", "ReplicaSet", "StatefulSet"].into_iter().find(|&k| k == o.kind)?;
            let group = if kind == "ReplicationController" { "v1" } else { "apps/v1" };
            (o.api_version == group).then_some(())?;
            self.controllers.get(&(kind, namespace, o.name.as_str()))
        });
        if let Some(Controller::Labels(selector)) = owner {
            merged.extend(selector.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        }
        let equal = |(k, v): (&str, &str)| LabelRequirement {
            key: k.to_string(),
            operator: SelectorOperator::In,
            values: vec![v.to_string()],
        };
        let mut requirements: Vec<LabelRequirement> = merged.into_iter().map(equal).collect();
        if let Some(Controller::Selector(selector)) = owner {
            let object = describe("Pod", &pod.metadata);
            requirements.extend(self::selector(&object, Some(selector))?.unwrap_or_default());
        }
        Ok((!requirements.is_empty()).then_some(requirements))
    }
}

/// Whether the pod asks for an accelerator: an extended resource, or a claim.
fn asks_for_devices(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    let built_in =
        |name: &str| matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods") || name.starts_with("hugepages-");
    let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    let resources = containers.filter_map(|c| c.resources.as_ref());
    let named = resources.flat_map(|r| r.requests.iter().chain(r.limits.iter()).flat_map(|m| m.keys()));
    spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) || named.into_iter().any(|n| !built_in(n))
}

/// The default constraints of `pod` (hard, then soft), when it sets none of its own and
/// something selects it.
pub fn defaults_for(
    pod: &Pod,
    defaults: &SpreadDefaults,
    owners: &SpreadOwners<'_>,
) -> Result<Option<(Vec<SpreadRule>, Vec<SpreadRule>)>> {
    let own = pod.spec.as_ref().and_then(|s| s.topology_spread_constraints.as_ref());
    if own.is_some_and(|c| !c.is_empty()) || defaults.constraints.is_empty() {
        return Ok(None);
    }
    if defaults.system && asks_for_devices(pod) {
        return Ok(None);
    }
    let Some(selector) = owners.selector(pod)? else { return Ok(None) };
    let (mut hard, mut soft) = (Vec::new(), Vec::new());
    for c in &defaults.constraints {
        let rule = SpreadRule {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            selector: Some(selector.clone()),
            min_domains: 1,
            honor_affinity: true,
            honor_taints: false,
        };
        match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => hard.push(rule),
            _ => soft.push(rule),
        }
    }
    Ok(Some((hard, soft)))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::Service;

    use super::*;
    use crate::config::PodTopologySpreadArgs;
    use crate::convert::view::ClusterObjects;
    use crate::engine::pods::PodRules;

    fn read<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        yaml_serde::from_str(yaml).expect("yaml")
    }

    fn cluster() -> ClusterObjects {
        ClusterObjects {
            services: vec![
                read("metadata: {name: web, namespace: ml}\nspec: {selector: {app: web}}"),
                read("metadata: {name: all, namespace: ml}\nspec: {selector: {tier: front}}"),
                read("metadata: {name: other, namespace: elsewhere}\nspec: {selector: {app: web}}"),
                read::<Service>("metadata: {name: none, namespace: ml}\nspec: {}"),
            ],
            replica_sets: vec![read::<ReplicaSet>(
                "metadata: {name: web-7d9, namespace: ml}
spec: {selector: {matchLabels: {app: web, pod-template-hash: 7d9}}, template: {}}",
            )],
            ..Default::default()
        }
    }

    fn pod(extra: &str) -> Pod {
        read(&format!(
            "metadata:
  name: web-7d9-x
  namespace: ml
  labels: {{app: web, tier: front, pod-template-hash: 7d9}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-7d9, uid: u, controller: true}}]
spec:
  containers: [{{name: a{extra}}}]"
        ))
    }

    fn defaults(pod: &Pod, args: &PodTopologySpreadArgs) -> PodRules {
        let objects = cluster();
        let view = objects.view();
        let owners = SpreadOwners::new(&view);
        let defaults = SpreadDefaults::new(args);
        let (spread, soft_spread) = defaults_for(pod, &defaults, &owners).expect("read").unwrap_or_default();
        PodRules { spread, soft_spread, system_spread: defaults.system, ..Default::default() }
    }

    #[test]
    fn a_pod_spreads_among_what_its_services_and_controller_select() {
        let rules = defaults(&pod(""), &PodTopologySpreadArgs::default());
        assert!(rules.system_spread && rules.spread.is_empty());
        let soft: Vec<(i32, &str)> = rules.soft_spread.iter().map(|r| (r.max_skew, r.topology_key.as_str())).collect();
        assert_eq!(soft, [(3, "kubernetes.io/hostname"), (5, "topology.kubernetes.io/zone")]);
        // The two Services of its namespace that select it, then its ReplicaSet's selector.
        let selector = rules.soft_spread[0].selector.as_ref().expect("a selector");
        let parts: Vec<String> = selector.iter().map(|r| format!("{}={}", r.key, r.values.join(","))).collect();
        assert_eq!(parts, ["app=web", "tier=front", "app=web", "pod-template-hash=7d9"]);
    }

    #[test]
    fn accelerator_pods_keep_packing_unless_the_list_is_configured() {
        let gpu = pod(", resources: {limits: {nvidia.com/gpu: 1}}");
        assert!(defaults(&gpu, &PodTopologySpreadArgs::default()).soft_spread.is_empty());
        let list: PodTopologySpreadArgs = read(
            "defaultingType: List
defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}]",
        );
        let rules = defaults(&gpu, &list);
        assert_eq!((rules.spread.len(), rules.soft_spread.len(), rules.system_spread), (1, 0, false));
    }

    #[test]
    fn a_pod_with_its_own_constraints_or_that_nothing_selects_gets_none() {
        let own = pod(
            "}]\n  topologySpreadConstraints: [{maxSkew: 1, topologyKey: z, whenUnsatisfiable: ScheduleAnyway, labelSelector: {}}]\n  initContainers: [{name: i",
        );
        assert!(defaults(&own, &PodTopologySpreadArgs::default()).soft_spread.is_empty());
        let alone: Pod = read("metadata: {name: p, namespace: ml, labels: {app: db}}\nspec: {containers: [{name: a}]}");
        assert!(defaults(&alone, &PodTopologySpreadArgs::default()).soft_spread.is_empty());
    }
}
