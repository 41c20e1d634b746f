//! The agent's loop: a thread of its own reads the GPUs every poll interval (NVML handles
//! stay on that thread); each reading is published (driver mode) or turned into taint rules
//! (companion mode), the Node is labelled and the metrics are set.

use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use thiserror::Error;
use tokio::sync::watch;
use tracing::{info, warn};

use super::gpu::{Gpu, GpuSample};
use super::inventory::{FakeSource, FileSource};
use super::metrics::AgentMetrics;
use super::nvml::{LiveNvml, NvmlSource};
use super::options::{AgentOptions, Mode};
use super::slices::{self, Publication};
use super::source::{self, DeviceSource};
use super::{companion, publish};
use crate::yaml;

#[derive(Debug, Error)]
pub enum Error {
    #[error("--node-name (or NODE_NAME) is required")]
    NoNodeName,
    #[error(transparent)]
    Source(#[from] source::Error),
    #[error(transparent)]
    Publish(#[from] publish::Error),
    #[error("failed to read node {node}: {source}")]
    Node { node: String, source: kube::Error },
    #[error("failed to render the slices as YAML: {0}")]
    Render(#[from] yaml_serde::Error),
    /// The first reading failed (NVML missing, an unreadable inventory): nothing to serve.
    #[error("{0}")]
    Unreadable(String),
    #[error("bad --metrics-address {address:?}: {problem}")]
    MetricsAddress { address: String, problem: String },
    #[error(transparent)]
    Metrics(#[from] crate::metrics::Error),
    #[error(transparent)]
    Kubelet(#[from] super::kubelet::Error),
    #[error(
        "NVIDIA's DRA driver ({0}) now publishes this node's GPUs; withdrew this agent's slices, restarting as its companion"
    )]
    NvidiaDriverAppeared(String),
    #[error("the GPU reader stopped")]
    ReaderStopped,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens the source the options ask for: an inventory file, invented GPUs, or NVML.
pub fn open_source(options: &AgentOptions, node_name: &str) -> Result<Box<dyn DeviceSource>> {
    if let Some(path) = &options.inventory {
        return Ok(Box::new(FileSource::new(path.clone())));
    }
    if let Some(count) = options.fake_gpus {
        return Ok(Box::new(FakeSource::new(node_name, count, &options.fake_product)));
    }
    Ok(Box::new(NvmlSource::new(LiveNvml::open(options.nvml_library.as_deref())?)))
}

fn publication(options: &AgentOptions, node_name: &str, node_uid: Option<String>) -> Publication {
    Publication {
        driver_name: options.driver_name.clone(),
        node_name: node_name.to_string(),
        node_uid,
        sharing: options.sharing,
    }
}

/// `--dry-run`: the ResourceSlices driver mode would publish, as a YAML stream, quoted so
/// that YAML 1.1 readers read every string (PCI bus IDs such as `0000:18:00.0`) as a string.
pub fn dry_run(options: &AgentOptions) -> Result<String> {
    let mut out = String::new();
    for slice in dry_run_slices(options)? {
        out.push_str("---\n");
        out.push_str(&yaml::to_string(&slice)?);
    }
    Ok(out)
}

/// The ResourceSlices of [`dry_run`], with their apiVersion and kind.
fn dry_run_slices(options: &AgentOptions) -> Result<Vec<serde_json::Value>> {
    let node_name = options.node_name.clone().ok_or(Error::NoNodeName)?;
    let gpus = open_source(options, &node_name)?.read()?;
    let publication = publication(options, &node_name, None);
    let slices = slices::desired(slices::devices(&gpus, &publication), &publication, 1);
    Ok(slices
        .iter()
        .map(|slice| {
            let mut value = serde_json::to_value(slice).expect("a ResourceSlice serialises");
            if let Some(map) = value.as_object_mut() {
                map.insert("apiVersion".into(), "resource.k8s.io/v1".into());
                map.insert("kind".into(), "ResourceSlice".into());
            }
            value
        })
        .collect())
}

/// One reading of the node's GPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    pub gpus: Vec<Gpu>,
    pub samples: Vec<GpuSample>,
}

type Readings = watch::Receiver<Option<std::result::Result<Reading, String>>>;

/// Starts the reader thread. It opens the source itself and reads until `stop` is dropped.
fn spawn_reader(options: AgentOptions, node_name: String, interval: Duration) -> (Readings, mpsc::Sender<()>) {
    let (tx, rx) = watch::channel(None);
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("gpu-reader".into())
        .spawn(move || {
            let mut source = match open_source(&options, &node_name) {
                Ok(source) => source,
                Err(e) => {
                    let _ = tx.send(Some(Err(e.to_string())));
                    return;
                }
            };
            loop {
                let reading =
                    source.read().map(|gpus| Reading { samples: source.samples(), gpus }).map_err(|e| e.to_string());
                if tx.send(Some(reading)).is_err() {
                    return;
                }
                match stop_rx.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })
        .expect("failed to start the GPU reader thread");
    (rx, stop_tx)
}

/// Which mode `--mode auto` resolves to on this node.
pub async fn resolve_mode(client: &kube::Client, options: &AgentOptions, node_name: &str) -> Result<Mode> {
    Ok(match options.mode {
        Mode::Auto => {
            let theirs = publish::node_slices(client, &options.nvidia_driver_name, node_name).await?;
            if companion::publishes_for(&theirs, &options.nvidia_driver_name, node_name) {
                Mode::Companion
            } else {
                Mode::Driver
            }
        }
        mode => mode,
    })
}

/// Re-publishes at least this often even when the GPUs did not change, repairing anything
/// edited or deleted behind the agent's back.
const RESYNC_POLLS: u32 = 6;

/// Runs the agent until `shutdown` completes. In driver mode the node's slices are removed
/// on the way out, so uninstalling the agent withdraws its devices.
pub async fn run(
    client: kube::Client,
    options: AgentOptions,
    metrics: &AgentMetrics,
    gpus_out: watch::Sender<Vec<Gpu>>,
    ready: watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let node_name = options.node_name.clone().ok_or(Error::NoNodeName)?;
    let nodes: Api<Node> = Api::all(client.clone());
    tokio::pin!(shutdown);
    // The API server may be briefly unreachable when a node boots: wait for it rather than
    // crash-loop.
    let (node, mode) = tokio::select! {
        _ = &mut shutdown => return Ok(()),
        started = start_point(&client, &nodes, &options, &node_name) => started,
    };
    info!(node = %node_name, ?mode, driver = %options.driver_name, "node agent starting");
    let publication = publication(&options, &node_name, node.metadata.uid.clone());
    let interval = Duration::from_secs(options.poll_interval_seconds.max(1));
    let (mut readings, _stop) = spawn_reader(options.clone(), node_name.clone(), interval);

    let mut published: Option<Vec<Gpu>> = None;
    let mut ever_read = false;
    let mut polls_since_sync = 0u32;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            changed = readings.changed() => {
                if changed.is_err() {
                    return Err(Error::ReaderStopped);
                }
            }
        }
        let reading = readings.borrow_and_update().clone();
        let reading = match reading {
            None => continue,
            // The source never worked (NVML missing, an unreadable inventory): nothing to serve.
            Some(Err(problem)) if !ever_read => return Err(Error::Unreadable(problem)),
            Some(Err(problem)) => {
                warn!(%problem, "failed to read the GPUs; keeping what is published");
                continue;
            }
            Some(Ok(reading)) => reading,
        };
        ever_read = true;
        metrics.update(&node_name, &reading.gpus, &reading.samples);
        gpus_out.send_replace(reading.gpus.clone());
        polls_since_sync += 1;
        if published.as_ref() == Some(&reading.gpus) && polls_since_sync < RESYNC_POLLS {
            continue;
        }
        polls_since_sync = 0;
        match sync(&client, &nodes, &node_name, mode, &options, &publication, &reading.gpus).await {
            Ok(()) => {}
            Err(e @ Error::NvidiaDriverAppeared(_)) => return Err(e),
            Err(e) => {
                warn!(error = %e, "failed to publish; retrying at the next poll");
                continue;
            }
        }
        published = Some(reading.gpus);
        ready.send_replace(true);
    }
    if mode == Mode::Driver {
        publish::remove_slices(&client, &publication).await?;
        info!(node = %node_name, "removed this node's ResourceSlices");
    }
    Ok(())
}

/// The Node and the mode, retried with backoff while the API server does not answer.
async fn start_point(
    client: &kube::Client,
    nodes: &Api<Node>,
    options: &AgentOptions,
    node_name: &str,
) -> (Node, Mode) {
    let mut delay = Duration::from_secs(1);
    loop {
        let attempt = async {
            let node =
                nodes.get(node_name).await.map_err(|source| Error::Node { node: node_name.to_string(), source })?;
            Ok::<_, Error>((node, resolve_mode(client, options, node_name).await?))
        };
        match attempt.await {
            Ok(found) => return found,
            Err(e) => warn!(error = %e, retry_in = ?delay, "cannot start yet"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// One round of writes for one reading.
async fn sync(
    client: &kube::Client,
    nodes: &Api<Node>,
    node_name: &str,
    mode: Mode,
    options: &AgentOptions,
    publication: &Publication,
    gpus: &[Gpu],
) -> Result<()> {
    match mode {
        Mode::Companion => {
            let theirs = publish::node_slices(client, &options.nvidia_driver_name, node_name).await?;
            let wanted =
                companion::rules(gpus, &theirs, &options.nvidia_driver_name, publication, &options.driver_name);
            if publish::apply_rules(client, node_name, wanted).await? {
                info!(node = %node_name, "updated the DeviceTaintRules for this node's GPUs");
            }
        }
        _ => {
            // Under --mode auto, NVIDIA's driver may start after the agent: two publishers of
            // one GPU would let it be allocated twice, so the agent withdraws and restarts.
            if options.mode == Mode::Auto {
                let theirs = publish::node_slices(client, &options.nvidia_driver_name, node_name).await?;
                if companion::publishes_for(&theirs, &options.nvidia_driver_name, node_name) {
                    publish::remove_slices(client, publication).await?;
                    return Err(Error::NvidiaDriverAppeared(options.nvidia_driver_name.clone()));
                }
            }
            if publish::publish_slices(client, publication, gpus).await? {
                info!(node = %node_name, gpus = gpus.len(), "published this node's ResourceSlices");
            }
        }
    }
    let node = nodes.get(node_name).await.map_err(|source| Error::Node { node: node_name.to_string(), source })?;
    publish::label_node(client, &node, gpus).await?;
    Ok(())
}

/// Completes on SIGTERM (the DaemonSet's pod is being stopped) or Ctrl-C.
pub async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(term) => { term.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// `muster agent`: the metrics endpoint, the kubelet plugin in driver mode, and the loop,
/// until the process is told to stop.
pub async fn serve(client: kube::Client, options: AgentOptions) -> Result<()> {
    let node_name = options.node_name.clone().ok_or(Error::NoNodeName)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let (_, mode) = tokio::select! {
        _ = terminated() => return Ok(()),
        started = start_point(&client, &nodes, &options, &node_name) => started,
    };
    let metrics = AgentMetrics::new();
    let (gpus_tx, gpus_rx) = watch::channel(Vec::new());
    let (ready_tx, ready_rx) = watch::channel(false);
    // One stop signal, fanned out to the loop, the metrics server and the plugin.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    if !options.metrics_address.is_empty() {
        let address = &options.metrics_address;
        let addr: std::net::SocketAddr = address.parse().map_err(|e: std::net::AddrParseError| {
            Error::MetricsAddress { address: address.clone(), problem: e.to_string() }
        })?;
        let registry = metrics.registry.clone();
        let stop = stopped();
        tasks.spawn(async move {
            crate::metrics::serve(addr, registry, std::sync::Arc::new(ready_rx), stop).await.map_err(Error::from)
        });
    }
    if mode == Mode::Driver && options.kubelet_plugin {
        let config = super::kubelet::PluginConfig::new(&options, &node_name);
        let (client, stop) = (client.clone(), stopped());
        tasks.spawn(async move { super::kubelet::serve(config, client, gpus_rx, stop).await.map_err(Error::from) });
    }
    let signal = async {
        tokio::select! {
            _ = terminated() => {}
            // A helper that fails (the metrics port is taken) stops the agent.
            Some(Ok(Err(e))) = tasks.join_next() => {
                tracing::error!(error = %e, "stopping the agent");
            }
        }
    };
    let outcome = run(client, options, &metrics, gpus_tx, ready_tx, signal).await;
    stop_tx.send_replace(true);
    while let Some(joined) = tasks.join_next().await {
        if let Ok(Err(e)) = joined {
            warn!(error = %e, "while stopping");
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde::Deserialize;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: AgentOptions,
    }

    fn options(args: &[&str]) -> AgentOptions {
        Cli::parse_from(std::iter::once("agent").chain(args.iter().copied())).options
    }

    /// The dry run reads back, through yaml_serde, as exactly the slices it was written
    /// from, and the fake GPUs' bus IDs (base-60 floats to YAML 1.1) are quoted.
    #[test]
    fn the_dry_run_reads_back_as_the_slices() {
        let options = options(&["--node-name", "gpu-node-1", "--fake-gpus", "2", "--sharing"]);
        let text = dry_run(&options).unwrap();
        let read: Vec<serde_json::Value> =
            yaml_serde::Deserializer::from_str(&text).map(|doc| serde_json::Value::deserialize(doc).unwrap()).collect();
        assert_eq!(read, dry_run_slices(&options).unwrap());
        for bus_id in ["0000:18:00.0", "0000:28:00.0"] {
            assert!(text.contains(&format!("string: '{bus_id}'")), "{bus_id} unquoted in:\n{text}");
        }
    }
}
