//! Pool generations (`docs/pool.md`, "Pool generations"): the log line an upsert that
//! began a new generation leads to. The hold-back itself lives in the pool's scripts.

use std::time::Duration;

use activity_pool::Timestamp;

use crate::distribution::rfc3339;

/// Says that a new pool generation began (first start, or a store that lost its data)
/// and until when `upstream`'s proxies are held back.
pub fn began(upstream: &str, start: Timestamp, quarantine: Duration) {
    tracing::warn!(
        upstream,
        generation_start = %rfc3339(start),
        quarantine_s = quarantine.as_secs_f64(),
        held_until = %rfc3339(start.plus(quarantine)),
        "a new pool generation began (first start, or the store lost its data): \
         proxies are held back until the quarantine ends, so none handed out before \
         is handed out again"
    );
}
