//! What a change in the cache could help: the scheduling loop's unschedulable pool retries a
//! gang that did not fit only after a change that could let it fit, or one to the gang
//! itself (see `scheduling::pool`). Watch events are sorted here, once, as they are applied.
//!
//! A change *helps every gang* when it may free or add capacity, or move what decides a
//! fit: a node added or changed, a bound pod deleted or ended (or its spec changed), a
//! pending pod deleted (its queue's demand moves), a claim's allocation dropped, any change to a slice, device class, taint rule, queue,
//! namespace or priority class, the end of a relist, or an assumption the scheduler takes
//! back. A change *touches one gang* when it is that gang's own: one of its pods created,
//! changed or bound, its PodGroup changed. Claims gaining an allocation help nobody.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Resource;

use crate::engine::model::{GangKey, GangKind};

/// Gangs touched between two cycles, at most; past it every gang counts as helped (a
/// standby replica runs no cycle to drain the set).
const MAX_TOUCHED: usize = 100_000;

/// What one change could help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Help {
    Nobody,
    /// Only this gang: its own pods or PodGroup changed.
    Gang(GangKey),
    /// Any gang that did not fit.
    Every,
}

/// Changes since the scheduling loop last looked, as its pool reads them.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    /// Counts changes that could help every gang.
    helped: u64,
    touched: HashSet<GangKey>,
}

impl Changes {
    pub fn note(&mut self, help: Help) {
        match help {
            Help::Nobody => {}
            Help::Gang(gang) => {
                if self.touched.len() >= MAX_TOUCHED {
                    self.touched.clear();
                    self.helped += 1;
                }
                self.touched.insert(gang);
            }
            Help::Every => self.helped += 1,
        }
    }

    /// How many changes so far could help every gang: a gang parked at one count is tried
    /// again at the next.
    pub fn helped(&self) -> u64 {
        self.helped
    }

    /// The gangs touched since the last call.
    pub fn take_touched(&mut self) -> HashSet<GangKey> {
        std::mem::take(&mut self.touched)
    }
}

fn bound(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.node_name.is_some())
}

fn ended(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// A pod changed from `old` to `new` (`None`: absent). A bound pod that goes or ends frees
/// its node's capacity; one whose spec changes (an in-place resize) may too; a pending pod
/// deleted moves its queue's demand. Anything else is its own gang's.
pub fn pod(old: Option<&Pod>, new: Option<&Pod>) -> Help {
    let Some(any) = new.or(old) else { return Help::Nobody };
    // A pending pod deleted: its queue asks for less, so others' fair shares may grow.
    if new.is_none() && old.is_some_and(|o| !bound(o) && !ended(o)) {
        return Help::Every;
    }
    if let Some(old) = old.filter(|o| bound(o) && !ended(o)) {
        match new {
            None => return Help::Every,
            Some(new) if ended(new) || (bound(new) && new.spec != old.spec) => return Help::Every,
            Some(_) => {}
        }
    }
    Help::Gang(crate::convert::view::gang_key(any))
}

/// A claim changed: only dropping an allocation frees devices. A claim created or deleted
/// helps too (a pod waits for its claim; a claim deleted with its allocation frees it).
pub fn claim(old: Option<&ResourceClaim>, new: Option<&ResourceClaim>) -> Help {
    let allocated = |c: &ResourceClaim| c.status.as_ref().is_some_and(|s| s.allocation.is_some());
    match (old, new) {
        (Some(old), Some(new)) if !allocated(old) || allocated(new) => Help::Nobody,
        _ => Help::Every,
    }
}

/// A PodGroup of `kind` changed: its own gang's.
pub fn group<K: Resource>(kind: GangKind, group: &K) -> Help {
    let meta = group.meta();
    Help::Gang(GangKey {
        kind,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_at(node: Option<&str>, phase: &str, gpus: u32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "labels": {"muster.dev/pod-group": "train"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": phase},
        }))
        .expect("pod")
    }

    fn train() -> Help {
        Help::Gang(GangKey { kind: GangKind::Muster, namespace: "ml".into(), name: "train".into() })
    }

    #[test]
    fn a_bound_pod_that_goes_ends_or_shrinks_helps_every_gang() {
        let running = pod_at(Some("n1"), "Running", 2);
        assert_eq!(pod(Some(&running), None), Help::Every);
        assert_eq!(pod(Some(&running), Some(&pod_at(Some("n1"), "Succeeded", 2))), Help::Every);
        assert_eq!(pod(Some(&running), Some(&pod_at(Some("n1"), "Running", 1))), Help::Every);
    }

    #[test]
    fn a_pod_created_bound_or_changing_status_is_only_its_gangs() {
        let pending = pod_at(None, "Pending", 2);
        let bound = pod_at(Some("n1"), "Pending", 2);
        assert_eq!(pod(None, Some(&pending)), train());
        assert_eq!(pod(Some(&pending), Some(&bound)), train());
        assert_eq!(pod(Some(&bound), Some(&pod_at(Some("n1"), "Running", 2))), train());
        // A pending pod deleted leaves its queue asking for less: other queues' fair
        // shares may grow.
        assert_eq!(pod(Some(&pending), None), Help::Every);
        // An ended pod deleted frees nothing either: it stopped counting when it ended.
        let done = pod_at(Some("n1"), "Succeeded", 2);
        assert_eq!(pod(Some(&done), None), train());
    }

    #[test]
    fn only_a_claim_losing_its_allocation_helps() {
        let pending: ResourceClaim =
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {}})).expect("claim");
        let allocated: ResourceClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"}, "spec": {},
            "status": {"allocation": {"devices": {"results": []}}},
        }))
        .expect("claim");
        assert_eq!(claim(Some(&pending), Some(&allocated)), Help::Nobody);
        assert_eq!(claim(Some(&allocated), Some(&allocated)), Help::Nobody);
        assert_eq!(claim(Some(&allocated), Some(&pending)), Help::Every);
        assert_eq!(claim(Some(&allocated), None), Help::Every);
        assert_eq!(claim(None, Some(&pending)), Help::Every);
    }

    #[test]
    fn touched_gangs_are_bounded_and_overflow_helps_every_gang() {
        let mut changes = Changes::default();
        for i in 0..MAX_TOUCHED + 1 {
            changes.note(Help::Gang(GangKey { kind: GangKind::Single, namespace: "ns".into(), name: i.to_string() }));
        }
        assert_eq!(changes.helped(), 1);
        assert_eq!(changes.take_touched().len(), 1);
        assert!(changes.take_touched().is_empty());
    }
}
