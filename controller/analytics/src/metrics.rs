//! Prometheus export of the analytics counters (no labels: nothing about clients,
//! identities or keys reaches a metric). The controller registers them in its registry
//! (`proxy_pool_controller_analytics_…`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::collector::Collector;
use crate::engine::WorkerMetrics;

/// Register with `registry.register_collector(Box::new(metrics))`.
#[derive(Debug, Clone)]
pub struct AnalyticsMetrics {
    /// The producers' handle (accepted/dropped/rejected, queue depth).
    pub collector: Collector,
    /// The worker's counters.
    pub worker: Arc<WorkerMetrics>,
}

fn counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

impl prometheus_client::collector::Collector for AnalyticsMetrics {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = self.collector.stats().counts();
        let w = &self.worker;
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut e,
            "analytics_events_accepted",
            "Events queued",
            c.accepted,
        )?;
        counter(
            &mut e,
            "analytics_events_dropped",
            "Events dropped (queue full)",
            c.dropped,
        )?;
        counter(
            &mut e,
            "analytics_events_rejected",
            "Events with invalid names",
            c.rejected,
        )?;
        counter(
            &mut e,
            "analytics_events_applied",
            "Events applied to Redis",
            l(&w.applied),
        )?;
        counter(
            &mut e,
            "analytics_events_lost",
            "Events lost to Redis failures",
            l(&w.lost),
        )?;
        counter(
            &mut e,
            "analytics_flushes",
            "Snapshots committed",
            l(&w.flushes),
        )?;
        counter(
            &mut e,
            "analytics_flush_errors",
            "Failed flushes",
            l(&w.flush_errors),
        )?;
        counter(
            &mut e,
            "analytics_recoveries",
            "Working-set rebuilds from SQL",
            l(&w.recoveries),
        )?;
        counter(
            &mut e,
            "analytics_pruned_rows",
            "Daily rows removed by retention",
            l(&w.pruned),
        )?;
        gauge(
            &mut e,
            "analytics_queue_depth",
            "Events waiting",
            i64::try_from(self.collector.queued()).unwrap_or(i64::MAX),
        )?;
        let last_flush =
            ConstGauge::new(std::time::Duration::from_millis(l(&w.last_flush_ms)).as_secs_f64());
        last_flush.encode(e.encode_descriptor(
            "analytics_last_flush_duration_seconds",
            "Duration of the last flush",
            None,
            last_flush.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::day::SystemClock;

    #[test]
    fn exports_without_labels() {
        let (c, _rx) = Collector::bounded(4, Arc::new(SystemClock));
        c.gateway_requests("r", "a", 1);
        let m = AnalyticsMetrics {
            collector: c,
            worker: Arc::default(),
        };
        let mut registry =
            prometheus_client::registry::Registry::with_prefix("proxy_pool_controller");
        registry.register_collector(Box::new(m));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(
            out.contains("proxy_pool_controller_analytics_events_accepted_total 1"),
            "{out}"
        );
        assert!(out.contains("proxy_pool_controller_analytics_queue_depth 1"));
        assert!(out.contains("proxy_pool_controller_analytics_last_flush_duration_seconds 0"));
    }
}
