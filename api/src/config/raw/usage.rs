//! `analytics` and `cache`: usage counting and the read-through cache, as written.

use serde::{Deserialize, Serialize};

/// `analytics`: usage counting (Redis working set → PostgreSQL). Uses the store's Redis
/// (`store.backend: redis`); see `docs/analytics.md`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAnalytics {
    /// Off by default.
    #[serde(default)]
    pub enabled: bool,
    /// File holding the PostgreSQL DSN (a mounted Secret key; may carry the password).
    /// Required when enabled.
    #[serde(default)]
    pub dsn_file: Option<String>,
    /// IANA time zone of the day boundaries (default `UTC`).
    #[serde(default)]
    pub time_zone: Option<String>,
    /// Prefix of the Redis keys (default `pp`; keys are `<prefix>:analytics:v1:…`).
    #[serde(default)]
    pub key_prefix: Option<String>,
    /// Bounded event queue; full ⇒ dropped and counted (default 4096).
    #[serde(default)]
    pub queue_capacity: Option<u32>,
    /// Time between two flushes to PostgreSQL (default `60s`).
    #[serde(default)]
    pub flush_interval: Option<String>,
    /// Flush early after this many events (default 10000).
    #[serde(default)]
    pub flush_after_events: Option<u32>,
    /// Natural days of daily rows kept (default 90).
    #[serde(default)]
    pub retention_days: Option<u32>,
    /// Days of persisted daily buckets kept in Redis (default 3).
    #[serde(default)]
    pub hot_days: Option<u32>,
    /// Budget of the final flush at shutdown (default `5s`, within `shutdown.gracePeriod`).
    #[serde(default)]
    pub shutdown_flush_timeout: Option<String>,
    /// File with a key mixed into client-identity digests (optional, a Secret key).
    #[serde(default)]
    pub identity_key_file: Option<String>,
}

/// `cache`: the Redis read-through cache of slow look-ups. Uses the store's Redis.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCache {
    /// Off by default.
    #[serde(default)]
    pub enabled: bool,
    /// Prefix of the Redis keys (default `pp`; keys are `<prefix>:cache:v1:…`).
    #[serde(default)]
    pub key_prefix: Option<String>,
    /// Keys per Redis `MGET` / loader call (default and most 100).
    #[serde(default)]
    pub batch_size: Option<u32>,
    /// Longest a shared loader call may run (default `3s`).
    #[serde(default)]
    pub loader_timeout: Option<String>,
    /// Loader calls running at once per namespace (default 16).
    #[serde(default)]
    pub loader_concurrency: Option<u32>,
    /// Budget of one Redis round trip (default `20ms`).
    #[serde(default)]
    pub redis_timeout: Option<String>,
    /// Per-namespace settings.
    #[serde(default)]
    pub namespaces: RawCacheNamespaces,
}

/// `cache.namespaces`: the known namespaces.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCacheNamespaces {
    /// Kubernetes `TokenReview` results (ttl ≤ 120s, never past the token's expiry).
    /// (Secrets need no cache: they are kubelet-mounted files read at load.)
    #[serde(default)]
    pub token_review: RawCacheNamespace,
}

/// One cache namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCacheNamespace {
    /// Hard TTL of an entry (`tokenReview`: default and most `120s`).
    #[serde(default)]
    pub ttl: Option<String>,
    /// TTL shortened by up to this percent at random (default 10, most 50).
    #[serde(default)]
    pub jitter_percent: Option<u32>,
    /// TTL of a "confirmed absent" entry (default `0s` = never stored; the only value
    /// allowed for `tokenReview`).
    #[serde(default)]
    pub negative_ttl: Option<String>,
    /// Largest encoded entry stored (default 65536).
    #[serde(default)]
    pub max_entry_bytes: Option<u32>,
}
