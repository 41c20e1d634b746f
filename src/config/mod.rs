//! The scheduler's configuration file (see `scheduler-config/default.yaml`).

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::engine::preempt::PreemptionConfig;
use crate::engine::topology::DomainChoice;
use crate::engine::{CycleConfig, Queueing, Scoring};

mod plugins;
mod sections;

pub use plugins::{DefaultConstraint, DefaultingType, Plugins, PodTopologySpreadArgs};

pub use sections::{
    Backoff, ClientConnection, EvictionRetry, LeaderElection, Limits, MinRuntimeResolution, Preemption, QueueImport,
    Queues,
};

#[derive(Debug, Error)]
pub enum Error {
    #[error("failed to read configuration {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("invalid configuration {path}: {source}")]
    Parse { path: String, source: yaml_serde::Error },
    #[error("invalid configuration {path}: {problem}")]
    Invalid { path: String, problem: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScoringStrategy {
    #[default]
    BinPack,
    Spread,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
// serde keeps the old name and wording, so that its error messages read as before.
#[serde(rename = "QueueingStrategy", expecting = "enum QueueingStrategy")]
pub enum QueueingPolicy {
    #[default]
    Backfill,
    #[serde(rename = "StrictFIFO")]
    StrictFifo,
    #[serde(rename = "BestEffortFIFO")]
    BestEffortFifo,
    /// Backfill with shadow times from the pods' runtime bounds (docs/scheduling.md).
    TimedBackfill,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopologyFit {
    #[default]
    BestFit,
    FirstFit,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologyLevel {
    pub name: String,
    pub node_label: String,
}

/// A duration as Kubernetes and Muster's objects write it ("10m", "1h30m", "90s"), in
/// seconds; never negative.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let parsed: jiff::SignedDuration =
        text.trim().parse().map_err(|_| format!("{text:?} is not a duration (write it as 90s, 10m or 1h30m)"))?;
    if parsed.is_negative() {
        return Err(format!("{text:?} is negative"));
    }
    Ok(parsed.as_secs())
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Pods with this `spec.schedulerName` are Muster's.
    pub scheduler_name: String,
    pub scoring: ScoringStrategy,
    pub queueing: QueueingPolicy,
    /// Backfill: how long a gang that does not fit waits before nodes are reserved for it.
    pub reserve_after_seconds: u64,
    /// TimedBackfill: how many waiting gangs hold a timed reservation at once.
    pub backfill_depth: u32,
    /// Backfill and TimedBackfill: preemptible gangs may run in capacity held for a
    /// reservation, evicted whole when the reserved gang can start (a Queue's
    /// `spec.opportunisticBackfill` decides for its gangs).
    pub opportunistic_backfill: bool,
    /// A gang that did not fit is tried again after a change that could help it, or after
    /// this long at the latest (the unschedulable pool's flush).
    pub retry_unschedulable_seconds: u64,
    /// Default for PodGroups that set no podsReadyTimeoutSeconds.
    pub pods_ready_timeout_seconds: u64,
    /// How long a gang that was Ready may stay below minMember before it is evicted whole.
    pub gang_broken_grace_seconds: u64,
    /// How long a gang's claims that wait for their first consumer may take to be bound
    /// (a volume provisioned or bound on the node they were given) before the gang is
    /// rolled back, as kube-scheduler's VolumeBinding `bindTimeoutSeconds`.
    pub volume_bind_timeout_seconds: u64,
    /// How long a gang's devices with binding conditions may take, from their allocation,
    /// to be reported ready by their drivers before the gang is rolled back, as
    /// kube-scheduler's DynamicResources `bindingTimeout`.
    pub device_bind_timeout_seconds: u64,
    /// Retry delay for a gang whose binding was rolled back or that was evicted.
    pub backoff: Backoff,
    /// Topology levels, outermost first.
    pub topology: Vec<TopologyLevel>,
    /// How a gang's topology domain is chosen among those that could hold it.
    pub topology_fit: TopologyFit,
    /// Where /metrics, /healthz and /readyz are served.
    pub metrics_address: String,
    /// Who may read /metrics and the page at /ui.
    pub metrics_server: crate::metrics::MetricsServer,
    /// Only nodes carrying all these labels are scheduled onto (empty: every node), for a
    /// Muster that manages part of a cluster, such as its GPU nodes.
    pub node_selector: std::collections::BTreeMap<String, String>,
    /// Several replicas: only the holder of the lease schedules, binds and writes status.
    pub leader_election: LeaderElection,
    /// Deadline of every one-shot request to the API server (binds, claim writes,
    /// evictions, status, events, lease calls); watches keep their long reads. Under leader
    /// election it must be shorter than leaseDurationSeconds - renewDeadlineSeconds, so a
    /// leader's last writes end before another replica may take over.
    pub request_timeout_seconds: u64,
    /// `/healthz` fails when the scheduling loop owes a cycle for this long, or, under leader
    /// election, when the API server has not answered this replica for this long.
    pub stall_timeout_seconds: u64,
    pub preemption: Preemption,
    pub queues: Queues,
    pub eviction: EvictionRetry,
    pub limits: Limits,
    pub client_connection: ClientConnection,
    /// What a kube-scheduler profile sets that Muster reads: score weights, InterPodAffinity's
    /// and PodTopologySpread's arguments.
    pub plugins: Plugins,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            scheduler_name: "muster".into(),
            scoring: ScoringStrategy::BinPack,
            queueing: QueueingPolicy::Backfill,
            reserve_after_seconds: 600,
            backfill_depth: 1,
            opportunistic_backfill: false,
            retry_unschedulable_seconds: 60,
            pods_ready_timeout_seconds: 30 * 60,
            gang_broken_grace_seconds: 60,
            volume_bind_timeout_seconds: 600,
            device_bind_timeout_seconds: 600,
            backoff: Backoff { initial_seconds: 1, max_seconds: 300 },
            topology: crate::engine::topology::default_levels()
                .into_iter()
                .map(|l| TopologyLevel { name: l.name, node_label: l.label })
                .collect(),
            topology_fit: TopologyFit::BestFit,
            metrics_address: "0.0.0.0:10251".into(),
            metrics_server: Default::default(),
            node_selector: Default::default(),
            leader_election: LeaderElection::default(),
            request_timeout_seconds: 4,
            stall_timeout_seconds: 60,
            preemption: Preemption::default(),
            queues: Queues::default(),
            eviction: EvictionRetry::default(),
            limits: Limits::default(),
            client_connection: ClientConnection::default(),
            plugins: Plugins::default(),
        }
    }
}

impl Config {
    /// Reads and checks a configuration file; fields left out take their defaults.
    pub fn load(path: &Path) -> Result<Config> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: shown.clone(), source })?;
        Config::parse(&text, &shown)
    }

    pub fn parse(text: &str, path: &str) -> Result<Config> {
        let partial: PartialConfig =
            yaml_serde::from_str(text).map_err(|source| Error::Parse { path: path.to_string(), source })?;
        let config = partial.merge_into(Config::default());
        config.check().map_err(|problem| Error::Invalid { path: path.to_string(), problem })?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        if self.scheduler_name.trim().is_empty() {
            return Err("schedulerName must not be empty".into());
        }
        self.plugins.check()?;
        if self.backoff.initial_seconds == 0 || self.backoff.max_seconds < self.backoff.initial_seconds {
            return Err("backoff needs 0 < initialSeconds <= maxSeconds".into());
        }
        if self.pods_ready_timeout_seconds == 0 {
            return Err("podsReadyTimeoutSeconds must be positive".into());
        }
        let mut seen = std::collections::HashSet::new();
        for level in &self.topology {
            if level.name.is_empty() || level.node_label.is_empty() {
                return Err("every topology level needs a name and a nodeLabel".into());
            }
            if !seen.insert(level.name.as_str()) {
                return Err(format!("topology level {:?} is listed twice", level.name));
            }
        }
        let election = &self.leader_election;
        if election.lease_name.is_empty() || election.lease_namespace.is_empty() {
            return Err("leaderElection needs a leaseName and a leaseNamespace".into());
        }
        if !(0 < election.retry_period_seconds
            && election.retry_period_seconds < election.renew_deadline_seconds
            && election.renew_deadline_seconds < election.lease_duration_seconds)
        {
            return Err(
                "leaderElection needs 0 < retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds".into()
            );
        }
        if self.request_timeout_seconds == 0 || self.stall_timeout_seconds == 0 {
            return Err("requestTimeoutSeconds and stallTimeoutSeconds must be positive".into());
        }
        if election.enabled
            && self.request_timeout_seconds >= election.lease_duration_seconds - election.renew_deadline_seconds
        {
            return Err(format!(
                "requestTimeoutSeconds ({}) must be shorter than leaseDurationSeconds - renewDeadlineSeconds ({}), so a leader's last requests end before another replica may take over",
                self.request_timeout_seconds,
                election.lease_duration_seconds - election.renew_deadline_seconds
            ));
        }
        let p = &self.preemption;
        if !(p.reclaimer_saturation_multiplier >= 1.0 && p.reclaimer_saturation_multiplier.is_finite()) {
            return Err("preemption.reclaimerSaturationMultiplier must be at least 1, which keeps two queues from reclaiming the same capacity back and forth".into());
        }
        for (field, value) in [
            ("defaultReclaimMinRuntime", &p.default_reclaim_min_runtime),
            ("defaultPreemptMinRuntime", &p.default_preempt_min_runtime),
            ("defaultPreemptionDelay", &p.default_preemption_delay),
            ("borrowAfterEviction", &p.borrow_after_eviction),
        ] {
            parse_duration(value).map_err(|e| format!("preemption.{field}: {e}"))?;
        }
        if p.reservation_timeout != "auto" {
            parse_duration(&p.reservation_timeout).map_err(|e| format!("preemption.reservationTimeout: {e}"))?;
        }
        let e = &self.eviction;
        if e.max_refusals == 0 || e.retry_initial_seconds == 0 || e.retry_max_seconds < e.retry_initial_seconds {
            return Err("eviction needs maxRefusals >= 1 and 0 < retryInitialSeconds <= retryMaxSeconds".into());
        }
        let l = &self.limits;
        if l.device_search_steps_per_node == 0 || l.device_search_steps_per_pod < l.device_search_steps_per_node {
            return Err("limits needs 0 < deviceSearchStepsPerNode <= deviceSearchStepsPerPod".into());
        }
        let c = &self.client_connection;
        if !(c.qps >= 0.0 && c.qps.is_finite()) || (c.qps > 0.0 && c.burst == 0) || c.max_in_flight == 0 {
            return Err(
                "clientConnection needs qps >= 0 (0: no limit), burst >= 1 with a qps, and maxInFlight >= 1".into()
            );
        }
        if self.metrics_address.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!("metricsAddress {:?} is not an address and port", self.metrics_address));
        }
        Ok(())
    }

    /// The deadline of one request to the API server.
    pub fn request_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.request_timeout_seconds)
    }

    /// The engine's part of the configuration.
    pub fn cycle(&self) -> CycleConfig {
        CycleConfig {
            scoring: match self.scoring {
                ScoringStrategy::BinPack => Scoring::BinPack,
                ScoringStrategy::Spread => Scoring::Spread,
            },
            weights: self.plugins.weights(),
            queueing: match self.queueing {
                QueueingPolicy::Backfill => Queueing::Backfill,
                QueueingPolicy::StrictFifo => Queueing::StrictFifo,
                QueueingPolicy::BestEffortFifo => Queueing::BestEffortFifo,
                QueueingPolicy::TimedBackfill => Queueing::TimedBackfill,
            },
            backfill_depth: self.backfill_depth.max(1) as usize,
            opportunistic_backfill: self.opportunistic_backfill,
            reserve_after_seconds: i64::try_from(self.reserve_after_seconds).unwrap_or(i64::MAX),
            domain_choice: match self.topology_fit {
                TopologyFit::BestFit => DomainChoice::BestFit,
                TopologyFit::FirstFit => DomainChoice::FirstFit,
            },
            preemption: self.preemption_config(),
            device_search: crate::engine::dra::allocate::SearchLimits {
                steps_per_node: self.limits.device_search_steps_per_node,
                steps_per_pod: self.limits.device_search_steps_per_pod,
                selector_idle_seconds: i64::try_from(self.limits.selector_idle_seconds).unwrap_or(i64::MAX),
            },
        }
    }

    /// The engine's preemption settings (the file was checked on load).
    fn preemption_config(&self) -> PreemptionConfig {
        let p = &self.preemption;
        let seconds = |text: &str| parse_duration(text).unwrap_or(0);
        PreemptionConfig {
            saturation_milli: (p.reclaimer_saturation_multiplier * 1000.0).round().clamp(1000.0, u32::MAX as f64)
                as u32,
            reclaim_min_runtime: seconds(&p.default_reclaim_min_runtime),
            reclaim_min_runtime_from_leaf: p.reclaim_min_runtime_resolution == MinRuntimeResolution::Queue,
            preempt_min_runtime: seconds(&p.default_preempt_min_runtime),
            preemption_delay: seconds(&p.default_preemption_delay),
            reservation_timeout: (p.reservation_timeout != "auto").then(|| seconds(&p.reservation_timeout)),
            max_evicted_gangs: usize::try_from(p.max_evicted_gangs_per_cycle).unwrap_or(usize::MAX),
            borrow_after_eviction: seconds(&p.borrow_after_eviction),
        }
    }
}

