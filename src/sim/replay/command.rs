//! `muster simulate --trace FILE` and `--generate-trace FILE`: reading the arguments into a
//! cluster and jobs, running the comparison, and writing it as a table, JSON or a page.

use std::path::{Path, PathBuf};

use super::cluster::{Cluster, ClusterShape};
use super::trace::{self, TraceJob};
use super::{compare, default_horizon, html};
use crate::config::Config;
use crate::sim::placer::{POLICIES, parse_policy};

/// How the comparison is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    /// A self-contained HTML page, to this file.
    Html(PathBuf),
}

impl Format {
    /// `--output table`, `--output json` or `--output html FILE`.
    pub fn parse(values: &[String]) -> Result<Format, String> {
        Ok(match crate::html::output_argument(values, &["table", "json"])? {
            (_, Some(page)) => Format::Html(page),
            (kind, None) if kind == "json" => Format::Json,
            _ => Format::Table,
        })
    }
}

/// The cluster a trace replays on.
#[derive(Clone, Debug)]
pub enum ClusterSource {
    Generated(ClusterShape),
    /// Node objects from these YAML files or folders.
    Files(Vec<PathBuf>),
}

/// Everything `--trace` needs.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    pub trace: PathBuf,
    pub cluster: ClusterSource,
    pub horizon_hours: Option<f64>,
    pub format: Format,
    /// The columns, by `--policy` name; empty: every policy.
    pub policies: Vec<String>,
}

/// A generated cluster from `--nodes`, `--gpus-per-node` and `--racks` (default: racks of
/// 8 nodes).
pub fn generated(nodes: usize, gpus_per_node: u32, racks: Option<usize>) -> Result<ClusterShape, String> {
    if nodes == 0 || gpus_per_node == 0 {
        return Err("--nodes and --gpus-per-node must be at least 1".into());
    }
    let racks = racks.unwrap_or_else(|| nodes.div_ceil(8));
    if racks == 0 || racks > nodes {
        return Err(format!("--racks {racks}: a cluster of {nodes} nodes has between 1 and {nodes} racks"));
    }
    Ok(ClusterShape { nodes, gpus_per_node, racks })
}

/// Replays the trace under every policy and writes the comparison; returns what goes to
/// standard output.
pub fn run(options: &TraceOptions, config: &Config) -> Result<String, String> {
    let jobs = read_trace(&options.trace)?;
    let cluster = match &options.cluster {
        ClusterSource::Generated(shape) => Cluster::generated(*shape, config),
        ClusterSource::Files(paths) => {
            let loaded = crate::sim::load::load(paths).map_err(|e| e.to_string())?;
            Cluster::from_nodes(&loaded.objects.nodes, config)?
        }
    };
    // Fractions need GPUs that several pods can share.
    let cluster =
        if jobs.iter().any(|j| j.gpu_fraction.is_some()) { super::shared::share(&cluster, config)? } else { cluster };
    let horizon = match options.horizon_hours {
        Some(hours) if hours > 0.0 => (hours * 3600.0) as i64,
        Some(hours) => return Err(format!("--horizon-hours {hours}: the horizon must be after the start")),
        None => default_horizon(&jobs),
    };
    let placers = if options.policies.is_empty() {
        POLICIES.to_vec()
    } else {
        options.policies.iter().map(|p| parse_policy(p)).collect::<Result<Vec<_>, _>>()?
    };
    let comparison = compare(&cluster, &jobs, config, horizon, &placers, true);
    let source = options.trace.display().to_string();
    match &options.format {
        Format::Table => Ok(super::table::trace_table(&comparison, &source, config.queueing)),
        Format::Json => Ok(serde_json::to_string_pretty(&comparison).expect("serialisable") + "\n"),
        Format::Html(path) => {
            let page = html::page(&comparison, &jobs, &source, config.queueing);
            std::fs::write(path, page).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            let mut text = super::table::trace_table(&comparison, &source, config.queueing);
            text.push_str(&format!("\nThe page: {}\n", path.display()));
            Ok(text)
        }
    }
}

fn read_trace(path: &Path) -> Result<Vec<TraceJob>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the trace {}: {e}", path.display()))?;
    let jobs = trace::read(std::io::BufReader::new(file), &path.display().to_string())?;
    if jobs.is_empty() {
        return Err(format!("{}: the trace has no jobs", path.display()));
    }
    Ok(jobs)
}
