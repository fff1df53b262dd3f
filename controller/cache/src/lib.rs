//! Proxy Pool's generic batched read-through cache (seed 002 §4, brief §9).
//!
//! Owns: the `redis` and `cache` config sections, the `MGet` cache (dedup, batches of
//! at most 100, only misses to the loader, in-flight sharing per key, independent
//! cancellation of waiters, capped loader concurrency and time, JSON envelope with a
//! hard expiry, TTL jitter, negative entries only when the loader answered every key),
//! its Redis adapter and per-namespace metrics, and the TokenReview TTL rule.
//! Must never: store a loader error as "absent", block a caller on a failing Redis
//! (it goes to the source), or cache an authorisation decision.

mod envelope;
mod metrics;
mod mget;
mod options;
mod store;
mod token;

pub use envelope::{Cached, DecodeError, decode, encode};
pub use metrics::{CacheMetricsCollector, MetricsSnapshot, NamespaceMetrics};
pub use mget::{Answer, Cache, CacheError, CacheKey, Loader, MAX_KEY_BYTES, jittered};
pub use options::{
    CacheOptions, FieldError, KNOWN_NAMESPACES, MAX_BATCH, Namespace, NamespaceOptions,
    RedisOptions,
};
pub use store::{CacheStore, RedisStore, StoreError};
pub use token::{TOKEN_REVIEW_MAX_TTL, TokenKey, token_key, token_review_ttl};
