//! The report as one self-contained HTML page (`muster report --output html FILE`): its
//! tables, GPUs in use per queue over the period, and how long each queue's gangs waited,
//! as inline SVG. No script, no external asset: it can be mailed or attached to a ticket.

use std::fmt::Write;

use super::{GANG_COLUMNS, NAMESPACE_COLUMNS, QUEUE_COLUMNS, Report};
use crate::html::{PAGE_STYLE, axes, axes_with, colour, escape, legend, polyline, x_at, y_at};
use crate::metrics::WAITING_BUCKETS;

pub fn page(report: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Muster usage: {}</title>\n<style>{PAGE_STYLE}</style></head><body>\n",
        escape(&report.period())
    );
    let _ = writeln!(
        out,
        "<h1>GPU usage</h1>\n<p>{}; {}; the fleet had {:.1} GPUs on average.</p>",
        escape(&report.source),
        escape(&report.period()),
        report.fleet_gpus
    );
    let _ = writeln!(out, "<h2>Queues</h2>");
    table(&mut out, &QUEUE_COLUMNS, report.queue_rows().iter().map(|r| r.as_slice()));
    let _ = writeln!(out, "<h2>Queues and namespaces</h2>");
    table(&mut out, &NAMESPACE_COLUMNS, report.namespace_rows().iter().map(|r| r.as_slice()));
    let _ = writeln!(
        out,
        "<p>Stranded: {:.2} GPU-hours; held by claims no pod uses: {:.2} GPU-hours. Gangs evicted: {}.</p>",
        report.stranded_gpu_hours,
        report.held_gpu_hours,
        escape(&report.evictions_by_reason())
    );
    if !report.gangs.is_empty() {
        let shown = super::LARGEST_GANGS.min(report.gangs.len());
        let _ = writeln!(out, "<h2>The {shown} largest of {} gangs</h2>", report.gangs.len());
        table(&mut out, &GANG_COLUMNS, report.gang_rows().iter().map(|r| r.as_slice()));
    }
    let queues: Vec<String> = report.in_use.keys().chain(report.wait_buckets.keys()).cloned().collect();
    let mut queues = queues;
    queues.sort();
    queues.dedup();
    legend(&mut out, &queues);
    let _ = writeln!(out, "<h2>GPUs in use per queue</h2>");
    in_use_plot(&mut out, report, &queues);
    let _ = writeln!(out, "<h2>Waits</h2><p>Share of each queue's gangs bound within a wait.</p>");
    wait_plot(&mut out, report, &queues);
    out.push_str("</body></html>\n");
    out
}

fn table<'a>(out: &mut String, columns: &[&str], rows: impl Iterator<Item = &'a [String]>) {
    out.push_str("<table>\n<tr>");
    for column in columns {
        let _ = write!(out, "<th>{}</th>", escape(column));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// One line per queue (coloured as the legend), over the period.
fn in_use_plot(out: &mut String, report: &Report, queues: &[String]) {
    let seconds = (report.until - report.from).max(1.0);
    let highest = report.in_use.values().flatten().map(|p| p.1).fold(0.0f64, f64::max);
    let top = nice_ceiling(highest.max(report.fleet_gpus.min(highest * 2.0)).max(1.0));
    let label = |g: f64| if top < 4.0 { format!("{g:.2}") } else { format!("{g:.0}") };
    axes(out, seconds, top, &|s| super::duration(s), &label);
    for (i, queue) in queues.iter().enumerate() {
        let Some(series) = report.in_use.get(queue) else { continue };
        let points: Vec<(f64, f64)> =
            series.iter().map(|(at, gpus)| (x_at((at / seconds).min(1.0)), y_at(gpus / top))).collect();
        polyline(out, &points, colour(i));
    }
    out.push_str("</svg>\n");
}

/// Per queue, the share of its gangs bound within each of the histogram's bounds.
fn wait_plot(out: &mut String, report: &Report, queues: &[String]) {
    let mut ticks: Vec<String> = WAITING_BUCKETS.iter().map(|b| bound(*b)).collect();
    ticks.push("longer".into());
    axes_with(out, 100.0, &ticks, &|p| format!("{p:.0}%"));
    let last = (ticks.len() - 1) as f64;
    for (i, queue) in queues.iter().enumerate() {
        let Some(counts) = report.wait_buckets.get(queue) else { continue };
        let Some(&total) = counts.last().filter(|t| **t > 0.0) else { continue };
        let points: Vec<(f64, f64)> =
            counts.iter().enumerate().map(|(k, c)| (x_at(k as f64 / last), y_at((c / total).min(1.0)))).collect();
        polyline(out, &points, colour(i));
    }
    out.push_str("</svg>\n");
}

/// A bucket's bound in its largest whole unit: `15s`, `10m`, `6h`, `1d`.
fn bound(seconds: f64) -> String {
    let unit =
        [(86_400.0, "d"), (3600.0, "h"), (60.0, "m")].into_iter().find(|(u, _)| seconds >= *u && seconds % u == 0.0);
    unit.map_or_else(|| format!("{seconds}s"), |(u, name)| format!("{}{name}", seconds / u))
}

/// The smallest of 1, 2, 5 times a power of ten at or above `value`.
fn nice_ceiling(value: f64) -> f64 {
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|v| *v >= value).unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Usage;

    #[test]
    fn the_page_has_each_queues_line_in_both_plots_and_escapes_names() {
        let mut report = Report {
            source: "Prometheus at http://prom:9090".into(),
            wall_clock: true,
            from: 1_700_000_000.0,
            until: 1_700_007_200.0,
            fleet_gpus: 16.0,
            ..Report::default()
        };
        for (queue, gpus) in [("team-a", 8.0), ("<b>", 2.0)] {
            report.usage.insert((queue.into(), "ml".into()), Usage { gpu_hours: gpus * 2.0, ..Usage::default() });
            report.in_use.insert(queue.into(), vec![(0.0, gpus), (3600.0, gpus), (7200.0, gpus)]);
            let mut counts = vec![1.0; WAITING_BUCKETS.len() + 1];
            counts[0] = 0.0;
            report.wait_buckets.insert(queue.into(), counts);
        }
        let page = page(&report);
        assert_eq!(page.matches("<polyline").count(), 4, "two queues in two plots: {page}");
        assert!(page.contains("&lt;b&gt;") && !page.contains("<b>"), "names are escaped");
        assert!(page.contains("<td>team-a</td><td>16.00</td>"), "{page}");
        assert!(
            page.contains(">2.0h<")
                && page.contains(">30m<")
                && page.contains(">longer<")
                && page.contains("2023-11-14T22:13:20Z")
        );
        assert!(!page.contains("<script") && !page.contains("src="), "no script, no external asset");
        assert_eq!([1.0, 60.0, 600.0, 7200.0, 86_400.0].map(bound), ["1s", "1m", "10m", "2h", "1d"]);
        assert_eq!((nice_ceiling(8.0), nice_ceiling(11.0), nice_ceiling(0.3)), (10.0, 20.0, 0.5));
    }
}
