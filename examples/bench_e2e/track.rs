//! Follows one namespace's pods through a watch (never a list per poll, which at 20,000 pods
//! would load the API server more than the scheduler under test): which are bound, and when
//! the last was, their gangs, their claims, and how many were deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::objects::GANG_LABEL;

#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub gang: Option<String>,
    pub bound: bool,
    /// The node it is bound to.
    pub node: Option<String>,
    pub uid: String,
    /// The name of the pod's first claim, once kube-controller-manager has made it.
    pub claim: Option<String>,
}

#[derive(Default)]
struct State {
    pods: HashMap<String, Seen>,
    bound: usize,
    claimed: usize,
    /// Pods deleted since the watch began.
    deleted: usize,
    last_bound: Option<Instant>,
}

impl State {
    fn apply(&mut self, pod: &Pod) {
        let Some(name) = pod.metadata.name.clone() else { return };
        let seen = Seen {
            gang: pod.metadata.labels.as_ref().and_then(|l| l.get(GANG_LABEL)).cloned(),
            bound: pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            claim: pod
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.resource_claim_name.clone()),
        };
        let before = self.pods.get(&name).cloned().unwrap_or_default();
        if seen.bound && !before.bound {
            self.bound += 1;
            self.last_bound = Some(Instant::now());
        }
        if seen.claim.is_some() && before.claim.is_none() {
            self.claimed += 1;
        }
        // Neither is ever undone for a pod that still exists.
        let merged = Seen {
            bound: seen.bound || before.bound,
            node: seen.node.or(before.node),
            claim: seen.claim.or(before.claim),
            ..seen
        };
        self.pods.insert(name, merged);
    }

    /// A pod deleted (a scheduler evicting the bound pods of a gang it rolls back, say):
    /// it no longer counts as bound.
    fn delete(&mut self, pod: &Pod) {
        let Some(seen) = pod.metadata.name.as_ref().and_then(|n| self.pods.remove(n)) else { return };
        self.deleted += 1;
        self.bound -= usize::from(seen.bound);
        self.claimed -= usize::from(seen.claim.is_some());
    }
}

pub struct Tracker {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tracker {
    pub fn start(pods: Api<Pod>) -> Tracker {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(pods, watcher::Config::default()).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        shared.lock().unwrap_or_else(|e| e.into_inner()).apply(&pod);
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        shared.lock().unwrap_or_else(|e| e.into_inner()).delete(&pod);
                    }
                    _ => {}
                }
            }
        });
        Tracker { state, task }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn bound(&self) -> usize {
        self.lock().bound
    }

    pub fn deleted(&self) -> usize {
        self.lock().deleted
    }

    pub fn claimed(&self) -> usize {
        self.lock().claimed
    }

    /// When the last pod was seen bound.
    pub fn last_bound(&self) -> Option<Instant> {
        self.lock().last_bound
    }

    /// Every pod seen, by name.
    pub fn pods(&self) -> HashMap<String, Seen> {
        self.lock().pods.clone()
    }

    /// Gangs of `size` pods with some but not all bound, and gangs with fewer than `size`
    /// pods left (some deleted).
    pub fn split_gangs(&self, size: usize) -> (usize, usize) {
        let state = self.lock();
        let mut gangs: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for seen in state.pods.values() {
            if let Some(gang) = &seen.gang {
                let entry = gangs.entry(gang).or_default();
                entry.0 += 1;
                entry.1 += usize::from(seen.bound);
            }
        }
        let split = gangs.values().filter(|(_, bound)| *bound > 0 && *bound < size).count();
        let short = gangs.values().filter(|(pods, _)| *pods < size).count();
        (split, short)
    }

    /// The deployments of the rules run (pods `d<D>-<r>`) whose bound replicas break their
    /// rules: two on one node, and zones (`zone_of` a node) whose counts differ by more
    /// than one. Checked here, from what the API server shows, not by either scheduler.
    pub fn broken_rules(&self, zones: usize, zone_of: impl Fn(&str) -> Option<usize>) -> (usize, usize) {
        let state = self.lock();
        let mut deployments: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, seen) in &state.pods {
            if let (Some(node), Some((deployment, _))) = (&seen.node, name.rsplit_once('-')) {
                deployments.entry(deployment).or_default().push(node);
            }
        }
        let (mut shared, mut skewed) = (0, 0);
        for nodes in deployments.values_mut() {
            let mut per_zone = vec![0usize; zones];
            for node in nodes.iter() {
                if let Some(z) = zone_of(node).filter(|z| *z < zones) {
                    per_zone[z] += 1;
                }
            }
            let (least, most) = (per_zone.iter().min().copied(), per_zone.iter().max().copied());
            skewed += usize::from(most.zip(least).is_some_and(|(most, least)| most > least + 1));
            nodes.sort_unstable();
            let before = nodes.len();
            nodes.dedup();
            shared += usize::from(nodes.len() < before);
        }
        (shared, skewed)
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}
