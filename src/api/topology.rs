//! The cluster's own topology objects: Kueue's `Topology` (`kueue.x-k8s.io/v1beta2`, or
//! `v1beta1`) and KAI Scheduler's `Topology` (`kai.scheduler/v1alpha1`), both cluster-scoped
//! lists of node label keys, outermost first. Read whenever served, so that a Kueue or KAI
//! annotation naming a node label key (`cloud.provider.com/topology-rack`) gets the levels
//! above it there: the rack `r1` of block `b1` and the rack `r1` of block `b2` are two racks.
//! Muster never writes them.
//!
//! Kueue's v1beta1 objects are kept as v1beta2's (the same fields).

use kube::CustomResource;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
// serde keeps the old name and wording, so that its error messages read as before.
#[serde(rename = "TopologyLevel", expecting = "struct TopologyLevel", rename_all = "camelCase")]
pub struct TopologyObjectLevel {
    pub node_label: String,
}

/// Kueue's Topology.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(derive = "PartialEq")]
#[kube(group = "kueue.x-k8s.io", version = "v1beta2", kind = "Topology", plural = "topologies", schema = "disabled")]
pub struct KueueTopologySpec {
    /// Outermost first.
    #[serde(default)]
    pub levels: Vec<TopologyObjectLevel>,
}

pub mod v1beta1 {
    use super::*;

    /// Kueue's Topology before v1beta2 (the same fields).
    #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    #[kube(derive = "PartialEq")]
    #[kube(
        group = "kueue.x-k8s.io",
        version = "v1beta1",
        kind = "Topology",
        plural = "topologies",
        schema = "disabled"
    )]
    // serde keeps the old name and wording, so that its error messages read as before.
    #[serde(rename = "KueueTopologySpec", expecting = "struct KueueTopologySpec")]
    pub struct KueueTopologyV1beta1Spec {
        /// Outermost first.
        #[serde(default)]
        pub levels: Vec<TopologyObjectLevel>,
    }

    impl From<Topology> for super::Topology {
        fn from(t: Topology) -> super::Topology {
            super::Topology { metadata: t.metadata, spec: super::KueueTopologySpec { levels: t.spec.levels } }
        }
    }
}

pub mod kai {
    use super::*;

    /// KAI Scheduler's Topology.
    #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    #[kube(derive = "PartialEq")]
    #[kube(
        group = "kai.scheduler",
        version = "v1alpha1",
        kind = "Topology",
        plural = "topologies",
        schema = "disabled"
    )]
    pub struct KaiTopologySpec {
        /// Outermost first.
        #[serde(default)]
        pub levels: Vec<TopologyObjectLevel>,
    }
}

/// The hierarchies the cluster's topology objects describe: node label keys, outermost
/// first; Kueue's, then KAI Scheduler's, each in name order.
pub fn hierarchies(kueue: &[&Topology], kai: &[&kai::Topology]) -> Vec<Vec<String>> {
    let levels = |levels: &[TopologyObjectLevel]| levels.iter().map(|l| l.node_label.clone()).collect::<Vec<_>>();
    let mut kueue: Vec<(&str, Vec<String>)> =
        kueue.iter().map(|t| (t.metadata.name.as_deref().unwrap_or_default(), levels(&t.spec.levels))).collect();
    let mut kai: Vec<(&str, Vec<String>)> =
        kai.iter().map(|t| (t.metadata.name.as_deref().unwrap_or_default(), levels(&t.spec.levels))).collect();
    kueue.sort();
    kai.sort();
    kueue.into_iter().chain(kai).map(|(_, levels)| levels).filter(|l| !l.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kueue_and_kai_topologies_read_as_label_hierarchies() {
        let kueue: Topology = yaml_serde::from_str(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: default}\n\
             spec:\n  levels:\n  - nodeLabel: cloud.provider.com/topology-block\n  - nodeLabel: cloud.provider.com/topology-rack\n",
        )
        .unwrap();
        let kai: kai::Topology = yaml_serde::from_str(
            "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: default}\n\
             spec:\n  levels:\n  - nodeLabel: topology.kubernetes.io/zone\n  - nodeLabel: kubernetes.io/hostname\n",
        )
        .unwrap();
        assert_eq!(
            hierarchies(&[&kueue], &[&kai]),
            vec![
                vec!["cloud.provider.com/topology-block".to_string(), "cloud.provider.com/topology-rack".into()],
                vec!["topology.kubernetes.io/zone".to_string(), "kubernetes.io/hostname".into()],
            ]
        );
    }
}
