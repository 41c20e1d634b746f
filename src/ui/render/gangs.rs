//! The gangs that wait: each with why (its events' words) and the placement that comes
//! nearest (`muster explain`'s).

use std::fmt::Write as _;

use super::{duration, escape};
use crate::ui::view::UiView;

pub(super) fn section(out: &mut String, view: &UiView) {
    writeln!(out, "<section id=\"waiting\"><h2>Gangs waiting ({})</h2>", view.waiting.len() + view.more_waiting).ok();
    if view.waiting.is_empty() {
        out.push_str("<p class=\"empty\">No gang waits.</p></section>\n");
        return;
    }
    out.push_str(
        "<table><thead><tr><th>Gang</th><th>Queue</th><th>Pods</th><th>Waiting</th><th>Why</th><th>Nearest placement</th></tr></thead><tbody>\n",
    );
    for gang in &view.waiting {
        let name = escape(&gang.gang);
        writeln!(
            out,
            "<tr data-gang=\"{name}\"><td class=\"gang\">{name}</td><td class=\"queue\">{}</td>\
             <td class=\"num\" title=\"pods waiting / minMember\">{}/{}</td><td class=\"num\">{}</td>\
             <td class=\"reason\">{}</td><td class=\"nearest\">{}</td></tr>",
            escape(&gang.queue),
            gang.pods,
            gang.min_member,
            duration(gang.waiting_seconds),
            escape(&gang.reason),
            gang.nearest.as_deref().map(escape).unwrap_or_default(),
        )
        .ok();
    }
    out.push_str("</tbody></table>");
    if view.more_waiting > 0 {
        write!(out, "<p class=\"empty\">and {} more, not listed.</p>", view.more_waiting).ok();
    }
    out.push_str("</section>\n");
}
