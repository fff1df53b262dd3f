//! The operator's metrics, `proxy_pool_operator_…` (the reference is the Operator table
//! of `docs/operations.md`): reconcile counts, errors and durations per kind, the
//! leader gauge, and the identity issuer's ([`IdentityMetrics`]). The `kind` label has
//! four values (the three custom resources and the controller config), every one
//! present from the start, so the label set stays bounded.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::config::CONFIG_KIND;
use crate::identity::IdentityMetrics;

/// The component name: every metric is `proxy_pool_operator_…`.
pub const COMPONENT: &str = "operator";

/// Every value of the `kind` label.
pub const KINDS: [&str; 5] = [
    "Upstream",
    "Routing",
    crate::reconcile::gateway::GROUP_KIND,
    "DistributionClient",
    CONFIG_KIND,
];

/// The `kind` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `Upstream`, `Routing`, `DistributionClient` or `ControllerConfig`.
    pub kind: &'static str,
}

type HistogramFamily = Family<KindLabel, Histogram, fn() -> Histogram>;

/// The operator's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<KindLabel, Counter>,
    errors: Family<KindLabel, Counter>,
    duration: HistogramFamily,
    leader: Gauge,
    identity: IdentityMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

impl Metrics {
    /// Registers every metric under the `proxy_pool_operator` prefix.
    pub fn new() -> Self {
        let mut registry = proxy_pool_runtime::telemetry::metrics::registry(COMPONENT);
        let reconciles = Family::<KindLabel, Counter>::default();
        let errors = Family::<KindLabel, Counter>::default();
        let duration: HistogramFamily = Family::new_with_constructor(histogram);
        for kind in KINDS {
            let label = KindLabel { kind };
            let _ = reconciles.get_or_create(&label);
            let _ = errors.get_or_create(&label);
            let _ = duration.get_or_create(&label);
        }
        let leader = Gauge::default();
        let identity = IdentityMetrics::default();
        registry.register("reconciles", "Reconciles run, by kind", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by kind",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took, by kind",
            duration.clone(),
        );
        registry.register(
            "leader",
            "Whether this replica holds the leader Lease (1) or stands by (0)",
            leader.clone(),
        );
        identity.register(&mut registry);
        Self {
            registry,
            reconciles,
            errors,
            duration,
            leader,
            identity,
        }
    }

    /// The identity issuer's metrics (pass them to the identity service).
    pub fn identity(&self) -> IdentityMetrics {
        self.identity.clone()
    }

    /// Starts timing one reconcile of `kind`.
    pub fn start(&self, kind: &'static str) -> Timer<'_> {
        Timer {
            metrics: self,
            kind,
            start: Instant::now(),
        }
    }

    /// Sets the leader gauge.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// One running reconcile.
#[derive(Debug)]
pub struct Timer<'a> {
    metrics: &'a Metrics,
    kind: &'static str,
    start: Instant,
}

impl Timer<'_> {
    /// Records the reconcile's duration and outcome.
    pub fn finish(self, ok: bool) {
        let label = KindLabel { kind: self.kind };
        self.metrics.reconciles.get_or_create(&label).inc();
        if !ok {
            self.metrics.errors.get_or_create(&label).inc();
        }
        self.metrics
            .duration
            .get_or_create(&label)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reconciled_is_listed() {
        use crate::reconcile::render::Kind;
        for kind in [Kind::Upstream, Kind::Routing, Kind::DistributionClient] {
            assert!(KINDS.contains(&kind.as_str()), "{kind:?}");
        }
    }

    #[test]
    fn names_and_types() {
        use proxy_pool_runtime::telemetry::metrics::{exported, reserved_labels_used};
        let m = Metrics::new();
        let text = m.encode();
        let names: Vec<(String, String)> = exported(&text).into_iter().collect();
        let want = [
            ("proxy_pool_operator_build_info", "gauge"),
            (
                "proxy_pool_operator_certificate_expiry_timestamp_seconds",
                "gauge",
            ),
            ("proxy_pool_operator_identity_denied_total", "counter"),
            ("proxy_pool_operator_identity_issued_total", "counter"),
            ("proxy_pool_operator_leader", "gauge"),
            (
                "proxy_pool_operator_reconcile_duration_seconds",
                "histogram",
            ),
            ("proxy_pool_operator_reconcile_errors_total", "counter"),
            ("proxy_pool_operator_reconciles_total", "counter"),
        ];
        assert_eq!(
            names,
            want.map(|(n, t)| (n.to_owned(), t.to_owned())),
            "{text}"
        );
        assert!(reserved_labels_used(&text).is_empty(), "{text}");
        assert!(
            text.contains(r#"proxy_pool_operator_reconciles_total{kind="ControllerConfig"} 0"#),
            "every kind from the start: {text}"
        );
        assert!(
            text.contains(r#"proxy_pool_operator_identity_denied_total{reason="forbidden"} 0"#),
            "every reason from the start: {text}"
        );
    }

    #[test]
    fn counts_errors_and_durations_per_kind() {
        let m = Metrics::new();
        m.start("Routing").finish(true);
        m.start("Routing").finish(false);
        m.set_leader(true);
        let text = m.encode();
        assert!(
            text.contains(r#"proxy_pool_operator_reconciles_total{kind="Routing"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"proxy_pool_operator_reconcile_errors_total{kind="Routing"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"proxy_pool_operator_reconcile_duration_seconds_count{kind="Routing"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l == "proxy_pool_operator_leader 1"),
            "{text}"
        );
    }
}
