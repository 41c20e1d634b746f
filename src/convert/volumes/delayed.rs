//! A claim that waits for its first consumer, read as kube-scheduler's volume binder reads
//! it: the free volumes it could be bound to (as the PV controller matches them: class,
//! size, volume mode, attributes class, access modes, the claim's selector; a volume
//! already promised to the claim wins; only volumes of the claim's class are looked at), where its class can provision one (the class's
//! allowed topologies), and, when the CSI driver publishes its capacities, where there is
//! room for it. A claim already given a node keeps it.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{VolumeError, VolumeIndex};
use crate::convert::core::{describe, requirement};
use crate::engine::model::{DelayedClaim, LabelRequirement, SelectorOperator};
use crate::engine::volumes::NodeTerms;
use crate::quantity::Quantity;

/// The annotation that names the node a delayed claim was given, for its provisioner.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The provisioner of classes whose volumes are made by hand.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The annotation older objects name their class with, read before the field.
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// A claim's or volume's class: the beta annotation first, then the field.
pub fn class_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, field: Option<&str>) -> String {
    let annotated = meta.annotations.as_ref().and_then(|a| a.get(BETA_CLASS)).map(String::as_str);
    annotated.or(field).unwrap_or_default().to_string()
}

/// Bytes of `storage` in a capacity or request map; 0 when absent or unreadable.
fn storage(
    map: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> i64 {
    map.and_then(|m| m.get("storage")).and_then(|q| Quantity::parse(&q.0).ok()).map_or(0, Quantity::units_ceil)
}

/// Whether the class binds its claims only once a pod using them is given a node.
pub fn waits_for_consumer(class: &StorageClass) -> bool {
    class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
}

impl VolumeIndex<'_> {
    /// What the node of a pod using `claim` (of `class`) must allow.
    pub(super) fn delayed(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<DelayedClaim, VolumeError> {
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let selected = claim.metadata.annotations.as_ref().and_then(|a| a.get(SELECTED_NODE));
        if let Some(node) = selected {
            // Given a node already: that node or none, as kube-scheduler's fast path says.
            let term = vec![LabelRequirement {
                key: "metadata.name".into(),
                operator: SelectorOperator::In,
                values: vec![node.clone()],
            }];
            return Ok(DelayedClaim { namespace, name, volumes: Vec::new(), provision: Some(vec![term]), room: None });
        }
        let volumes = self.free_volumes(claim, class)?;
        let provisioner = class.provisioner.as_str();
        let provision = (!provisioner.is_empty() && provisioner != NO_PROVISIONER).then(|| allowed_topologies(class));
        let room = match provision {
            Some(_) => self.room(claim, class),
            None => None,
        };
        Ok(DelayedClaim { namespace, name, volumes, provision, room })
    }

    /// The free volumes `claim` could be bound to, smallest first, with the node terms each
    /// reaches: only the one promised to the claim, when there is one.
    fn free_volumes(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<Vec<(String, NodeTerms)>, VolumeError> {
        let spec = claim.spec.as_ref();
        let wanted = storage(spec.and_then(|s| s.resources.as_ref()?.requests.as_ref()));
        let mode = |m: Option<&String>| m.map_or("Filesystem", |m| m.as_str()).to_string();
        let claim_mode = mode(spec.and_then(|s| s.volume_mode.as_ref()));
        let claim_attributes = spec.and_then(|s| s.volume_attributes_class_name.clone()).unwrap_or_default();
        let modes = spec.and_then(|s| s.access_modes.clone()).unwrap_or_default();
        let object = describe("PersistentVolumeClaim", &claim.metadata);
        let selector = spec.and_then(|s| s.selector.as_ref());
        let selector = crate::convert::pod_rules::selector(&object, selector).map_err(VolumeError::Affinity)?;
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        let mut found: Vec<(i64, &PersistentVolume)> = Vec::new();
        for &volume in self.by_class.get(class_name).into_iter().flatten() {
            let Some(vspec) = volume.spec.as_ref() else { continue };
            let size = storage(vspec.capacity.as_ref());
            let promised = vspec.claim_ref.as_ref().is_some_and(|r| {
                r.name.as_deref() == claim.metadata.name.as_deref()
                    && r.namespace.as_deref() == claim.metadata.namespace.as_deref()
                    && r.uid.as_deref().is_none_or(|u| u.is_empty() || Some(u) == claim.metadata.uid.as_deref())
            });
            if (vspec.claim_ref.is_some() && !promised)
                || size < wanted
                || mode(vspec.volume_mode.as_ref()) != claim_mode
                || vspec.volume_attributes_class_name.clone().unwrap_or_default() != claim_attributes
                || volume.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            if promised {
                return Ok(vec![(volume.metadata.name.clone().unwrap_or_default(), volume_terms(volume)?)]);
            }
            let labels = volume.metadata.labels.clone().unwrap_or_default();
            let available = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available");
            let selected = selector.as_ref().is_none_or(|s| s.iter().all(|r| r.matches(&labels)));
            let has = vspec.access_modes.as_deref().unwrap_or_default();
            if available && selected && modes.iter().all(|m| has.contains(m)) {
                found.push((size, volume));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.metadata.name.cmp(&b.1.metadata.name)));
        found.into_iter().map(|(_, v)| Ok((v.metadata.name.clone().unwrap_or_default(), volume_terms(v)?))).collect()
    }

    /// Where the capacities the class's CSI driver publishes leave room for `claim`; None
    /// when the claim asks no size or the driver tracks no capacity.
    fn room(&self, claim: &PersistentVolumeClaim, class: &StorageClass) -> Option<NodeTerms> {
        let requests = claim.spec.as_ref().and_then(|s| s.resources.as_ref()?.requests.as_ref());
        requests?.get("storage")?;
        let wanted = storage(requests);
        let driver = self.drivers.get(class.provisioner.as_str())?;
        driver.spec.storage_capacity.filter(|tracked| *tracked)?;
        let class_name = class.metadata.name.as_deref().unwrap_or_default();
        let terms = self
            .capacities
            .iter()
            .filter(|c| c.storage_class_name == class_name)
            .filter(|c| {
                c.maximum_volume_size
                    .as_ref()
                    .or(c.capacity.as_ref())
                    .is_some_and(|q| Quantity::parse(&q.0).is_ok_and(|q| q.units_ceil() >= wanted))
            })
            .filter_map(|c| {
                let object = describe("CSIStorageCapacity", &c.metadata);
                crate::convert::pod_rules::selector(&object, c.node_topology.as_ref()).ok().flatten()
            })
            .collect();
        Some(terms)
    }
}

/// The node terms a volume reaches: its required node affinity, or every node.
pub(super) fn volume_terms(volume: &PersistentVolume) -> Result<NodeTerms, VolumeError> {
    let Some(required) = volume.spec.as_ref().and_then(|s| s.node_affinity.as_ref()?.required.as_ref()) else {
        return Ok(vec![Vec::new()]);
    };
    let object = describe("PersistentVolume", &volume.metadata);
    let mut terms = Vec::new();
    for term in &required.node_selector_terms {
        let expressions = term.match_expressions.iter().flatten();
        let fields = term.match_fields.iter().flatten();
        let requirements = expressions.chain(fields).map(|r| requirement(&object, r));
        let requirements = requirements.collect::<Result<Vec<_>, _>>().map_err(VolumeError::Affinity)?;
        // A term that asks nothing matches no node.
        if !requirements.is_empty() {
            terms.push(requirements);
        }
    }
    Ok(terms)
}

/// Where a class can provision: its allowed topologies, or every node.
fn allowed_topologies(class: &StorageClass) -> NodeTerms {
    let Some(allowed) = class.allowed_topologies.as_ref().filter(|a| !a.is_empty()) else {
        return vec![Vec::new()];
    };
    allowed
        .iter()
        .map(|term| {
            term.match_label_expressions
                .iter()
                .flatten()
                .map(|e| LabelRequirement {
                    key: e.key.clone(),
                    operator: SelectorOperator::In,
                    values: e.values.clone(),
                })
                .collect()
        })
        .collect()
}
