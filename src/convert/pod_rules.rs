//! A pod's rules between pods read into the engine's terms (`engine::pods`): its host
//! ports, pod affinity and anti-affinity terms (required and preferred) with their
//! namespaces resolved and `matchLabelKeys`/`mismatchLabelKeys` merged into their selectors
//! (as the API server does when it admits a pod; a pod read from a file has not been
//! through one), and its topology spread constraints with their defaults and
//! `matchLabelKeys`, as kube-scheduler 1.37 reads them (docs/kube-scheduler-semantics.md,
//! sections 1 to 3).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Namespace, Pod, PodAffinityTerm, PodSpec, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::core::{Error, Result, describe};
use crate::engine::model::{LabelRequirement, SelectorOperator};
use crate::engine::pods::{
    Attachment, BoundPod, HostPort, Labels, Namespaces, PodRules, PodSelector, PodTerm, SpreadRule, WeightedTerm,
};

/// A pod's labels, shared.
pub fn labels(pod: &Pod) -> Labels {
    Arc::new(pod.metadata.labels.clone().unwrap_or_default())
}

/// The rules of `pod`; None when it has none. `namespaces`: the cluster's, for terms that
/// select namespaces by label.
pub fn pod_rules(pod: &Pod, namespaces: &[&Namespace]) -> Result<Option<Arc<PodRules>>> {
    let Some(spec) = pod.spec.as_ref() else { return Ok(None) };
    let object = describe("Pod", &pod.metadata);
    let own = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let affinity = spec.affinity.as_ref();
    let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
    let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
    let terms = |terms: Option<&Vec<PodAffinityTerm>>| -> Result<Vec<PodTerm>> {
        terms.into_iter().flatten().map(|t| term(&object, own, &labels, t, namespaces)).collect()
    };
    let weighted = |terms: Option<&Vec<WeightedPodAffinityTerm>>| -> Result<Vec<WeightedTerm>> {
        let read = |t: &WeightedPodAffinityTerm| -> Result<WeightedTerm> {
            Ok(WeightedTerm { weight: t.weight, term: term(&object, own, &labels, &t.pod_affinity_term, namespaces)? })
        };
        terms.into_iter().flatten().map(read).collect()
    };
    let spreads = |when: &str| -> Result<Vec<SpreadRule>> {
        let constraints = spec.topology_spread_constraints.iter().flatten();
        constraints.filter(|c| c.when_unsatisfiable == when).map(|c| spread(&object, c, &labels)).collect()
    };
    let rules = PodRules {
        ports: host_ports(spec),
        attach: Vec::new(),
        affinity: terms(pod_affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()))?,
        anti_affinity: terms(anti.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()))?,
        spread: spreads("DoNotSchedule")?,
        preferred_affinity: weighted(
            pod_affinity.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
        )?,
        preferred_anti_affinity: weighted(
            anti.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
        )?,
        soft_spread: spreads("ScheduleAnyway")?,
        system_spread: false,
    };
    Ok((!rules.is_empty()).then(|| Arc::new(rules)))
}

/// A bound pod as the rules between pods count it, with the volumes its claims `attach`;
/// its rules are left out if they cannot be read (the API server validated them; nothing
/// placed later should fail for them).
pub fn bound_pod(pod: &Pod, namespaces: &[&Namespace], attach: Vec<Attachment>) -> BoundPod {
    let mut rules = pod_rules(pod, namespaces).ok().flatten();
    if !attach.is_empty() {
        let mut with = rules.as_deref().cloned().unwrap_or_default();
        with.attach = attach;
        rules = Some(Arc::new(with));
    }
    BoundPod {
        key: super::view::pod_key(&pod.metadata),
        labels: labels(pod),
        rules,
        terminating: pod.metadata.deletion_timestamp.is_some(),
    }
}

