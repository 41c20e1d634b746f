//! Quantities: every notation (decimal SI, binary Ki…Ei, exponents, milli and finer) means
//! the value an exact computation gives, rounded up to a nano-unit; the printer's text parses
//! back to the same value and prints the same again; the parser never panics, whatever the
//! text, and its errors quote the text.

use muster::quantity::Quantity;
use proptest::prelude::*;

/// Kubernetes keeps at most 2^63-1 units; in nano-units:
const MAX_NANOS: u128 = (i64::MAX as u128) * 1_000_000_000;

/// Suffixes and what they multiply by: 2^binary × 10^exponent.
const SUFFIXES: &[(&str, u32, i32)] = &[
    ("", 0, 0),
    ("Ki", 10, 0),
    ("Mi", 20, 0),
    ("Gi", 30, 0),
    ("Ti", 40, 0),
    ("Pi", 50, 0),
    ("Ei", 60, 0),
    ("n", 0, -9),
    ("u", 0, -6),
    ("m", 0, -3),
    ("k", 0, 3),
    ("M", 0, 6),
    ("G", 0, 9),
    ("T", 0, 12),
    ("P", 0, 15),
    ("E", 0, 18),
];

/// The problems the parser may report; anything else is a new failure mode.
const PROBLEMS: &[&str] = &[
    "no number",
    "more than one decimal point",
    "number too long",
    "bad exponent",
    "exponent out of range",
    "unknown suffix",
    "too large",
];

/// A number written with `fraction` decimals: `mantissa` × 10^-fraction.
fn decimal(mantissa: u64, fraction: usize, bare_point: bool) -> String {
    let digits = format!("{mantissa:0>width$}", width = fraction + 1);
    let (whole, decimals) = digits.split_at(digits.len() - fraction);
    match (decimals.is_empty(), bare_point) {
        (true, true) => format!("{whole}."),
        (true, false) => whole.to_string(),
        // ".5" as well as "0.5"
        (false, true) if whole == "0" => format!(".{decimals}"),
        (false, _) => format!("{whole}.{decimals}"),
    }
}

/// The exact value in nano-units, rounded up; None when it does not fit in a u128 (far
/// beyond what Kubernetes keeps).
fn exact_nanos(mantissa: u64, fraction: usize, binary: u32, exponent: i32) -> Option<u128> {
    let scaled = u128::from(mantissa).checked_mul(1u128 << binary)?;
    let power = exponent + 9 - fraction as i32;
    if power >= 0 {
        scaled.checked_mul(10u128.checked_pow(power as u32)?)
    } else {
        match 10u128.checked_pow((-power) as u32) {
            Some(divisor) => Some(scaled.div_ceil(divisor)),
            None => Some(u128::from(scaled > 0)),
        }
    }
}

/// How the printer writes `nanos` nano-units: whole numbers bare, others with their
/// decimals and no trailing zeros.
fn printed(negative: bool, nanos: u128) -> String {
    let sign = if negative && nanos > 0 { "-" } else { "" };
    let (whole, fraction) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if fraction == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{}", format!("{fraction:09}").trim_end_matches('0'))
    }
}

fn suffix() -> impl Strategy<Value = (String, u32, i32)> {
    prop_oneof![
        3 => proptest::sample::select(SUFFIXES).prop_map(|(s, b, e)| (s.to_string(), b, e)),
        1 => (prop_oneof![Just('e'), Just('E')], -25i32..=25, any::<bool>()).prop_map(|(e, power, plus)| {
            let sign = if plus && power >= 0 { "+" } else { "" };
            (format!("{e}{sign}{power}"), 0, power)
        }),
    ]
}

fn sign() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(&["", "", "+", "-"][..])
}

