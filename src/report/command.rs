//! `muster report`: the report from Prometheus or from a simulator run's JSON, written as a
//! table, CSV or an HTML page.

use std::path::{Path, PathBuf};

use super::Report;
use super::prometheus::Prometheus;
use crate::config::Config;
use crate::sim::placer::Placer;
use crate::sim::replay::usage::SimulatedUsage;

/// How the report is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Csv,
    /// A self-contained HTML page, to this file.
    Html(PathBuf),
}

impl Output {
    /// `--output table`, `--output csv` or `--output html FILE`.
    pub fn parse(values: &[String]) -> Result<Output, String> {
        Ok(match crate::html::output_argument(values, &["table", "csv"])? {
            (_, Some(page)) => Output::Html(page),
            (kind, None) if kind == "csv" => Output::Csv,
            _ => Output::Table,
        })
    }

    /// The report written this way: the text to print (for a page, the table and where the
    /// page went).
    pub fn write(&self, report: &Report) -> Result<String, String> {
        match self {
            Output::Table => Ok(report.table()),
            Output::Csv => Ok(report.csv()),
            Output::Html(path) => {
                std::fs::write(path, super::html::page(report))
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                Ok(format!("{}\nThe page: {}\n", report.table(), path.display()))
            }
        }
    }
}

/// The report of the `since` seconds before now, from the Prometheus at `url`.
pub fn from_prometheus(url: &str, since: u64) -> Result<Report, String> {
    let server = Prometheus::new(url)?;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("failed to start the runtime: {e}"))?;
    let now = crate::metrics::ledger::unix_now();
    runtime.block_on(Report::from_prometheus(&server, since, now))
}

/// The report of one policy's run in a simulator's JSON output (`muster simulate --trace
/// FILE --output json`): `policy` by its `--policy` name, by default the one the default
/// configuration schedules with.
pub fn from_simulation(path: &Path, policy: Option<&str>) -> Result<Report, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let run: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{shown} is not a simulator run's JSON: {e}"))?;
    let Some(outcomes) = run["outcomes"].as_array() else {
        return Err(format!(
            "{shown} has no `outcomes`: give the JSON of a trace replay (muster simulate --trace FILE ... --output json)"
        ));
    };
    let names: Vec<&str> = outcomes.iter().filter_map(|o| o["policy"].as_str()).collect();
    let wanted = match policy {
        Some(name) => name.to_string(),
        None if names.len() == 1 => names[0].to_string(),
        None => Placer::Queueing(Config::default().queueing).name(),
    };
    let outcome = outcomes
        .iter()
        .find(|o| o["policy"].as_str().is_some_and(|p| p.eq_ignore_ascii_case(&wanted)))
        .ok_or_else(|| format!("{shown} has no run of policy {wanted:?}; it has {}", names.join(", ")))?;
    let usage: SimulatedUsage = serde_json::from_value(outcome["usage"].clone()).map_err(|e| {
        format!("{shown}: the {wanted} run has no usage ledger ({e}); replay the trace again with this version")
    })?;
    let source = format!("simulated: {}, policy {wanted}", run["cluster"].as_str().unwrap_or("a cluster"));
    Ok(Report::from_simulation(&usage, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_read_with_their_file_and_mistakes_say_what_to_give() {
        let parse = |args: &[&str]| Output::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(parse(&["csv"]), Ok(Output::Csv));
        assert_eq!(parse(&["html", "r.html"]), Ok(Output::Html("r.html".into())));
        assert!(parse(&["html"]).unwrap_err().contains("--output html FILE"));
        assert!(parse(&["json"]).unwrap_err().contains("table, csv, html FILE"));
    }

    #[test]
    fn a_file_that_is_not_a_replay_is_refused_with_what_to_give() {
        let path = std::env::temp_dir().join(format!("muster-report-{}.json", std::process::id()));
        std::fs::write(&path, "{\"pods\": []}").unwrap();
        let refused = from_simulation(&path, None).unwrap_err();
        assert!(refused.contains("no `outcomes`") && refused.contains("--trace"), "{refused}");
        std::fs::write(&path, "{\"outcomes\": [{\"policy\": \"Backfill\"}]}").unwrap();
        let refused = from_simulation(&path, Some("StrictFIFO")).unwrap_err();
        assert!(refused.contains("no run of policy \"StrictFIFO\"; it has Backfill"), "{refused}");
        let refused = from_simulation(&path, None).unwrap_err();
        assert!(refused.contains("no usage ledger"), "{refused}");
        std::fs::remove_file(&path).unwrap();
    }
}
