//! `analytics` and `cache`: raw → typed, every problem with its field path.
//!
//! Both sections are off by default and both use the store's Redis: enabling either
//! needs `store.backend: redis` (the same server as the activity pool, keys under the
//! section's own `keyPrefix`). The ranges are those of the `proxy-pool-analytics` and
//! `proxy-pool-cache` option types (`AnalyticsOptions::validate`,
//! `CacheOptions::validate`); the controller converts the typed sections into them and
//! checks them again at start-up, and a controller test keeps both sets of rules equal.
//! The time zone is only checked for its shape here (this crate has no time zone
//! database); the controller resolves it (`validate-config` and start-up).

use std::path::PathBuf;
use std::time::Duration;

use super::ctx::Ctx;
use crate::config::raw::{RawAnalytics, RawCache, RawCacheNamespace};
use crate::config::types::{AnalyticsConfig, CacheConfig, CacheNamespaceConfig, StoreConfig};

/// Longest `keyPrefix`.
pub const MAX_KEY_PREFIX: usize = 64;
/// Most keys one cache batch holds.
pub const MAX_CACHE_BATCH: u32 = 100;
/// Longest a `TokenReview` result may be cached.
pub const TOKEN_REVIEW_MAX_TTL: Duration = Duration::from_secs(120);

/// The readers only these sections use, on the validator's one collector.
impl Ctx {
    /// A whole number of seconds within `min..=max` seconds.
    fn seconds_in(
        &mut self,
        path: &str,
        raw: Option<&str>,
        default: Duration,
        max: Duration,
    ) -> Duration {
        let d = self.duration_in(path, raw, default, Duration::from_secs(1)..=max);
        if d.subsec_nanos() != 0 {
            self.err(path, "must be a whole number of seconds");
        }
        d
    }

    /// A count within `min..=max` (kept as given when out of range: these sections
    /// report it the way the analytics and cache option types do).
    fn within(&mut self, path: &str, value: Option<u32>, default: u32, min: u32, max: u32) -> u32 {
        let v = value.unwrap_or(default);
        if !(min..=max).contains(&v) {
            self.err(path, format!("must be within {min}..={max}"));
        }
        v
    }

    fn absolute_file(&mut self, path: &str, raw: Option<&str>) -> Option<PathBuf> {
        let p = raw?;
        if !p.starts_with('/') {
            self.err(path, "must be an absolute path");
        }
        Some(PathBuf::from(p))
    }

    fn key_prefix(&mut self, path: &str, raw: Option<&str>) -> String {
        let p = raw.unwrap_or("pp");
        if p.is_empty()
            || p.len() > MAX_KEY_PREFIX
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.'))
        {
            self.err(
                path,
                format!("1..={MAX_KEY_PREFIX} characters of [A-Za-z0-9:._-]"),
            );
        }
        p.to_owned()
    }
}

/// Whether `tz` looks like an IANA zone name (`UTC`, `Europe/Paris`, `Etc/GMT+3`).
fn time_zone_shape(tz: &str) -> bool {
    !tz.is_empty()
        && tz.len() <= 64
        && !tz.starts_with('/')
        && !tz.ends_with('/')
        && !tz.contains("..")
        && !tz.contains("//")
        && tz
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+'))
}

/// Validates `analytics` and `cache`; `grace_period` is `shutdown.gracePeriod` (the
/// final flush must fit in it).
pub(super) fn usage(
    e: &mut Ctx,
    analytics: &RawAnalytics,
    cache: &RawCache,
    store: &StoreConfig,
    grace_period: Duration,
) -> (Option<AnalyticsConfig>, Option<CacheConfig>) {
    let redis_store = matches!(store, StoreConfig::Redis(_));
    let a = analytics
        .enabled
        .then(|| analytics_section(e, analytics, redis_store, grace_period));
    let c = cache.enabled.then(|| cache_section(e, cache, redis_store));
    (a, c)
}

