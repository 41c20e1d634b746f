//! Companion mode, computed without I/O: NVIDIA's DRA driver publishes the node's GPUs, and
//! the agent takes a failing one out of service with a DeviceTaintRule aimed at that
//! driver's device, found in its ResourceSlices by the GPU's UUID.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::gpu::Gpu;
use super::slices::{self, NODE_LABEL, Publication, health_taint};

/// Whether `driver` publishes devices for `node` (what `--mode auto` looks for).
pub fn publishes_for(slices: &[ResourceSlice], driver: &str, node: &str) -> bool {
    slices.iter().any(|s| s.spec.driver == driver && s.spec.node_name.as_deref() == Some(node))
}

/// A device of the other driver that belongs to a GPU: the GPU itself (its `uuid`) or one
/// of its MIG devices (`parentUUID`). Attribute names may carry the driver's domain.
fn belongs_to(
    attributes: Option<&BTreeMap<String, k8s_openapi::api::resource::v1::DeviceAttribute>>,
    driver: &str,
    uuid: &str,
) -> bool {
    let Some(attributes) = attributes else { return false };
    ["uuid", "parentUUID"].iter().any(|name| {
        let qualified = format!("{driver}/{name}");
        [name.to_string(), qualified]
            .iter()
            .any(|key| attributes.get(key).and_then(|a| a.string.as_deref()) == Some(uuid))
    })
}

/// The DeviceTaintRules this node's GPUs call for: one per device of `driver` on the node
/// whose GPU is not healthy. Taint keys are in `taint_domain` (the agent's own driver name),
/// so they never collide with the other driver's own taints. Rules are owned by the Node,
/// so they go with it.
pub fn rules(
    gpus: &[Gpu],
    slices: &[ResourceSlice],
    driver: &str,
    publication: &Publication,
    taint_domain: &str,
) -> Vec<DeviceTaintRule> {
    let node = publication.node_name.as_str();
    let owner = slices::node_owner(publication);
    let mut rules = Vec::new();
    for gpu in gpus {
        let Some(taint) = health_taint(taint_domain, &gpu.health) else { continue };
        for slice in slices.iter().filter(|s| s.spec.driver == driver && s.spec.node_name.as_deref() == Some(node)) {
            for device in slice.spec.devices.iter().flatten() {
                if !belongs_to(device.attributes.as_ref(), driver, &gpu.uuid) {
                    continue;
                }
                rules.push(DeviceTaintRule {
                    metadata: ObjectMeta {
                        name: Some(rule_name(node, &slice.spec.pool.name, &device.name)),
                        labels: Some(BTreeMap::from([(NODE_LABEL.to_string(), node.to_string())])),
                        owner_references: owner.clone(),
                        ..Default::default()
                    },
                    spec: DeviceTaintRuleSpec {
                        device_selector: Some(DeviceTaintSelector {
                            driver: Some(driver.to_string()),
                            pool: Some(slice.spec.pool.name.clone()),
                            device: Some(device.name.clone()),
                        }),
                        taint: taint.clone(),
                    },
                    status: None,
                });
            }
        }
    }
    rules.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    rules.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    rules
}

/// A rule's name: `muster-<node>-<pool>-<device>` as a DNS subdomain.
pub fn rule_name(node: &str, pool: &str, device: &str) -> String {
    let raw = if pool == node { format!("muster-{node}-{device}") } else { format!("muster-{node}-{pool}-{device}") };
    let mut name: String = raw
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
        .collect();
    name.truncate(253);
    name.trim_end_matches(['-', '.']).to_string()
}

/// The writes that make the node's published rules match the wanted ones.
#[derive(Debug, Default, PartialEq)]
pub struct RulePlan {
    pub create: Vec<DeviceTaintRule>,
    pub replace: Vec<DeviceTaintRule>,
    pub delete: Vec<String>,
}

pub fn plan(published: &[DeviceTaintRule], wanted: Vec<DeviceTaintRule>) -> RulePlan {
    let mut plan = RulePlan::default();
    for rule in &wanted {
        match published.iter().find(|p| p.metadata.name == rule.metadata.name) {
            None => plan.create.push(rule.clone()),
            Some(old) => {
                let mut old_taint = old.spec.taint.clone();
                old_taint.time_added = None;
                if old.spec.device_selector != rule.spec.device_selector || old_taint != rule.spec.taint {
                    let mut rule = rule.clone();
                    rule.metadata.resource_version = old.metadata.resource_version.clone();
                    plan.replace.push(rule);
                }
            }
        }
    }
    for old in published {
        if !wanted.iter().any(|w| w.metadata.name == old.metadata.name) {
            plan.delete.push(old.metadata.name.clone().unwrap_or_default());
        }
    }
    plan
}
