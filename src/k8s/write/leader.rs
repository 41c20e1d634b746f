//! Leader election on a `coordination.k8s.io/v1` Lease: of several scheduler replicas, only
//! the one holding the lease schedules, binds and writes status.
//!
//! The rules are client-go's. A candidate takes the lease when it does not exist, when it
//! is its own, or when its record (holder and renew time) has not changed for the lease's
//! duration *as this candidate observed it*, so clocks need not agree. Every write carries
//! the resourceVersion it read, so two candidates cannot both take it. The holder renews
//! every retry period and gives up leadership at once when a renewal is refused, or when it
//! has not renewed for the renew deadline, which is shorter than the lease duration: a
//! holder cut off from the API server stops before anyone else may start.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::k8s::client::request::{RequestError, within};

/// How the lease is named and timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    pub name: String,
    pub namespace: String,
    /// This candidate's name in `holderIdentity`: unique among the replicas.
    pub identity: String,
    /// How long a lease that is not renewed stays with its holder.
    pub lease_duration: Duration,
    /// The holder stops leading when it has not renewed for this long (< lease duration).
    pub renew_deadline: Duration,
    /// How often the holder renews and the others try to take over.
    pub retry_period: Duration,
    /// Deadline of each request to the API server.
    pub request_timeout: Duration,
}

impl LeaseSettings {
    pub fn from_config(config: &crate::config::Config, identity: String) -> LeaseSettings {
        let request_timeout = config.request_timeout();
        let config = &config.leader_election;
        LeaseSettings {
            request_timeout,
            name: config.lease_name.clone(),
            namespace: config.lease_namespace.clone(),
            identity,
            lease_duration: Duration::from_secs(config.lease_duration_seconds),
            renew_deadline: Duration::from_secs(config.renew_deadline_seconds),
            retry_period: Duration::from_secs(config.retry_period_seconds),
        }
    }
}

/// A name for this replica: the pod's name (`HOSTNAME` in a pod) and the process id.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "muster".into());
    format!("{host}_{}", std::process::id())
}

/// The lease record as last seen, and when it was first seen that way.
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    at: Instant,
}

/// What one round of the election found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Round {
    /// This candidate holds the lease (took it or renewed it).
    Leading,
    /// Another candidate holds it.
    Following(Option<String>),
}

pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Option<Observed>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn duration_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

impl Elector {
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Elector {
        Elector { api: Api::namespaced(client, &settings.namespace), settings, observed: None }
    }

    /// One attempt to take or renew the lease.
    pub async fn round(&mut self) -> Result<Round, RequestError> {
        let deadline = self.settings.request_timeout;
        let Some(lease) = within(deadline, self.api.get_opt(&self.settings.name)).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.record(&LeaseSpec::default())),
            };
            return match within(deadline, self.api.create(&PostParams::default(), &lease)).await {
                Ok(_) => Ok(Round::Leading),
                Err(e) if e.is_conflict() => Ok(Round::Following(None)),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let changed = self.observed.as_ref().is_none_or(|o| o.holder != holder || o.renew_time != spec.renew_time);
        if changed {
            self.observed =
                Some(Observed { holder: holder.clone(), renew_time: spec.renew_time.clone(), at: Instant::now() });
        }
        let mine = holder.as_deref() == Some(self.settings.identity.as_str());
        if let Some(other) = holder.as_ref().filter(|_| !mine) {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.settings.lease_duration, Duration::from_secs);
            let seen = self.observed.as_ref().map_or_else(Instant::now, |o| o.at);
            if seen.elapsed() < duration {
                return Ok(Round::Following(Some(other.clone())));
            }
            tracing::info!(lease = %self.settings.name, previous = %other, "the lease expired; taking it over");
        }
        let updated = Lease { metadata: lease.metadata.clone(), spec: Some(self.record(&spec)) };
        match within(deadline, self.api.replace(&self.settings.name, &PostParams::default(), &updated)).await {
            Ok(_) => Ok(Round::Leading),
            // Someone else wrote it since we read it: they lead, or renewed.
            Err(e) if e.is_conflict() => Ok(Round::Following(holder.filter(|_| !mine))),
            Err(e) => Err(e),
        }
    }

    /// The lease record with this candidate as holder, renewed now.
    fn record(&self, old: &LeaseSpec) -> LeaseSpec {
        let at = now();
        let ours = old.holder_identity.as_deref() == Some(self.settings.identity.as_str());
        let previous = old.holder_identity.as_deref().is_some_and(|h| !h.is_empty());
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(duration_seconds(self.settings.lease_duration)),
            acquire_time: if ours { old.acquire_time.clone() } else { Some(at.clone()) },
            renew_time: Some(at),
            lease_transitions: Some(old.lease_transitions.unwrap_or(0) + i32::from(!ours && previous)),
            ..old.clone()
        }
    }

    /// Gives the lease up, if held, so that another replica takes over at once.
    pub async fn release(&mut self) -> Result<(), RequestError> {
        let deadline = self.settings.request_timeout;
        let Some(lease) = within(deadline, self.api.get_opt(&self.settings.name)).await? else { return Ok(()) };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(1);
        let released = Lease { metadata: lease.metadata, spec: Some(spec) };
        within(deadline, self.api.replace(&self.settings.name, &PostParams::default(), &released)).await.map(|_| ())
    }
}

