//! The cache's side of gangs from owners: each pod is resolved as it arrives (before it is
//! compared with the version held, so an unchanged pod stays unchanged), and the pods of a
//! workload that changes are resolved again, each recorded as changed so that the next
//! snapshot makes their gangs again. A workload's own change is recorded in its store,
//! which the snapshot reads with the PodGroups.

use k8s_openapi::api::core::v1::Pod;

use crate::convert::view::gang_key;
use crate::convert::workloads::{MAX_DEPTH, Workload, WorkloadKind, key};
use crate::convert::workloads::{resolve, resolve::Workloads};
use crate::k8s::store::cache::Cache;
use crate::k8s::store::changes::Help;

impl Workloads for Cache {
    fn get(&self, namespace: &str, key: &str) -> Option<&Workload> {
        self.workloads.get(namespace, key)
    }
    fn watched(&self, kind: WorkloadKind) -> bool {
        self.workload_kinds.contains(&kind)
    }
}

impl Cache {
    /// Marks `pod` with the gang its owners make, from the workloads held.
    pub fn mark_pod(&self, pod: &mut Pod) {
        resolve::mark(pod, self);
    }

    /// A workload arrived or changed; nothing happens if what is kept of it did not change.
    pub fn apply_workload(&mut self, workload: Workload) {
        if self.workloads.find(&workload) == Some(&workload) {
            return;
        }
        let (namespace, key) = (workload.namespace().to_string(), workload.metadata.name.clone().unwrap_or_default());
        self.workloads.apply(workload);
        self.workload_changed(&namespace, &key);
    }

    pub fn delete_workload(&mut self, workload: &Workload) {
        self.workloads.delete(workload);
        self.workload_changed(workload.namespace(), workload.metadata.name.as_deref().unwrap_or_default());
    }

    /// A relist of the workloads of `kind` is complete: those not listed are gone, the others
    /// applied (each changed one resolving its pods again). Several kinds share the store, so
    /// a relist touches only its own kind.
    pub fn workloads_relisted(&mut self, kind: WorkloadKind, listed: Vec<Workload>) {
        let keys: std::collections::HashSet<(String, String)> =
            listed.iter().map(|w| (w.namespace().to_string(), w.metadata.name.clone().unwrap_or_default())).collect();
        let gone: Vec<Workload> = self
            .workloads
            .values()
            .filter(|w| w.kind == kind)
            .filter(|w| !keys.contains(&(w.namespace().to_string(), w.metadata.name.clone().unwrap_or_default())))
            .cloned()
            .collect();
        for workload in &gone {
            self.delete_workload(workload);
        }
        for workload in listed {
            self.apply_workload(workload);
        }
    }

    /// Every pod resolved again (after a relist of pods, whose pods were resolved against
    /// whatever workloads were held as they arrived).
    pub fn remark_all(&mut self) {
        let pods: Vec<(String, String)> = self
            .pods
            .values()
            .map(|p| (p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone().unwrap_or_default()))
            .collect();
        for (namespace, name) in pods {
            self.remark(&namespace, &name);
        }
    }

    /// Resolves again the pods of the workload `key` and of every workload under it (a
    /// JobSet's Jobs).
    fn workload_changed(&mut self, namespace: &str, key: &str) {
        let mut owners = vec![key.to_string()];
        for w in self.workloads.in_namespace(namespace) {
            let mut up = w.controller();
            for _ in 0..MAX_DEPTH {
                let Some(r) = up else { break };
                let Some(kind) = WorkloadKind::from_name(&r.kind).filter(|k| k.owns(r)) else { break };
                let above = self::key(kind, &r.name);
                if above == key {
                    owners.push(w.metadata.name.clone().unwrap_or_default());
                    break;
                }
                up = self.workloads.get(namespace, &above).and_then(Workload::controller);
            }
        }
        let pods: Vec<String> = owners.iter().flat_map(|o| self.pod_owners.of(namespace, o).cloned()).collect();
        for name in pods {
            self.remark(namespace, &name);
        }
    }

