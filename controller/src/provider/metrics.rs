//! Prometheus metrics of the provider reconcilers. Labels are bounded: `upstream`
//! (from configuration) and `reason` / `result` (fixed code sets).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::register_all;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    upstream: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    upstream: String,
    reason: String,
}

/// Exposition name and help text of each metric [`ProviderMetrics::register`]
/// registers, in order.
const DOCS: [(&str, &str); 8] = [
    ("provider_fetches", "Vendor fetches by result (ok or error)"),
    (
        "provider_fetch_errors",
        "Failed vendor fetches by reason (unauthorized, status, too_large, timeout, \
         transport, invalid_document, pool_error)",
    ),
    (
        "provider_fetch_duration_seconds",
        "Time a vendor took to answer a fetch (successful or not)",
    ),
    (
        "provider_fetched_proxies",
        "Proxy entries offered by vendors",
    ),
    (
        "provider_upserted_proxies",
        "Proxies inserted into the pool (new lifetimes)",
    ),
    (
        "provider_refreshed_proxies",
        "Proxies whose lifetime a fetch refreshed",
    ),
    (
        "provider_dropped_proxies",
        "Proxy entries not written, by reason",
    ),
    (
        "provider_consecutive_failures",
        "Failed fetches in a row (0 after a success)",
    ),
];

/// Buckets of the vendor fetch latency, seconds.
const FETCH_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
];

/// Counters shared by every reconciler of a controller. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ProviderMetrics {
    fetches: Family<ResultLabels, Counter>,
    fetch_errors: Family<ReasonLabels, Counter>,
    fetch_duration: Family<UpstreamLabels, Histogram, fn() -> Histogram>,
    fetched: Family<UpstreamLabels, Counter>,
    inserted: Family<UpstreamLabels, Counter>,
    refreshed: Family<UpstreamLabels, Counter>,
    dropped: Family<ReasonLabels, Counter>,
    consecutive_failures: Family<UpstreamLabels, Gauge>,
}

fn fetch_histogram() -> Histogram {
    Histogram::new(FETCH_BUCKETS)
}

impl Default for ProviderMetrics {
    fn default() -> Self {
        Self {
            fetches: Family::default(),
            fetch_errors: Family::default(),
            fetch_duration: Family::new_with_constructor(fetch_histogram),
            fetched: Family::default(),
            inserted: Family::default(),
            refreshed: Family::default(),
            dropped: Family::default(),
            consecutive_failures: Family::default(),
        }
    }
}

fn up(upstream: &str) -> UpstreamLabels {
    UpstreamLabels {
        upstream: upstream.to_owned(),
    }
}

fn result(upstream: &str, result: &'static str) -> ResultLabels {
    ResultLabels {
        upstream: upstream.to_owned(),
        result,
    }
}

fn reason(upstream: &str, reason: &str) -> ReasonLabels {
    ReasonLabels {
        upstream: upstream.to_owned(),
        reason: reason.to_owned(),
    }
}

impl ProviderMetrics {
    /// Registers every metric under `registry` (prefix it with a sub-registry if wanted).
    pub fn register(&self, registry: &mut Registry) {
        register_all(
            registry,
            DOCS,
            [
                &self.fetches,
                &self.fetch_errors,
                &self.fetch_duration,
                &self.fetched,
                &self.inserted,
                &self.refreshed,
                &self.dropped,
                &self.consecutive_failures,
            ],
        );
    }

    /// Creates every series of `upstream` at zero, so that dashboards and alerts see
    /// them before its first fetch.
    pub(crate) fn track(&self, upstream: &str) {
        for r in ["ok", "error"] {
            let _ = self.fetches.get_or_create(&result(upstream, r));
        }
        for failure in proxy_pool_api::inventory::FetchFailure::ALL {
            if failure != proxy_pool_api::inventory::FetchFailure::Unknown {
                let _ = self
                    .fetch_errors
                    .get_or_create(&reason(upstream, failure.as_str()));
            }
        }
        let _ = self.fetch_duration.get_or_create(&up(upstream));
        let _ = self.fetched.get_or_create(&up(upstream));
        let _ = self.inserted.get_or_create(&up(upstream));
        let _ = self.refreshed.get_or_create(&up(upstream));
        let _ = self.consecutive_failures.get_or_create(&up(upstream));
    }

