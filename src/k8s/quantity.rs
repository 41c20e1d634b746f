//! Kubernetes resource quantities ("500m", "80Gi", "1.5", "2e3") in the engine's units.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid quantity {text:?}: {problem}")]
pub struct Error {
    pub text: String,
    pub problem: &'static str,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The quantity in thousandths of its unit (millicores for CPU), rounded up as Kubernetes
/// rounds a request up.
pub fn parse_milli(text: &str) -> Result<i64> {
    let fail = |problem| Error { text: text.to_string(), problem };
    let trimmed = text.trim();
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let number_end = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    if number.is_empty() || number == "." {
        return Err(fail("no number"));
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return Err(fail("more than one decimal point"));
    }
    // value = digits / 10^fraction_len × base^exponent, kept exact as a fraction of i128s.
    let digits: i128 = format!("{whole}{fraction}").parse().map_err(|_| fail("number too long"))?;
    let mut numerator = digits * 1000;
    let mut denominator: i128 = 10i128.checked_pow(fraction.len() as u32).ok_or_else(|| fail("number too long"))?;
    let binary = |power: u32| (1i128 << (10 * power), 1);
    let decimal =
        |power: i32| if power >= 0 { (10i128.pow(power as u32), 1) } else { (1, 10i128.pow((-power) as u32)) };
    let (multiply, divide) = match suffix {
        "" => (1, 1),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().map_err(|_| fail("bad exponent"))?;
            if power.abs() > 30 {
                return Err(fail("exponent out of range"));
            }
            decimal(power)
        }
        _ => return Err(fail("unknown suffix")),
    };
    numerator = numerator.checked_mul(multiply).ok_or_else(|| fail("too large"))?;
    denominator = denominator.checked_mul(divide).ok_or_else(|| fail("too large"))?;
    let milli = (numerator + denominator - 1) / denominator;
    let milli = i64::try_from(milli).map_err(|_| fail("too large"))?;
    Ok(if negative { -milli } else { milli })
}

/// The quantity in whole units (bytes, devices, pods), rounded up.
pub fn parse_units(text: &str) -> Result<i64> {
    let milli = parse_milli(text)?;
    Ok(milli.div_euclid(1000) + i64::from(milli.rem_euclid(1000) != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_kubernetes_notation() {
        let cases = [
            ("1", 1000),
            ("500m", 500),
            ("1.5", 1500),
            ("0.1", 100),
            ("2k", 2_000_000),
            ("1Ki", 1_024_000),
            ("80Gi", 80 * (1i64 << 30) * 1000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("100n", 1),
            ("-2", -2000),
        ];
        for (text, milli) in cases {
            assert_eq!(parse_milli(text), Ok(milli), "{text}");
        }
        assert_eq!(parse_units("80Gi"), Ok(80 << 30));
        assert_eq!(parse_units("1.5"), Ok(2), "requests round up");
        assert_eq!(parse_units("8"), Ok(8));
    }

    #[test]
    fn bad_quantities_say_what_is_wrong() {
        assert_eq!(parse_milli("12XB").unwrap_err().to_string(), "invalid quantity \"12XB\": unknown suffix");
        assert_eq!(parse_milli("Gi").unwrap_err().problem, "no number");
        assert_eq!(parse_milli("1.2.3").unwrap_err().problem, "more than one decimal point");
    }
}
