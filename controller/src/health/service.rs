//! The health service: the planner and reducer behind the two hand-off ports the
//! control plane serves to checkers ([`TaskSource`], [`ObservationSink`]), and the
//! announcer the provider reconciler feeds. Verdicts reach the pool through
//! [`HealthStore::apply_health`] in batches, by one writer at a time.

use std::sync::Arc;

use activity_pool::model::{
    HealthResult, HealthUpdate, HealthVerdict, ProxyId, ProxyState, UpstreamId,
};
use activity_pool::options::MAX_UPDATE_BATCH;
use activity_pool::ports::{HealthStore, ProxyCatalog};
use activity_pool::{Clock, PoolError, Timestamp};
use async_trait::async_trait;
use parking_lot::Mutex;
use tracing::debug;

use proxy_pool_api::controlplane::model::{Outcome, OutcomeStage};

use super::metrics::HealthMetrics;
use super::model::FailureCode;
use super::model::{CheckTask, CheckerId, Observation, Tier};
use super::planner::{Lease, Planner, PlannerConfig, Verdict};
use super::reducer::ReducerConfig;
use crate::controlplane::{TargetExclusions, WorkerOutcome};
use crate::provider::ProxyAnnouncer;

/// Most observations one `submit` call takes.
pub const MAX_OBSERVATIONS_PER_SUBMIT: usize = 4_096;

/// Errors of the health hand-off.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The pool failed; retryable when the pool error is.
    #[error("pool: {0}")]
    Pool(#[from] PoolError),
    /// The call exceeds a limit.
    #[error("{what} exceeds the limit of {limit}")]
    TooLarge {
        /// What.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
}

/// What a `submit` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubmitReport {
    /// Tasks whose observations were applied.
    pub accepted_tasks: u32,
    /// Tasks ignored (unknown, already reported, or late).
    pub ignored_tasks: u32,
    /// Verdicts written to the pool.
    pub verdicts: u32,
}

/// Hands check tasks to checkers (called by the control plane's `CheckerControlPlane`).
#[async_trait]
pub trait TaskSource: Send + Sync {
    /// Up to `max` tasks for `checker`, limited to the `tiers` it supports; empty when
    /// nothing is due (the caller waits and asks again).
    async fn next_tasks(
        &self,
        checker: &CheckerId,
        max: usize,
        tiers: &[Tier],
    ) -> Result<Vec<CheckTask>, HealthError>;
}

/// Takes checker observations (called by the control plane's `CheckerControlPlane`).
#[async_trait]
pub trait ObservationSink: Send + Sync {
    /// Applies a batch of observations; a task's observations must arrive together.
    async fn submit(
        &self,
        checker: &CheckerId,
        observations: Vec<Observation>,
    ) -> Result<SubmitReport, HealthError>;
}

/// The planner + reducer service.
pub struct HealthService {
    /// Short critical sections only, never held across `.await`.
    planner: Mutex<Planner>,
    /// Serialises reduce-and-write so verdicts reach the pool in reduction order
    /// (a single writer, whatever the number of checkers).
    writer: tokio::sync::Mutex<()>,
    catalog: Arc<dyn ProxyCatalog>,
    store: Arc<dyn HealthStore>,
    clock: Arc<dyn Clock>,
    metrics: HealthMetrics,
}

impl std::fmt::Debug for HealthService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthService")
            .field("tracked", &self.tracked())
            .finish_non_exhaustive()
    }
}

impl HealthService {
    /// A service; fails when the reducer thresholds are inconsistent.
    pub fn new(
        planner: PlannerConfig,
        reducer: ReducerConfig,
        catalog: Arc<dyn ProxyCatalog>,
        store: Arc<dyn HealthStore>,
        clock: Arc<dyn Clock>,
        metrics: HealthMetrics,
    ) -> Result<Self, String> {
        reducer.validate()?;
        Ok(Self {
            planner: Mutex::new(Planner::new(planner, reducer)),
            writer: tokio::sync::Mutex::new(()),
            catalog,
            store,
            clock,
            metrics,
        })
    }

    /// Tracked proxies.
    pub fn tracked(&self) -> usize {
        self.planner.lock().len()
    }

    /// Gives leased tasks back without a verdict (e.g. they could not be queued); the
    /// proxies are due again at once.
    pub fn release_tasks(&self, task_ids: &[u64]) {
        let now = self.clock.now();
        let mut p = self.planner.lock();
        for t in task_ids {
            p.release(*t, now);
        }
    }

