//! Prometheus counters of the provider reconcilers. Labels are bounded: `upstream`
//! (from configuration) and `reason` / `result` (fixed code sets).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::register_all;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    upstream: String,
    reason: String,
}

/// Exposition name and help text of each metric [`ProviderMetrics::register`]
/// registers, in order.
const DOCS: [(&str, &str); 6] = [
    (
        "provider_fetches",
        "Vendor fetches by result (ok or an error kind)",
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

/// Counters shared by every reconciler of a controller. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ProviderMetrics {
    fetches: Family<ReasonLabels, Counter>,
    fetched: Family<UpstreamLabels, Counter>,
    inserted: Family<UpstreamLabels, Counter>,
    refreshed: Family<UpstreamLabels, Counter>,
    dropped: Family<ReasonLabels, Counter>,
    consecutive_failures: Family<UpstreamLabels, Gauge>,
}

fn up(upstream: &str) -> UpstreamLabels {
    UpstreamLabels {
        upstream: upstream.to_owned(),
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
                &self.fetched,
                &self.inserted,
                &self.refreshed,
                &self.dropped,
                &self.consecutive_failures,
            ],
        );
    }

    pub(crate) fn fetch_result(&self, upstream: &str, result: &str) {
        self.fetches.get_or_create(&reason(upstream, result)).inc();
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

    /// Fetches of `upstream` with `result` (`ok` or an error kind).
    pub fn fetches(&self, upstream: &str, result: &str) -> u64 {
        self.fetches.get_or_create(&reason(upstream, result)).get()
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
        m.add_fetched("vendor-a", 3);
        m.add_upserted("vendor-a", 2, 1);
        m.add_dropped("vendor-a", "malformed", 2);
        m.set_failures("vendor-a", 0);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "provider_fetches_total{upstream=\"vendor-a\",reason=\"ok\"} 1",
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
