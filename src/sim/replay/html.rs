//! The comparison as one self-contained HTML page.

use super::Comparison;
use super::trace::TraceJob;
use crate::config::QueueingStrategy;

pub fn page(comparison: &Comparison, _jobs: &[TraceJob], source: &str, default: QueueingStrategy) -> String {
    let mut table = String::new();
    crate::sim::table::comparison_table(&mut table, comparison, default);
    format!("<!doctype html><title>{source}</title><pre>{table}</pre>")
}
