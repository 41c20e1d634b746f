//! Built-in scenarios: Muster beside a per-pod baseline that places pods as kube-scheduler
//! does (queued by priority then creation time, one at a time, each holding what it gets,
//! scored LeastAllocated, kube-scheduler's default).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::placer::Placer;
use super::replay::cluster::{Cluster, ClusterShape};
use super::replay::report::Outcome;
use super::replay::trace::TraceJob;
use super::replay::{Comparison, compare};
use super::run;
use crate::api::pod_group::PodGroupTopology;
use crate::config::Config;
use crate::convert::assemble::{ClusterObjects, Memo};
use crate::convert::objects::{START, gpu_node, pod_group, training_pod};
use crate::sim::tracker::Tracker;

/// One cycle at `now`, its placements bound, through the simulator's driver. A cycle
/// places, in queue order, every gang that fits, and what did not fit cannot fit once
/// others took capacity, so a second cycle would place nothing (the scenarios evict
/// nothing). `memo` and `tracker` live as long as the scenario, so a cycle converts and
/// folds again only the pods and PodGroups that changed since the last one, as the
/// scheduler's do.
fn settle(objects: &mut ClusterObjects, config: &Config, now: i64, memo: &mut Memo, tracker: &mut Tracker) {
    run::settle(objects, config, START + now, 1, memo, tracker);
}

/// A job: `pods` pods of `gpus_per_pod` GPUs, a gang under Muster.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub arrival: i64,
    pub duration: i64,
    pub pods: usize,
    pub gpus_per_pod: u32,
    /// The runtime limit it declares (its pods' `activeDeadlineSeconds`), if any.
    pub limit: Option<i64>,
}

impl Job {
    pub fn gpus(&self) -> u32 {
        self.pods as u32 * self.gpus_per_pod
    }
}

fn add_job(objects: &mut ClusterObjects, job: &Job, placer: Placer, scheduler: &str, created: impl Fn(usize) -> i64) {
    let gang = placer != Placer::PerPodBaseline;
    if gang {
        let mut group = pod_group(&job.name, job.pods, created(0));
        // Distributed training wants one rack; smaller multi-pod jobs would rather have one.
        group.spec.topology = if job.gpus() >= 16 {
            Some(PodGroupTopology { required: Some("rack".into()), preferred: None })
        } else if job.pods > 1 {
            Some(PodGroupTopology { required: None, preferred: Some("rack".into()) })
        } else {
            None
        };
        objects.muster_groups.push(group);
    }
    for i in 0..job.pods {
        let group = gang.then_some(job.name.as_str());
        let mut pod = training_pod(&format!("{}-{i}", job.name), job.gpus_per_pod, created(i), scheduler, group);
        pod.metadata.resource_version = Some("sim-created".into());
        if let Some(spec) = pod.spec.as_mut() {
            spec.active_deadline_seconds = job.limit;
        }
        objects.pods.push(pod);
    }
}

fn job_of(pod_name: &str) -> &str {
    pod_name.rsplit_once('-').map_or(pod_name, |(job, _)| job)
}

/// Placed pods per job.
fn placed_per_job(objects: &ClusterObjects) -> BTreeMap<String, usize> {
    let mut placed = BTreeMap::new();
    for pod in &objects.pods {
        if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            *placed.entry(job_of(pod.metadata.name.as_deref().unwrap_or("")).to_string()).or_default() += 1;
        }
    }
    placed
}

/// The guide's scenario: two 8-GPU jobs of 8 one-GPU pods on 2 nodes × 4 GPUs, their pods
/// created interleaved as two Job controllers starting together create them.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TwoJobsOutcome {
    pub placer: Placer,
    /// Pods placed per job right after both were created.
    pub placed: BTreeMap<String, usize>,
    /// Jobs that can start (all 8 pods placed).
    pub running: Vec<String>,
    /// GPUs held by pods of jobs that cannot start.
    pub stranded_gpus: u32,
    /// Once the running jobs finish, the jobs that run next.
    pub running_after_first_finish: Vec<String>,
}

