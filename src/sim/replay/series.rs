//! The replay's figures over time: values spread over equal spans of the horizon.

/// Adds `value` over [from, to) to the series' spans of `horizon`, as an average per span.
pub fn spread(series: &mut [f64], horizon: i64, from: i64, to: i64, value: f64) {
    if value == 0.0 || horizon <= 0 {
        return;
    }
    let width = horizon as f64 / series.len() as f64;
    let (from, to) = (from as f64, (to.min(horizon)) as f64);
    // Span by span, counting spans rather than dividing again at each boundary, where
    // rounding could find the span just ended.
    let (mut at, mut i) = (from, ((from / width) as usize).min(series.len() - 1));
    while at < to && i < series.len() {
        let end = if i + 1 == series.len() { to } else { ((i + 1) as f64 * width).min(to) };
        if end > at {
            series[i] += value * (end - at) / width;
            at = end;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn a_value_spread_over_a_run_fills_every_span_it_covers() {
        // 7260 s in 400 spans: widths that are not whole seconds.
        let mut series = vec![0.0; 400];
        spread(&mut series, 7260, 0, 7200, 8.0);
        let covered = (7200.0 / (7260.0 / 400.0)) as usize;
        assert!(series[..covered].iter().all(|v| (v - 8.0).abs() < 1e-9), "{series:?}");
        assert!(series[covered + 1..].iter().all(|v| *v == 0.0));
        let total: f64 = series.iter().sum::<f64>() * 7260.0 / 400.0;
        assert!((total - 8.0 * 7200.0).abs() < 1e-6, "{total}");
    }
}
