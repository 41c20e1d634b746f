//! Kubernetes resource quantities in the engine's units: millicores for CPU, whole units
//! (bytes, devices, pods) for everything else, both rounded up as Kubernetes rounds a
//! request up. The parsing is the crate's one parser ([`crate::quantity`]), shared with DRA.

pub use crate::quantity::{Error, Quantity, Result};

/// The quantity in thousandths of its unit (millicores for CPU), rounded up.
pub fn parse_milli(text: &str) -> Result<i64> {
    Quantity::parse(text.trim()).map(Quantity::milli_ceil)
}

/// The quantity in whole units (bytes, devices, pods), rounded up.
pub fn parse_units(text: &str) -> Result<i64> {
    Quantity::parse(text.trim()).map(Quantity::units_ceil)
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
}
