//! Prometheus metrics of health checking. Labels are bounded: `tier`, `result`,
//! `state`, `reason` (fixed code sets).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::register_all;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObservationLabels {
    tier: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabels {
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Exposition name and help text of each metric [`HealthMetrics::register`] registers,
/// in order.
const DOCS: [(&str, &str); 6] = [
    (
        "health_observations",
        "Checker observations by tier and result",
    ),
    (
        "health_check_duration_seconds",
        "Time a check took, as the checker reported it, by tier",
    ),
    (
        "health_verdicts",
        "Health verdicts applied to the pool, by resulting state",
    ),
    (
        "health_ignored_tasks",
        "Task reports ignored (unknown, duplicate or late)",
    ),
    (
        "health_announce_dropped",
        "Proxies not tracked because the planner was full",
    ),
    (
        "health_checks_dropped",
        "Check tasks not run because their proxy was taken when the check was to start \
         (reason: extracted, removed, gone)",
    ),
];

/// The tiers, as labels.
const TIERS: [&str; 3] = ["basic", "egress", "target"];

/// Buckets of the check latency, seconds.
const CHECK_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn check_histogram() -> Histogram {
    Histogram::new(CHECK_BUCKETS)
}

/// Health counters. Cheap to clone.
#[derive(Clone, Debug)]
pub struct HealthMetrics {
    observations: Family<ObservationLabels, Counter>,
    check_duration: Family<TierLabels, Histogram, fn() -> Histogram>,
    verdicts: Family<StateLabels, Counter>,
    ignored_tasks: Counter,
    announce_dropped: Counter,
    checks_dropped: Family<ReasonLabels, Counter>,
}

impl Default for HealthMetrics {
    fn default() -> Self {
        Self {
            observations: Family::default(),
            check_duration: Family::new_with_constructor(check_histogram),
            verdicts: Family::default(),
            ignored_tasks: Counter::default(),
            announce_dropped: Counter::default(),
            checks_dropped: Family::default(),
        }
    }
}

impl HealthMetrics {
    /// Registers every metric under `registry`.
    pub fn register(&self, registry: &mut Registry) {
        // Every series of a fixed label set from the start (0), so a dashboard sees it
        // before the first event.
        for reason in ["extracted", "removed", "gone"] {
            let _ = self.checks_dropped.get_or_create(&ReasonLabels { reason });
        }
        for tier in TIERS {
            for result in ["success", "failure"] {
                let _ = self
                    .observations
                    .get_or_create(&ObservationLabels { tier, result });
            }
            let _ = self.check_duration.get_or_create(&TierLabels { tier });
        }
        for state in ["AVAILABLE", "SUSPECT", "UNHEALTHY"] {
            let _ = self.verdicts.get_or_create(&StateLabels { state });
        }
        register_all(
            registry,
            DOCS,
            [
                &self.observations,
                &self.check_duration,
                &self.verdicts,
                &self.ignored_tasks,
                &self.announce_dropped,
                &self.checks_dropped,
            ],
        );
    }

    pub(crate) fn observation(&self, tier: &'static str, success: bool) {
        let result = if success { "success" } else { "failure" };
        self.observations
            .get_or_create(&ObservationLabels { tier, result })
            .inc();
    }

    /// A check of `tier` took `took` (as the checker measured it).
    pub(crate) fn check_duration(&self, tier: &'static str, took: Duration) {
        self.check_duration
            .get_or_create(&TierLabels { tier })
            .observe(took.as_secs_f64());
    }

    pub(crate) fn verdict(&self, state: &'static str) {
        self.verdicts.get_or_create(&StateLabels { state }).inc();
    }

    pub(crate) fn ignored_tasks(&self, n: u32) {
        self.ignored_tasks.inc_by(u64::from(n));
    }

    pub(crate) fn announce_dropped(&self, n: u32) {
        self.announce_dropped.inc_by(u64::from(n));
    }

    pub(crate) fn check_dropped(&self, reason: &'static str) {
        self.checks_dropped
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Check tasks not run because their proxy was taken first: `reason` is
    /// `extracted`, `removed` or `gone`.
    pub fn checks_dropped(&self, reason: &'static str) -> u64 {
        self.checks_dropped
            .get_or_create(&ReasonLabels { reason })
            .get()
    }

    /// Verdicts applied that left proxies in `state` (e.g. `AVAILABLE`).
    pub fn verdicts(&self, state: &'static str) -> u64 {
        self.verdicts.get_or_create(&StateLabels { state }).get()
    }
}