/// The file's form: every field optional, unknown fields an error.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PartialConfig {
    scheduler_name: Option<String>,
    scoring: Option<ScoringStrategy>,
    queueing: Option<QueueingPolicy>,
    reserve_after_seconds: Option<u64>,
    backfill_depth: Option<u32>,
    opportunistic_backfill: Option<bool>,
    retry_unschedulable_seconds: Option<u64>,
    pods_ready_timeout_seconds: Option<u64>,
    gang_broken_grace_seconds: Option<u64>,
    volume_bind_timeout_seconds: Option<u64>,
    device_bind_timeout_seconds: Option<u64>,
    backoff: Option<Backoff>,
    topology: Option<Vec<TopologyLevel>>,
    topology_fit: Option<TopologyFit>,
    metrics_address: Option<String>,
    metrics_server: Option<crate::metrics::MetricsServer>,
    node_selector: Option<std::collections::BTreeMap<String, String>>,
    leader_election: Option<PartialLeaderElection>,
    request_timeout_seconds: Option<u64>,
    stall_timeout_seconds: Option<u64>,
    preemption: Option<Preemption>,
    queues: Option<Queues>,
    eviction: Option<EvictionRetry>,
    limits: Option<Limits>,
    client_connection: Option<ClientConnection>,
    plugins: Option<Plugins>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PartialLeaderElection {
    enabled: Option<bool>,
    lease_name: Option<String>,
    lease_namespace: Option<String>,
    lease_duration_seconds: Option<u64>,
    renew_deadline_seconds: Option<u64>,
    retry_period_seconds: Option<u64>,
}