pub fn two_jobs(placer: Placer, muster: &Config) -> TwoJobsOutcome {
    let config = placer.config(muster);
    let mut objects = ClusterObjects {
        nodes: vec![gpu_node("node-1", "rack-1", 4), gpu_node("node-2", "rack-1", 4)],
        ..Default::default()
    };
    let jobs: Vec<Job> = ["job-a", "job-b"]
        .iter()
        .map(|name| Job { name: name.to_string(), arrival: 0, duration: 3600, pods: 8, gpus_per_pod: 1, limit: None })
        .collect();
    for (j, job) in jobs.iter().enumerate() {
        add_job(&mut objects, job, placer, &config.scheduler_name, |i| (2 * i + j) as i64);
    }
    let mut memo = Memo::new(&config);
    let mut tracker = Tracker::default();
    settle(&mut objects, &config, 16, &mut memo, &mut tracker);
    let placed = placed_per_job(&objects);
    let running: Vec<String> =
        jobs.iter().filter(|j| placed.get(&j.name) == Some(&j.pods)).map(|j| j.name.clone()).collect();
    let stranded_gpus = jobs
        .iter()
        .filter(|j| !running.contains(&j.name))
        .map(|j| placed.get(&j.name).copied().unwrap_or(0) as u32 * j.gpus_per_pod)
        .sum();
    // The running jobs finish: their pods go away and the cluster settles again.
    objects.pods.retain(|p| !running.iter().any(|r| job_of(p.metadata.name.as_deref().unwrap_or("")) == r));
    settle(&mut objects, &config, 3600, &mut memo, &mut tracker);
    let after = placed_per_job(&objects);
    let running_after_first_finish = jobs
        .iter()
        .filter(|j| !running.contains(&j.name) && after.get(&j.name) == Some(&j.pods))
        .map(|j| j.name.clone())
        .collect();
    TwoJobsOutcome { placer, placed, running, stranded_gpus, running_after_first_finish }
}

/// A small deterministic random source (SplitMix64), so scenarios repeat exactly.
pub(crate) struct Random(u64);