    /// Resolves one held pod again; when its gang moved, both gangs are touched.
    fn remark(&mut self, namespace: &str, name: &str) {
        let Some(held) = self.pods.get(namespace, name) else { return };
        let mut pod = held.clone();
        if !resolve::mark(&mut pod, self) {
            return;
        }
        let before = gang_key(held);
        self.changes.note(Help::Gang(before));
        self.changes.note(Help::Gang(gang_key(&pod)));
        self.apply_pod(pod);
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use crate::engine::model::{GangKey, GangKind};
    use crate::k8s::store::watch::apply_event;

    fn job(parallelism: u32, version: &str) -> Workload {
        let object = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "u-train", "resourceVersion": version},
            "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed"},
            "status": {"active": version},
        });
        Workload::read(WorkloadKind::Job, &object).unwrap()
    }

    fn pod(i: usize) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("train-{i}"), "namespace": "ml",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-train", "controller": true}]},
            "spec": {"schedulerName": "muster", "containers": [{"name": "c"}]},
        }))
        .unwrap()
    }

    fn gang_of(cache: &Cache, i: usize) -> GangKey {
        gang_key(cache.pods.get("ml", &format!("train-{i}")).unwrap())
    }

    #[test]
    fn pods_seen_before_their_job_wait_for_it_then_join_its_gang_and_its_status_moves_nothing() {
        let mut cache = Cache::default();
        cache.workload_kinds = [WorkloadKind::Job].into();
        for i in 0..2 {
            apply_event(&mut cache, Event::Apply(pod(i)));
        }
        let train = GangKey { kind: GangKind::Workload, namespace: "ml".into(), name: "Job/train".into() };
        assert_eq!(gang_of(&cache, 0), train, "its Job is read but not here yet: the pod waits for it");
        cache.changes.take_touched();
        let before = cache.pods.journal().mark();

        assert!(apply_event(&mut cache, Event::Apply(job(2, "1"))));
        assert_eq!(gang_of(&cache, 1), train);
        assert!(!apply_event(&mut cache, Event::Apply(job(2, "2"))), "a status change wakes nothing");
        assert_eq!(cache.pods.journal().mark(), before, "nor does it touch the pods");

        // A Job of one pod leaves its pods alone: both move, both are recorded.
        assert!(apply_event(&mut cache, Event::Apply(job(1, "3"))));
        assert_eq!(gang_of(&cache, 0).kind, GangKind::Single);
        assert_ne!(cache.pods.journal().mark(), before);
        let touched = cache.changes.take_touched();
        assert!(touched.contains(&train) && touched.iter().any(|g| g.name == "train-1"), "{touched:?}");

        // Deleted: its pods are of a kind read and their owner is gone, so they wait again.
        apply_event(&mut cache, Event::Delete(job(1, "4")));
        assert_eq!(gang_of(&cache, 1), train);
    }

    #[test]
    fn after_both_relists_the_gang_of_the_pods_has_its_spec() {
        let mut cache = Cache::default();
        cache.workload_kinds = [WorkloadKind::Job].into();
        apply_event(&mut cache, Event::<Pod>::Init);
        apply_event(&mut cache, Event::InitApply(pod(0)));
        cache.workloads_relisted(WorkloadKind::Job, vec![job(2, "1")]);
        // Another kind's relist leaves the Jobs alone.
        cache.workloads_relisted(WorkloadKind::PyTorchJob, Vec::new());
        apply_event(&mut cache, Event::<Pod>::InitDone);
        let specs = crate::convert::groups::group_specs(&cache.view());
        let key = gang_of(&cache, 0);
        assert!(specs.contains_key(&key), "{key:?} in {:?}", specs.keys());
    }

    #[test]
    fn a_snapshot_made_before_the_job_arrived_takes_its_spec_once_it_does() {
        use crate::convert::assemble::{Memo, assemble_view};
        let mut cache = Cache::default();
        cache.workload_kinds = [WorkloadKind::Job].into();
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "10"}}}))
        .unwrap();
        apply_event(&mut cache, Event::Apply(node));
        for i in 0..2 {
            apply_event(&mut cache, Event::Apply(pod(i)));
        }
        let mut memo = Memo::new(&crate::config::Config::default());
        let before = assemble_view(&cache.view(), "muster", 0, &mut memo);
        assert!(before.snapshot.gangs[0].blocked.as_deref().is_some_and(|b| b.contains("not read yet")));
        apply_event(&mut cache, Event::Apply(job(2, "1")));
        let after = assemble_view(&cache.view(), "muster", 0, &mut memo);
        let gang = &after.snapshot.gangs[0];
        assert_eq!((gang.blocked.as_deref(), gang.min_member), (None, 2));
    }
}
