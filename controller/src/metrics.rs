//! Prometheus metrics of the controller, every one named `proxy_pool_controller_…`
//! (`proxy_pool_runtime::telemetry::metrics::registry`). Label sets are bounded: HTTP
//! status codes the API can produce, configured upstream names, fixed code sets and
//! (control plane) the IDs of the connected workers. No client ID, proxy or secret is
//! ever a label. The reference is the Controller table of `docs/operations.md`.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Labels of request counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// HTTP status code.
    pub status: String,
}

/// Labels of inventory gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InventoryLabels {
    /// Configured upstream name.
    pub upstream: String,
    /// `managed`, `unextracted`, `available`, `available_slots` or `quarantined`
    /// (un-extracted proxies held back after a new pool generation).
    pub kind: &'static str,
}

/// Labels of static upsert counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpsertLabels {
    /// Configured upstream name.
    pub upstream: String,
    /// `inserted`, `refreshed`, `dropped` or `failed`.
    pub result: &'static str,
}

/// Exposition name and help text of each metric [`Metrics::new`] registers, in order.
const DOCS: [(&str, &str); 7] = [
    (
        "pool_generation_start_timestamp_seconds",
        "When the current pool generation began (Unix seconds; a change means the store lost \
         its data)",
    ),
    ("leader", "1 while this controller replica leads, else 0"),
    (
        "distribution_requests",
        "Distribution API requests by HTTP status",
    ),
    (
        "distribution_extracted_proxies",
        "Proxies handed out by the Distribution API",
    ),
    (
        "distribution_request_duration_seconds",
        "Distribution API request latency",
    ),
    (
        "pool_inventory",
        "Activity pool inventory per upstream (managed, unextracted, available, \
         available_slots, quarantined)",
    ),
    (
        "static_upstream_upserts",
        "Static upstream upsert results (candidates)",
    ),
];

/// A metric a registration table lists: any counter, gauge, family or histogram.
pub(crate) trait SharedMetric {
    /// A clone registered in place of `self` (clones share their values).
    fn share(&self) -> SharedBox;
}

impl<M: Metric + Clone> SharedMetric for M {
    fn share(&self) -> SharedBox {
        SharedBox(Box::new(self.clone()))
    }
}

/// A [`SharedMetric`]'s clone, as the registry stores it.
#[derive(Debug)]
pub(crate) struct SharedBox(Box<dyn Metric>);

impl EncodeMetric for SharedBox {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Registers `metrics[i]` under `registry` with the name and help text `docs[i]`, in
/// order: a component lists its metrics' documentation once, as a table.
pub(crate) fn register_all<const N: usize>(
    registry: &mut Registry,
    docs: [(&str, &str); N],
    metrics: [&dyn SharedMetric; N],
) {
    for ((name, help), metric) in docs.into_iter().zip(metrics) {
        registry.register(name, help, metric.share());
    }
}

/// Every metric, and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Distribution requests by status.
    pub requests: Family<StatusLabels, Counter>,
    /// Proxies handed out (replays not counted).
    pub extracted: Counter,
    /// Distribution request latency, seconds.
    pub latency: Histogram,
    /// Pool inventory per upstream (refreshed at scrape).
    pub inventory: Family<InventoryLabels, Gauge>,
    /// Static upstream upserts.
    pub upserts: Family<UpsertLabels, Counter>,
    /// 1 while this replica leads (runs the background loops and answers the control
    /// plane), else 0.
    pub leader: Gauge,
    /// When the current pool generation began, Unix seconds (0 before the first
    /// upsert of a new store; refreshed at scrape).
    pub generation_start: Gauge,
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Arc<Self> {
        let mut registry = proxy_pool_runtime::telemetry::metrics::registry("controller");
        let requests = Family::<StatusLabels, Counter>::default();
        let extracted = Counter::default();
        let latency = Histogram::new([
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        ]);
        let inventory = Family::<InventoryLabels, Gauge>::default();
        let upserts = Family::<UpsertLabels, Counter>::default();
        let leader = Gauge::default();
        let generation_start = Gauge::default();
        register_all(
            &mut registry,
            DOCS,
            [
                &generation_start,
                &leader,
                &requests,
                &extracted,
                &latency,
                &inventory,
                &upserts,
            ],
        );
        Arc::new(Self {
            registry: Mutex::new(registry),
            requests,
            extracted,
            latency,
            inventory,
            upserts,
            leader,
            generation_start,
        })
    }

    /// Registers more metrics (other components: health, provider, control plane) in
    /// the registry `/metrics` serves.
    pub fn register_with(&self, f: impl FnOnce(&mut Registry)) {
        f(&mut self.registry.lock());
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock();
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

/// `redis_script_duration_seconds{operation}`: the latency of the pool's Redis script
/// calls per operation (`extract`, `upsert`, `assign`, …: one per script), read at
/// scrape time from the adapter's lock-free histograms. Register with
/// `registry.register_collector`.
#[derive(Debug)]
pub struct ScriptLatency(pub Arc<activity_pool::ScriptTimings>);

impl prometheus_client::collector::Collector for ScriptLatency {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "redis_script_duration_seconds",
            "Time a pool operation's Redis script call took (with its one retry, if any)",
            None,
            MetricType::Histogram,
        )?;
        for t in self.0.read() {
            let buckets: Vec<(f64, u64)> = activity_pool::SCRIPT_BUCKETS
                .iter()
                .copied()
                .chain(std::iter::once(f64::MAX))
                .zip(t.buckets)
                .collect();
            let labels = [("operation", t.operation)];
            family
                .encode_family(&labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    t.sum_seconds,
                    t.count,
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }
}
