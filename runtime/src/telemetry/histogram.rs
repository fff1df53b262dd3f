//! A histogram for hot paths: fixed buckets, one atomic count per bucket and an atomic
//! sum, so [`AtomicHistogram::observe`] takes no lock and allocates nothing (two
//! `fetch_add`s and a binary search over the bounds). prometheus-client's own
//! `Histogram` takes a lock per observation; this one encodes the same way (OpenMetrics
//! `histogram`: `_sum`, `_count`, cumulative `_bucket{le}` with `+Inf`).
//!
//! The sum is kept in fixed point, millionths of the observed unit (microseconds for
//! seconds), so adding to it is one wait-free `fetch_add`; negative observations count
//! as 0 (durations and sizes are never negative). A scrape reads the buckets one by one
//! while observations go on: each bucket is exact, the snapshot across buckets and the
//! sum is not a single instant (as with any lock-free exposition); `_count` is the sum
//! of the buckets read, so it always equals the `+Inf` bucket.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Fixed-point scale of the sum: millionths of the unit.
const SUM_SCALE: f64 = 1e6;

/// Bucket bounds (seconds) for request-scale durations: 1 ms … 60 s.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// Bucket bounds (seconds) for long-lived connections (tunnels): 10 ms … 1 h.
pub const LONG_DURATION_BUCKETS: [f64; 12] = [
    0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
];

/// A lock-free histogram; clones share the same counts.
#[derive(Debug, Clone)]
pub struct AtomicHistogram {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Upper bounds, strictly increasing, finite.
    bounds: Box<[f64]>,
    /// One more than `bounds`: the last is the `+Inf` bucket. Not cumulative.
    counts: Box<[AtomicU64]>,
    /// Sum of observations in millionths of the unit.
    sum: AtomicU64,
}

impl AtomicHistogram {
    /// A histogram with these upper bounds (sorted, deduplicated; non-finite bounds are
    /// dropped: `+Inf` is always the last bucket).
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let mut bounds: Vec<f64> = bounds.into_iter().filter(|b| b.is_finite()).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Self {
            inner: Arc::new(Inner {
                bounds: bounds.into_boxed_slice(),
                counts,
                sum: AtomicU64::new(0),
            }),
        }
    }

    /// A histogram of durations in seconds with [`DURATION_BUCKETS`].
    pub fn durations() -> Self {
        Self::new(DURATION_BUCKETS)
    }

    /// A histogram of long durations in seconds with [`LONG_DURATION_BUCKETS`].
    pub fn long_durations() -> Self {
        Self::new(LONG_DURATION_BUCKETS)
    }

    /// Records `value` (NaN and negative values count as 0).
    pub fn observe(&self, value: f64) {
        let v = if value.is_nan() || value < 0.0 {
            0.0
        } else {
            value
        };
        // The first bucket whose bound is >= v (Prometheus `le`), else `+Inf`.
        let i = self.inner.bounds.partition_point(|b| *b < v);
        self.inner.counts[i].fetch_add(1, Ordering::Relaxed);
        // Saturating float-to-int conversion: an absurd value cannot wrap the sum.
        let fixed = (v * SUM_SCALE).round() as u64;
        self.inner.sum.fetch_add(fixed, Ordering::Relaxed);
    }

    /// Records a duration in seconds.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.inner
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Sum of observations so far (to a millionth).
    pub fn sum(&self) -> f64 {
        self.inner.sum.load(Ordering::Relaxed) as f64 / SUM_SCALE
    }

    /// `(upper bound, observations in this bucket alone)`, the last bound `f64::MAX`
    /// (encoded as `+Inf`).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let bounds = self.inner.bounds.iter().copied().chain([f64::MAX]);
        bounds
            .zip(self.inner.counts.iter())
            .map(|(b, c)| (b, c.load(Ordering::Relaxed)))
            .collect()
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets = self.buckets();
        let count = buckets.iter().map(|(_, n)| n).sum();
        encoder.encode_histogram::<NoLabelSet>(self.sum(), count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    fn text(h: &AtomicHistogram) -> String {
        let mut registry = Registry::default();
        registry.register("latency_seconds", "Latency", h.clone());
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn observations_land_in_le_buckets() {
        let h = AtomicHistogram::new([0.1, 1.0, 0.5, 1.0, f64::INFINITY]);
        for v in [0.05, 0.1, 0.3, 0.5, 0.7, 2.0, -1.0, f64::NAN] {
            h.observe(v);
        }
        assert_eq!(
            h.buckets(),
            vec![(0.1, 4), (0.5, 2), (1.0, 1), (f64::MAX, 1)],
            "le bounds: 0.1 holds 0.05, 0.1 and the two clamped to 0"
        );
        assert_eq!(h.count(), 8);
        assert!((h.sum() - 3.65).abs() < 1e-9, "{}", h.sum());
    }

    #[test]
    fn encodes_as_a_cumulative_histogram() {
        let h = AtomicHistogram::new([0.5, 1.0]);
        h.observe_duration(Duration::from_millis(250));
        h.observe_duration(Duration::from_millis(750));
        h.observe_duration(Duration::from_secs(3));
        let out = text(&h);
        for line in [
            "# TYPE latency_seconds histogram",
            "latency_seconds_sum 4.0",
            "latency_seconds_count 3",
            "latency_seconds_bucket{le=\"0.5\"} 1",
            "latency_seconds_bucket{le=\"1.0\"} 2",
            "latency_seconds_bucket{le=\"+Inf\"} 3",
        ] {
            assert!(out.lines().any(|l| l == line), "{line:?} in\n{out}");
        }
    }

    #[test]
    fn an_empty_histogram_encodes_zeros() {
        let out = text(&AtomicHistogram::durations());
        assert!(out.contains("latency_seconds_count 0\n"), "{out}");
        assert!(
            out.contains("latency_seconds_bucket{le=\"+Inf\"} 0\n"),
            "{out}"
        );
        assert_eq!(
            out.matches("latency_seconds_bucket").count(),
            DURATION_BUCKETS.len() + 1
        );
    }

    #[test]
    fn concurrent_observations_are_all_counted() {
        let h = AtomicHistogram::long_durations();
        std::thread::scope(|s| {
            for t in 0..4 {
                let h = h.clone();
                s.spawn(move || {
                    for i in 0..10_000u32 {
                        h.observe(f64::from((i + t) % 7));
                    }
                });
            }
        });
        assert_eq!(h.count(), 40_000);
        let expected: u64 = (0..4u32)
            .map(|t| (0..10_000u32).map(|i| u64::from((i + t) % 7)).sum::<u64>())
            .sum();
        assert!((h.sum() - expected as f64).abs() < 1e-6);
    }

    #[test]
    fn clones_share_counts() {
        let h = AtomicHistogram::durations();
        h.clone().observe(0.002);
        assert_eq!(h.count(), 1);
        assert!(matches!(h.metric_type(), MetricType::Histogram));
    }
}