impl PartialLeaderElection {
    fn merge_into(self, d: LeaderElection) -> LeaderElection {
        LeaderElection {
            enabled: self.enabled.unwrap_or(d.enabled),
            lease_name: self.lease_name.unwrap_or(d.lease_name),
            lease_namespace: self.lease_namespace.unwrap_or(d.lease_namespace),
            lease_duration_seconds: self.lease_duration_seconds.unwrap_or(d.lease_duration_seconds),
            renew_deadline_seconds: self.renew_deadline_seconds.unwrap_or(d.renew_deadline_seconds),
            retry_period_seconds: self.retry_period_seconds.unwrap_or(d.retry_period_seconds),
        }
    }
}

impl PartialConfig {
    fn merge_into(self, d: Config) -> Config {
        Config {
            scheduler_name: self.scheduler_name.unwrap_or(d.scheduler_name),
            scoring: self.scoring.unwrap_or(d.scoring),
            queueing: self.queueing.unwrap_or(d.queueing),
            reserve_after_seconds: self.reserve_after_seconds.unwrap_or(d.reserve_after_seconds),
            backfill_depth: self.backfill_depth.unwrap_or(d.backfill_depth),
            opportunistic_backfill: self.opportunistic_backfill.unwrap_or(d.opportunistic_backfill),
            retry_unschedulable_seconds: self.retry_unschedulable_seconds.unwrap_or(d.retry_unschedulable_seconds),
            pods_ready_timeout_seconds: self.pods_ready_timeout_seconds.unwrap_or(d.pods_ready_timeout_seconds),
            gang_broken_grace_seconds: self.gang_broken_grace_seconds.unwrap_or(d.gang_broken_grace_seconds),
            volume_bind_timeout_seconds: self.volume_bind_timeout_seconds.unwrap_or(d.volume_bind_timeout_seconds),
            device_bind_timeout_seconds: self.device_bind_timeout_seconds.unwrap_or(d.device_bind_timeout_seconds),
            backoff: self.backoff.unwrap_or(d.backoff),
            topology: self.topology.unwrap_or(d.topology),
            topology_fit: self.topology_fit.unwrap_or(d.topology_fit),
            metrics_address: self.metrics_address.unwrap_or(d.metrics_address),
            metrics_server: self.metrics_server.unwrap_or(d.metrics_server),
            node_selector: self.node_selector.unwrap_or(d.node_selector),
            leader_election: match self.leader_election {
                Some(partial) => partial.merge_into(d.leader_election),
                None => d.leader_election,
            },
            request_timeout_seconds: self.request_timeout_seconds.unwrap_or(d.request_timeout_seconds),
            stall_timeout_seconds: self.stall_timeout_seconds.unwrap_or(d.stall_timeout_seconds),
            preemption: self.preemption.unwrap_or(d.preemption),
            queues: self.queues.unwrap_or(d.queues),
            eviction: self.eviction.unwrap_or(d.eviction),
            limits: self.limits.unwrap_or(d.limits),
            client_connection: self.client_connection.unwrap_or(d.client_connection),
            plugins: self.plugins.unwrap_or(d.plugins),
        }
    }
}

#[cfg(test)]
mod preemption_tests {
    use super::*;

    #[test]
    fn durations_are_read_as_kubernetes_writes_them() {
        assert_eq!(parse_duration("10m"), Ok(600));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("0s"), Ok(0));
        assert!(parse_duration("soon").unwrap_err().contains("\"soon\" is not a duration"));
    }

    #[test]
    fn a_saturation_multiplier_below_one_is_refused() {
        let error = Config::parse("preemption: {reclaimerSaturationMultiplier: 0.5}", "c.yaml").unwrap_err();
        assert!(error.to_string().contains("reclaimerSaturationMultiplier must be at least 1"), "{error}");
        let error = Config::parse("preemption: {defaultPreemptionDelay: later}", "c.yaml").unwrap_err();
        assert!(error.to_string().contains("preemption.defaultPreemptionDelay"), "{error}");
        let config =
            Config::parse("preemption: {defaultReclaimMinRuntime: 10m, reservationTimeout: 2m}", "c.yaml").unwrap();
        let engine = config.cycle().preemption;
        assert_eq!((engine.reclaim_min_runtime, engine.reservation_timeout), (600, Some(120)));
    }
}