/// The host ports of the containers and of the init containers that run beside them
/// (sidecars: `restartPolicy: Always`).
fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let containers = spec.containers.iter().chain(sidecars);
    let ports = containers.flat_map(|c: &Container| c.ports.iter().flatten());
    let mut found: Vec<HostPort> = ports
        .filter(|p| p.host_port.is_some_and(|port| port > 0))
        .map(|p| HostPort {
            ip: p.host_ip.clone().filter(|ip| !ip.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
            protocol: p.protocol.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "TCP".into()),
            port: p.host_port.unwrap_or_default(),
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

fn term(
    object: &str,
    own: &str,
    labels: &BTreeMap<String, String>,
    t: &PodAffinityTerm,
    namespaces: &[&Namespace],
) -> Result<PodTerm> {
    let listed = t.namespaces.clone().unwrap_or_default();
    let names = match &t.namespace_selector {
        None if listed.is_empty() => Namespaces::Only(vec![own.to_string()]),
        None => Namespaces::Only(listed),
        Some(s)
            if s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_ref().is_none_or(Vec::is_empty) =>
        {
            Namespaces::All
        }
        Some(s) => {
            let selector = selector(object, Some(s))?.unwrap_or_default();
            let mut names = listed;
            for ns in namespaces {
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                if selector.iter().all(|r| r.matches(&labels)) {
                    names.extend(ns.metadata.name.clone());
                }
            }
            Namespaces::Only(names)
        }
    };
    let names = match names {
        Namespaces::Only(mut names) => {
            names.sort();
            names.dedup();
            Namespaces::Only(names)
        }
        all => all,
    };
    let mut selector = selector(object, t.label_selector.as_ref())?;
    if let Some(requirements) = selector.as_mut() {
        add_label_keys(requirements, t.match_label_keys.iter().flatten(), SelectorOperator::In, labels);
        add_label_keys(requirements, t.mismatch_label_keys.iter().flatten(), SelectorOperator::NotIn, labels);
    }
    Ok(PodTerm { namespaces: names, selector, topology_key: t.topology_key.clone() })
}

/// Adds `key <operator> (the pod's value)` for each of `keys` the pod has a label for
/// (`matchLabelKeys` with In, `mismatchLabelKeys` with NotIn).
fn add_label_keys<'k>(
    requirements: &mut Vec<LabelRequirement>,
    keys: impl Iterator<Item = &'k String>,
    operator: SelectorOperator,
    labels: &BTreeMap<String, String>,
) {
    for key in keys {
        if let Some(value) = labels.get(key) {
            requirements.push(LabelRequirement { key: key.clone(), operator, values: vec![value.clone()] });
        }
    }
}

fn spread(object: &str, c: &TopologySpreadConstraint, labels: &BTreeMap<String, String>) -> Result<SpreadRule> {
    let mut selector = selector(object, c.label_selector.as_ref())?;
    if let Some(requirements) = selector.as_mut() {
        add_label_keys(requirements, c.match_label_keys.iter().flatten(), SelectorOperator::In, labels);
    }
    let policy = |value: Option<&String>, default_honor: bool, field: &'static str| match value.map(String::as_str) {
        None => Ok(default_honor),
        Some("Honor") => Ok(true),
        Some("Ignore") => Ok(false),
        Some(other) => Err(Error::Unknown { object: object.into(), what: field, value: other.into() }),
    };
    Ok(SpreadRule {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        selector,
        min_domains: c.min_domains.unwrap_or(1),
        honor_affinity: policy(c.node_affinity_policy.as_ref(), true, "nodeAffinityPolicy")?,
        honor_taints: policy(c.node_taints_policy.as_ref(), false, "nodeTaintsPolicy")?,
    })
}

