//! `muster simulate --openb DIR`: Alibaba's openb GPU-sharing trace replayed through the
//! engine under the protocol its paper published results with (Weng et al., "Beware of
//! Fragmentation", USENIX ATC '23), over several seeds, reported beside those results.

pub mod load;
pub mod run;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::Config;
use run::{Base, SeedRun, arrivals, arrived_percent};

/// The arrived GPU request, in percent of the cluster's, the replay goes up to.
pub const ARRIVE_PERCENT: u64 = 130;

pub struct OpenbOptions {
    pub dir: PathBuf,
    pub workload: String,
    pub seeds: Vec<u64>,
    pub json: bool,
}

/// One policy's figures: the share of GPUs allocated when the arrived request reaches
/// 100% and 130% of capacity, and the fragmentation ratio at 90%, seed means.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyFigures {
    pub policy: String,
    pub allocated_at_100: f64,
    pub allocated_at_130: f64,
    pub fragmentation_at_90: Option<f64>,
    pub seeds: usize,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedFigures {
    pub seed: u64,
    pub allocated_at_100: f64,
    pub allocated_at_130: f64,
    pub fragmentation_at_90: Option<f64>,
    pub arrivals: usize,
    pub placed: usize,
    pub skipped: usize,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenbReport {
    pub workload: String,
    pub nodes: usize,
    pub gpus: u64,
    pub muster: PolicyFigures,
    pub per_seed: Vec<SeedFigures>,
    /// The paper's simulator's results for the same workload, when they are beside the trace.
    pub published: Vec<PolicyFigures>,
}

/// The mean allocation (percent of GPUs) over arrival events whose arrived request rounds to
/// `k` percent (within one percent when none does, and the last event below `k` when none
/// is that near, as in a small cluster), each rounded to two decimals as the published
/// analysis rounds them.
fn column(events: &[(u64, u64)], total: u64, k: u64) -> f64 {
    let allocated = |used: u64| (used as f64 * 100.0 / total as f64 * 100.0).round() / 100.0;
    let mean = |values: Vec<f64>| (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
    let exact = events.iter().filter(|(a, _)| arrived_percent(*a, total) == k).map(|&(_, u)| allocated(u)).collect();
    mean(exact)
        .or_else(|| {
            let near = |a: u64| arrived_percent(a, total).abs_diff(k) <= 1;
            mean(events.iter().filter(|(a, _)| near(*a)).map(|&(_, u)| allocated(u)).collect())
        })
        .or_else(|| events.iter().rev().find(|(a, _)| arrived_percent(*a, total) <= k).map(|&(_, u)| allocated(u)))
        .unwrap_or(0.0)
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let values: Vec<f64> = values.collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Replays the trace for every seed (as many at once as there are cores) and reports.
pub fn replay(options: &OpenbOptions, config: &Config) -> Result<OpenbReport, String> {
    let (nodes, pods) = load::load(&options.dir, &options.workload)?;
    let base = Base::new(&nodes)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).max(1);
    let mut runs: Vec<SeedRun> = Vec::new();
    for chunk in options.seeds.chunks(threads) {
        let done: Vec<SeedRun> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&seed| {
                    let (base, pods) = (&base, &pods);
                    scope.spawn(move || {
                        let order = arrivals(pods, seed, base.total_milli, ARRIVE_PERCENT);
                        run::run(base, pods, &order, seed, config)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a replay thread")).collect()
        });
        runs.extend(done);
    }
    let total = base.total_milli;
    let per_seed: Vec<SeedFigures> = runs
        .iter()
        .map(|r| SeedFigures {
            seed: r.seed,
            allocated_at_100: column(&r.events, total, 100),
            allocated_at_130: column(&r.events, total, ARRIVE_PERCENT),
            fragmentation_at_90: mean(r.fragmentation_at_90.iter().copied()),
            arrivals: r.events.len(),
            placed: r.placed,
            skipped: r.skipped,
        })
        .collect();
    let muster = PolicyFigures {
        policy: "Muster".into(),
        allocated_at_100: mean(per_seed.iter().map(|s| s.allocated_at_100)).unwrap_or(0.0),
        allocated_at_130: mean(per_seed.iter().map(|s| s.allocated_at_130)).unwrap_or(0.0),
        fragmentation_at_90: mean(per_seed.iter().filter_map(|s| s.fragmentation_at_90)),
        seeds: per_seed.len(),
    };
    let published = load::published_folder(&options.dir)
        .map(|folder| published(&folder, &options.workload))
        .transpose()?
        .unwrap_or_default();
    Ok(OpenbReport {
        workload: options.workload.clone(),
        nodes: nodes.len(),
        gpus: total / 1000,
        muster,
        per_seed,
        published,
    })
}

/// Seed means per policy from the published analysis files (`analysis_allo_discrete.csv`,
/// `analysis_frag_ratio_discrete.csv`), for `workload` at the 130% tuning.
fn published(folder: &Path, workload: &str) -> Result<Vec<PolicyFigures>, String> {
    let name = format!("openb_pod_list_{workload}");
    let read = |file: &str, columns: &[&str]| -> Result<Vec<(String, Vec<f64>)>, String> {
        let path = folder.join(file);
        let Ok(mut reader) = csv::Reader::from_path(&path) else { return Ok(Vec::new()) };
        let headers = reader.headers().map_err(|e| format!("{}: {e}", path.display()))?.clone();
        let at = |h: &str| headers.iter().position(|x| x == h);
        let (Some(w), Some(p), Some(t)) = (at("workload"), at("sc_policy"), at("tune")) else {
            return Err(format!("{}: not the published analysis (no workload, sc_policy, tune)", path.display()));
        };
        let wanted: Vec<usize> = columns.iter().filter_map(|c| at(c)).collect();
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| format!("{}: {e}", path.display()))?;
            if record.get(w) != Some(name.as_str()) || record.get(t).and_then(|t| t.parse::<f64>().ok()) != Some(1.3) {
                continue;
            }
            let values =
                wanted.iter().map(|&i| record.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)).collect();
            rows.push((record.get(p).unwrap_or_default().to_string(), values));
        }
        Ok(rows)
    };
    let allocated = read("analysis_allo_discrete.csv", &["100", "130"])?;
    let fragmentation = read("analysis_frag_ratio_discrete.csv", &["90"])?;
    let mut policies: Vec<String> = allocated.iter().map(|(p, _)| p.clone()).collect();
    policies.dedup();
    policies.sort();
    policies.dedup();
    Ok(policies
        .into_iter()
        .map(|policy| {
            let rows: Vec<&Vec<f64>> = allocated.iter().filter(|(p, _)| *p == policy).map(|(_, v)| v).collect();
            let column = |i: usize| mean(rows.iter().filter_map(|v| v.get(i).copied())).unwrap_or(f64::NAN);
            PolicyFigures {
                allocated_at_100: column(0),
                allocated_at_130: column(1),
                fragmentation_at_90: mean(
                    fragmentation.iter().filter(|(p, _)| *p == policy).filter_map(|(_, v)| v.first().copied()),
                ),
                seeds: rows.len(),
                policy,
            }
        })
        .collect())
}

