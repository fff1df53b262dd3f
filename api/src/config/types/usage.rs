//! `analytics` and `cache`, validated: usage counting and the read-through cache.

use std::path::PathBuf;
use std::time::Duration;

/// Usage analytics (`analytics`, see `docs/analytics.md`): uses the store's Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnalyticsConfig {
    /// File holding the PostgreSQL DSN (a secret: read at start-up, never logged).
    pub dsn_file: PathBuf,
    /// IANA time zone of the day boundaries.
    pub time_zone: String,
    /// Prefix of the Redis keys.
    pub key_prefix: String,
    /// Bounded event queue.
    pub queue_capacity: u32,
    /// Time between two flushes.
    pub flush_interval: Duration,
    /// Early flush threshold.
    pub flush_after_events: u32,
    /// Natural days of daily rows kept.
    pub retention_days: u32,
    /// Persisted daily buckets kept in Redis.
    pub hot_days: u32,
    /// Budget of the final flush at shutdown.
    pub shutdown_flush_timeout: Duration,
    /// File with the identity digest key (optional).
    pub identity_key_file: Option<PathBuf>,
}

/// The read-through cache (`cache`): uses the store's Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Prefix of the Redis keys.
    pub key_prefix: String,
    /// Keys per batch (1..=100).
    pub batch_size: u32,
    /// Longest shared loader call.
    pub loader_timeout: Duration,
    /// Loader calls at once, per namespace.
    pub loader_concurrency: u32,
    /// Budget of one Redis round trip.
    pub redis_timeout: Duration,
    /// `TokenReview` results.
    pub token_review: CacheNamespaceConfig,
}

/// One cache namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheNamespaceConfig {
    /// Hard TTL.
    pub ttl: Duration,
    /// Random shortening of the TTL, percent.
    pub jitter_percent: u8,
    /// TTL of negative entries (`None`: never stored).
    pub negative_ttl: Option<Duration>,
    /// Largest encoded entry stored.
    pub max_entry_bytes: u32,
}
