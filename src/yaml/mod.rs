//! YAML that every reader reads the same way.
//!
//! Everything Muster prints as YAML (`muster crds`, the agent's `--dry-run`) goes through
//! [`to_string`]. yaml_serde quotes a string only when a YAML 1.2 reader would take it for
//! something else, so strings such as the PCI bus ID `0000:18:00.0` came out plain, and
//! YAML 1.1 readers (PyYAML, and so Ansible) read that one as the number 1080.0. Here the
//! value is turned into a [`Value`] by yaml_serde and written out by hand, quoting every
//! string that a reader of either version could resolve to anything else (see
//! [`implicit`]). The layout is yaml_serde's, so a document that needs no extra quoting
//! comes out as yaml_serde writes it: block mappings and sequences (a sequence under a
//! mapping key is not indented), `{}` and `[]` when empty, literal blocks for multi-line
//! strings, single quotes where a plain string will not do, double quotes (with escapes)
//! for characters that only they can carry, and numbers in a form both versions read as
//! numbers.

mod implicit;
#[cfg(test)]
mod tests;

use serde::Serialize;
use serde::ser::Error as _;
use yaml_serde::value::TaggedValue;
use yaml_serde::{Mapping, Number, Value};

/// `value` as one YAML document (without `---`), ending in a newline.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, yaml_serde::Error> {
    let value = yaml_serde::to_value(value)?;
    let mut out = String::new();
    node(&mut out, &value, 0, Place::Document)?;
    Ok(out)
}

/// Where a node is written. Document: at the start of a line, column 0. Value: after a
/// mapping key's `:`, the key at the given column. Entry: after a `-`, `?` or `:` indicator
/// that stands at the given column.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Document,
    Value,
    Entry,
}

/// Writes `value` from the cursor on, through the end of its last line.
fn node(out: &mut String, value: &Value, indent: usize, place: Place) -> Result<(), yaml_serde::Error> {
    let gap = if place == Place::Document { "" } else { " " };
    match value {
        Value::Mapping(map) if !map.is_empty() => match place {
            Place::Document => mapping(out, map, 0, false),
            Place::Value => {
                out.push('\n');
                mapping(out, map, indent + 2, false)
            }
            Place::Entry => {
                out.push(' ');
                mapping(out, map, indent + 2, true)
            }
        },
        Value::Sequence(items) if !items.is_empty() => match place {
            Place::Document => sequence(out, items, 0, false),
            Place::Value => {
                out.push('\n');
                sequence(out, items, indent, false)
            }
            Place::Entry => {
                out.push(' ');
                sequence(out, items, indent + 2, true)
            }
        },
        Value::Tagged(tagged) => {
            out.push_str(gap);
            out.push_str(&tag(tagged)?);
            // A tagged collection starts on the next line, indented under its tag.
            let inner = if place == Place::Document { 0 } else { indent + 2 };
            match &tagged.value {
                Value::Mapping(map) if !map.is_empty() => {
                    out.push('\n');
                    mapping(out, map, inner, false)
                }
                Value::Sequence(items) if !items.is_empty() => {
                    out.push('\n');
                    sequence(out, items, inner, false)
                }
                Value::Tagged(_) => Err(yaml_serde::Error::custom("a tagged value inside a tagged value")),
                scalar => {
                    out.push(' ');
                    self::scalar(out, scalar, indent, true);
                    Ok(())
                }
            }
        }
        scalar => {
            out.push_str(gap);
            self::scalar(out, scalar, indent, true);
            Ok(())
        }
    }
}

/// A block mapping, its keys at column `indent`; with `inline`, the cursor already stands
/// there for the first key (after a sequence's `- `).
fn mapping(out: &mut String, map: &Mapping, indent: usize, inline: bool) -> Result<(), yaml_serde::Error> {
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 || !inline {
            push_indent(out, indent);
        }
        match simple_key(key) {
            Some(text) => {
                out.push_str(&text);
                out.push(':');
                node(out, value, indent, Place::Value)?;
            }
            None => {
                // Collections and very long strings as keys: YAML's explicit `? key` / `: value`.
                out.push('?');
                node(out, key, indent, Place::Entry)?;
                push_indent(out, indent);
                out.push(':');
                node(out, value, indent, Place::Entry)?;
            }
        }
    }
    Ok(())
}

/// A block sequence, its `-` at column `indent`; `inline` as for [`mapping`].
fn sequence(out: &mut String, items: &[Value], indent: usize, inline: bool) -> Result<(), yaml_serde::Error> {
    for (i, item) in items.iter().enumerate() {
        if i > 0 || !inline {
            push_indent(out, indent);
        }
        out.push('-');
        node(out, item, indent, Place::Entry)?;
    }
    Ok(())
}