    /// A fetch of `upstream` ended: `ok`, or the failure kind (counted as `error`
    /// and by reason).
    pub(crate) fn fetch_result(&self, upstream: &str, kind: &str) {
        if kind == "ok" {
            self.fetches.get_or_create(&result(upstream, "ok")).inc();
        } else {
            self.fetches.get_or_create(&result(upstream, "error")).inc();
            self.fetch_errors
                .get_or_create(&reason(upstream, kind))
                .inc();
        }
    }

    /// How long the vendor of `upstream` took to answer (or fail).
    pub(crate) fn fetch_duration(&self, upstream: &str, took: Duration) {
        self.fetch_duration
            .get_or_create(&up(upstream))
            .observe(took.as_secs_f64());
    }

    pub(crate) fn add_fetched(&self, upstream: &str, n: u32) {
        self.fetched
            .get_or_create(&up(upstream))
            .inc_by(u64::from(n));
    }

    pub(crate) fn add_upserted(&self, upstream: &str, inserted: u32, refreshed: u32) {
        self.inserted
            .get_or_create(&up(upstream))
            .inc_by(u64::from(inserted));
        self.refreshed
            .get_or_create(&up(upstream))
            .inc_by(u64::from(refreshed));
    }

    pub(crate) fn add_dropped(&self, upstream: &str, why: &str, n: u32) {
        self.dropped
            .get_or_create(&reason(upstream, why))
            .inc_by(u64::from(n));
    }

    pub(crate) fn set_failures(&self, upstream: &str, n: u32) {
        self.consecutive_failures
            .get_or_create(&up(upstream))
            .set(i64::from(n));
    }

    /// Fetches of `upstream` that ended with `kind`: `ok`, `error` (every failure),
    /// or a failure reason (`unauthorized`, `timeout`, …).
    pub fn fetches(&self, upstream: &str, kind: &str) -> u64 {
        match kind {
            "ok" => self.fetches.get_or_create(&result(upstream, "ok")).get(),
            "error" => self.fetches.get_or_create(&result(upstream, "error")).get(),
            why => self
                .fetch_errors
                .get_or_create(&reason(upstream, why))
                .get(),
        }
    }

    /// Entries offered by `upstream`'s vendor.
    pub fn fetched(&self, upstream: &str) -> u64 {
        self.fetched.get_or_create(&up(upstream)).get()
    }

    /// Proxies inserted for `upstream`.
    pub fn upserted(&self, upstream: &str) -> u64 {
        self.inserted.get_or_create(&up(upstream)).get()
    }

    /// Proxies refreshed for `upstream`.
    pub fn refreshed(&self, upstream: &str) -> u64 {
        self.refreshed.get_or_create(&up(upstream)).get()
    }

    /// Entries of `upstream` dropped for `why`.
    pub fn dropped(&self, upstream: &str, why: &str) -> u64 {
        self.dropped.get_or_create(&reason(upstream, why)).get()
    }

    /// Current failure streak of `upstream`.
    pub fn consecutive_failures(&self, upstream: &str) -> i64 {
        self.consecutive_failures.get_or_create(&up(upstream)).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn exposition_has_the_documented_names_and_labels() {
        let m = ProviderMetrics::default();
        m.fetch_result("vendor-a", "ok");
        m.fetch_result("vendor-a", "timeout");
        m.fetch_duration("vendor-a", Duration::from_millis(20));
        m.add_fetched("vendor-a", 3);
        m.add_upserted("vendor-a", 2, 1);
        m.add_dropped("vendor-a", "malformed", 2);
        m.set_failures("vendor-a", 0);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "provider_fetches_total{upstream=\"vendor-a\",result=\"ok\"} 1",
            "provider_fetches_total{upstream=\"vendor-a\",result=\"error\"} 1",
            "provider_fetch_errors_total{upstream=\"vendor-a\",reason=\"timeout\"} 1",
            "provider_fetch_duration_seconds_count{upstream=\"vendor-a\"} 1",
            "provider_fetched_proxies_total{upstream=\"vendor-a\"} 3",
            "provider_upserted_proxies_total{upstream=\"vendor-a\"} 2",
            "provider_refreshed_proxies_total{upstream=\"vendor-a\"} 1",
            "provider_dropped_proxies_total{upstream=\"vendor-a\",reason=\"malformed\"} 2",
            "provider_consecutive_failures{upstream=\"vendor-a\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
