//! Kubernetes quantities ("500m", "80Gi", "1.5", "2e3") as exact numbers.
//!
//! One parser for every quantity Muster reads: pod requests and node capacity (in the
//! engine's units, through `convert::quantity`), device capacity and consumed capacity, and the
//! CEL `quantity()` library. A value is kept as a whole number of nano-units, the finest
//! precision Kubernetes keeps; anything finer is rounded up, as the API server rounds it.

use std::fmt;

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid quantity {text:?}: {problem}")]
pub struct Error {
    pub text: String,
    pub problem: &'static str,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

const NANO: i128 = 1_000_000_000;
/// Kubernetes caps the quantities it stores at 2^63-1 units; so do we, to stay exact.
const MAX_NANOS: i128 = (i64::MAX as i128) * NANO;

/// An exact quantity: `nanos` × 10⁻⁹ units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Parses Kubernetes' notation: a signed decimal number, then a binary suffix (Ki … Ei),
    /// a decimal suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent (e3, E-3).
    pub fn parse(text: &str) -> Result<Quantity> {
        let fail = |problem| Error { text: text.to_string(), problem };
        let (negative, unsigned) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
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
        // value = digits × 10^(exponent - fraction digits) × 2^(binary), kept as a fraction.
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(fail("number too long"));
        }
        let digits: i128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| fail("number too long"))? };
        let (binary, exponent): (u32, i32) = match suffix {
            "" => (0, 0),
            "Ki" => (10, 0),
            "Mi" => (20, 0),
            "Gi" => (30, 0),
            "Ti" => (40, 0),
            "Pi" => (50, 0),
            "Ei" => (60, 0),
            "n" => (0, -9),
            "u" => (0, -6),
            "m" => (0, -3),
            "k" => (0, 3),
            "M" => (0, 6),
            "G" => (0, 9),
            "T" => (0, 12),
            "P" => (0, 15),
            "E" => (0, 18),
            exponent if exponent.starts_with(['e', 'E']) => {
                let power: i32 = exponent[1..].parse().map_err(|_| fail("bad exponent"))?;
                if power.unsigned_abs() > 40 {
                    return Err(fail("exponent out of range"));
                }
                (0, power)
            }
            _ => return Err(fail("unknown suffix")),
        };
        // In nano-units: digits × 2^binary × 10^(exponent + 9 - fraction digits).
        let scale = exponent + 9 - fraction.len() as i32;
        let too_large = || fail("too large");
        let mut nanos = digits.checked_mul(1i128 << binary).ok_or_else(too_large)?;
        if scale >= 0 {
            let factor = 10i128.checked_pow(scale as u32).ok_or_else(too_large)?;
            nanos = if nanos == 0 { 0 } else { nanos.checked_mul(factor).ok_or_else(too_large)? };
        } else {
            // Finer than a nano-unit: round up, as Kubernetes does (without `nanos + d - 1`,
            // which overflows when both are near i128's range).
            let divisor = 10i128.checked_pow((-scale) as u32);
            nanos = match divisor {
                Some(d) => nanos / d + i128::from(nanos % d != 0),
                None => i128::from(nanos > 0),
            };
        }
        if nanos > MAX_NANOS {
            return Err(too_large());
        }
        Ok(Quantity { nanos: if negative { -nanos } else { nanos } })
    }

    pub fn from_units(units: i64) -> Quantity {
        Quantity { nanos: i128::from(units) * NANO }
    }

    /// The value in thousandths of a unit (millicores), rounded up.
    pub fn milli_ceil(self) -> i64 {
        let milli = self.nanos.div_euclid(1_000_000) + i128::from(self.nanos.rem_euclid(1_000_000) != 0);
        milli.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// The value in whole units (bytes, devices), rounded up.
    pub fn units_ceil(self) -> i64 {
        let units = self.nanos.div_euclid(NANO) + i128::from(self.nanos.rem_euclid(NANO) != 0);
        units.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    pub fn sign(self) -> i64 {
        self.nanos.signum() as i64
    }

    pub fn is_integer(self) -> bool {
        self.nanos % NANO == 0
    }

    /// The value as an int64, if it is a whole number that fits.
    pub fn as_integer(self) -> Option<i64> {
        if !self.is_integer() {
            return None;
        }
        i64::try_from(self.nanos / NANO).ok()
    }

    pub fn as_f64(self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_add(other.nanos)?;
        (nanos.abs() <= MAX_NANOS).then_some(Quantity { nanos })
    }

    pub fn checked_sub(self, other: Quantity) -> Option<Quantity> {
        self.checked_add(Quantity { nanos: -other.nanos })
    }

    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// The smallest multiple of `step` above `base` that is at least `self` (`base` when
    /// `self` is below it).
    pub fn round_up_to_step(self, base: Quantity, step: Quantity) -> Quantity {
        if step.nanos <= 0 || self <= base {
            return base.max(self);
        }
        let over = self.nanos - base.nanos;
        let steps = (over + step.nanos - 1) / step.nanos;
        Quantity { nanos: base.nanos + steps * step.nanos }
    }
}

impl Quantity {
    /// `milli` thousandths of the quantity, in whole units, rounded down.
    pub fn scale_milli_floor(self, milli: u32) -> Quantity {
        let units = (self.nanos / NANO) * i128::from(milli) / 1000;
        Quantity { nanos: units * NANO }
    }

    /// The largest multiple of `step` above `base` that is at most `self` (`base` when
    /// `self` is below it).
    pub fn round_down_to_step(self, base: Quantity, step: Quantity) -> Quantity {
        if step.nanos <= 0 || self <= base {
            return base.max(self);
        }
        let steps = (self.nanos - base.nanos) / step.nanos;
        Quantity { nanos: base.nanos + steps * step.nanos }
    }
}

impl fmt::Display for Quantity {
    /// Whole numbers as they are (`85899345920`), others with their decimals (`1.5`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let magnitude = self.nanos.unsigned_abs();
        let whole = magnitude / NANO as u128;
        let fraction = magnitude % NANO as u128;
        if fraction == 0 {
            write!(f, "{sign}{whole}")
        } else {
            let digits = format!("{fraction:09}");
            write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    #[test]
    fn every_notation_kubernetes_accepts() {
        assert_eq!(q("80Gi"), Quantity::from_units(80 << 30));
        assert_eq!(q("1.5").to_string(), "1.5");
        assert_eq!(q("500m").milli_ceil(), 500);
        assert_eq!(q("2k"), Quantity::from_units(2000));
        assert_eq!(q("1e3"), Quantity::from_units(1000));
        assert_eq!(q("1E-3").milli_ceil(), 1);
        assert_eq!(q(".5").to_string(), "0.5");
        assert_eq!(q("5.").to_string(), "5");
        assert_eq!(q("-2").sign(), -1);
        assert_eq!(q("+2"), Quantity::from_units(2));
        assert_eq!(q("0.0000000001").to_string(), "0.000000001", "finer than nano rounds up");
        assert_eq!(q("007"), Quantity::from_units(7));
        assert!(q("80Gi") > q("40Gi"));
        assert_eq!(q("1Gi"), q("1073741824"));
    }

    #[test]
    fn arithmetic_and_conversions_are_exact() {
        assert_eq!(q("1.5").checked_add(q("500m")), Some(Quantity::from_units(2)));
        assert_eq!(q("1").checked_sub(q("3")).map(Quantity::sign), Some(-1));
        assert_eq!(q("1.5").as_integer(), None);
        assert_eq!(Quantity::parse("8Ei").unwrap_err().problem, "too large", "2^63 is more than Kubernetes keeps");
        assert_eq!(q("9223372036854775807").checked_add(q("1")), None);
        assert_eq!(q("1Ki").as_integer(), Some(1024));
        assert_eq!(q("1.5").units_ceil(), 2);
        assert!((q("1.5").as_f64() - 1.5).abs() < 1e-12);
        assert_eq!(q("5").round_up_to_step(q("1"), q("2")), q("5"));
        assert_eq!(q("6").round_up_to_step(q("1"), q("2")), q("7"));
        assert_eq!(q("0").round_up_to_step(q("1"), q("2")), q("1"));
    }

    #[test]
    fn bad_quantities_say_what_is_wrong() {
        assert_eq!(Quantity::parse("12XB").unwrap_err().to_string(), "invalid quantity \"12XB\": unknown suffix");
        assert_eq!(Quantity::parse("Gi").unwrap_err().problem, "no number");
        assert_eq!(Quantity::parse("1.2.3").unwrap_err().problem, "more than one decimal point");
        assert_eq!(Quantity::parse("").unwrap_err().problem, "no number");
        assert_eq!(Quantity::parse("1 Gi").unwrap_err().problem, "unknown suffix");
        assert_eq!(Quantity::parse("99999999999999999999999").unwrap_err().problem, "too large");
    }
}
