//! The health service: the planner and reducer behind the two hand-off ports the
//! control plane serves to checkers ([`TaskSource`], [`ObservationSink`]), and the
//! announcer the provider reconciler feeds. Verdicts reach the pool through
//! [`HealthStore::apply_health`] in batches, by one writer at a time.
//!
//! A check must never go through a proxy a client holds: before a task may start, its
//! proxy is marked under check in the pool ([`HealthService::admit`],
//! `HealthStore::begin_checks`), which fails for a proxy already extracted and keeps
//! extraction off it until the task's result is applied (`HealthStore::end_checks`)
//! or its deadline plus the lease grace has passed.

use std::sync::Arc;

use activity_pool::model::{
    CheckEnd, CheckMark, CheckStart, HealthResult, HealthUpdate, HealthVerdict, ProxyId,
    ProxyState, UpstreamId,
};
use activity_pool::options::{MAX_CHECK_HOLD, MAX_UPDATE_BATCH, MIN_CHECK_HOLD};
use activity_pool::ports::{HealthStore, ProxyCatalog};
use activity_pool::{Clock, PoolError, Timestamp};
use async_trait::async_trait;
use parking_lot::Mutex;
use tracing::debug;

use proxy_pool_api::controlplane::model::{Outcome, OutcomeStage};

use super::metrics::HealthMetrics;
use super::model::FailureCode;
use super::model::{CheckTask, CheckerId, Observation, Tier, verdict_updates};
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

/// A leased task about to start ([`HealthService::admit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStart {
    /// The planner's task ID.
    pub task_id: u64,
    /// Its proxy.
    pub proxy_id: ProxyId,
    /// Its deadline: no check of the task starts later.
    pub deadline: Timestamp,
}