/// Where an election reports: whether this replica leads, every round that reached the API
/// server, and until when its writes are safe.
pub struct Election {
    pub leading: watch::Sender<bool>,
    pub health: std::sync::Arc<crate::k8s::observe::health::SchedulerHealth>,
    pub fence: std::sync::Arc<super::fence::Fence>,
}

/// Runs the election until `shutdown` completes, publishing on `leading` whether this
/// replica leads, telling `health` of every round that reached the API server, and moving
/// the write fence with each renewal. On shutdown a held lease is released.
pub async fn elect(
    client: kube::Client,
    settings: LeaseSettings,
    report: Election,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let Election { leading, health, fence } = report;
    let lease_duration = settings.lease_duration;
    let retry = settings.retry_period.max(Duration::from_millis(100));
    let deadline = settings.renew_deadline;
    let name = format!("{}/{}", settings.namespace, settings.name);
    let mut elector = Elector::new(client, settings);
    let mut renewed: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        // A round that hangs must not keep a holder leading past its deadline.
        let budget = renewed.map_or(retry, |at| deadline.saturating_sub(at.elapsed()).max(Duration::from_millis(1)));
        let sent = tokio::time::Instant::now();
        let round = tokio::time::timeout(budget, elector.round()).await;
        if let Ok(Ok(_)) = &round {
            health.contact();
        }
        match round {
            Ok(Ok(Round::Leading)) => {
                renewed = Some(Instant::now());
                fence.renewed(sent, lease_duration);
                if !*leading.borrow() {
                    tracing::info!(lease = %name, "acquired the lease; leading");
                }
                leading.send_replace(true);
            }
            Ok(Ok(Round::Following(holder))) => {
                if *leading.borrow() {
                    tracing::warn!(lease = %name, holder = ?holder, "lost the lease; stopping at once");
                }
                renewed = None;
                fence.close();
                leading.send_replace(false);
            }
            Ok(Err(e)) => tracing::warn!(lease = %name, error = %e, "failed to read or renew the lease"),
            Err(_) => tracing::warn!(lease = %name, "renewing the lease timed out"),
        }
        if renewed.is_some_and(|at| at.elapsed() >= deadline) {
            tracing::warn!(lease = %name, "could not renew the lease within the renew deadline; stopping at once");
            renewed = None;
            fence.close();
            leading.send_replace(false);
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = &mut shutdown => break,
        }
    }
    fence.close();
    let was_leading = leading.send_replace(false);
    if was_leading {
        match elector.release().await {
            Ok(()) => tracing::info!(lease = %name, "released the lease"),
            Err(e) => tracing::warn!(lease = %name, error = %e, "failed to release the lease"),
        }
    }
}
