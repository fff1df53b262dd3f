//! Per-namespace cache counters. The namespace is the only label: never a key, a token
//! or a caller.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one namespace.
#[derive(Debug, Default)]
pub struct NamespaceMetrics {
    pub(crate) hits: AtomicU64,
    pub(crate) negative_hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) shared_waits: AtomicU64,
    pub(crate) decode_errors: AtomicU64,
    pub(crate) redis_errors: AtomicU64,
    pub(crate) loader_calls: AtomicU64,
    pub(crate) loader_errors: AtomicU64,
    pub(crate) loader_micros: AtomicU64,
    pub(crate) oversized: AtomicU64,
}

/// A point-in-time copy of a namespace's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Keys answered with a value from Redis.
    pub hits: u64,
    /// Keys answered by a negative entry.
    pub negative_hits: u64,
    /// Keys that went to the loader (or joined an in-flight load).
    pub misses: u64,
    /// Misses that joined a load already in flight.
    pub shared_waits: u64,
    /// Entries that could not be decoded (treated as misses).
    pub decode_errors: u64,
    /// Failed or timed-out Redis round trips.
    pub redis_errors: u64,
    /// Loader calls (one per batch of new misses).
    pub loader_calls: u64,
    /// Loader calls that failed or timed out.
    pub loader_errors: u64,
    /// Total loader time, microseconds.
    pub loader_micros: u64,
    /// Values too large to store.
    pub oversized: u64,
}

impl NamespaceMetrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            hits: g(&self.hits),
            negative_hits: g(&self.negative_hits),
            misses: g(&self.misses),
            shared_waits: g(&self.shared_waits),
            decode_errors: g(&self.decode_errors),
            redis_errors: g(&self.redis_errors),
            loader_calls: g(&self.loader_calls),
            loader_errors: g(&self.loader_errors),
            loader_micros: g(&self.loader_micros),
            oversized: g(&self.oversized),
        }
    }
}
