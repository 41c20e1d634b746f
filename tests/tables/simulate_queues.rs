//! `muster simulate` with team queues: fair shares, reclaim of whole gangs, preemption
//! inside a queue, surplus pods before cores, minimum runtimes, and no ping-pong over many
//! cycles. Each test writes a small cluster of ordinary YAML and reads the JSON document.

use std::fmt::Write;
use std::process::Command;

use serde_json::Value;

/// A cluster written as YAML, one object at a time.
#[derive(Default)]
struct Cluster(String);

const T0: &str = "2026-01-01T00:00:00Z";

fn time(minutes: u32) -> String {
    format!("2026-01-01T{:02}:{:02}:00Z", minutes / 60, minutes % 60)
}

impl Cluster {
    fn nodes(mut self, count: usize, gpus: u32) -> Cluster {
        for i in 1..=count {
            let _ = write!(
                self.0,
                "---\napiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}}}\nstatus:\n  allocatable: {{cpu: \"64\", memory: 512Gi, pods: \"110\", nvidia.com/gpu: \"{gpus}\"}}\n"
            );
        }
        self
    }

    /// A queue with a GPU quota and any further spec lines (indented two spaces).
    fn queue(mut self, name: &str, parent: &str, gpu_rule: &str, extra: &str) -> Cluster {
        let _ = write!(
            self.0,
            "---\napiVersion: muster.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}, creationTimestamp: \"{T0}\"}}\nspec:\n  parent: \"{parent}\"\n  resources:\n    nvidia.com/gpu: {gpu_rule}\n{extra}"
        );
        self
    }

    /// A gang in `queue` of `pods` pods with `gpus` GPUs each, created at minute
    /// `created`; with `on`, its pods run on that node since minute `started`.
    #[allow(clippy::too_many_arguments)]
    fn gang(
        mut self,
        name: &str,
        queue: &str,
        min: usize,
        pods: usize,
        gpus: u32,
        created: u32,
        on: Option<(&str, u32)>,
        spec_extra: &str,
    ) -> Cluster {
        let _ = write!(
            self.0,
            "---\napiVersion: muster.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: {name}, namespace: ml, creationTimestamp: \"{}\"}}\nspec: {{minMember: {min}, queue: {queue}{spec_extra}}}\n",
            time(created)
        );
        for i in 0..pods {
            let _ = write!(
                self.0,
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-{i}, namespace: ml, uid: {name}-{i}, creationTimestamp: \"{}\", labels: {{muster.dev/pod-group: {name}}}}}\nspec:\n  schedulerName: muster\n",
                time(created)
            );
            if let Some((node, _)) = on {
                let _ = writeln!(self.0, "  nodeName: {node}");
            }
            let _ = writeln!(
                self.0,
                "  containers: [{{name: c, image: train, resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}}}]"
            );
            if let Some((_, started)) = on {
                let _ = writeln!(self.0, "status: {{phase: Running, startTime: \"{}\"}}", time(started));
            }
        }
        self
    }

    fn priority_class(mut self, name: &str, value: i32) -> Cluster {
        let _ = write!(
            self.0,
            "---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\n"
        );
        self
    }

