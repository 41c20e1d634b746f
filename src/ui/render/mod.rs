//! The page as HTML: one document, its style inline, GPUs drawn in inline SVG, no script
//! and nothing fetched from elsewhere. It reloads itself with a meta refresh. Every text
//! that comes from the cluster (names, reasons) passes through [`escape`].

mod gangs;
mod nodes;
mod queues;
mod style;

use std::fmt::Write as _;

use super::view::UiView;

/// Seconds between the page's own reloads.
pub const REFRESH_SECONDS: u32 = 5;

/// The whole page for `view`.
pub fn page(view: &UiView) -> String {
    let gpus: usize = view.racks.iter().flat_map(|r| &r.nodes).map(|n| n.gpus.len()).sum();
    // About 60 bytes a GPU and 300 a gang or queue row: one allocation for most pages.
    let mut out = String::with_capacity(8_192 + gpus * 64 + (view.waiting.len() + view.queues.len()) * 320);
    let name = escape(&view.scheduler_name);
    let role = if view.leading { "leading" } else { "standby: the figures are this replica's last view" };
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Muster: {name}</title><style>{}</style></head><body>\
         <header><h1>Muster <span class=\"scheduler\">{name}</span></h1>\
         <p class=\"meta\"><span id=\"as-of\" data-unix=\"{}\">as of {}</span> · {role} · reloads every {REFRESH_SECONDS} s · read only</p></header>\n",
        style::CSS,
        view.at,
        timestamp(view.at),
    )
    .ok();
    queues::section(&mut out, view);
    gangs::section(&mut out, view);
    nodes::section(&mut out, view);
    nodes::fragmentation(&mut out, view);
    out.push_str("</body></html>\n");
    out
}

/// The page before the first view: this replica has not run a cycle as leader yet.
pub fn not_yet() -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\"><title>Muster</title><style>{}</style></head><body>\
         <h1>Muster</h1><p class=\"empty\">No figures yet: this replica has not finished a scheduling cycle as leader. \
         It is starting, or another replica leads (that replica's page has them). This page reloads every {REFRESH_SECONDS} s.</p></body></html>\n",
        style::CSS
    )
}

pub use crate::html::escape;

/// Unix seconds as an RFC 3339 time in UTC, to the second.
fn timestamp(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).map_or_else(|_| unix.to_string(), |t| t.to_string())
}

/// A duration in the largest units that keep it short: `45s`, `12m`, `3h20m`, `2d4h`.
fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests;
