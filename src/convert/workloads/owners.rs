//! The cache's index of pods by the first owner their gang is looked up by, so that a
//! workload that changes (created after its pods, resized, deleted) re-resolves only its
//! own pods.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;

use super::resolve::first_owner;

#[derive(Clone, Debug, Default)]
pub struct PodOwners {
    /// (namespace, owner's store key) → names of its pods.
    by_owner: HashMap<(String, String), BTreeSet<String>>,
}

fn entry(pod: &Pod) -> Option<((String, String), String)> {
    let owner = first_owner(pod)?;
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    Some(((namespace, owner), pod.metadata.name.clone().unwrap_or_default()))
}

impl PodOwners {
    pub fn add(&mut self, pod: &Pod) {
        if let Some((owner, name)) = entry(pod) {
            self.by_owner.entry(owner).or_default().insert(name);
        }
    }

    pub fn remove(&mut self, pod: &Pod) {
        if let Some((owner, name)) = entry(pod)
            && let Some(pods) = self.by_owner.get_mut(&owner)
        {
            pods.remove(&name);
            if pods.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }

    /// The pods whose first owner is `owner` (a store key) in `namespace`.
    pub fn of(&self, namespace: &str, owner: &str) -> impl Iterator<Item = &String> {
        self.by_owner.get(&(namespace.to_string(), owner.to_string())).into_iter().flatten()
    }

    pub fn rebuild<'p>(&mut self, pods: impl Iterator<Item = &'p Pod>) {
        self.by_owner.clear();
        for pod in pods {
            self.add(pod);
        }
    }
}