fn analytics_section(
    e: &mut Ctx,
    raw: &RawAnalytics,
    redis_store: bool,
    grace_period: Duration,
) -> AnalyticsConfig {
    if !redis_store {
        e.err(
            "analytics.enabled",
            "needs `store.backend: redis` (analytics uses the store's Redis)",
        );
    }
    let dsn_file = match raw.dsn_file.as_deref() {
        None => {
            e.err("analytics.dsnFile", "is required when analytics is enabled");
            PathBuf::new()
        }
        Some(p) => e
            .absolute_file("analytics.dsnFile", Some(p))
            .unwrap_or_default(),
    };
    let time_zone = raw.time_zone.clone().unwrap_or_else(|| "UTC".to_owned());
    if !time_zone_shape(&time_zone) {
        e.err("analytics.timeZone", "not an IANA time zone name");
    }
    let key_prefix = e.key_prefix("analytics.keyPrefix", raw.key_prefix.as_deref());
    let queue_capacity = e.within(
        "analytics.queueCapacity",
        raw.queue_capacity,
        4096,
        1,
        1_048_576,
    );
    let flush_interval = e.seconds_in(
        "analytics.flushInterval",
        raw.flush_interval.as_deref(),
        Duration::from_secs(60),
        Duration::from_secs(3600),
    );
    let flush_after_events = e.within(
        "analytics.flushAfterEvents",
        raw.flush_after_events,
        10_000,
        1,
        1_000_000,
    );
    let retention_days = e.within("analytics.retentionDays", raw.retention_days, 90, 90, 3660);
    let hot_days = e.within("analytics.hotDays", raw.hot_days, 3, 1, 31);
    let shutdown_flush_timeout = e.seconds_in(
        "analytics.shutdownFlushTimeout",
        raw.shutdown_flush_timeout.as_deref(),
        Duration::from_secs(5),
        Duration::from_secs(60),
    );
    if shutdown_flush_timeout >= grace_period && !grace_period.is_zero() {
        e.err(
            "analytics.shutdownFlushTimeout",
            "must be shorter than shutdown.gracePeriod",
        );
    }
    let identity_key_file = e.absolute_file(
        "analytics.identityKeyFile",
        raw.identity_key_file.as_deref(),
    );
    AnalyticsConfig {
        dsn_file,
        time_zone,
        key_prefix,
        queue_capacity,
        flush_interval,
        flush_after_events,
        retention_days,
        hot_days,
        shutdown_flush_timeout,
        identity_key_file,
    }
}

fn cache_section(e: &mut Ctx, raw: &RawCache, redis_store: bool) -> CacheConfig {
    if !redis_store {
        e.err(
            "cache.enabled",
            "needs `store.backend: redis` (the cache uses the store's Redis)",
        );
    }
    let key_prefix = e.key_prefix("cache.keyPrefix", raw.key_prefix.as_deref());
    let batch_size = e.within(
        "cache.batchSize",
        raw.batch_size,
        MAX_CACHE_BATCH,
        1,
        MAX_CACHE_BATCH,
    );
    let loader_timeout = e.duration_in(
        "cache.loaderTimeout",
        raw.loader_timeout.as_deref(),
        Duration::from_secs(3),
        Duration::from_millis(10)..=Duration::from_secs(30),
    );
    let loader_concurrency = e.within(
        "cache.loaderConcurrency",
        raw.loader_concurrency,
        16,
        1,
        256,
    );
    let redis_timeout = e.duration_in(
        "cache.redisTimeout",
        raw.redis_timeout.as_deref(),
        Duration::from_millis(20),
        Duration::from_millis(1)..=Duration::from_secs(5),
    );
    let token_review = namespace(
        e,
        "cache.namespaces.tokenReview",
        &raw.namespaces.token_review,
        TOKEN_REVIEW_MAX_TTL,
        TOKEN_REVIEW_MAX_TTL,
    );
    CacheConfig {
        key_prefix,
        batch_size,
        loader_timeout,
        loader_concurrency,
        redis_timeout,
        token_review,
    }
}

fn namespace(
    e: &mut Ctx,
    path: &str,
    raw: &RawCacheNamespace,
    default_ttl: Duration,
    max_ttl: Duration,
) -> CacheNamespaceConfig {
    let ttl = e.seconds_in(
        &format!("{path}.ttl"),
        raw.ttl.as_deref(),
        default_ttl,
        max_ttl,
    );
    let jitter = e.within(
        &format!("{path}.jitterPercent"),
        raw.jitter_percent,
        10,
        0,
        50,
    );
    let negative = e.duration(
        &format!("{path}.negativeTtl"),
        raw.negative_ttl.as_deref(),
        Duration::ZERO,
    );
    // The only namespace is `tokenReview`: a rejected token is never stored.
    if !negative.is_zero() {
        e.err(
            format!("{path}.negativeTtl"),
            "a TokenReview answer is never cached as absent",
        );
    }
    let max_entry_bytes = e.within(
        &format!("{path}.maxEntryBytes"),
        raw.max_entry_bytes,
        65_536,
        64,
        1_048_576,
    );
    CacheNamespaceConfig {
        ttl,
        jitter_percent: u8::try_from(jitter).unwrap_or(u8::MAX),
        negative_ttl: (!negative.is_zero()).then_some(negative),
        max_entry_bytes,
    }
}
