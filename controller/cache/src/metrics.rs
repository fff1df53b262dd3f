//! Per-namespace cache counters, exported with the namespace as the label `cache` (the
//! only label: never a key, a token or a caller; not `namespace`, which Kubernetes
//! scrapes set on every series).

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

impl MetricsSnapshot {
    /// Each counter but the loader time as a Prometheus counter: (name, help, value).
    pub fn series(&self) -> [(&'static str, &'static str, u64); 9] {
        [
            ("cache_hits", "Keys answered from Redis", self.hits),
            (
                "cache_negative_hits",
                "Keys answered by a negative entry",
                self.negative_hits,
            ),
            ("cache_misses", "Keys that went to the loader", self.misses),
            (
                "cache_shared_waits",
                "Misses that joined an in-flight load",
                self.shared_waits,
            ),
            (
                "cache_decode_errors",
                "Undecodable entries",
                self.decode_errors,
            ),
            (
                "cache_redis_errors",
                "Failed Redis round trips",
                self.redis_errors,
            ),
            ("cache_loader_calls", "Loader calls", self.loader_calls),
            (
                "cache_loader_errors",
                "Failed or timed-out loader calls",
                self.loader_errors,
            ),
            (
                "cache_oversized",
                "Values too large to store",
                self.oversized,
            ),
        ]
    }
}

/// Name and help text of the loader time counter (seconds).
const LOADER_SECONDS: (&str, &str) = ("cache_loader_seconds", "Time spent in loader calls");

impl MetricsSnapshot {
    /// Total loader time, seconds.
    #[allow(clippy::cast_precision_loss, reason = "microseconds: exact below 2^53")]
    pub fn loader_seconds(&self) -> f64 {
        self.loader_micros as f64 / 1e6
    }
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

/// The registered namespaces and their live counters.
type Registered = std::sync::Arc<std::sync::Mutex<Vec<(String, std::sync::Arc<NamespaceMetrics>)>>>;

/// A Prometheus collector over the caches' counters, labelled by namespace only (label
/// `cache`).
/// Register once with `registry.register_collector(Box::new(metrics.clone()))`.
#[derive(Debug, Clone, Default)]
pub struct CacheMetricsCollector {
    // std Mutex: touched at registration and per scrape, never across an await.
    namespaces: Registered,
}

impl CacheMetricsCollector {
    /// Adds a namespace's counters (from `Cache::metrics_handle`).
    pub fn add(&self, namespace: &str, metrics: std::sync::Arc<NamespaceMetrics>) {
        if let Ok(mut v) = self.namespaces.lock() {
            v.push((namespace.to_owned(), metrics));
        }
    }
}

impl prometheus_client::collector::Collector for CacheMetricsCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        let Ok(list) = self.namespaces.lock() else {
            return Ok(());
        };
        let snaps: Vec<(&str, MetricsSnapshot)> = list
            .iter()
            .map(|(n, m)| (n.as_str(), m.snapshot()))
            .collect();
        for (i, (name, help, _)) in MetricsSnapshot::default().series().into_iter().enumerate() {
            let counter = ConstCounter::new(0u64);
            let mut family = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            for (ns, snap) in &snaps {
                let labels = [("cache", *ns)];
                ConstCounter::new(snap.series()[i].2).encode(family.encode_family(&labels)?)?;
            }
        }
        let (name, help) = LOADER_SECONDS;
        let counter = ConstCounter::new(0f64);
        let mut family = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
        for (ns, snap) in &snaps {
            let labels = [("cache", *ns)];
            ConstCounter::new(snap.loader_seconds()).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
