//! Nodes by rack, each GPU a square coloured by its state, in one inline SVG per rack; and
//! the fragmentation of the free GPUs, per rack and for the cluster.

use std::fmt::Write as _;

use super::escape;
use crate::ui::view::{GpuState, NodeRow, UiView};

/// A GPU's square, the gap between squares, a node's row and the name's column, in pixels.
const SQUARE: usize = 10;
const GAP: usize = 2;
const ROW: usize = 14;
const LABEL: usize = 150;
/// GPUs drawn on one line of a node's row; a node with more takes several lines.
const PER_LINE: usize = 16;
/// Characters of a node's name drawn (all of it is in the row's tooltip).
const NAME_CHARS: usize = 22;

pub(super) fn section(out: &mut String, view: &UiView) {
    let level = view.grouping.as_deref().unwrap_or("all nodes");
    writeln!(out, "<section id=\"nodes\"><h2>Nodes by {}</h2>", escape(level)).ok();
    let mut counts = [0usize; GpuState::ALL.len()];
    for gpu in view.racks.iter().flat_map(|r| &r.nodes).flat_map(|n| &n.gpus) {
        counts[*gpu as usize] += 1;
    }
    out.push_str("<p class=\"legend\">");
    for state in GpuState::ALL {
        write!(
            out,
            "<span><i class=\"{0}\"></i>{0} <b id=\"gpus-{0}\">{1}</b></span>",
            state.word(),
            counts[state as usize]
        )
        .ok();
    }
    out.push_str("</p>\n");
    if view.racks.is_empty() {
        out.push_str("<p class=\"empty\">No node is scheduled by this scheduler.</p></section>\n");
        return;
    }
    out.push_str("<div class=\"racks\">\n");
    for rack in &view.racks {
        let title = if rack.name.is_empty() { format!("without {level}") } else { rack.name.clone() };
        let per_line = rack.nodes.iter().map(|n| n.gpus.len()).max().unwrap_or(0).clamp(1, PER_LINE);
        let width = LABEL + per_line * (SQUARE + GAP);
        let height: usize = rack.nodes.iter().map(|n| lines(n) * ROW).sum::<usize>().max(ROW);
        let gpus: usize = rack.nodes.iter().map(|n| n.gpus.len()).sum();
        write!(
            out,
            "<div class=\"rack\" data-rack=\"{}\"><h3>{} <span class=\"meta\">{} nodes, {gpus} GPUs</span></h3>\
             <svg width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"GPUs of {}\">",
            escape(&rack.name),
            escape(&title),
            rack.nodes.len(),
            escape(&title),
        )
        .ok();
        let mut y = 0;
        for node in &rack.nodes {
            draw_node(out, node, y);
            y += lines(node) * ROW;
        }
        out.push_str("</svg></div>\n");
    }
    out.push_str("</div></section>\n");
}

fn lines(node: &NodeRow) -> usize {
    node.gpus.len().div_ceil(PER_LINE).max(1)
}

fn draw_node(out: &mut String, node: &NodeRow, y: usize) {
    let name = escape(&node.name);
    let mut shown: String = node.name.chars().take(NAME_CHARS).collect();
    if shown.len() < node.name.len() {
        shown.push('…');
    }
    let mut summary = String::new();
    for state in GpuState::ALL {
        let n = node.gpus.iter().filter(|g| **g == state).count();
        if n > 0 {
            write!(summary, ", {n} {}", state.word()).ok();
        }
    }
    let cordoned = if node.cordoned { " (cordoned)" } else { "" };
    write!(
        out,
        "<g data-node=\"{name}\"><title>{name}{cordoned}{summary}</title><text x=\"0\" y=\"{}\"{}>{}</text>",
        y + SQUARE,
        if node.cordoned { " class=\"cordoned\"" } else { "" },
        escape(&shown),
    )
    .ok();
    for (i, gpu) in node.gpus.iter().enumerate() {
        let x = LABEL + (i % PER_LINE) * (SQUARE + GAP);
        let top = y + 1 + (i / PER_LINE) * ROW;
        write!(
            out,
            "<rect class=\"{}\" x=\"{x}\" y=\"{top}\" width=\"{SQUARE}\" height=\"{SQUARE}\" rx=\"2\"/>",
            gpu.word()
        )
        .ok();
    }
    if node.gpus.is_empty() {
        write!(out, "<text x=\"{LABEL}\" y=\"{}\">no GPU</text>", y + SQUARE).ok();
    }
    out.push_str("</g>");
}

pub(super) fn fragmentation(out: &mut String, view: &UiView) {
    let f = &view.fragmentation;
    out.push_str("<section id=\"fragmentation\"><h2>Fragmentation</h2>\n");
    match f.expected {
        Some(gpus) => writeln!(
            out,
            "<p>Under the mix of GPU pods the scheduler has learned, <b>{gpus:.1}</b> GPUs' worth of free capacity could not be used by them.</p>"
        )
        .ok(),
        None => None,
    };
    if f.rows.is_empty() {
        out.push_str("<p class=\"empty\">No GPUs.</p></section>\n");
        return;
    }
    out.push_str(
        "<table><thead><tr><th></th><th>GPUs</th><th>Free</th><th>Free on busy nodes</th><th>Nodes all free</th>\
         <th>Largest free on one node</th><th>Stranded (gangs short of minMember)</th></tr></thead><tbody>\n",
    );
    for row in &f.rows {
        writeln!(
            out,
            "<tr data-domain=\"{0}\"><td>{0}</td><td class=\"num\">{1}</td><td class=\"num\">{2}</td><td class=\"num\">{3}</td>\
             <td class=\"num\">{4}</td><td class=\"num\">{5}</td><td class=\"num\">{6}</td></tr>",
            escape(&row.name),
            row.gpus,
            row.free,
            row.free_on_busy_nodes,
            row.free_nodes,
            row.largest_free_block,
            row.stranded,
        )
        .ok();
    }
    out.push_str("</tbody></table></section>\n");
}
