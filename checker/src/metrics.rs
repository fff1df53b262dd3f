//! The checker's metrics, `proxy_pool_checker_…` (the reference is the Checker table of
//! `docs/operations.md`): the task loop's counters, probe durations by tier and result,
//! whether a session is registered with the controller, and the worker certificate's
//! expiry when it runs with an issued identity. Labels come from fixed sets only; no
//! proxy, task or credential ever reaches a label.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use proxy_pool_identity_client::CertificateExpiry;

use crate::model::{Observation, Tier};
use crate::runner::RunStats;

/// The component name: every metric is `proxy_pool_checker_…`.
pub const COMPONENT: &str = "checker";

/// Labels of a probe duration: the check's tier and whether it passed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    /// `basic`, `egress` or `target`.
    tier: &'static str,
    /// `ok` or `error`.
    result: &'static str,
}

const TIERS: [Tier; 3] = [Tier::Basic, Tier::Egress, Tier::Target];
const RESULTS: [&str; 2] = ["ok", "error"];

fn probe_histogram() -> Histogram {
    // 5 ms … 10.24 s: a check is bounded by its 5 s timeout and the task deadline.
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

type ProbeFamily = Family<ProbeLabels, Histogram, fn() -> Histogram>;

/// How long checks took, by tier and result. Every tier/result pair exists from the
/// start (at 0), so a rate over it is defined before the first probe.
#[derive(Clone, Debug)]
pub struct ProbeDurations {
    family: ProbeFamily,
}

impl Default for ProbeDurations {
    fn default() -> Self {
        let family: ProbeFamily = Family::new_with_constructor(probe_histogram);
        for tier in TIERS {
            for result in RESULTS {
                let _ = family.get_or_create(&ProbeLabels {
                    tier: tier.as_str(),
                    result,
                });
            }
        }
        Self { family }
    }
}

impl ProbeDurations {
    /// Records one check's duration (checks without a measured duration are skipped).
    pub fn observe(&self, observation: &Observation) {
        let Some(latency) = observation.latency else {
            return;
        };
        let labels = ProbeLabels {
            tier: observation.tier.as_str(),
            result: if observation.success { "ok" } else { "error" },
        };
        self.family
            .get_or_create(&labels)
            .observe(latency.as_secs_f64());
    }
}

/// The task loop's counters, read at scrape time.
#[derive(Debug)]
struct RunCounters(Arc<RunStats>);

impl Collector for RunCounters {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let counters: [(&str, &str, &AtomicU64); 5] = [
            (
                "tasks_received",
                "Check tasks received (leased) from the controller",
                &s.leased,
            ),
            (
                "tasks_completed",
                "Check tasks whose checks all ran; their observations are queued for the controller",
                &s.probed,
            ),
            (
                "tasks_failed",
                "Check tasks that ended without observations: cut at the end of the shutdown grace period",
                &s.cancelled,
            ),
            (
                "observations_submitted",
                "Observations the controller accepted",
                &s.submitted,
            ),
            (
                "observations_dropped",
                "Observations dropped after every submit attempt failed",
                &s.dropped,
            ),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(value.load(Ordering::Relaxed));
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        Ok(())
    }
}

/// The checker's registry and what it reads at scrape time.
pub struct Metrics {
    registry: Registry,
    registered: Arc<dyn Fn() -> bool + Send + Sync>,
    session: Gauge,
    certificate: CertificateExpiry,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers every checker metric: `registered` tells whether a session is
    /// registered now, `stats` are the task loop's counters and probe durations.
    pub fn new(registered: Arc<dyn Fn() -> bool + Send + Sync>, stats: Arc<RunStats>) -> Self {
        let mut registry = proxy_pool_runtime::telemetry::metrics::registry(COMPONENT);
        let session = Gauge::default();
        registry.register(
            "session_registered",
            "1 while a session is registered with the controller's control plane, else 0",
            session.clone(),
        );
        registry.register(
            "probe_duration_seconds",
            "Time one check of a proxy took, by tier (basic, egress, target) and result (ok, error)",
            stats.probes.family.clone(),
        );
        registry.register_collector(Box::new(RunCounters(stats)));
        let certificate = CertificateExpiry::register(&mut registry);
        Self {
            registry,
            registered,
            session,
            certificate,
        }
    }

    /// The worker certificate gauge: point it at the TLS source once there is one.
    pub fn certificate(&self) -> &CertificateExpiry {
        &self.certificate
    }

    /// The exposition (OpenMetrics text), the session gauge read now.
    pub fn encode(&self) -> String {
        self.session.set(i64::from((self.registered)()));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_runtime::telemetry::metrics::{exported, reserved_labels_used};
    use std::time::Duration;

    fn observation(tier: Tier, success: bool, latency: Option<Duration>) -> Observation {
        Observation {
            task_id: "t".into(),
            proxy_id: "p".into(),
            tier,
            routing: None,
            success,
            latency,
            failure: None,
            egress: None,
            observed_at_ms: 0,
        }
    }

    #[test]
    fn names_types_and_values() {
        let stats = Arc::new(RunStats::default());
        for (i, c) in [
            &stats.leased,
            &stats.probed,
            &stats.cancelled,
            &stats.submitted,
            &stats.dropped,
        ]
        .into_iter()
        .enumerate()
        {
            c.store(i as u64 + 1, Ordering::Relaxed);
        }
        stats.probes.observe(&observation(
            Tier::Egress,
            false,
            Some(Duration::from_millis(30)),
        ));
        stats.probes.observe(&observation(Tier::Basic, true, None));
        let metrics = Metrics::new(Arc::new(|| true), stats);
        let text = metrics.encode();
        let names = exported(&text);
        let want = [
            ("proxy_pool_checker_build_info", "gauge"),
            (
                "proxy_pool_checker_certificate_expiry_timestamp_seconds",
                "gauge",
            ),
            ("proxy_pool_checker_observations_dropped_total", "counter"),
            ("proxy_pool_checker_observations_submitted_total", "counter"),
            ("proxy_pool_checker_probe_duration_seconds", "histogram"),
            ("proxy_pool_checker_session_registered", "gauge"),
            ("proxy_pool_checker_tasks_completed_total", "counter"),
            ("proxy_pool_checker_tasks_failed_total", "counter"),
            ("proxy_pool_checker_tasks_received_total", "counter"),
        ];
        assert_eq!(
            names,
            want.iter()
                .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
                .collect(),
            "{text}"
        );
        assert!(reserved_labels_used(&text).is_empty(), "{text}");
        for line in [
            "proxy_pool_checker_session_registered 1",
            "proxy_pool_checker_tasks_received_total 1",
            "proxy_pool_checker_tasks_completed_total 2",
            "proxy_pool_checker_tasks_failed_total 3",
            "proxy_pool_checker_observations_submitted_total 4",
            "proxy_pool_checker_observations_dropped_total 5",
            r#"proxy_pool_checker_probe_duration_seconds_count{tier="egress",result="error"} 1"#,
            r#"proxy_pool_checker_probe_duration_seconds_count{tier="basic",result="ok"} 0"#,
            r#"proxy_pool_checker_probe_duration_seconds_count{tier="target",result="ok"} 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
        }
    }
}
