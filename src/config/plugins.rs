//! The `plugins` section: what a kube-scheduler scheduling profile sets that Muster reads,
//! under kube-scheduler's own names, so that a profile carries over (docs/scheduling.md,
//! "Configuring the plugins"). Every filter always runs: turning one off would place pods
//! where their own spec says they must not go.

use serde::{Deserialize, Serialize};

use crate::engine::Weights;

/// The `plugins` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Plugins {
    /// The weights of the scores Muster computes as kube-scheduler does; 0 turns one off.
    pub weights: PluginWeights,
    pub inter_pod_affinity: InterPodAffinityArgs,
    pub pod_topology_spread: PodTopologySpreadArgs,
}

/// Score weights, by plugin name (kube-scheduler's default profile's by default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
pub struct PluginWeights {
    pub node_affinity: u32,
    pub taint_toleration: u32,
    pub inter_pod_affinity: u32,
    pub pod_topology_spread: u32,
}

impl Default for PluginWeights {
    fn default() -> Self {
        let w = Weights::default();
        let read = |w: i64| u32::try_from(w).unwrap_or(0);
        PluginWeights {
            node_affinity: read(w.node_affinity),
            taint_toleration: read(w.taint_toleration),
            inter_pod_affinity: read(w.inter_pod_affinity),
            pod_topology_spread: read(w.pod_topology_spread),
        }
    }
}

/// InterPodAffinity's arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct InterPodAffinityArgs {
    /// What a bound pod's required affinity term adds, in scoring, for the pods it selects
    /// (0 to 100).
    pub hard_pod_affinity_weight: i32,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs { hard_pod_affinity_weight: Weights::default().hard_pod_affinity }
    }
}

/// Where PodTopologySpread's constraints for pods that set none come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DefaultingType {
    /// kube-scheduler's own: at most 3 pods more per node and 5 per zone than the least
    /// (`ScheduleAnyway`), for pods that ask for no accelerator (packing places those).
    #[default]
    System,
    /// `defaultConstraints`, for every pod (none if the list is empty).
    List,
}

/// PodTopologySpread's arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PodTopologySpreadArgs {
    pub defaulting_type: DefaultingType,
    /// With `List`: the constraints, without a label selector (each pod's is made from the
    /// Services, ReplicaSets, StatefulSets and ReplicationControllers that select it).
    pub default_constraints: Vec<DefaultConstraint>,
}

/// One default spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: String,
}

impl PodTopologySpreadArgs {
    /// The constraints pods that set none get: (maxSkew, topologyKey, whenUnsatisfiable).
    pub fn constraints(&self) -> Vec<DefaultConstraint> {
        match self.defaulting_type {
            DefaultingType::List => self.default_constraints.clone(),
            DefaultingType::System => [(3, "kubernetes.io/hostname"), (5, "topology.kubernetes.io/zone")]
                .into_iter()
                .map(|(max_skew, key)| DefaultConstraint {
                    max_skew,
                    topology_key: key.into(),
                    when_unsatisfiable: "ScheduleAnyway".into(),
                })
                .collect(),
        }
    }
}

impl Plugins {
    /// The engine's weights.
    pub fn weights(&self) -> Weights {
        let w = &self.weights;
        Weights {
            node_affinity: w.node_affinity.into(),
            taint_toleration: w.taint_toleration.into(),
            inter_pod_affinity: w.inter_pod_affinity.into(),
            pod_topology_spread: w.pod_topology_spread.into(),
            hard_pod_affinity: self.inter_pod_affinity.hard_pod_affinity_weight,
        }
    }

    /// What kube-scheduler's validation of the same arguments refuses.
    pub fn check(&self) -> Result<(), String> {
        let w = &self.weights;
        let most = [w.node_affinity, w.taint_toleration, w.inter_pod_affinity, w.pod_topology_spread];
        if most.iter().any(|&w| w > 100) {
            return Err("plugins.weights must each be between 0 and 100".into());
        }
        if !(0..=100).contains(&self.inter_pod_affinity.hard_pod_affinity_weight) {
            return Err("plugins.interPodAffinity.hardPodAffinityWeight must be between 0 and 100".into());
        }
        let spread = &self.pod_topology_spread;
        if spread.defaulting_type == DefaultingType::System && !spread.default_constraints.is_empty() {
            return Err("plugins.podTopologySpread.defaultConstraints needs defaultingType: List".into());
        }
        for (i, c) in spread.default_constraints.iter().enumerate() {
            let at = format!("plugins.podTopologySpread.defaultConstraints[{i}]");
            if c.max_skew < 1 {
                return Err(format!("{at}.maxSkew must be at least 1"));
            }
            if c.topology_key.is_empty() {
                return Err(format!("{at}.topologyKey must not be empty"));
            }
            if !matches!(c.when_unsatisfiable.as_str(), "DoNotSchedule" | "ScheduleAnyway") {
                return Err(format!(
                    "{at}.whenUnsatisfiable {:?} is neither DoNotSchedule nor ScheduleAnyway",
                    c.when_unsatisfiable
                ));
            }
            if spread.default_constraints[..i]
                .iter()
                .any(|o| (&o.topology_key, &o.when_unsatisfiable) == (&c.topology_key, &c.when_unsatisfiable))
            {
                return Err(format!("{at} repeats topologyKey {:?} with the same whenUnsatisfiable", c.topology_key));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn a_profile_carries_over_and_bad_arguments_are_named() {
        let config = Config::parse(
            "plugins:
  weights: {InterPodAffinity: 5, NodeAffinity: 0}
  interPodAffinity: {hardPodAffinityWeight: 10}
  podTopologySpread:
    defaultingType: List
    defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}]",
            "c.yaml",
        )
        .expect("read");
        let w = config.cycle().weights;
        assert_eq!((w.inter_pod_affinity, w.node_affinity, w.taint_toleration, w.hard_pod_affinity), (5, 0, 3, 10));
        assert_eq!(config.plugins.pod_topology_spread.constraints().len(), 1);
        assert_eq!(Config::default().plugins.pod_topology_spread.constraints().len(), 2);
        for (text, says) in [
            ("plugins: {weights: {PodTopologySpread: 101}}", "between 0 and 100"),
            ("plugins: {interPodAffinity: {hardPodAffinityWeight: -1}}", "hardPodAffinityWeight"),
            (
                "plugins: {podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: z, whenUnsatisfiable: DoNotSchedule}]}}",
                "needs defaultingType: List",
            ),
            (
                "plugins: {podTopologySpread: {defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: z, whenUnsatisfiable: Later}]}}",
                "defaultConstraints[0].whenUnsatisfiable \"Later\"",
            ),
            ("plugins: {weights: {ImageLocality: 1}}", "unknown field `ImageLocality`"),
        ] {
            let error = Config::parse(text, "c.yaml").expect_err(text).to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
