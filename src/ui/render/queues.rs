//! The queue tree: each queue indented under its parent, with its quota, fair share,
//! allocated and requested per resource key, and a bar of allocated against what it is
//! entitled to.

use std::fmt::Write as _;

use super::escape;
use crate::ui::view::UiView;

/// The bar's width in pixels.
const BAR: f64 = 120.0;

pub(super) fn section(out: &mut String, view: &UiView) {
    out.push_str("<section id=\"queues\"><h2>Queues</h2>\n");
    if view.queues.is_empty() {
        out.push_str(
            "<p class=\"empty\">No Queue objects: every gang is in one unlimited queue, served by priority then age.</p></section>\n",
        );
        return;
    }
    out.push_str(
        "<table><thead><tr><th>Queue</th><th>Resource</th><th>Quota</th><th>Fair share</th><th>Allocated</th>\
         <th>Requested</th><th>Allocated of entitled</th><th>Gangs waiting</th><th>Gangs running</th></tr></thead><tbody>\n",
    );
    for queue in &view.queues {
        let name = escape(&queue.name);
        let indent = queue.depth as f64 * 1.2;
        let problem = queue
            .problem
            .as_deref()
            .map(|p| format!("<div class=\"problem\">invalid: {}</div>", escape(p)))
            .unwrap_or_default();
        let rows = queue.resources.len().max(1);
        let head = format!(
            "<td rowspan=\"{rows}\" style=\"padding-left:{indent:.1}em\" class=\"queue-name\">{name}{problem}</td>"
        );
        let tail = format!(
            "<td rowspan=\"{rows}\" class=\"num pending\">{}</td><td rowspan=\"{rows}\" class=\"num running\">{}</td>",
            queue.pending_gangs, queue.running_gangs
        );
        if queue.resources.is_empty() {
            writeln!(
                out,
                "<tr data-queue=\"{name}\">{head}<td colspan=\"6\" class=\"empty\">governs no resource</td>{tail}</tr>"
            )
            .ok();
            continue;
        }
        for (i, figures) in queue.resources.iter().enumerate() {
            let fill = figures.fill.max(0.0);
            let width = fill.min(1.0) * BAR;
            let over = if fill > 1.0 { " over" } else { "" };
            writeln!(
                out,
                "<tr data-queue=\"{name}\" data-resource=\"{}\">{}<td>{}</td><td class=\"num quota\">{}</td>\
                 <td class=\"num fair-share\">{}</td><td class=\"num allocated\">{}</td><td class=\"num requested\">{}</td>\
                 <td><svg width=\"{BAR}\" height=\"10\" role=\"img\" aria-label=\"{:.0}% of entitled\"><rect class=\"bar-bg\" width=\"{BAR}\" height=\"10\" rx=\"2\"/>\
                 <rect class=\"bar{over}\" width=\"{width:.1}\" height=\"10\" rx=\"2\"/></svg></td>{}</tr>",
                escape(&figures.resource),
                if i == 0 { head.as_str() } else { "" },
                escape(&figures.resource),
                escape(&figures.quota),
                escape(&figures.fair_share),
                escape(&figures.allocated),
                escape(&figures.requested),
                fill * 100.0,
                if i == 0 { tail.as_str() } else { "" },
            )
            .ok();
        }
    }
    out.push_str("</tbody></table></section>\n");
}