fn push_indent(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// YAML caps a key written without `?` at 1024 characters, on one line.
const SIMPLE_KEY_MAX: usize = 1000;

/// The key as written before `:`, when it can be: a scalar on one line, short enough.
fn simple_key(key: &Value) -> Option<String> {
    if matches!(key, Value::Mapping(_) | Value::Sequence(_) | Value::Tagged(_)) {
        return None;
    }
    let mut text = String::new();
    scalar(&mut text, key, 0, false);
    text.pop(); // the newline
    (text.chars().count() <= SIMPLE_KEY_MAX).then_some(text)
}

/// A scalar (or an empty collection) and the newline after it. A literal block's lines
/// are indented two columns past `indent`; `block` false keeps a string on one line.
fn scalar(out: &mut String, value: &Value, indent: usize, block: bool) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => match style(s, block) {
            Style::Plain => out.push_str(s),
            Style::Single => {
                out.push('\'');
                out.push_str(&s.replace('\'', "''"));
                out.push('\'');
            }
            Style::Double => double_quoted(out, s),
            // The literal block ends with its own last line.
            Style::Literal => return literal(out, s, indent + 2),
        },
        Value::Mapping(_) => out.push_str("{}"),
        Value::Sequence(_) => out.push_str("[]"),
        // `node` writes tags, and hands this function only the value under one.
        Value::Tagged(_) => unreachable!("a tagged value reached the scalar writer"),
    }
    out.push('\n');
}

/// Integers as they are; floats with a dot and, in exponent form, a signed exponent
/// (`1.0e+20`, not Rust's `1e20`), which YAML 1.1 needs to read a number rather than a
/// string. Rust's debug form is the shortest that reads back as the same float.
fn number(n: &Number) -> String {
    let f = match n.as_f64() {
        Some(f) if n.is_f64() => f,
        _ => return n.to_string(),
    };
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let text = format!("{f:?}");
    match text.split_once('e') {
        None => text,
        Some((mantissa, exponent)) => {
            let dot = if mantissa.contains('.') { "" } else { ".0" };
            let sign = if exponent.starts_with('-') { "" } else { "+" };
            format!("{mantissa}{dot}e{sign}{exponent}")
        }
    }
}

fn tag(tagged: &TaggedValue) -> Result<String, yaml_serde::Error> {
    let text = tagged.tag.to_string();
    let name = text.strip_prefix('!').unwrap_or(&text);
    let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c));
    if plain {
        Ok(format!("!{name}"))
    } else {
        Err(yaml_serde::Error::custom(format!("cannot write the tag {text:?}")))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// How a string is written: plain when every reader reads it back as this string, else a
/// literal block for several lines (`block` allowing), else single quotes, else double
/// quotes for what neither of the others can carry.
fn style(s: &str, block: bool) -> Style {
    let escapes = s.chars().any(needs_escape);
    if s.contains('\n') {
        if block && !escapes && fits_literal(s) { Style::Literal } else { Style::Double }
    } else if escapes {
        Style::Double
    } else if fits_plain(s) && !implicit::is_implicit(s) {
        Style::Plain
    } else {
        Style::Single
    }
}

/// Characters that only a double-quoted string carries safely: those YAML does not allow
/// printed (C0 and C1 controls, DEL, U+FFFE, U+FFFF, the byte-order mark), tabs (which
/// readers trim or take for indentation), and the line breaks other than `\n` (YAML 1.1
/// also breaks lines at CR, NEL, LS and PS).
fn needs_escape(c: char) -> bool {
    match c {
        '\n' => false,
        '\t' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}' => true,
        ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..='\u{10ffff}' => false,
        _ => true,
    }
}

/// Whether a one-line string reads back as itself plain in block context, before the
/// question of implicit types: no indicator first, no `: ` or ` #` inside, no `:` last,
/// no space at either end, not a document marker.
fn fits_plain(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if s.starts_with(' ') || s.ends_with(' ') || "#,[]{}&*!|>'\"%@`".contains(first) {
        return false;
    }
    // `-`, `?` and `:` are indicators when a space (or nothing) follows them.
    if matches!(first, '-' | '?' | ':') && s[1..].chars().next().is_none_or(|c| c == ' ') {
        return false;
    }
    !(s.starts_with("---") || s.starts_with("...") || s.contains(": ") || s.contains(" #") || s.ends_with(':'))
}

/// Whether a multi-line string (printable, `\n` its only break) can be a literal block
/// without an indentation indicator: its first line starts with neither a space nor a
/// break, and no line ends in spaces (which editors strip).
fn fits_literal(s: &str) -> bool {
    !s.starts_with([' ', '\n']) && !s.split('\n').any(|line| line.ends_with(' '))
}

/// `|-`, `|` or `|+` (as the string ends in no, one or several newlines), then the lines.
fn literal(out: &mut String, s: &str, indent: usize) {
    let body = s.trim_end_matches('\n');
    let newlines = s.len() - body.len();
    out.push_str(match newlines {
        0 => "|-\n",
        1 => "|\n",
        _ => "|+\n",
    });
    for line in body.split('\n') {
        if !line.is_empty() {
            push_indent(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
    // Kept trailing newlines beyond the last line's own are empty lines.
    for _ in 1..newlines {
        out.push('\n');
    }
}

fn double_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if needs_escape(c) => {
                let code = c as u32;
                let escape = match code {
                    0..=0xff => format!("\\x{code:02X}"),
                    0x100..=0xffff => format!("\\u{code:04X}"),
                    _ => format!("\\U{code:08X}"),
                };
                out.push_str(&escape);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