/// A label selector as requirements; None for none (which selects nothing).
pub(crate) fn selector(object: &str, s: Option<&LabelSelector>) -> Result<PodSelector> {
    let Some(s) = s else { return Ok(None) };
    let mut requirements: Vec<LabelRequirement> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelRequirement { key: k.clone(), operator: SelectorOperator::In, values: vec![v.clone()] })
        .collect();
    for e in s.match_expressions.iter().flatten() {
        let operator = match e.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => {
                return Err(Error::Unknown {
                    object: object.into(),
                    what: "label selector operator",
                    value: other.into(),
                });
            }
        };
        requirements.push(LabelRequirement {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(Some(requirements))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        yaml_serde::from_str(yaml).expect("pod")
    }

    fn namespace(name: &str, team: &str) -> Namespace {
        yaml_serde::from_str(&format!("metadata: {{name: {name}, labels: {{team: {team}}}}}")).expect("namespace")
    }

    #[test]
    fn host_ports_are_normalised_and_only_sidecars_among_init_containers_count() {
        let p = pod("metadata: {name: p, namespace: web}
spec:
  containers: [{name: a, ports: [{containerPort: 80, hostPort: 8080}, {containerPort: 81}, {containerPort: 53, hostPort: 53, protocol: UDP, hostIP: 10.0.0.1}]}]
  initContainers:
  - {name: init, ports: [{containerPort: 90, hostPort: 9090}]}
  - {name: side, restartPolicy: Always, ports: [{containerPort: 91, hostPort: 9191}]}");
        let rules = pod_rules(&p, &[]).expect("read").expect("rules");
        let ports: Vec<(&str, &str, i32)> =
            rules.ports.iter().map(|p| (p.ip.as_str(), p.protocol.as_str(), p.port)).collect();
        assert_eq!(ports, [("0.0.0.0", "TCP", 8080), ("0.0.0.0", "TCP", 9191), ("10.0.0.1", "UDP", 53)]);
    }

    #[test]
    fn term_namespaces_default_to_the_pods_own_and_selectors_resolve_by_label() {
        let p = pod("metadata: {name: p, namespace: web}
spec:
  containers: [{name: a}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: zone, labelSelector: {matchLabels: {app: db}}}
      - {topologyKey: zone, namespaceSelector: {}, labelSelector: {matchLabels: {app: db}}}
      - {topologyKey: zone, namespaces: [extra], namespaceSelector: {matchLabels: {team: a}}}");
        let spaces = [namespace("a1", "a"), namespace("b1", "b"), namespace("a2", "a")];
        let refs: Vec<&Namespace> = spaces.iter().collect();
        let rules = pod_rules(&p, &refs).expect("read").expect("rules");
        let names: Vec<&Namespaces> = rules.affinity.iter().map(|t| &t.namespaces).collect();
        assert_eq!(
            names,
            [
                &Namespaces::Only(vec!["web".into()]),
                &Namespaces::All,
                &Namespaces::Only(vec!["a1".into(), "a2".into(), "extra".into()])
            ]
        );
        // A term without a label selector selects no pod.
        assert_eq!(rules.affinity[2].selector, None);
    }

    #[test]
    fn spread_takes_its_defaults_and_match_label_keys_and_keeps_schedule_anyway_apart() {
        let p = pod("metadata: {name: p, namespace: web, labels: {app: web, pod-template-hash: abc}}
spec:
  containers: [{name: a}]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}, matchLabelKeys: [pod-template-hash, absent]}
  - {maxSkew: 2, topologyKey: host, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}");
        let rules = pod_rules(&p, &[]).expect("read").expect("rules");
        assert_eq!(rules.spread.len(), 1);
        assert_eq!(
            rules.soft_spread.iter().map(|r| (r.max_skew, r.topology_key.as_str())).collect::<Vec<_>>(),
            [(2, "host")]
        );
        let rule = &rules.spread[0];
        assert_eq!((rule.max_skew, rule.min_domains, rule.honor_affinity, rule.honor_taints), (1, 1, true, false));
        let keys: Vec<&str> = rule.selector.as_ref().expect("selector").iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["app", "pod-template-hash"]);
    }

    #[test]
    fn preferred_terms_keep_their_weights_and_label_keys_join_the_selector() {
        let p = pod("metadata: {name: p, namespace: web, labels: {app: web, tenant: t1}}
spec:
  containers: [{name: a}]
  affinity:
    podAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 30
        podAffinityTerm: {topologyKey: zone, labelSelector: {matchLabels: {app: db}}, matchLabelKeys: [tenant]}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 70
        podAffinityTerm: {topologyKey: host, labelSelector: {matchLabels: {app: web}}, mismatchLabelKeys: [tenant, absent]}");
        let rules = pod_rules(&p, &[]).expect("read").expect("rules");
        let show = |w: &WeightedTerm| {
            let selector = w.term.selector.as_ref().expect("selector");
            let parts: Vec<String> =
                selector.iter().map(|r| format!("{} {:?} {:?}", r.key, r.operator, r.values)).collect();
            (w.weight, w.term.topology_key.clone(), parts)
        };
        assert_eq!(
            show(&rules.preferred_affinity[0]),
            (30, "zone".into(), vec!["app In [\"db\"]".to_string(), "tenant In [\"t1\"]".into()])
        );
        assert_eq!(
            show(&rules.preferred_anti_affinity[0]),
            (70, "host".into(), vec!["app In [\"web\"]".to_string(), "tenant NotIn [\"t1\"]".into()])
        );
        assert!(rules.pulls() && rules.prefers());
    }

    #[test]
    fn a_pod_without_rules_has_none_and_a_bad_policy_names_the_pod() {
        assert_eq!(pod_rules(&pod("metadata: {name: p}\nspec: {containers: [{name: a}]}"), &[]).expect("read"), None);
        let bad = pod("metadata: {name: p, namespace: web}
spec:
  containers: [{name: a}]
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Sometimes}]");
        let error = pod_rules(&bad, &[]).expect_err("refused").to_string();
        assert!(
            error.contains("web/p") && error.contains("nodeTaintsPolicy") && error.contains("Sometimes"),
            "{error}"
        );
    }
}
