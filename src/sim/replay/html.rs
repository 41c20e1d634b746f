//! The comparison as one self-contained HTML page: the figures as a table, GPUs in use over
//! time per policy, and the distribution of waits per job size, as inline SVG (no script,
//! no external asset), for `--output html FILE`.

use std::fmt::Write;

use super::Comparison;
use super::report::size_class;
use super::trace::TraceJob;
use crate::config::QueueingPolicy;
use crate::html::{PAGE_STYLE, axes, colour, escape, legend, polyline, x_at, y_at};

pub fn page(comparison: &Comparison, jobs: &[TraceJob], source: &str, default: QueueingPolicy) -> String {
    let mut out = String::new();
    let titles: Vec<String> = comparison.outcomes.iter().map(|o| o.placer.title(default)).collect();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Muster replay: {}</title>\n<style>{PAGE_STYLE}</style></head><body>\n",
        escape(source)
    );
    let _ = writeln!(
        out,
        "<h1>Replay of {}</h1>\n<p>{} jobs on {} ({} GPUs), {:.0} h horizon; every policy on the same trace.</p>",
        escape(source),
        comparison.jobs,
        escape(&comparison.cluster),
        comparison.total_gpus,
        comparison.horizon_seconds as f64 / 3600.0
    );
    out.push_str(&figures_table(comparison, default));
    legend(&mut out, &titles);
    let _ = writeln!(out, "<h2>GPUs in use by running jobs</h2>");
    in_use_plot(&mut out, comparison);
    let _ = writeln!(out, "<h2>Waits by job size</h2><p>Share of each size's jobs started within a wait.</p>");
    let mut classes: Vec<(usize, String)> =
        jobs.iter().map(|j| size_class(j.total_gpus(), comparison.node_gpus)).collect();
    classes.sort();
    classes.dedup();
    for (class, label) in classes {
        let members: Vec<usize> = (0..jobs.len())
            .filter(|&j| jobs[j].submit <= comparison.horizon_seconds)
            .filter(|&j| size_class(jobs[j].total_gpus(), comparison.node_gpus).0 == class)
            .collect();
        let _ = writeln!(out, "<h3>{} ({} jobs)</h3>", escape(&label), members.len());
        wait_plot(&mut out, comparison, &members);
    }
    out.push_str("</body></html>\n");
    out
}

/// The figures as an HTML table, then the notes.
fn figures_table(comparison: &Comparison, default: QueueingPolicy) -> String {
    let mut out = String::from("<table>\n");
    for (i, (label, cells)) in super::table::comparison_rows(comparison, default).iter().enumerate() {
        let tag = if i == 0 { "th" } else { "td" };
        let _ = write!(out, "<tr><{tag}>{}</{tag}>", escape(label.trim()));
        for cell in cells {
            let _ = write!(out, "<{tag}>{}</{tag}>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    for note in &comparison.notes {
        let _ = writeln!(out, "<p>note: {}</p>", escape(note));
    }
    out
}

fn in_use_plot(out: &mut String, comparison: &Comparison) {
    let total = f64::from(comparison.total_gpus.max(1));
    let hours = comparison.horizon_seconds as f64 / 3600.0;
    axes(out, hours, total, &|h| format!("{h:.0} h"), &|g| format!("{g:.0}"));
    for (i, series) in comparison.in_use.iter().enumerate() {
        let n = series.len().max(1) as f64;
        let points: Vec<(f64, f64)> =
            series.iter().enumerate().map(|(k, v)| (x_at((k as f64 + 0.5) / n), y_at(v / total))).collect();
        polyline(out, &points, colour(i));
    }
    out.push_str("</svg>\n");
}

/// The share of `members` started within each wait, per policy: a step line up to the
/// longest wait any policy gave them.
fn wait_plot(out: &mut String, comparison: &Comparison, members: &[usize]) {
    let longest = comparison
        .waits
        .iter()
        .flat_map(|waits| members.iter().filter_map(|&j| waits[j]))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let count = members.len().max(1) as f64;
    axes(out, longest, 100.0, &|m| format!("{m:.0} min"), &|p| format!("{p:.0}%"));
    for (i, waits) in comparison.waits.iter().enumerate() {
        let mut sorted: Vec<f64> = members.iter().filter_map(|&j| waits[j]).collect();
        sorted.sort_by(f64::total_cmp);
        let x = |m: f64| x_at(m / longest);
        let y = y_at;
        let mut points = vec![(x(0.0), y(0.0))];
        // One point per distinct wait, at most 400 of them.
        let step = (sorted.len() / 400).max(1);
        for (k, wait) in sorted.iter().enumerate() {
            if (k + 1) % step == 0 || k + 1 == sorted.len() {
                let share = (k + 1) as f64 / count;
                points.push((x(*wait), points.last().map_or(y(0.0), |p| p.1)));
                points.push((x(*wait), y(share)));
            }
        }
        let last = points.last().map_or(y(0.0), |p| p.1);
        points.push((x(longest), last));
        polyline(out, &points, colour(i));
    }
    out.push_str("</svg>\n");
}