    /// Starts tracking proxies (also the [`ProxyAnnouncer`] entry point).
    pub fn track(&self, ids: &[ProxyId]) {
        let a = self.planner.lock().announce(ids);
        if a.dropped > 0 {
            self.metrics.announce_dropped(a.dropped);
        }
    }

    async fn build_tasks(&self, leases: Vec<Lease>) -> Result<Vec<CheckTask>, HealthError> {
        let ids: Vec<ProxyId> = leases.iter().map(|l| l.proxy_id.clone()).collect();
        let records = match self.catalog.records(&ids).await {
            Ok(r) => r,
            Err(err) => {
                let now = self.clock.now();
                let mut p = self.planner.lock();
                for l in &leases {
                    p.release(l.task_id, now);
                }
                return Err(err.into());
            }
        };
        let now = self.clock.now();
        let mut tasks = Vec::with_capacity(leases.len());
        let mut checking = Vec::new();
        {
            let mut p = self.planner.lock();
            for (lease, record) in leases.into_iter().zip(records) {
                let record = match record {
                    Some(r) if now < r.usable_until => r,
                    _ => {
                        p.forget(&lease.proxy_id);
                        continue;
                    }
                };
                match record.state {
                    ProxyState::Extracted | ProxyState::Removed | ProxyState::Expired => {
                        p.forget(&lease.proxy_id);
                    }
                    ProxyState::Draining => {
                        p.release(lease.task_id, now.plus(std::time::Duration::from_secs(5)))
                    }
                    state => {
                        if state == ProxyState::Fetched {
                            checking.push(lease.proxy_id.clone());
                        }
                        tasks.push(CheckTask {
                            task_id: lease.task_id,
                            proxy_id: lease.proxy_id,
                            upstream: record.upstream,
                            protocol: record.protocol,
                            host: record.host,
                            port: record.port,
                            credentials: record.credentials,
                            checks: lease.checks,
                            deadline: lease.deadline,
                        })
                    }
                }
            }
        }
        self.mark_checking(&checking).await;
        Ok(tasks)
    }

    /// FETCHED → CHECKING for proxies whose first check is handed out (visibility
    /// only; a failure here does not hold the tasks back).
    async fn mark_checking(&self, ids: &[ProxyId]) {
        for chunk in ids.chunks(MAX_UPDATE_BATCH) {
            let updates: Vec<HealthUpdate> = chunk
                .iter()
                .map(|id| HealthUpdate {
                    proxy_id: id.clone(),
                    verdict: HealthVerdict::Checking,
                    success: false,
                    latency: None,
                    failure: None,
                })
                .collect();
            if let Err(e) = self.store.apply_health(&updates).await {
                debug!(error = %e, "marking proxies CHECKING failed");
            }
        }
    }

    async fn write(&self, verdicts: Vec<Verdict>) -> Result<u32, HealthError> {
        let mut written = 0;
        for chunk in verdicts.chunks(MAX_UPDATE_BATCH) {
            let updates: Vec<HealthUpdate> = chunk
                .iter()
                .map(|v| HealthUpdate {
                    proxy_id: v.proxy_id.clone(),
                    verdict: v.verdict,
                    success: v.success,
                    latency: v.latency,
                    failure: v.failure.and_then(super::model::failure_label),
                })
                .collect();
            let results = self.store.apply_health(&updates).await?;
            let mut p = self.planner.lock();
            for (v, r) in chunk.iter().zip(results) {
                match r {
                    HealthResult::Applied(state) => {
                        written += 1;
                        self.metrics.verdict(state.as_str());
                    }
                    HealthResult::NotFound
                    | HealthResult::Ignored(
                        ProxyState::Extracted | ProxyState::Removed | ProxyState::Expired,
                    ) => {
                        p.forget(&v.proxy_id);
                    }
                    HealthResult::Ignored(_) => {}
                }
            }
        }
        Ok(written)
    }
}

#[async_trait]
impl TaskSource for HealthService {
    async fn next_tasks(
        &self,
        checker: &CheckerId,
        max: usize,
        tiers: &[Tier],
    ) -> Result<Vec<CheckTask>, HealthError> {
        let leases = self.planner.lock().lease(self.clock.now(), max, tiers);
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let tasks = self.build_tasks(leases).await?;
        debug!(checker = %checker.0, tasks = tasks.len(), "check tasks leased");
        Ok(tasks)
    }
}