/// The report as a table a person reads.
pub fn table(report: &OpenbReport) -> String {
    let mut out = String::new();
    let seeds: Vec<String> = report.per_seed.iter().map(|s| s.seed.to_string()).collect();
    let _ = writeln!(
        out,
        "openb ({}): {} nodes, {} GPUs; pods arrive until they ask for {ARRIVE_PERCENT}% of the GPUs, none leaves; seeds {}",
        report.workload,
        report.nodes,
        report.gpus,
        seeds.join(", ")
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<28} {:>16} {:>16} {:>22}",
        "policy", "allocated @100%", "allocated @130%", "fragmentation @90%"
    );
    let row = |out: &mut String, f: &PolicyFigures| {
        let frag = f.fragmentation_at_90.map_or("-".to_string(), |v| format!("{v:.2}%"));
        let _ =
            writeln!(out, "{:<28} {:>15.2}% {:>15.2}% {:>22}", f.policy, f.allocated_at_100, f.allocated_at_130, frag);
    };
    row(&mut out, &report.muster);
    for f in &report.published {
        row(&mut out, &PolicyFigures { policy: format!("published: {}", f.policy), ..f.clone() });
    }
    let _ = writeln!(out);
    for s in &report.per_seed {
        let frag = s.fragmentation_at_90.map_or("-".to_string(), |v| format!("{v:.2}%"));
        let _ = writeln!(
            out,
            "seed {}: allocated {:.2}% at 100%, {:.2}% at 130%, fragmentation {frag} at 90%; {} pods arrived, {} placed, {} skipped",
            s.seed, s.allocated_at_100, s.allocated_at_130, s.arrivals, s.placed, s.skipped
        );
    }
    out
}
