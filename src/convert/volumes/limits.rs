//! NodeVolumeLimits, as kube-scheduler 1.37 counts it: each node's CSINode says how many
//! volumes each CSI driver may attach there (`allocatable.count`), and each pod's claims
//! attach volumes keyed by driver and handle: a bound claim its CSI volume's, a claim not
//! bound yet its class's provisioner with a key of its own. Volumes of other kinds (in-tree
//! ones) are not counted, nor are VolumeAttachments left on a node without a pod
//! (docs/scheduling.md).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::class_of;
use super::once::claim_names;
use crate::convert::view::ClusterView;
use crate::engine::pods::{Attachment, VolumeLimits};

/// What each claim attaches, by namespace and name; made once per snapshot made afresh
/// (claims, volumes and classes changing make it afresh).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimAttachments {
    /// By namespace, then claim name.
    by_claim: HashMap<String, HashMap<String, Attachment>>,
}

impl ClaimAttachments {
    pub fn new(view: &ClusterView<'_>) -> ClaimAttachments {
        let volumes: HashMap<&str, _> =
            view.persistent_volumes.iter().filter_map(|v| Some((v.metadata.name.as_deref()?, *v))).collect();
        let classes: HashMap<&str, _> =
            view.storage_classes.iter().filter_map(|c| Some((c.metadata.name.as_deref()?, *c))).collect();
        let mut by_claim: HashMap<String, HashMap<String, Attachment>> = HashMap::new();
        for claim in &view.persistent_volume_claims {
            let (Some(namespace), Some(name)) = (claim.metadata.namespace.as_deref(), claim.metadata.name.as_deref())
            else {
                continue;
            };
            let spec = claim.spec.as_ref();
            let bound = spec.and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty());
            let attachment = match bound {
                Some(volume) => volumes
                    .get(volume)
                    .and_then(|v| v.spec.as_ref()?.csi.as_ref())
                    .map(|csi| Attachment { driver: csi.driver.clone(), handle: csi.volume_handle.clone() }),
                None => {
                    let class = class_of(&claim.metadata, spec.and_then(|s| s.storage_class_name.as_deref()));
                    classes
                        .get(class.as_str())
                        .map(|c| Attachment { driver: c.provisioner.clone(), handle: format!("{namespace}/{name}") })
                }
            };
            if let Some(attachment) = attachment {
                by_claim.entry(namespace.to_string()).or_default().insert(name.to_string(), attachment);
            }
        }
        ClaimAttachments { by_claim }
    }

    /// What `pod`'s claims attach, sorted, each once.
    pub fn of(&self, pod: &Pod) -> Vec<Attachment> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let Some(claims) = self.by_claim.get(namespace) else { return Vec::new() };
        let mut found: Vec<Attachment> = claim_names(pod).filter_map(|claim| claims.get(&claim).cloned()).collect();
        found.sort();
        found.dedup();
        found
    }
}

/// Each node's limits (by the index `node_index` gives its name), from the CSINodes.
pub fn volume_limits(view: &ClusterView<'_>, node_index: &HashMap<String, usize>) -> VolumeLimits {
    let mut limits = VolumeLimits::default();
    for csi_node in &view.csi_nodes {
        let Some(&i) = csi_node.metadata.name.as_ref().and_then(|n| node_index.get(n)) else { continue };
        let drivers = csi_node.spec.drivers.iter();
        let counted: Vec<(String, u32)> = drivers
            .filter_map(|d| {
                let count = d.allocatable.as_ref()?.count?;
                Some((d.name.clone(), u32::try_from(count).unwrap_or(0)))
            })
            .collect();
        if !counted.is_empty() {
            if limits.on_node.len() <= i {
                limits.on_node.resize_with(i + 1, Vec::new);
            }
            limits.on_node[i] = counted;
        }
    }
    limits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::view::ClusterObjects;

    fn read<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        yaml_serde::from_str(yaml).expect("yaml")
    }

    #[test]
    fn claims_attach_their_csi_volume_or_their_provisioners_and_nodes_say_how_many() {
        let objects = ClusterObjects {
            persistent_volumes: vec![
                read("metadata: {name: pv-a}\nspec: {csi: {driver: ebs.example, volumeHandle: vol-a}}"),
                read("metadata: {name: pv-nfs}\nspec: {nfs: {server: s, path: /p}}"),
            ],
            persistent_volume_claims: vec![
                read("metadata: {name: a, namespace: ml}\nspec: {volumeName: pv-a}"),
                read("metadata: {name: nfs, namespace: ml}\nspec: {volumeName: pv-nfs}"),
                read("metadata: {name: fresh, namespace: ml}\nspec: {storageClassName: gp3}"),
            ],
            storage_classes: vec![read("metadata: {name: gp3}\nprovisioner: ebs.example")],
            csi_nodes: vec![
                read(
                    "metadata: {name: n2}\nspec: {drivers: [{name: ebs.example, nodeID: x, allocatable: {count: 25}}, {name: other, nodeID: y}]}",
                ),
                read(
                    "metadata: {name: gone}\nspec: {drivers: [{name: ebs.example, nodeID: z, allocatable: {count: 1}}]}",
                ),
            ],
            ..Default::default()
        };
        let view = objects.view();
        let attachments = ClaimAttachments::new(&view);
        let pod: Pod = read(
            "metadata: {name: p, namespace: ml}
spec:
  containers: [{name: c}]
  volumes:
  - {name: a, persistentVolumeClaim: {claimName: a}}
  - {name: b, persistentVolumeClaim: {claimName: a}}
  - {name: n, persistentVolumeClaim: {claimName: nfs}}
  - {name: f, persistentVolumeClaim: {claimName: fresh}}",
        );
        let attached = attachments.of(&pod);
        let found: Vec<(&str, &str)> = attached.iter().map(|a| (a.driver.as_str(), a.handle.as_str())).collect();
        assert_eq!(found, [("ebs.example", "ml/fresh"), ("ebs.example", "vol-a")]);
        let index: HashMap<String, usize> = [("n1".to_string(), 0), ("n2".to_string(), 1)].into();
        let limits = volume_limits(&view, &index);
        assert_eq!(limits.on(0), []);
        assert_eq!(limits.on(1), [("ebs.example".to_string(), 25)]);
    }
}