    fn simulate(&self, extra: &[&str]) -> Value {
        let dir = std::env::temp_dir().join(format!("muster-simq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:x}.yaml", fxhash(&self.0)));
        std::fs::write(&path, &self.0).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(["simulate", "--output", "json", "--cluster", path.to_str().unwrap()])
            .args(extra)
            .output()
            .expect("muster runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).expect("one JSON document")
    }
}

fn fxhash(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

fn pod<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["pods"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no pod {name}"))
}

/// Evictions as `pod reason preemptor cycle`.
fn evictions(report: &Value) -> Vec<String> {
    report
        .get("evictions")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|e| {
                    format!(
                        "{} {} {} {}",
                        e["name"].as_str().unwrap(),
                        e["reason"].as_str().unwrap(),
                        e["preemptor"].as_str().unwrap(),
                        e["cycle"]
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Two 8-GPU nodes, team-a and team-b with quota 8 each; team-a runs two gangs of 2×4.
fn two_teams() -> Cluster {
    Cluster::default()
        .nodes(2, 8)
        .queue("team-a", "", "{quota: \"8\"}", "")
        .queue("team-b", "", "{quota: \"8\"}", "")
        .gang("a-old", "team-a", 2, 2, 4, 0, Some(("node-1", 10)), "")
        .gang("a-new", "team-a", 2, 2, 4, 60, Some(("node-2", 70)), "")
}

#[test]
fn reclaim_evicts_the_newest_whole_gang_once_and_the_freed_gpus_go_to_the_owner() {
    let report = two_teams().gang("b-job", "team-b", 2, 2, 4, 120, None, "").simulate(&[]);
    // Both pods of a-new, in one cycle, and nothing after: the capacity was reserved.
    assert_eq!(evictions(&report), ["a-new-0 Reclaimed ml/b-job 1", "a-new-1 Reclaimed ml/b-job 1"]);
    assert_eq!(report["evictions"][0]["gang"], "ml/a-new");
    assert_eq!(pod(&report, "b-job-0")["node"], "node-2");
    assert_eq!(pod(&report, "b-job-1")["node"], "node-2");
    let victim = pod(&report, "a-new-0");
    assert_eq!(victim["evicted"], true);
    assert_eq!(victim["node"], Value::Null);
    let reason = victim["reason"].as_str().unwrap();
    assert!(reason.starts_with("evicted (Reclaimed) for gang ml/b-job in cycle 1; "), "{reason}");
    assert!(reason.contains("queue team-a has reached its fair share of 8 nvidia.com/gpu"), "{reason}");
    // The older gang is untouched.
    assert_eq!(pod(&report, "a-old-0")["node"], "node-1");
    assert!(pod(&report, "a-old-0").get("evicted").is_none());
}

#[test]
fn a_queue_within_its_quota_is_never_reclaimed() {
    // team-b runs its quota on node-2; team-a runs its quota on node-1 and wants more.
    let report = Cluster::default()
        .nodes(2, 8)
        .queue("team-a", "", "{quota: \"8\"}", "")
        .queue("team-b", "", "{quota: \"8\"}", "")
        .gang("a-run", "team-a", 2, 2, 4, 0, Some(("node-1", 10)), "")
        .gang("b-run", "team-b", 2, 2, 4, 0, Some(("node-2", 10)), "")
        .gang("a-more", "team-a", 1, 1, 4, 30, None, "")
        .simulate(&[]);
    assert!(evictions(&report).is_empty());
    assert!(pod(&report, "a-more-0")["reason"].as_str().unwrap().contains("queue team-a has reached its fair share"));
}

#[test]
fn priority_preempts_a_whole_two_pod_gang_inside_a_queue_and_never_crosses_queues() {
    // team-a runs low-priority work within its quota on node-1; team-b's own low-priority
    // gang on node-2 is what team-b's urgent gang preempts.
    let report = Cluster::default()
        .nodes(2, 8)
        .queue("team-a", "", "{quota: \"8\"}", "")
        .queue("team-b", "", "{quota: \"8\"}", "")
        .gang("a-low", "team-a", 2, 2, 4, 0, Some(("node-1", 10)), "")
        .gang("b-low", "team-b", 2, 2, 4, 0, Some(("node-2", 10)), "")
        .gang("b-urgent", "team-b", 2, 2, 4, 30, None, ", priorityClassName: urgent")
        .priority_class("urgent", 50)
        .simulate(&[]);
    assert_eq!(evictions(&report), ["b-low-0 Preempted ml/b-urgent 1", "b-low-1 Preempted ml/b-urgent 1"]);
    assert_eq!(pod(&report, "b-urgent-0")["node"], "node-2");
    assert_eq!(pod(&report, "a-low-0")["node"], "node-1");
}

#[test]
fn an_elastic_gang_loses_one_surplus_pod_and_keeps_its_core() {
    let report = Cluster::default()
        .nodes(1, 8)
        .queue("team-a", "", "{quota: \"0\"}", "")
        .queue("team-b", "", "{quota: \"8\"}", "")
        .gang("elastic", "team-a", 2, 4, 2, 0, Some(("node-1", 10)), "")
        .gang("b-small", "team-b", 1, 1, 2, 30, None, "")
        .simulate(&[]);
    assert_eq!(evictions(&report), ["elastic-3 Reclaimed ml/b-small 1"]);
    assert_eq!(pod(&report, "b-small-0")["node"], "node-1");
    for core in ["elastic-0", "elastic-1", "elastic-2"] {
        assert_eq!(pod(&report, core)["node"], "node-1");
    }
}

#[test]
fn a_minimum_runtime_protects_a_young_gang_until_the_clock_passes_it() {
    let cluster = two_teams()
        .queue("team-c", "", "{quota: \"0\"}", "  preemption: {reclaimMinRuntime: 2h}\n")
        .gang("b-job", "team-b", 2, 2, 4, 120, None, "");
    // Replace team-a's gangs' queue with team-c: both run beyond a zero quota.
    let cluster = Cluster(cluster.0.replace("queue: team-a", "queue: team-c"));
    let young = cluster.simulate(&["--now", "2026-01-01T02:00:00Z"]);
    assert!(evictions(&young).is_empty());
    let reason = pod(&young, "b-job-0")["reason"].as_str().unwrap().to_string();
    assert!(
        reason.ends_with("protected by their minimum runtime until 2026-01-01T02:10:00Z"),
        "the older gang (started 00:10) is the first to pass 2h: {reason}"
    );
    let later = cluster.simulate(&["--now", "2026-01-01T03:30:00Z"]);
    assert_eq!(evictions(&later), ["a-new-0 Reclaimed ml/b-job 1", "a-new-1 Reclaimed ml/b-job 1"]);
}

#[test]
fn non_preemptible_gangs_stay_within_quota_and_are_never_victims() {
    let report = Cluster::default()
        .nodes(2, 8)
        .queue("team-a", "", "{quota: \"4\"}", "")
        .queue("team-b", "", "{quota: \"12\"}", "")
        .gang("a-vital", "team-a", 2, 2, 4, 0, Some(("node-1", 10)), ", preemptibility: NonPreemptible")
        .gang("a-extra", "team-a", 2, 2, 4, 10, None, ", preemptibility: NonPreemptible")
        .gang("b-job", "team-b", 2, 2, 4, 20, None, "")
        .simulate(&[]);
    // a-vital runs beyond team-a's quota of 4 but cannot be reclaimed; b-job takes node-2.
    assert!(evictions(&report).is_empty());
    assert_eq!(pod(&report, "b-job-0")["node"], "node-2");
    let reason = pod(&report, "a-extra-0")["reason"].as_str().unwrap();
    assert!(reason.starts_with("a non-preemptible gang runs only within quota: queue team-a has 4"), "{reason}");
}

#[test]
fn in_a_hierarchy_reclaim_takes_from_the_sibling_over_its_share_not_from_a_cousin_at_its_share() {
    // org-x holds x1 and x2; org-y holds y1. Each org has quota 8 of 16 GPUs. x2 runs
    // beyond its share inside org-x; y1 runs exactly org-y's share. x1 reclaims from x2.
    let report = Cluster::default()
        .nodes(2, 8)
        .queue("org-x", "", "{quota: \"8\"}", "")
        .queue("org-y", "", "{quota: \"8\"}", "")
        .queue("x1", "org-x", "{quota: \"4\"}", "")
        .queue("x2", "org-x", "{quota: \"4\"}", "")
        .queue("y1", "org-y", "{quota: \"8\"}", "")
        .gang("x2-run", "x2", 2, 2, 4, 0, Some(("node-1", 10)), "")
        .gang("y1-run", "y1", 2, 2, 4, 0, Some(("node-2", 10)), "")
        .gang("x1-job", "x1", 1, 1, 4, 30, None, "")
        .simulate(&[]);
    assert_eq!(evictions(&report), ["x2-run-0 Reclaimed ml/x1-job 1", "x2-run-1 Reclaimed ml/x1-job 1"]);
    assert_eq!(pod(&report, "y1-run-0")["node"], "node-2");
    assert_eq!(pod(&report, "x1-job-0")["node"], "node-1");
}

#[test]
fn many_cycles_of_two_teams_wanting_everything_evict_once_and_settle() {
    // Both teams want the whole cluster; a holds it all at the start. One reclaim makes
    // the shares 8 and 8, and then nothing moves again within 50 cycles.
    let mut cluster = two_teams();
    for i in 0..3 {
        cluster = cluster.gang(&format!("a-wait-{i}"), "team-a", 2, 2, 4, 100 + i, None, "");
        cluster = cluster.gang(&format!("b-wait-{i}"), "team-b", 2, 2, 4, 110 + i, None, "");
    }
    let report = cluster.simulate(&["--cycles", "50"]);
    assert_eq!(evictions(&report), ["a-new-0 Reclaimed ml/b-wait-0 1", "a-new-1 Reclaimed ml/b-wait-0 1"]);
    let queues = report["queues"].as_array().unwrap();
    let allocated: Vec<&str> = queues
        .iter()
        .filter(|q| q["name"] != "default")
        .map(|q| q["resources"]["nvidia.com/gpu"]["allocated"].as_str().unwrap())
        .collect();
    assert_eq!(allocated, ["8", "8"]);
}

#[test]
fn a_queue_with_the_higher_priority_takes_the_surplus_first() {
    // Neither has quota; high's gang is younger but its queue's priority wins the node.
    let report = Cluster::default()
        .nodes(1, 8)
        .queue("low", "", "{quota: \"0\"}", "")
        .queue("high", "", "{quota: \"0\"}", "  priority: 200\n")
        .gang("low-job", "low", 1, 1, 8, 0, None, "")
        .gang("high-job", "high", 1, 1, 8, 30, None, "")
        .simulate(&[]);
    assert_eq!(pod(&report, "high-job-0")["node"], "node-1");
    assert_eq!(pod(&report, "low-job-0")["node"], Value::Null);
}

#[test]
fn weights_split_the_surplus_and_a_small_demand_caps_a_share() {
    // QUEUES.md §2.3: quotas 4 and 4, weights 1 and 3, both wanting everything: 6 and 10.
    let share = |report: &Value, queue: &str| -> String {
        let queues = report["queues"].as_array().unwrap();
        let q = queues.iter().find(|q| q["name"] == queue).unwrap();
        q["resources"]["nvidia.com/gpu"]["fairShare"].as_str().unwrap().to_string()
    };
    let weighted = Cluster::default()
        .nodes(2, 8)
        .queue("light", "", "{quota: \"4\", overQuotaWeight: 1}", "")
        .queue("heavy", "", "{quota: \"4\", overQuotaWeight: 3}", "")
        .gang("light-job", "light", 16, 16, 1, 0, None, "")
        .gang("heavy-job", "heavy", 16, 16, 1, 0, None, "")
        .simulate(&[]);
    assert_eq!((share(&weighted, "light"), share(&weighted, "heavy")), ("6".into(), "10".into()));
    // A queue that wants only 2 deserves 2; the rest goes to the other.
    let capped = Cluster::default()
        .nodes(2, 8)
        .queue("light", "", "{quota: \"4\", overQuotaWeight: 1}", "")
        .queue("heavy", "", "{quota: \"4\", overQuotaWeight: 3}", "")
        .gang("light-job", "light", 2, 2, 1, 0, None, "")
        .gang("heavy-job", "heavy", 16, 16, 1, 0, None, "")
        .simulate(&[]);
    assert_eq!((share(&capped, "light"), share(&capped, "heavy")), ("2".into(), "14".into()));
}

#[test]
fn explain_queue_shows_the_tree_the_figures_how_the_share_was_reached_and_why_gangs_wait() {
    use muster::cli::explain::{Target, explain_objects};
    let cluster = two_teams().gang("a-more", "team-a", 1, 1, 4, 90, None, "");
    let dir = std::env::temp_dir().join(format!("muster-explainq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, &cluster.0).unwrap();
    let loaded = muster::sim::load::load(&[path]).unwrap();
    let config = muster::config::Config::default();
    let now = 1_767_232_800; // 2026-01-01T02:00:00Z
    let text = explain_objects(&loaded.objects, &config, &Target::Queue { name: "team-a".into() }, now).unwrap();
    for expected in [
        "queue team-a (parent: none, top level, priority 100)",
        "tree:\n  default\n  team-a  <-\n  team-b\n",
        "nvidia.com/gpu: quota 8, limit none, fair share 16, allocated 16 (0 by non-preemptible gangs), requested 4",
        "borrowed 8 beyond its quota: reclaimable when its owners need it",
        "how the fair share was reached, from the top:\n    among the top level:",
        "pending gangs: 1\n  gang ml/a-more: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu",
        "queue team-a has reached its fair share of 16 nvidia.com/gpu (16 allocated, the gang needs 4)",
        "running gangs: 2\n",
        "  gang ml/a-old: 2 pod(s), priority 0, preemptible, running since 2026-01-01T00:10:00Z",
        "surplus 8, round 1: team-a +8",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    let missing = explain_objects(&loaded.objects, &config, &Target::Queue { name: "nope".into() }, now).unwrap_err();
    assert_eq!(missing.to_string(), "queue nope not found");
}

#[test]
fn kai_queues_are_read_only_when_the_configuration_imports_them_and_keep_their_rules() {
    // KAI's queues: team-a may hold at most 4 GPUs (limit), team-b's limit 0 allows nothing.
    let kai = "---\napiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  resources:\n    gpu: {quota: 2, limit: 4}\n---\napiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: team-b}\nspec:\n  resources:\n    gpu: {quota: 0, limit: 0}\n";
    let cluster = Cluster(format!("{}{kai}", Cluster::default().nodes(1, 8).0))
        .gang("a-job", "team-a", 1, 1, 8, 0, None, "")
        .gang("b-job", "team-b", 1, 1, 1, 0, None, "");
    // Without the import the KAI queues are skipped and both gangs are in no queue at all.
    let plain = cluster.simulate(&[]);
    assert!(plain.get("queues").is_none());
    assert_eq!(pod(&plain, "a-job-0")["node"], "node-1");
    let dir = std::env::temp_dir().join(format!("muster-kai-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(&config, "queues: {import: [kai]}\n").unwrap();
    let imported = cluster.simulate(&["--config", config.to_str().unwrap()]);
    assert_eq!(
        pod(&imported, "a-job-0")["reason"],
        "queue team-a would exceed its limit of 4 nvidia.com/gpu (0 allocated, the gang needs 8)"
    );
    assert_eq!(
        pod(&imported, "b-job-0")["reason"],
        "queue team-b would exceed its limit of 0 nvidia.com/gpu (0 allocated, the gang needs 1)"
    );
    let names: Vec<&str> = imported["queues"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "team-a", "team-b"]);
}

/// A pod of its own (no PodGroup) asking for `gpus` GPUs, with `labels` (YAML flow).
fn single(name: &str, labels: &str, gpus: u32, created: u32) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml, creationTimestamp: \"{}\", labels: {labels}}}\nspec:\n  schedulerName: muster\n  containers: [{{name: c, image: train, resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}}}]\n",
        time(created)
    )
}

/// A configuration file that imports `sources`, for `--config`.
fn importing(sources: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("muster-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{sources}.yaml"));
    std::fs::write(&path, format!("queues: {{import: [{sources}]}}\n")).unwrap();
    path
}

/// Kueue's objects for two ClusterQueues of a cohort, each with a LocalQueue in `ml`.
fn kueue_teams(a_gpu: &str, b_gpu: &str, preemption: &str) -> String {
    let cq = |name: &str, gpu: &str| {
        format!(
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: {name}, creationTimestamp: \"{T0}\"}}\nspec:\n  cohortName: research\n  namespaceSelector: {{}}\n  preemption: {preemption}\n  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: default-flavor\n      resources:\n      - {{name: nvidia.com/gpu, {gpu}}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: {name}, namespace: ml}}\nspec: {{clusterQueue: {name}}}\n"
        )
    };
    format!("{}{}", cq("team-a", a_gpu), cq("team-b", b_gpu))
}

/// Per pod: its node, or `-` while it waits.
fn placements(report: &Value) -> Vec<String> {
    let pods = report["pods"].as_array().unwrap();
    pods.iter().map(|p| format!("{} {}", p["name"].as_str().unwrap(), p["node"].as_str().unwrap_or("-"))).collect()
}

#[test]
fn a_limit_and_kueues_borrowing_limit_behave_the_same() {
    // Muster: team-a (quota 4, limit 6) and team-b (quota 4) under research (quota 8).
    // Kueue: the same as two ClusterQueues of cohort research, team-a borrowing at most 2.
    let nodes = Cluster::default().nodes(2, 8).0;
    let muster = Cluster(nodes.clone())
        .queue("research", "", "{quota: \"8\"}", "")
        .queue("team-a", "research", "{quota: \"4\", limit: \"6\"}", "")
        .queue("team-b", "research", "{quota: \"4\"}", "");
    let mut muster = muster.0;
    let mut kueue = format!("{nodes}{}", kueue_teams("nominalQuota: 4, borrowingLimit: 2", "nominalQuota: 4", "{}"));
    for i in 0..8 {
        muster.push_str(&single(&format!("a-{i}"), "{muster.dev/queue: team-a}", 1, i));
        kueue.push_str(&single(&format!("a-{i}"), "{kueue.x-k8s.io/queue-name: team-a}", 1, i));
    }
    let muster = Cluster(muster).simulate(&[]);
    let config = importing("kueue");
    let kueue = Cluster(kueue).simulate(&["--config", config.to_str().unwrap()]);
    assert_eq!(placements(&muster), placements(&kueue));
    let placed = placements(&kueue).iter().filter(|p| !p.ends_with(" -")).count();
    assert_eq!(placed, 6);
    assert_eq!(
        pod(&muster, "a-7")["reason"],
        "queue team-a would exceed its limit of 6 nvidia.com/gpu (6 allocated, the gang needs 1)"
    );
    assert_eq!(
        pod(&kueue, "a-7")["reason"],
        "queue kueue/team-a would exceed its limit of 6 nvidia.com/gpu (6 allocated, the gang needs 1)"
    );
    let names: Vec<&str> = kueue["queues"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "kueue-cohort/research", "kueue/team-a", "kueue/team-b"]);
}

#[test]
fn kueue_cluster_queues_reclaim_whole_gangs_as_reclaim_within_cohort_allows() {
    // team-a has borrowed all of team-b's quota; team-b's gang takes it back only when its
    // ClusterQueue may reclaim (Kueue's default, Never, keeps it waiting).
    let run = |preemption: &str| {
        let mut text = format!(
            "{}{}",
            Cluster::default().nodes(2, 8).0,
            kueue_teams("nominalQuota: 8", "nominalQuota: 8", preemption)
        );
        for (name, node, minute) in [("a-old", "node-1", 10), ("a-new", "node-2", 70)] {
            let _ = write!(
                text,
                "---\napiVersion: muster.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: {name}, namespace: ml, creationTimestamp: \"{}\"}}\nspec: {{minMember: 2}}\n",
                time(minute - 10)
            );
            for i in 0..2 {
                let _ = write!(
                    text,
                    "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-{i}, namespace: ml, creationTimestamp: \"{}\", labels: {{kueue.x-k8s.io/queue-name: team-a, muster.dev/pod-group: {name}}}}}\nspec:\n  schedulerName: muster\n  nodeName: {node}\n  containers: [{{name: c, image: train, resources: {{limits: {{nvidia.com/gpu: \"4\"}}}}}}]\nstatus: {{phase: Running, startTime: \"{}\"}}\n",
                    time(minute - 10),
                    time(minute)
                );
            }
        }
        text.push_str(&single("b-job", "{kueue.x-k8s.io/queue-name: team-b}", 8, 120));
        let config = importing("kueue");
        Cluster(text).simulate(&["--config", config.to_str().unwrap()])
    };
    let never = run("{}");
    assert!(evictions(&never).is_empty());
    assert_eq!(pod(&never, "b-job")["node"], Value::Null);
    let any = run("{reclaimWithinCohort: Any}");
    assert_eq!(evictions(&any), ["a-new-0 Reclaimed ml/b-job 1", "a-new-1 Reclaimed ml/b-job 1"]);
    assert_eq!(pod(&any, "b-job")["node"], "node-2");
}

#[test]
fn pods_kueue_admits_are_placed_outside_musters_queues_when_kueue_is_not_imported() {
    // Muster's team-a may hold 4 GPUs, and is namespace ml's default queue. A pod Kueue
    // manages names a LocalQueue; without the import Kueue keeps its quota, so Muster's
    // queues neither admit nor charge it.
    let mut text = Cluster::default().nodes(1, 8).queue("team-a", "", "{quota: \"4\", limit: \"4\"}", "").0;
    text.push_str(
        "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {muster.dev/default-queue: team-a}}\n",
    );
    text.push_str(&kueue_teams("nominalQuota: 0", "nominalQuota: 0", "{}"));
    text.push_str(&single("kueue-job", "{kueue.x-k8s.io/queue-name: team-a}", 6, 0));
    text.push_str(&single("muster-job", "{muster.dev/queue: team-a}", 4, 1));
    let report = Cluster(text).simulate(&[]);
    assert_eq!(pod(&report, "kueue-job")["node"], "node-1");
    // The Kueue pod's 6 GPUs are in use; team-a's own gang waits for capacity, not its limit.
    let reason = pod(&report, "muster-job")["reason"].as_str().unwrap();
    assert!(reason.contains("Insufficient nvidia.com/gpu"), "{reason}");
    let team_a = report["queues"].as_array().unwrap().iter().find(|q| q["name"] == "team-a").unwrap();
    assert_eq!(team_a["resources"]["nvidia.com/gpu"]["allocated"], "0");
}

#[test]
fn kai_podgroups_are_gangs_in_the_queue_they_name_when_kai_is_imported() {
    let mut text = Cluster::default().nodes(1, 8).0;
    text.push_str("---\napiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  resources:\n    gpu: {quota: 4, limit: 4}\n");
    for (group, gpus) in [("train", 4), ("small", 2)] {
        let _ = write!(
            text,
            "---\napiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata: {{name: {group}, namespace: ml, creationTimestamp: \"{T0}\"}}\nspec: {{minMember: 2, queue: team-a, preemptibility: non-preemptible}}\n"
        );
        for i in 0..2 {
            let _ = write!(
                text,
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {group}-{i}, namespace: ml, creationTimestamp: \"{T0}\", annotations: {{pod-group-name: {group}}}}}\nspec:\n  schedulerName: muster\n  containers: [{{name: c, image: train, resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}}}]\n"
            );
        }
    }
    let cluster = Cluster(text);
    let config = importing("kai");
    let imported = cluster.simulate(&["--config", config.to_str().unwrap()]);
    // Two pods of 4 GPUs are one gang of 8, over the queue's limit: neither runs alone.
    for pod_name in ["train-0", "train-1"] {
        assert_eq!(
            pod(&imported, pod_name)["reason"],
            "queue team-a would exceed its limit of 4 nvidia.com/gpu (4 allocated, the gang needs 8)"
        );
    }
    assert_eq!(pod(&imported, "small-0")["node"], "node-1");
    assert_eq!(pod(&imported, "small-1")["node"], "node-1");
    let gangs: Vec<String> = imported["gangs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| format!("{} {}", g["name"].as_str().unwrap(), g["apiVersion"].as_str().unwrap_or("-")))
        .collect();
    assert!(gangs.contains(&"train scheduling.run.ai/v2alpha2".to_string()), "{gangs:?}");
    // Without the import the pods name a PodGroup Muster does not read, and say so.
    let plain = cluster.simulate(&[]);
    let reason = pod(&plain, "train-0")["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        "PodGroup ml/train (scheduling.run.ai/v2alpha2) does not exist; its pods wait for it (KAI's PodGroups are read with queues.import: [kai])"
    );
}

#[test]
fn a_podgroups_preemption_delay_holds_its_evictions_and_a_bad_one_is_its_reason() {
    let held = two_teams().gang("b-job", "team-b", 2, 2, 4, 120, None, ", preemptionDelay: 1h").simulate(&[]);
    assert!(evictions(&held).is_empty());
    let reason = pod(&held, "b-job-0")["reason"].as_str().unwrap();
    assert!(reason.ends_with("in its preemption delay until 2026-01-01T03:00:00Z"), "{reason}");
    let bad = two_teams().gang("b-job", "team-b", 2, 2, 4, 120, None, ", preemptionDelay: a while").simulate(&[]);
    let reason = pod(&bad, "b-job-0")["reason"].as_str().unwrap();
    assert!(reason.starts_with("gang ml/b-job: PodGroup preemptionDelay: \"a while\" is not a duration"), "{reason}");
}

#[test]
fn a_stopped_local_queue_admits_nothing_and_says_so() {
    let mut text =
        format!("{}{}", Cluster::default().nodes(1, 8).0, kueue_teams("nominalQuota: 8", "nominalQuota: 8", "{}"));
    text.push_str("---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: paused, namespace: ml}\nspec: {clusterQueue: team-a, stopPolicy: Hold}\n");
    text.push_str(&single("held", "{kueue.x-k8s.io/queue-name: paused}", 1, 0));
    text.push_str(&single("open", "{kueue.x-k8s.io/queue-name: team-a}", 1, 0));
    let config = importing("kueue");
    let report = Cluster(text).simulate(&["--config", config.to_str().unwrap()]);
    assert_eq!(
        pod(&report, "held")["reason"],
        "LocalQueue ml/paused is stopped (stopPolicy Hold); it admits no new gang"
    );
    assert_eq!(pod(&report, "open")["node"], "node-1");
}