/// Quantity-like text that reaches every branch of the parser: long zero runs, long
/// fractions, huge and tiny exponents, stray points and signs.
fn quantity_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-+]?[0-9]{0,40}(\\.[0-9]{0,50})?([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]{1,12})?",
        (sign(), 0usize..60, "[1-9][0-9]{0,34}", "(|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|E|e-40|e40)")
            .prop_map(|(s, zeros, digits, suffix)| format!("{s}0.{}{digits}{suffix}", "0".repeat(zeros))),
        // Near i128's range, rounded up by the largest divisors (10^36 to 10^39).
        (sign(), "[1-9][0-9]{19,26}", 0usize..5, "(Ti|Pi|Ei)").prop_map(|(s, digits, offset, suffix)| {
            format!("{s}0.{}{digits}{suffix}", "0".repeat((45 + offset).saturating_sub(digits.len())))
        }),
        ("[0-9]{1,5}", "[eE]", prop_oneof![any::<i32>().prop_map(i64::from), any::<i64>()])
            .prop_map(|(d, e, p)| format!("{d}{e}{p}")),
        "[-+0-9.eEikKmMGTPun ]{0,64}",
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(super::cases(2_000))]

    /// Every notation means the exact value, rounded up to a nano-unit, or is "too large";
    /// the printer writes it canonically.
    #[test]
    fn every_notation_means_its_exact_value(
        negative in any::<bool>(),
        mantissa in prop_oneof![0u64..1000, 0u64..1_000_000_000, any::<u64>()],
        fraction in 0usize..14,
        bare_point in any::<bool>(),
        (suffix, binary, exponent) in suffix(),
    ) {
        let text = format!("{}{}{suffix}", if negative { "-" } else { "" }, decimal(mantissa, fraction, bare_point));
        let parsed = Quantity::parse(&text);
        match exact_nanos(mantissa, fraction, binary, exponent).filter(|n| *n <= MAX_NANOS) {
            Some(nanos) => {
                let q = parsed.map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                prop_assert_eq!(q.to_string(), printed(negative, nanos), "{}", text);
                prop_assert_eq!(q.sign(), if nanos == 0 { 0 } else if negative { -1 } else { 1 }, "{}", text);
            }
            None => prop_assert_eq!(parsed.map_err(|e| e.problem), Err("too large"), "{}", text),
        }
    }

    /// What the printer writes parses back to the same value and prints the same again.
    #[test]
    fn printing_round_trips(text in quantity_like()) {
        if let Ok(q) = Quantity::parse(&text) {
            let shown = q.to_string();
            let again = Quantity::parse(&shown).map_err(|e| TestCaseError::fail(format!("{text} -> {shown}: {e}")))?;
            prop_assert_eq!(again, q, "{} printed as {}", text, shown);
            prop_assert_eq!(again.to_string(), shown.clone());
            let canonical = shown.strip_prefix('-').unwrap_or(&shown);
            let (whole, fraction) = canonical.split_once('.').unwrap_or((canonical, ""));
            prop_assert!(whole == "0" || !whole.starts_with('0'), "{} printed as {}", text, shown);
            prop_assert!(whole.bytes().all(|b| b.is_ascii_digit()) && !whole.is_empty(), "{}", shown);
            prop_assert!(fraction.len() <= 9 && !fraction.ends_with('0'), "{} printed as {}", text, shown);
            prop_assert!(fraction.bytes().all(|b| b.is_ascii_digit()), "{}", shown);
        }
    }

    /// The parser never panics; an error quotes the text and says one of the known problems.
    #[test]
    fn the_parser_never_panics(text in quantity_like()) {
        if let Err(e) = Quantity::parse(&text) {
            prop_assert_eq!(&e.text, &text);
            prop_assert!(PROBLEMS.contains(&e.problem), "{:?}: unexpected problem {:?}", text, e.problem);
            prop_assert!(e.to_string().contains(&format!("{text:?}")), "{}", e);
        }
    }

    /// Rounding up to thousandths and to units gives the smallest such value at least `q`;
    /// adding then subtracting gives `q` back.
    #[test]
    fn conversions_round_up_and_arithmetic_is_exact(a in quantity_like(), b in quantity_like()) {
        let (Ok(a), Ok(b)) = (Quantity::parse(&a), Quantity::parse(&b)) else { return Ok(()) };
        let milli = a.milli_ceil();
        if milli.unsigned_abs() < (i64::MAX / 2) as u64 {
            prop_assert!(Quantity::parse(&format!("{milli}m")).unwrap() >= a, "{} -> {}m", a, milli);
            prop_assert!(Quantity::parse(&format!("{}m", milli - 1)).unwrap() < a, "{} -> {}m", a, milli);
        }
        let units = a.units_ceil();
        if units.unsigned_abs() < (i64::MAX / 2) as u64 {
            prop_assert!(Quantity::from_units(units) >= a && Quantity::from_units(units - 1) < a, "{} -> {}", a, units);
        }
        prop_assert_eq!(a.as_integer(), a.is_integer().then_some(units), "{}", a);
        if let Some(sum) = a.checked_add(b) {
            prop_assert_eq!(sum.checked_sub(b), Some(a));
            prop_assert_eq!(b.checked_add(a), Some(sum));
        }
    }
}

/// Inputs the generators reach rarely, kept as fixed cases: an exponent of i32::MIN (its
/// absolute value overflows), and a value near i128's range rounded with the largest
/// divisor (rounding up by adding the divisor overflows).
#[test]
fn extreme_inputs_are_errors_or_values_not_panics() {
    assert_eq!(Quantity::parse("1e-2147483648").unwrap_err().problem, "exponent out of range");
    assert_eq!(Quantity::parse("1E2147483647").unwrap_err().problem, "exponent out of range");
    let tiny = format!("0.{}100000000000000000000Ei", "0".repeat(26));
    assert_eq!(Quantity::parse(&tiny).unwrap().to_string(), "0.000000002", "1e20 × 2^60 × 1e-47, rounded up");
}
