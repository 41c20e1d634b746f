//! Which plain scalars a YAML reader takes for something other than a string.
//!
//! Readers disagree. YAML 1.2's core schema (yaml_serde, Go's yaml.v3, kubectl) reads `yes`
//! and `0000:18:00.0` as strings; YAML 1.1 (PyYAML and so Ansible, SnakeYAML, Ruby's
//! Psych, Go's yaml.v2) reads the first as the boolean true and the second as the base-60
//! number 1080.0. A string is written plain only when no reader of either version would
//! resolve it to anything else, so this answers for the union of both schemas and, where
//! the readers' patterns are loose, leans towards yes: a string quoted needlessly still
//! reads as itself, one left plain wrongly does not.

/// Whether `text`, written plain, would be read by some YAML 1.1 or 1.2 reader as a null, a
/// boolean, a number, a timestamp, or one of YAML 1.1's merge (`<<`) and value (`=`) keys.
pub fn is_implicit(text: &str) -> bool {
    is_null(text) || is_bool(text) || matches!(text, "<<" | "=") || is_number(text) || is_timestamp(text)
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// YAML 1.1's booleans; YAML 1.2's (true and false in three casings) are among them.
const BOOLEANS: [&str; 22] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on",
    "On", "ON", "off", "Off", "OFF",
];

fn is_bool(text: &str) -> bool {
    BOOLEANS.contains(&text)
}

/// Integers and floats of both versions, signed or not: `0x`, `0o` and `0b` prefixes, YAML
/// 1.1's leading-zero octal and base 60, infinities and not-a-number, exponents. YAML 1.1
/// allows `_` between digits, and Psych `,` as well.
fn is_number(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF" | ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let bytes = unsigned.as_bytes();
    if bytes.len() > 2 && bytes[0] == b'0' {
        let digits = &bytes[2..];
        let all = |digit: fn(&u8) -> bool| digits.iter().all(|b| digit(b) || is_separator(*b));
        match bytes[1] {
            b'x' | b'X' => return all(u8::is_ascii_hexdigit),
            b'o' | b'O' => return all(|b| (b'0'..=b'7').contains(b)),
            b'b' | b'B' => return all(|b| matches!(b, b'0' | b'1')),
            _ => {}
        }
    }
    is_decimal(bytes)
}

fn is_separator(b: u8) -> bool {
    b == b'_' || b == b','
}

/// Unsigned decimal numbers: a whole part (digits and separators), base-60 groups after it
/// (`190:20:30`, `0000:18:00.0`: `:` then one digit, or two with the first at most 5), a
/// fraction, then an exponent (`e5`, `E-3`). The fraction may hold further dots, as YAML
/// 1.1's published float pattern allows (`1.2.3`), and a lone `.` counts; SnakeYAML lets
/// the whole part start with `_` (`_1`).
fn is_decimal(bytes: &[u8]) -> bool {
    let mut i = 0;
    let whole = bytes.first().is_some_and(|b| b.is_ascii_digit() || *b == b'_');
    if whole {
        while i < bytes.len() && (bytes[i].is_ascii_digit() || is_separator(bytes[i])) {
            i += 1;
        }
        while i < bytes.len() && bytes[i] == b':' {
            let digits = leading_digits(&bytes[i + 1..]);
            if !(digits == 1 || (digits == 2 && bytes[i + 1] <= b'5')) {
                return false;
            }
            i += 1 + digits;
        }
    }
    let fraction = bytes.get(i) == Some(&b'.');
    if fraction {
        i += 1;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || matches!(bytes[i], b'_' | b'.')) {
            i += 1;
        }
    }
    if !whole && !fraction {
        return false;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let digits = leading_digits(&bytes[i..]);
        if digits == 0 {
            return false;
        }
        i += digits;
    }
    i == bytes.len()
}

fn leading_digits(bytes: &[u8]) -> usize {
    bytes.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// YAML 1.1's timestamps: a date (`2001-12-14`, or `2001-1-2` before a time), alone or
/// followed by `t`, `T`, a space or a tab and a time. Anything that starts as such a date
/// and goes on that way counts, whether or not the time after it is well formed.
fn is_timestamp(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() < 8 || !bytes[..4].iter().all(u8::is_ascii_digit) || bytes[4] != b'-' {
        return false;
    }
    let month = leading_digits(&bytes[5..]);
    if !(1..=2).contains(&month) || bytes.get(5 + month) != Some(&b'-') {
        return false;
    }
    let day_at = 6 + month;
    let day = leading_digits(&bytes[day_at.min(bytes.len())..]);
    if !(1..=2).contains(&day) {
        return false;
    }
    matches!(bytes.get(day_at + day), None | Some(b't' | b'T' | b' ' | b'\t'))
}
