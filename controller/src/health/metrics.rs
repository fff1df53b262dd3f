//! Prometheus counters of health checking. Labels are bounded: `tier`, `result`,
//! `state`, `reason` (fixed code sets).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::metrics::register_all;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObservationLabels {
    tier: &'static str,
    result: &'static str,
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
const DOCS: [(&str, &str); 5] = [
    (
        "health_observations",
        "Checker observations by tier and result",
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

/// Health counters. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct HealthMetrics {
    observations: Family<ObservationLabels, Counter>,
    verdicts: Family<StateLabels, Counter>,
    ignored_tasks: Counter,
    announce_dropped: Counter,
    checks_dropped: Family<ReasonLabels, Counter>,
}

impl HealthMetrics {
    /// Registers every metric under `registry`.
    pub fn register(&self, registry: &mut Registry) {
        // Every reason from the start (0), so a dashboard sees the series before the
        // first drop.
        for reason in ["extracted", "removed", "gone"] {
            let _ = self.checks_dropped.get_or_create(&ReasonLabels { reason });
        }
        register_all(
            registry,
            DOCS,
            [
                &self.observations,
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
