//! The rows of the table: printed one by one as they are measured, then all again.

use std::io::Write;

use crate::ProgressState;

#[derive(Clone, Debug, Default)]
pub struct Row {
    pub run: String,
    pub scheduler: String,
    /// "bound/total", as the run counts them.
    pub bound: String,
    /// Seconds: to all bound, to all reported, or the idle window.
    pub time: Option<f64>,
    /// Pods bound per second.
    pub rate: Option<f64>,
    /// `rate` over the ceiling of the same run.
    pub ratio: Option<f64>,
    pub split: Option<usize>,
    /// The scheduler's CPU seconds.
    pub cpu: Option<f64>,
    pub peak_mib: Option<f64>,
    /// Empty when the row completed as planned; otherwise why not ("over budget ...").
    pub note: String,
    /// Extra words that do not make the row incomplete.
    pub detail: String,
}

impl Row {
    pub fn new(run: &str, scheduler: &str) -> Row {
        Row { run: run.to_string(), scheduler: scheduler.to_string(), ..Default::default() }
    }

    /// A row that did not complete: what it had reached, and why.
    pub fn failed(run: &str, scheduler: &str, state: &ProgressState, why: &str) -> Row {
        let mut row = Row::new(run, scheduler);
        if state.total > 0 {
            row.bound = format!("{}/{}", state.bound, state.total);
        }
        row.note = why.to_string();
        row
    }
}

fn or_dash<T>(value: Option<T>, show: impl Fn(T) -> String) -> String {
    value.map_or_else(|| "-".to_string(), show)
}

fn line(r: &Row) -> String {
    let note = match (r.note.is_empty(), r.detail.is_empty()) {
        (true, true) => "-".to_string(),
        (false, true) => format!("**{}**", r.note),
        (true, false) => r.detail.clone(),
        (false, false) => format!("**{}**; {}", r.note, r.detail),
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.run,
        r.scheduler,
        if r.bound.is_empty() { "-" } else { &r.bound },
        or_dash(r.time, |t| if t < 10.0 { format!("{t:.2} s") } else { format!("{t:.1} s") }),
        or_dash(r.rate, |v| format!("{v:.0}")),
        or_dash(r.ratio, |v| format!("{v:.2}")),
        or_dash(r.split, |v| v.to_string()),
        or_dash(r.cpu, |v| format!("{v:.2} s")),
        or_dash(r.peak_mib, |v| format!("{v:.0} MiB")),
        note,
    )
}

#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
}

impl Table {
    pub fn new() -> Table {
        Table::default()
    }

    pub fn print_header(&self) {
        println!(
            "| run | scheduler | pods bound | time | pods/s | ÷ ceiling | gangs split | CPU | peak memory | note |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        let _ = std::io::stdout().flush();
    }

    /// Records the row and prints it at once.
    pub fn push(&mut self, row: Row) {
        println!("{}", line(&row));
        let _ = std::io::stdout().flush();
        self.rows.push(row);
    }

    pub fn print_all(&self) {
        self.print_header();
        for row in &self.rows {
            println!("{}", line(row));
        }
        let _ = std::io::stdout().flush();
    }
}
