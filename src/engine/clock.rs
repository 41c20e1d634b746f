//! Times as the engine's reasons print them.

/// A time in seconds since the epoch, as RFC 3339.
pub fn at(seconds: i64) -> String {
    jiff::Timestamp::from_second(seconds).map_or_else(|_| format!("{seconds}s"), |t| t.to_string())
}
