use super::*;
use crate::api::kueue::{LocalQueue, LocalQueues};
use crate::engine::resources::ResourceId;

fn objects<T: serde::de::DeserializeOwned>(yaml: &str) -> Vec<T> {
    yaml_serde::Deserializer::from_str(yaml).map(|d| T::deserialize(d).unwrap()).collect()
}

fn rule(specs: &[QueueSpec], names: &ResourceNames, queue: &str, key: &str) -> ResourceRule {
    let spec = specs.iter().find(|s| s.name == queue).unwrap_or_else(|| panic!("no queue {queue}"));
    spec.resources.iter().find(|(id, _)| names.name(*id) == key).unwrap_or_else(|| panic!("{queue} has no {key}")).1
}

const TWO_TEAMS: &str = "
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohortName: research
  namespaceSelector: {}
  fairSharing: {weight: \"3\"}
  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: \"32\"}
      - {name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 4, lendingLimit: 2}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohort: research
  namespaceSelector: {matchLabels: {team: b}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: alone}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 4}
";

#[test]
fn cluster_queues_become_leaves_of_their_cohort_with_borrowing_as_a_limit() {
    let cqs: Vec<ClusterQueue> = objects(TWO_TEAMS);
    let ns: Namespace = yaml_serde::from_str("metadata: {name: ml-b, labels: {team: b}}").unwrap();
    let mut names = ResourceNames::default();
    let specs = kueue_queue_specs(&cqs.iter().collect::<Vec<_>>(), &[], &[&ns], &mut names);
    let names_of: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names_of, ["kueue/team-a", "kueue/team-b", "kueue/alone", "kueue-cohort/research"]);
    assert!(specs.iter().all(|s| s.problem.is_none()), "{specs:?}");
    let a = rule(&specs, &names, "kueue/team-a", "nvidia.com/gpu");
    assert_eq!((a.quota, a.limit, a.lending_limit, a.weight_milli), (Some(8000), Some(12_000), Some(2000), 3000));
    assert_eq!(rule(&specs, &names, "kueue/team-a", "cpu").quota, Some(32_000));
    // No borrowingLimit: it may borrow all the cohort has.
    assert_eq!(rule(&specs, &names, "kueue/team-b", "nvidia.com/gpu").limit, None);
    // No cohort: nobody to borrow from.
    assert_eq!(rule(&specs, &names, "kueue/alone", "nvidia.com/gpu").limit, Some(4000));
    // The cohort pools its queues' quotas.
    let cohort = rule(&specs, &names, "kueue-cohort/research", "nvidia.com/gpu");
    assert_eq!((cohort.quota, cohort.limit), (Some(16_000), None));
    let a = &specs[0];
    assert_eq!(a.parent.as_deref(), Some("kueue-cohort/research"));
    assert_eq!((a.preemption.reclaim, a.preemption.within), (ReclaimPolicy::Any, WithinQueue::LowerPriority));
    assert_eq!(a.namespaces, None);
    let b = &specs[1];
    assert_eq!((b.preemption.reclaim, b.preemption.within), (ReclaimPolicy::Never, WithinQueue::Never));
    assert_eq!(b.namespaces, Some(vec!["ml-b".to_string()]));
}

#[test]
fn a_cohort_object_adds_its_own_quota_to_its_childrens_and_nests() {
    let cqs: Vec<ClusterQueue> = objects(TWO_TEAMS);
    let cohorts: Vec<Cohort> = objects(
        "
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  parentName: org
  fairSharing: {weight: 500m}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 4, borrowingLimit: 2}
",
    );
    let mut names = ResourceNames::default();
    let specs = kueue_queue_specs(&cqs.iter().collect::<Vec<_>>(), &[&cohorts[0]], &[], &mut names);
    let research = rule(&specs, &names, "kueue-cohort/research", "nvidia.com/gpu");
    assert_eq!((research.quota, research.limit, research.weight_milli), (Some(20_000), Some(22_000), 500));
    let org = specs.iter().find(|s| s.name == "kueue-cohort/org").unwrap();
    assert_eq!(org.parent, None);
    assert_eq!(rule(&specs, &names, "kueue-cohort/org", "nvidia.com/gpu").quota, Some(20_000));
    let research = specs.iter().find(|s| s.name == "kueue-cohort/research").unwrap();
    assert_eq!(research.parent.as_deref(), Some("kueue-cohort/org"));
}

#[test]
fn what_is_not_supported_is_said_in_notes_and_bad_amounts_are_problems() {
    let cqs: Vec<ClusterQueue> = objects(
        "
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: mixed}
spec:
  admissionChecks: [prov]
  preemption: {borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
  - coveredResources: [memory]
    flavors:
    - name: h100
      resources: [{name: memory, nominalQuota: lots}]
",
    );
    let mut names = ResourceNames::default();
    let specs = kueue_queue_specs(&[&cqs[0]], &[], &[], &mut names);
    let spec = &specs[0];
    assert_eq!(rule(&specs, &names, "kueue/mixed", "nvidia.com/gpu").quota, Some(6000));
    let notes = spec.notes.join("\n");
    assert_eq!(spec.preemption.borrow_within_parent, Some(Some(100)));
    for said in ["flavors a100, h100 are counted as one pool", "admission checks"] {
        assert!(notes.contains(said), "{notes}");
    }
    assert!(notes.contains("namespaceSelector is unset"), "{notes}");
    assert_eq!(spec.namespaces, Some(Vec::new()));
    let problem = spec.problem.as_deref().unwrap();
    assert!(problem.contains("flavor h100 nominalQuota: resource memory: invalid quantity \"lots\""), "{problem}");
    assert_eq!(names.get("memory"), Some(ResourceId::MEMORY));
}

#[test]
fn a_local_queue_leads_to_its_cluster_queue_and_a_missing_one_is_named() {
    let lqs: Vec<LocalQueue> = objects(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {namespace: ml, name: user-queue}\nspec: {clusterQueue: team-a}\n",
    );
    let local = LocalQueues::new(&[&lqs[0]]);
    assert_eq!(local.queue_of("ml", "user-queue"), "kueue/team-a");
    assert_eq!(local.queue_of("other", "user-queue"), "kueue-localqueue/other/user-queue");
}