#[async_trait]
impl ObservationSink for HealthService {
    async fn submit(
        &self,
        checker: &CheckerId,
        mut observations: Vec<Observation>,
    ) -> Result<SubmitReport, HealthError> {
        if observations.len() > MAX_OBSERVATIONS_PER_SUBMIT {
            return Err(HealthError::TooLarge {
                what: "observations",
                limit: MAX_OBSERVATIONS_PER_SUBMIT,
            });
        }
        for o in &observations {
            self.metrics.observation(o.tier.as_str(), o.success);
        }
        // Group by task, keeping each task's order.
        observations.sort_by_key(|o| o.task_id);
        let _writer = self.writer.lock().await;
        let now = self.clock.now();
        let mut report = SubmitReport::default();
        let mut verdicts = Vec::new();
        {
            let mut p = self.planner.lock();
            for task in observations.chunk_by(|a, b| a.task_id == b.task_id) {
                match p.complete(now, task[0].task_id, task) {
                    Some(v) => {
                        report.accepted_tasks += 1;
                        verdicts.extend(v);
                    }
                    None => report.ignored_tasks += 1,
                }
            }
        }
        if report.ignored_tasks > 0 {
            self.metrics.ignored_tasks(report.ignored_tasks);
        }
        report.verdicts = self.write(verdicts).await?;
        debug!(
            checker = %checker.0,
            accepted = report.accepted_tasks,
            ignored = report.ignored_tasks,
            verdicts = report.verdicts,
            "observations applied"
        );
        Ok(report)
    }
}

/// What a gateway outcome says about its proxy: `Some(None)` it worked, `Some(Some(code))`
/// a proxy-side failure (a refused or timed-out dial, a failed or garbled proxy
/// handshake), `None` nothing about the proxy (target-side failures, failures after the
/// tunnel was up, timeouts that may be the target's).
pub fn proxy_side(o: &Outcome) -> Option<Option<FailureCode>> {
    if o.success {
        return Some(None);
    }
    let code = o.failure_code.as_deref().unwrap_or("");
    match (o.stage, code) {
        (OutcomeStage::Dial, "upstream-timeout") => Some(Some(FailureCode::ConnectTimeout)),
        (OutcomeStage::Dial, _) => Some(Some(FailureCode::ConnectRefused)),
        (OutcomeStage::ProxyHandshake, "upstream-handshake-failed" | "upstream-io") => {
            Some(Some(FailureCode::HandshakeFailed))
        }
        (OutcomeStage::ProxyHandshake, "upstream-bad-response") => {
            Some(Some(FailureCode::BadResponse))
        }
        _ => None,
    }
}

impl HealthService {
    /// Feeds gateway outcomes to the reducer (their own weight: `outcome_suspect_after`
    /// proxy-side failures in a row make an AVAILABLE proxy SUSPECT) and writes the
    /// verdicts. Untracked proxies and outcomes that say nothing about the proxy are
    /// skipped. Returns how many verdicts were written.
    pub async fn outcomes(&self, outcomes: &[WorkerOutcome]) -> Result<u32, HealthError> {
        let _writer = self.writer.lock().await;
        let mut verdicts = Vec::new();
        {
            let now = self.clock.now();
            let mut p = self.planner.lock();
            for o in outcomes {
                let Some(failure) = proxy_side(&o.outcome) else {
                    continue;
                };
                let Ok(id) = ProxyId::new(o.outcome.proxy_id.as_str()) else {
                    continue;
                };
                if let Some(v) = p.outcome(now, &id, failure) {
                    debug!(proxy = %id, worker = %o.worker_id, "gateway outcomes: proxy SUSPECT");
                    verdicts.push(v);
                }
            }
        }
        if verdicts.is_empty() {
            return Ok(0);
        }
        self.write(verdicts).await
    }
}

impl TargetExclusions for HealthService {
    fn excluded(&self, proxy: &ProxyId) -> Vec<String> {
        self.planner.lock().excluded(proxy)
    }
}

impl ProxyAnnouncer for HealthService {
    /// Tracks the proxies with their upstream's `health` settings.
    fn announce(&self, upstream: &UpstreamId, ids: &[ProxyId], not_before: Option<Timestamp>) {
        let a = self.planner.lock().announce_held(
            upstream.as_str(),
            ids,
            not_before.unwrap_or(Timestamp(0)),
        );
        if a.dropped > 0 {
            self.metrics.announce_dropped(a.dropped);
        }
    }
}
