//! What the pages Muster writes share: escaping text for HTML, and line plots as inline SVG
//! (axes, lines, a legend) for the replay's page (`muster simulate --trace --output html`)
//! and the usage report's (`muster report --output html`). No script, no external asset.

use std::borrow::Cow;
use std::fmt::Write;
use std::path::PathBuf;

/// Line colours, one per series (colour-blind safe).
pub const COLOURS: [&str; 6] = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9"];
/// The plot area, and the margin left of it for the values' labels.
pub const WIDTH: f64 = 720.0;
pub const HEIGHT: f64 = 240.0;
pub const MARGIN: f64 = 48.0;

/// The style of a standalone page with tables and plots.
pub const PAGE_STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:60em}\
table{border-collapse:collapse;font-size:.9em}td,th{padding:.2em .8em;text-align:right;border-bottom:1px solid #ddd}\
td:first-child,th:first-child{text-align:left}td,th{white-space:nowrap}svg{display:block;margin:.5em 0}\
.legend span{display:inline-block;margin-right:1.5em}.legend i{display:inline-block;width:1.5em;height:.3em;\
vertical-align:middle;margin-right:.4em}text{font-size:11px;fill:#444}";

/// `text` safe inside HTML text and double-quoted attributes.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['<', '>', '&', '"', '\'']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// An `--output` argument: one of the `plain` formats (written to standard output; the
/// first is the default), or `html FILE` (a page written to the file). The format and the
/// page's file.
pub fn output_argument(values: &[String], plain: &[&str]) -> Result<(String, Option<PathBuf>), String> {
    match values {
        [] => Ok((plain.first().copied().unwrap_or("table").to_string(), None)),
        [kind] if plain.contains(&kind.as_str()) => Ok((kind.clone(), None)),
        [kind, file] if kind == "html" => Ok((kind.clone(), Some(PathBuf::from(file)))),
        [kind] if kind == "html" => Err("--output html needs a file to write the page to: --output html FILE".into()),
        [kind, ..] if plain.contains(&kind.as_str()) => {
            Err(format!("--output {kind} takes no file; it writes to standard output"))
        }
        [kind, ..] => Err(format!("--output {kind:?} is not one of {}, html FILE", plain.join(", "))),
    }
}

/// The colour of the `i`th series.
pub fn colour(i: usize) -> &'static str {
    COLOURS[i % COLOURS.len()]
}

/// A legend: one coloured mark and title per series, in order.
pub fn legend(out: &mut String, titles: &[String]) {
    out.push_str("<p class=\"legend\">");
    for (i, title) in titles.iter().enumerate() {
        let _ = write!(out, "<span><i style=\"background:{}\"></i>{}</span>", colour(i), escape(title));
    }
    out.push_str("</p>\n");
}

/// Opens an `<svg>` with axes over [0, x_max] and [0, y_max], five ticks each labelled by
/// `x_label` and `y_label`; the caller draws its lines and closes it with `</svg>`.
pub fn axes(
    out: &mut String,
    x_max: f64,
    y_max: f64,
    x_label: &dyn Fn(f64) -> String,
    y_label: &dyn Fn(f64) -> String,
) {
    let ticks: Vec<String> = (0..=4).map(|i| x_label(x_max * i as f64 / 4.0)).collect();
    axes_with(out, y_max, &ticks, y_label);
}

/// Axes whose x ticks are `x_ticks`, spread evenly from the left edge to the right.
pub fn axes_with(out: &mut String, y_max: f64, x_ticks: &[String], y_label: &dyn Fn(f64) -> String) {
    let _ = write!(
        out,
        "<svg width=\"{}\" height=\"{}\" role=\"img\"><g stroke=\"#bbb\">",
        WIDTH + MARGIN + 36.0,
        HEIGHT + 30.0
    );
    for i in 0..=4 {
        let y = y_at(i as f64 / 4.0);
        let _ = write!(out, "<line x1=\"{MARGIN}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>", MARGIN + WIDTH);
    }
    out.push_str("</g>");
    for i in 0..=4 {
        let y = y_at(i as f64 / 4.0);
        let value = y_max * i as f64 / 4.0;
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            MARGIN - 4.0,
            y + 4.0,
            y_label(value)
        );
    }
    let last = x_ticks.len().saturating_sub(1).max(1) as f64;
    for (i, tick) in x_ticks.iter().enumerate() {
        let x = x_at(i as f64 / last);
        let _ =
            write!(out, "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", HEIGHT + 22.0, escape(tick));
    }
}

/// The x coordinate of a point `share` (0 to 1) of the way across the plot.
pub fn x_at(share: f64) -> f64 {
    MARGIN + WIDTH * share
}

/// The y coordinate of a value `share` (0 to 1) of the plot's height.
pub fn y_at(share: f64) -> f64 {
    5.0 + HEIGHT * (1.0 - share)
}

/// A line through `points` (in the plot's coordinates).
pub fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str) {
    let _ = write!(out, "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"");
    for (x, y) in points {
        let _ = write!(out, "{x:.1},{y:.1} ");
    }
    out.push_str("\"/>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_only_when_it_must_be() {
        assert!(matches!(escape("team-a"), Cow::Borrowed("team-a")));
        assert_eq!(escape("<b a=\"x\">&'"), "&lt;b a=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn axes_label_their_ticks_and_lines_land_inside_the_plot() {
        let mut out = String::new();
        axes(&mut out, 10.0, 100.0, &|h| format!("{h:.1} h"), &|v| format!("{v:.0}"));
        polyline(&mut out, &[(x_at(0.0), y_at(0.0)), (x_at(1.0), y_at(1.0))], colour(7));
        out.push_str("</svg>");
        assert!(out.contains(">0.0 h<") && out.contains(">10.0 h<") && out.contains(">100<"), "{out}");
        assert!(out.contains("stroke=\"#e69f00\" stroke-width=\"1.5\" points=\"48.0,245.0 768.0,5.0 \""), "{out}");
    }
}
