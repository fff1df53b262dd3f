//! Wall-clock instants as the gateway keeps them: Unix milliseconds (`u64`, 0 before
//! the epoch) on the hot path and in the compiled snapshot, and the conversions to and
//! from the control-plane model's signed Unix milliseconds. A leaf: it depends on
//! nothing else in the crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Unix milliseconds of `t` (0 before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    from_model_ms(proxy_pool_runtime::clock::unix_millis(t))
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// `SystemTime` of `ms` Unix milliseconds.
pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// `ms` as the control-plane model carries an instant (signed Unix milliseconds).
pub fn to_model_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A control-plane model instant as Unix milliseconds (0 before the epoch).
pub fn from_model_ms(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_and_clamp_at_the_ends() {
        let t = from_unix_ms(1_700_000_000_123);
        assert_eq!(unix_ms(t), 1_700_000_000_123);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(from_model_ms(to_model_ms(42)), 42);
        assert_eq!(from_model_ms(-5), 0);
        assert_eq!(to_model_ms(u64::MAX), i64::MAX);
    }
}