impl Random {
    pub(crate) fn new(seed: u64) -> Random {
        Random(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The mixed fleet: `nodes` nodes of 8 GPUs in racks of 8, and `jobs` jobs of 1 to 64 GPUs
/// arriving over `arrival_hours`, each running 1 to 6 hours. `limited_percent` of the jobs
/// declare a runtime limit, as users do: their runtime times a factor between 1 and 3.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetShape {
    pub nodes: usize,
    pub jobs: usize,
    pub arrival_hours: i64,
    pub horizon_hours: i64,
    pub seed: u64,
    pub limited_percent: u64,
}

impl Default for FleetShape {
    fn default() -> Self {
        FleetShape { nodes: 64, jobs: 900, arrival_hours: 48, horizon_hours: 72, seed: 7, limited_percent: 85 }
    }
}

impl FleetShape {
    /// The same fleet with half as many jobs again: more work arrives than can be done by
    /// the horizon, so policies differ in the work they complete.
    pub fn overloaded() -> FleetShape {
        FleetShape { jobs: 1350, ..FleetShape::default() }
    }
}

pub fn fleet_jobs(shape: &FleetShape) -> Vec<Job> {
    let mut random = Random(shape.seed);
    let sizes: [(u32, u64); 7] = [(1, 30), (2, 15), (4, 15), (8, 15), (16, 10), (32, 10), (64, 5)];
    let total: u64 = sizes.iter().map(|(_, w)| w).sum();
    let window = shape.arrival_hours * 3600;
    let mut jobs: Vec<Job> = (0..shape.jobs)
        .map(|i| {
            let mut pick = random.below(total);
            let gpus = sizes
                .iter()
                .find(|(_, w)| {
                    if pick < *w {
                        true
                    } else {
                        pick -= w;
                        false
                    }
                })
                .map_or(1, |(g, _)| *g);
            // Jobs of 8 GPUs or more run one 8-GPU pod per node; smaller ones are either one
            // pod or one pod per GPU (data-parallel workers).
            let (pods, gpus_per_pod) = if gpus >= 8 {
                (gpus as usize / 8, 8)
            } else if random.below(2) == 0 {
                (1, gpus)
            } else {
                (gpus as usize, 1)
            };
            Job {
                name: format!("job-{i:04}"),
                arrival: random.below(window as u64) as i64,
                duration: 3600 + random.below(5 * 3600) as i64,
                pods,
                gpus_per_pod,
                limit: None,
            }
        })
        .collect();
    // Limits from a source of their own, so the jobs themselves do not depend on them.
    let mut limits = Random(shape.seed ^ 0x5EED_0F11_0175);
    for job in &mut jobs {
        if limits.below(100) < shape.limited_percent {
            job.limit = Some(job.duration + (job.duration as u64 * limits.below(2001) / 1000) as i64);
        }
    }
    jobs.sort_by_key(|j| (j.arrival, j.name.clone()));
    jobs
}

/// One fleet, every policy over it.
pub struct Fleet {
    pub label: &'static str,
    pub shape: FleetShape,
    pub comparison: Comparison,
}

/// The fleet's cluster: `nodes` nodes of 8 GPUs in racks of 8 nodes, two racks to a block.
pub fn fleet_cluster(shape: &FleetShape, config: &Config) -> Cluster {
    let racks = shape.nodes.div_ceil(8).max(1);
    Cluster::generated(ClusterShape { nodes: shape.nodes, gpus_per_node: 8, racks }, config)
}

/// The fleet's jobs as a trace: each pod asks for 4 cores and 32 GiB per GPU.
pub fn fleet_trace(shape: &FleetShape) -> Vec<TraceJob> {
    fleet_jobs(shape)
        .into_iter()
        .map(|job| {
            let per_pod = i64::from(job.gpus_per_pod.max(1));
            TraceJob {
                id: job.name,
                submit: job.arrival,
                workers: job.pods,
                gpus: job.gpus_per_pod,
                gpu_fraction: None,
                cpu_milli: 4000 * per_pod,
                memory: 32 * per_pod * (1 << 30),
                runtime: job.duration,
                limit: job.limit,
                queue: crate::engine::queues::DEFAULT_QUEUE.to_string(),
                priority: 0,
                gpu_model: None,
            }
        })
        .collect()
}

/// The built-in fleet's mix of jobs (1 to 64 GPUs, 1 to 6 hours, 36.4 GPU-hours a job on
/// average), `jobs` of them for a cluster of `nodes` nodes of 8 GPUs, arriving at a steady
/// rate that offers 90% of the cluster's GPU-hours; written as a trace.
pub fn generate_trace(path: &Path, jobs: usize, nodes: usize, seed: u64) -> Result<String, String> {
    const GPU_HOURS_PER_JOB: f64 = 36.4;
    let hours = jobs as f64 * GPU_HOURS_PER_JOB / (0.9 * 8.0 * nodes.max(1) as f64);
    let shape = FleetShape { nodes, jobs, arrival_hours: hours.ceil().max(1.0) as i64, seed, ..FleetShape::default() };
    let trace = fleet_trace(&shape);
    let file = std::fs::File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    super::replay::trace::write(&trace, std::io::BufWriter::new(file))?;
    Ok(format!(
        "wrote {} jobs arriving over {} h for {nodes} nodes of 8 GPUs to {}\n",
        trace.len(),
        shape.arrival_hours,
        path.display()
    ))
}

/// The fleet under each of `placers`, over its horizon.
pub fn fleet_compare(shape: &FleetShape, config: &Config, placers: &[Placer]) -> Comparison {
    let cluster = fleet_cluster(shape, config);
    compare(&cluster, &fleet_trace(shape), config, shape.horizon_hours * 3600, placers, false)
}

/// The fleet under one placer.
pub fn fleet(placer: Placer, shape: &FleetShape, config: &Config) -> Outcome {
    fleet_compare(shape, config, &[placer]).outcomes.remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pods each job has placed, after each of `events` (jobs arriving, then the first
    /// job ending), with the memo and tracker kept across events or made afresh each time.
    fn replay(keep: bool) -> (Vec<BTreeMap<String, usize>>, u64) {
        let config = Config::default();
        let nodes = (0..4).map(|i| gpu_node(&format!("node-{i}"), "rack-0", 8)).collect();
        let mut objects = ClusterObjects { nodes, ..Default::default() };
        let (mut memo, mut tracker) = (Memo::new(&config), Tracker::default());
        let mut placed = Vec::new();
        let mut rebuilds = 0;
        for (i, (pods, gpus)) in [(2, 8), (4, 4), (1, 8), (8, 1)].into_iter().enumerate() {
            let job = Job {
                name: format!("job-{i}"),
                arrival: i as i64,
                duration: 60,
                pods,
                gpus_per_pod: gpus,
                limit: None,
            };
            add_job(&mut objects, &job, Placer::Muster, &config.scheduler_name, |_| job.arrival);
            if !keep {
                (memo, tracker) = (Memo::new(&config), Tracker::default());
            }
            settle(&mut objects, &config, i as i64, &mut memo, &mut tracker);
            rebuilds += memo.rebuilds();
            placed.push(placed_per_job(&objects));
        }
        objects.pods.retain(|p| job_of(p.metadata.name.as_deref().unwrap_or("")) != "job-0");
        objects.muster_groups.retain(|g| g.metadata.name.as_deref() != Some("job-0"));
        settle(&mut objects, &config, 10, &mut memo, &mut tracker);
        placed.push(placed_per_job(&objects));
        (placed, if keep { memo.rebuilds() } else { rebuilds })
    }

    #[test]
    fn a_scenario_brings_its_snapshot_up_to_date_and_places_as_one_made_afresh() {
        let (kept, rebuilds) = replay(true);
        let (fresh, _) = replay(false);
        assert_eq!(kept, fresh);
        assert_eq!(kept.last().unwrap().get("job-3"), Some(&8), "the last job starts when the first ends");
        assert_eq!(rebuilds, 1, "only the first snapshot is made from scratch");
    }
}
