//! What changed in owned objects (the simulator's cluster) between two snapshots, found
//! by resourceVersion: every change the simulator makes stamps a new one, as the API
//! server does. Its views carry journals as the scheduler's cache's do, so a simulated
//! cycle brings the last snapshot up to date rather than making it afresh: one path for
//! both.

use std::cmp::Ordering;
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::Resource;

use crate::convert::journal::{Journal, ObjectKey};
use crate::convert::kinds::{Change, change, object_kinds};
use crate::convert::view::{ClusterObjects, ClusterView, Versions};

/// Where an object sorts in a view with versions: namespace (empty for cluster objects),
/// then name, as the cache's stores keep them.
fn id<T: Resource>(object: &T) -> (&str, &str) {
    let meta = object.meta();
    (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

fn version<T: Resource>(object: &T) -> Option<&str> {
    object.meta().resource_version.as_deref()
}

/// One store followed object by object: what each object's version was when last looked.
#[derive(Default)]
struct Followed {
    journal: Journal,
    seen: Vec<(ObjectKey, Option<String>)>,
}

impl Followed {
    /// Records every object of `now` (sorted by `id`) added, changed or removed since the
    /// last look.
    fn follow<T: Resource>(&mut self, now: &[&T]) {
        let (mut i, mut j, mut reshaped) = (0, 0, false);
        while i < self.seen.len() || j < now.len() {
            let order = match (self.seen.get(i), now.get(j)) {
                (Some((key, _)), Some(object)) => (key.0.as_str(), key.1.as_str()).cmp(&id(*object)),
                (Some(_), None) => Ordering::Less,
                _ => Ordering::Greater,
            };
            match order {
                Ordering::Equal => {
                    let current = version(now[j]);
                    if self.seen[i].1.as_deref() != current {
                        self.seen[i].1 = current.map(str::to_string);
                        self.journal.record(self.seen[i].0.clone());
                    }
                    i += 1;
                    j += 1;
                }
                Ordering::Less => {
                    self.journal.record(self.seen[i].0.clone());
                    reshaped = true;
                    i += 1;
                }
                Ordering::Greater => {
                    let (namespace, name) = id(now[j]);
                    self.journal.record((namespace.to_string(), name.to_string()));
                    reshaped = true;
                    j += 1;
                }
            }
        }
        if reshaped {
            self.seen = now
                .iter()
                .map(|o| {
                    let (namespace, name) = id(*o);
                    ((namespace.to_string(), name.to_string()), version(*o).map(str::to_string))
                })
                .collect();
        }
    }
}

/// Stores read as a whole: one fingerprint of every object's identity and version.
#[derive(Default)]
struct Whole {
    journal: Journal,
    print: Option<u64>,
}

impl Whole {
    fn follow(&mut self, print: u64) {
        if self.print != Some(print) {
            self.print = Some(print);
            self.journal.record(ObjectKey::default());
        }
    }
}

fn fingerprint<T: Resource>(hasher: &mut DefaultHasher, objects: &[T]) {
    objects.len().hash(hasher);
    for object in objects {
        id(object).hash(hasher);
        version(object).hash(hasher);
    }
}

/// Follows one `ClusterObjects` from view to view.
#[derive(Default)]
pub struct Tracker {
    pods: Followed,
    nodes: Followed,
    groups: Whole,
    others: Whole,
}

impl Tracker {
    /// `objects` as a view that says what changed since the last view this tracker made.
    pub fn view<'a>(&'a mut self, objects: &'a ClusterObjects) -> ClusterView<'a> {
        let mut view = objects.view();
        if !view.pods.is_sorted_by(|a, b| id(*a) <= id(*b)) {
            view.pods.sort_by(|a, b| id(*a).cmp(&id(*b)));
        }
        if !view.nodes.is_sorted_by(|a, b| id(*a) <= id(*b)) {
            view.nodes.sort_by(|a, b| id(*a).cmp(&id(*b)));
        }
        self.pods.follow(&view.pods);
        self.nodes.follow(&view.nodes);
        let (mut groups, mut others) = (DefaultHasher::new(), DefaultHasher::new());
        // Fingerprints each kind whose changes are the gangs' or everything's.
        macro_rules! fingerprints {
            ([] $($(#[$doc:meta])* $field:ident: $kind:ty => $change:ident,)*) => {
                $(match change!($change) {
                    Change::Groups => fingerprint(&mut groups, &objects.$field),
                    Change::Others => fingerprint(&mut others, &objects.$field),
                    Change::Pods | Change::Nodes => {}
                })*
            };
        }
        object_kinds!(fingerprints);
        self.groups.follow(groups.finish());
        objects.kueue_imported.hash(&mut others);
        self.others.follow(others.finish());
        let this: &'a Tracker = self;
        view.versions = Some(Versions {
            pods: &this.pods.journal,
            nodes: &this.nodes.journal,
            groups: vec![this.groups.journal.mark()],
            others: vec![this.others.journal.mark()],
        });
        view
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(name: &str, version: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ml".into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn changed(
        tracker: &mut Tracker,
        objects: &ClusterObjects,
        since: crate::convert::journal::JournalMark,
    ) -> Vec<String> {
        let view = tracker.view(objects);
        let versions = view.versions.as_ref().unwrap();
        versions.pods.since(since).unwrap().map(|k| k.1.clone()).collect()
    }

    #[test]
    fn a_view_names_the_pods_added_changed_and_removed_since_the_last_and_is_sorted() {
        let mut tracker = Tracker::default();
        let mut objects = ClusterObjects { pods: vec![pod("b", "1"), pod("a", "1")], ..Default::default() };
        let view = tracker.view(&objects);
        let names: Vec<_> = view.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["a", "b"], "pods in the order the cache keeps them");
        let mark = view.versions.as_ref().unwrap().pods.mark();
        let others = view.versions.as_ref().unwrap().others.clone();
        assert!(changed(&mut tracker, &objects, mark).is_empty(), "nothing changed");

        objects.pods[0].metadata.resource_version = Some("2".into());
        objects.pods.push(pod("c", "1"));
        objects.pods.remove(1);
        assert_eq!(changed(&mut tracker, &objects, mark), ["a", "b", "c"]);
        let view = tracker.view(&objects);
        assert_eq!(view.versions.as_ref().unwrap().others, others, "pods are not another store");
    }

    #[test]
    fn a_store_read_as_a_whole_moves_its_mark_when_any_object_in_it_changes() {
        let mut tracker = Tracker::default();
        let mut objects = ClusterObjects::default();
        objects.namespaces.push(Default::default());
        let before = tracker.view(&objects).versions.unwrap().others;
        assert_eq!(tracker.view(&objects).versions.unwrap().others, before);
        objects.namespaces[0].metadata.resource_version = Some("7".into());
        assert_ne!(tracker.view(&objects).versions.unwrap().others, before);
    }
}
