//! Health: the reducer that turns checker observations (BASIC / EGRESS / TARGET)
//! into AVAILABLE / SUSPECT / UNHEALTHY, and the planner that decides which proxies
//! need which checks when. The control plane hands tasks to checkers and their
//! observations back through [`TaskSource`] and [`ObservationSink`]; verdicts reach
//! the pool only through `HealthStore::apply_health`, from one writer. A task starts
//! only once its proxy is marked under check in the pool (`HealthStore::begin_checks`):
//! no extraction takes a proxy a check may still go through.
//!
//! It owns thresholds, schedules and the per-proxy streaks (in memory: a controller
//! restart starts every streak afresh). It never probes anything itself and never
//! logs proxy credentials (tasks carry them to the checker, nothing prints them).

mod bridge;
mod metrics;
mod model;
mod planner;
mod reducer;
mod service;

pub use bridge::{BridgeOptions, CheckerBridge, from_wire, to_wire};
pub use metrics::HealthMetrics;
pub use model::{Check, CheckTask, CheckerId, FailureCode, Observation, Tier, verdict_updates};
pub use planner::{
    Announced, Lease, MAX_TARGETS, Planner, PlannerConfig, RoutingTargets, TargetSpec,
    UpstreamHealth, Verdict,
};
pub use reducer::{Fact, HealthState, ProxyHealth, ReducerConfig, reduce, reduce_outcome};
pub use service::{
    HealthError, HealthService, MAX_OBSERVATIONS_PER_SUBMIT, ObservationSink, SubmitReport,
    TaskSource, TaskStart, proxy_side,
};
