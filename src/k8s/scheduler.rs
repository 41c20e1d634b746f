//! The scheduler as a process: discovery, caches, leader election and the scheduling loop,
//! wired together, with `/metrics`, `/healthz` and `/readyz`.
//!
//! Order, as kube-scheduler does it: discover the APIs, start the watches and wait for
//! their first lists, and only then run for the Lease, so a failover starts from a full
//! cache and a replica whose lists never complete (RBAC that forbids one) never leads.
//! Each term as leader runs a fresh [`Scheduler`] with its own writer and binder over the
//! shared cache; losing the Lease drops them, their in-flight bindings with them.

use std::sync::{Arc, Mutex};

use thiserror::Error;
use tokio::sync::oneshot;
use tokio::sync::watch as signal;

use super::scheduling::Scheduler;
use crate::config::Config;
use crate::k8s::observe::health::SchedulerHealth;
use crate::k8s::store::cache::Cache;
use crate::k8s::store::discovery;
use crate::k8s::store::{reads, watch::Wake};
use crate::k8s::write::bind::{BindHook, Binder};
use crate::k8s::write::sink::ApiSink;
use crate::k8s::write::writer::Writer;
use crate::metrics::Metrics;

#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Discovery(#[from] discovery::Error),
    #[error("a watch ended before the cache was filled")]
    WatchEnded,
    #[error("leader election for lease {lease} ended")]
    ElectionEnded { lease: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Background writers (conditions, events, statuses, evictions, releases) at once.
const WRITERS: usize = 8;

#[derive(Default)]
pub struct Options {
    /// Test-only: called before every bind.
    pub hook: Option<Arc<dyn BindHook>>,
    /// Where the scheduler's metrics go (served by the caller, see `metrics::serve`).
    pub metrics: Arc<Metrics>,
    /// What `/healthz` and `/readyz` report; made from the configuration when None.
    pub health: Option<Arc<SchedulerHealth>>,
    /// The scheduler stops when this turns true, releasing its lease if it holds one.
    pub shutdown: Option<signal::Receiver<bool>>,
    /// This replica's name in the lease (default: `leader::default_identity()`).
    pub identity: Option<String>,
    /// Where the loop publishes the page's view (served at `/ui` by the caller).
    pub ui: Arc<crate::ui::Board>,
}

/// The health a configuration asks for.
pub fn health_for(config: &Config) -> Arc<SchedulerHealth> {
    Arc::new(SchedulerHealth::new(
        std::time::Duration::from_secs(config.stall_timeout_seconds),
        config.leader_election.enabled,
    ))
}

/// Runs the scheduler until the process ends or `options.shutdown` turns true. With leader
/// election on, it schedules only while it holds the lease.
pub async fn run(client: kube::Client, config: Config, options: Options) -> Result<()> {
    let metrics = options.metrics.clone();
    let health = options.health.clone().unwrap_or_else(|| health_for(&config));
    let mut shutdown = options.shutdown.clone();
    let stopped = async move {
        match shutdown.as_mut() {
            Some(rx) => {
                let _ = rx.wait_for(|stop| *stop).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(stopped);

    // Caches first: discovery, every watch, and their first lists.
    let retry = crate::k8s::client::request::Retry::new(config.request_timeout());
    let sources = tokio::select! {
        sources = discovery::discover(&client, retry) => discovery::imported(sources?, &config.queues),
        _ = &mut stopped => return Ok(()),
    };
    let mut fresh = Cache::new(config.node_selector.clone().into_iter().collect());
    fresh.kueue_imported = sources.kueue_imported;
    fresh.workload_kinds = sources.workloads().map(|(kind, _)| kind).collect();
    let cache = Arc::new(Mutex::new(fresh));
    let wake = Arc::new(Wake::new(health.clone()));
    let (_watches, synced) = reads::start(&client, &sources, &cache, &wake);
    let filled = async {
        for rx in synced {
            rx.await.map_err(|_| Error::WatchEnded)?;
        }
        Ok::<(), Error>(())
    };
    tokio::select! {
        filled = filled => filled?,
        _ = &mut stopped => return Ok(()),
    }
    health.synced();
    tracing::info!(scheduler = %config.scheduler_name, "caches filled");

    // Writes end before another replica may lead (see `fence`).
    let fence = Arc::new(if config.leader_election.enabled {
        crate::k8s::write::fence::Fence::closed(config.request_timeout())
    } else {
        crate::k8s::write::fence::Fence::open()
    });
    let term = |client: kube::Client| lead(client, &config, &options, &cache, &wake, &health, &fence);
    if !config.leader_election.enabled {
        metrics.leader.set(1);
        health.leading(true);
        tokio::select! {
            _ = term(client) => {}
            _ = &mut stopped => {}
        }
        return Ok(());
    }
    let identity = options.identity.clone().unwrap_or_else(crate::k8s::write::leader::default_identity);
    let settings = crate::k8s::write::leader::LeaseSettings::from_config(&config, identity.clone());
    let lease = format!("{}/{}", settings.namespace, settings.name);
    tracing::info!(%lease, %identity, "leader election on; waiting for the lease");
    let (leading_tx, mut leading) = signal::channel(false);
    let (stop_election, election_stopped) = oneshot::channel::<()>();
    let mut election = tokio::task::JoinSet::new();
    let elector =
        crate::k8s::write::leader::Election { leading: leading_tx, health: health.clone(), fence: fence.clone() };
    election.spawn(crate::k8s::write::leader::elect(client.clone(), settings, elector, async move {
        let _ = election_stopped.await;
    }));
    let result = loop {
        tokio::select! {
            became = leading.wait_for(|l| *l) => if became.is_err() { break Err(Error::ElectionEnded { lease }) },
            _ = &mut stopped => break Ok(()),
        }
        metrics.leader.set(1);
        health.leading(true);
        tracing::info!(%lease, %identity, "leading: scheduling");
        tokio::select! {
            _ = term(client.clone()) => {}
            _ = leading.wait_for(|l| !*l) => {
                tracing::warn!(%lease, %identity, "not leading any more: stopped scheduling, binding and writing");
            }
            _ = &mut stopped => break Ok(()),
        }
        metrics.leader.set(0);
        health.leading(false);
    };
    metrics.leader.set(0);
    health.leading(false);
    // The elector releases the lease on its way out, so a standby takes over at once.
    let _ = stop_election.send(());
    while election.join_next().await.is_some() {}
    result
}

/// One term as leader: a fresh writer, binder and scheduling loop over the shared cache.
/// Runs until dropped; dropping it stops its writes and its bindings.
async fn lead(
    client: kube::Client,
    config: &Config,
    options: &Options,
    cache: &Arc<Mutex<Cache>>,
    wake: &Arc<Wake>,
    health: &Arc<SchedulerHealth>,
    fence: &Arc<crate::k8s::write::fence::Fence>,
) {
    let metrics = options.metrics.clone();
    // GPU usage counts while this term leads, and stops with it however it ends.
    metrics.ledger.begin(crate::metrics::ledger::unix_now());
    let _usage = EndUsage(metrics.ledger.clone());
    // What the last term assumed and never saw through is not this term's.
    cache.lock().unwrap_or_else(|e| e.into_inner()).forget_assumptions();
    let deadline = config.request_timeout();
    let sink = Arc::new(ApiSink::new(client.clone(), &config.scheduler_name, deadline));
    // A write is one or two requests, each with its deadline; the writer's own is a backstop.
    let writer = Writer::new(sink, deadline * 4, metrics.clone())
        .with_refusals(crate::k8s::write::refusals::RefusalPolicy::from_config(&config.eviction))
        .with_fence(fence.clone());
    writer.set_leading(true);
    let binder = Arc::new(
        Binder::new(client, options.hook.clone(), deadline)
            .with_metrics(metrics.clone())
            .with_fence(fence.clone())
            .with_in_flight(config.client_connection.bind_in_flight())
            .with_volume_timeout(std::time::Duration::from_secs(config.volume_bind_timeout_seconds))
            .with_device_timeout(std::time::Duration::from_secs(config.device_bind_timeout_seconds)),
    );
    let scheduler = Scheduler::new(config.clone(), cache.clone(), metrics, health.clone(), writer.clone(), binder)
        .with_ui(options.ui.clone());
    let stop_writes = StopWrites(writer.clone());
    tokio::select! {
        _ = writer.run(WRITERS) => {}
        _ = scheduler.run(wake.clone()) => {}
    }
    drop(stop_writes);
    // A replica that does not lead shows no figures rather than stale ones.
    options.ui.clear();
}

/// Stops counting a term's GPU usage when the term ends.
struct EndUsage(crate::metrics::ledger::Ledger);

impl Drop for EndUsage {
    fn drop(&mut self) {
        self.0.end(crate::metrics::ledger::unix_now());
    }
}

/// Stops a term's writes when the term ends, however it ends.
struct StopWrites(Writer);

impl Drop for StopWrites {
    fn drop(&mut self) {
        self.0.set_leading(false);
    }
}

/// The scheduler as a process: serves its metrics, `/healthz`, `/readyz` and the page at
/// `/ui` on the configured address, and stops on SIGTERM or Ctrl-C, releasing its lease if
/// it holds one.
pub async fn run_process(client: kube::Client, config: Config) -> std::result::Result<(), String> {
    let address: std::net::SocketAddr = config
        .metrics_address
        .parse()
        .map_err(|e| format!("metricsAddress {:?} is not an address and port: {e}", config.metrics_address))?;
    // A token file that cannot be read would lock everyone out of /metrics: say so now.
    if let Some(Err(why)) = config.metrics_server.token() {
        return Err(why);
    }
    let metrics = Arc::new(Metrics::new());
    let health = health_for(&config);
    let ui = Arc::new(crate::ui::Board::default());
    let site = crate::metrics::Site { page: Some(ui.clone()), access: config.metrics_server.clone() };
    let (stop_tx, stop_rx) = signal::channel(false);
    let mut server_stop = stop_rx.clone();
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("failed to listen for metrics on {address}: {e}"))?;
    let page = match config.metrics_server.ui {
        crate::metrics::UiAccess::Off => "",
        _ if config.metrics_server.bearer_token_file.is_empty() => ", /ui",
        crate::metrics::UiAccess::Protected => ", /ui (all but the probes behind the bearer token)",
        crate::metrics::UiAccess::Open => ", /ui (open; /metrics behind the bearer token)",
    };
    tracing::info!(%address, "serving /metrics, /healthz, /readyz{page}");
    let registry = metrics.registry.clone();
    let server = tokio::spawn(crate::metrics::serve_site(listener, registry, health.clone(), site, async move {
        let _ = server_stop.wait_for(|stop| *stop).await;
    }));
    tokio::spawn(async move {
        terminated().await;
        tracing::info!("stopping");
        stop_tx.send_replace(true);
    });
    let options = Options { metrics, health: Some(health), shutdown: Some(stop_rx), ui, ..Default::default() };
    let result = run(client, config, options).await.map_err(|e| e.to_string());
    server.abort();
    match server.await {
        Ok(Err(e)) => Err(e.to_string()),
        _ => result,
    }
}

/// Completes on SIGTERM (what the kubelet sends) or Ctrl-C.
async fn terminated() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