impl From<&CheckTask> for TaskStart {
    fn from(t: &CheckTask) -> Self {
        Self {
            task_id: t.task_id,
            proxy_id: t.proxy_id.clone(),
            deadline: t.deadline,
        }
    }
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
    /// Added to task IDs to make the check IDs of the pool's marks: random per
    /// service, so that a mark of another controller's check (a leader before this
    /// one, whose task IDs count from 1 too) is never ended by one of ours.
    check_base: u64,
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
            check_base: rand::random(),
        })
    }

    /// The ID of a task's check in the pool's marks.
    fn check_id(&self, task_id: u64) -> u64 {
        self.check_base.wrapping_add(task_id)
    }

    /// Leases up to `max` due tasks limited to `tiers`, **without** marking their
    /// proxies: for a queue that marks each task when a checker takes it (the
    /// bridge's backend calls [`HealthService::admit`] then). A checker given these
    /// tasks directly would probe unmarked proxies; it uses [`TaskSource::next_tasks`].
    pub async fn lease_tasks(
        &self,
        max: usize,
        tiers: &[Tier],
    ) -> Result<Vec<CheckTask>, HealthError> {
        let leases = self.planner.lock().lease(self.clock.now(), max, tiers);
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        self.build_tasks(leases).await
    }

    /// Marks the proxies of tasks about to start as under check in the pool
    /// (`HealthStore::begin_checks`), each until its deadline plus the planner's lease
    /// grace (counted from now in pool time, so clock skew and a late probe stay
    /// covered): no extraction takes a proxy while a checker may go through it.
    /// Returns, in input order, whether each task may start. One whose proxy was taken
    /// first (extracted, removed, gone) must not: the planner forgets the proxy and
    /// `health_checks_dropped` counts it. On a pool error none may start, and all are
    /// given back to the planner ([`HealthService::release_tasks`]).
    pub async fn admit(&self, tasks: &[TaskStart]) -> Result<Vec<bool>, HealthError> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let marks = match self.begin_checks(tasks).await {
            Ok(marks) => marks,
            Err(e) => {
                let ids: Vec<u64> = tasks.iter().map(|t| t.task_id).collect();
                self.release_tasks(&ids);
                return Err(e);
            }
        };
        let mut p = self.planner.lock();
        Ok(tasks
            .iter()
            .zip(marks)
            .map(|(t, mark)| {
                let reason = match mark {
                    CheckMark::Marked(_) => return true,
                    CheckMark::Refused(ProxyState::Extracted) => "extracted",
                    CheckMark::Refused(_) => "removed",
                    CheckMark::NotFound => "gone",
                };
                if p.forget(&t.proxy_id) {
                    self.metrics.check_dropped(reason);
                    debug!(proxy = %t.proxy_id, reason, "check dropped: the proxy was taken first");
                }
                false
            })
            .collect())
    }

    /// Marks the proxies of `tasks` (`HealthStore::begin_checks`); one mark per task.
    async fn begin_checks(&self, tasks: &[TaskStart]) -> Result<Vec<CheckMark>, HealthError> {
        let now = self.clock.now();
        let grace = self.planner.lock().lease_grace();
        let starts: Vec<CheckStart> = tasks
            .iter()
            .map(|t| CheckStart {
                proxy_id: t.proxy_id.clone(),
                check: self.check_id(t.task_id),
                hold: (t.deadline.since(now) + grace).clamp(MIN_CHECK_HOLD, MAX_CHECK_HOLD),
            })
            .collect();
        let mut marks = Vec::with_capacity(starts.len());
        for chunk in starts.chunks(MAX_UPDATE_BATCH) {
            marks.extend(self.store.begin_checks(chunk).await?);
        }
        if marks.len() != tasks.len() {
            return Err(PoolError::Internal("check marks: wrong count".into()).into());
        }
        Ok(marks)
    }

    /// Ends the pool marks of finished tasks' checks; a failure only leaves them to end
    /// at their hold.
    async fn end_checks(&self, ends: &[CheckEnd]) {
        for chunk in ends.chunks(MAX_UPDATE_BATCH) {
            if let Err(e) = self.store.end_checks(chunk).await {
                debug!(error = %e, "ending check marks failed (they end at their hold)");
            }
        }
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
                            dial: record.dial,
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
            let updates = verdict_updates(chunk, HealthVerdict::Checking);
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
        let tasks = self.lease_tasks(max, tiers).await?;
        if tasks.is_empty() {
            return Ok(tasks);
        }
        // The checker probes these at once: mark them first.
        let starts: Vec<TaskStart> = tasks.iter().map(TaskStart::from).collect();
        let admitted = self.admit(&starts).await?;
        let tasks: Vec<CheckTask> = tasks
            .into_iter()
            .zip(admitted)
            .filter_map(|(t, ok)| ok.then_some(t))
            .collect();
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
            if let Some(took) = o.latency {
                self.metrics.check_duration(o.tier.as_str(), took);
            }
        }
        // Group by task, keeping each task's order.
        observations.sort_by_key(|o| o.task_id);
        let _writer = self.writer.lock().await;
        let now = self.clock.now();
        let mut report = SubmitReport::default();
        let mut verdicts = Vec::new();
        // Tasks this report finished with every check in: their marks end once the
        // verdicts are in. One ended early (a BASIC failed) keeps its mark until it runs
        // out: another of its checks may still be under way (the proxy is SUSPECT then
        // anyway).
        let mut ended = Vec::new();
        {
            let mut p = self.planner.lock();
            for task in observations.chunk_by(|a, b| a.task_id == b.task_id) {
                let task_id = task[0].task_id;
                let proxy = p.task_proxy(task_id).cloned();
                match p.complete(now, task_id, task) {
                    Some(v) => {
                        report.accepted_tasks += 1;
                        verdicts.extend(v);
                        if let Some(proxy_id) = proxy
                            && p.task_proxy(task_id).is_none()
                            && p.unreported(&proxy_id) == Some(0)
                        {
                            ended.push(CheckEnd {
                                proxy_id,
                                check: self.check_id(task_id),
                            });
                        }
                    }
                    None => report.ignored_tasks += 1,
                }
            }
        }
        if report.ignored_tasks > 0 {
            self.metrics.ignored_tasks(report.ignored_tasks);
        }
        report.verdicts = self.write(verdicts).await?;
        self.end_checks(&ended).await;
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

    fn version(&self) -> u64 {
        self.planner.lock().exclusions_version()
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
