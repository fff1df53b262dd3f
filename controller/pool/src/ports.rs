//! The narrow ports of the activity pool. Callers depend on the one they need.
//!
//! Every method is cancellation safe in the sense that matters here: a dropped call
//! either committed completely or not at all (each is one atomic step in storage).

use async_trait::async_trait;
use std::time::Duration;

use crate::error::PoolResult;
use crate::model::{
    Assignment, ChangePage, CheckEnd, CheckMark, CheckStart, Claim, DrainAck, ExpiredAssignments,
    ExtractOutcome, ExtractRequest, FetchedBatch, HealthResult, HealthUpdate, LeasePage,
    LeaseRequest, ProxyId, ProxyRecord, PurgeReport, RemoveResult, ReportAck, RuntimeReport,
    SessionRegistration, SnapshotAck, SnapshotReject, UpstreamId, UpstreamInventory, WorkerId,
    WorkerRuntime, WorkerSession,
};

/// Provider side: puts fetched proxies into the pool and withdraws them.
#[async_trait]
pub trait Upserter: Send + Sync {
    /// Validates the batch (an invalid batch fails before touching storage), then
    /// atomically inserts / refreshes its candidates chunk by chunk.
    async fn upsert(&self, batch: FetchedBatch) -> PoolResult<crate::model::UpsertReport>;

    /// Marks live records of `upstream` REMOVED.
    async fn remove(&self, upstream: &UpstreamId, ids: &[ProxyId])
    -> PoolResult<Vec<RemoveResult>>;
}

/// The health reducer's write side, and the check marks that keep a proxy under a
/// health check from being extracted (`docs/pool.md`, "Check marks").
#[async_trait]
pub trait HealthStore: Send + Sync {
    /// Applies each update atomically; results are in input order. Check marks are
    /// left alone (a task's checks may be reported one by one: `end_checks` ends the
    /// mark once the whole task is in).
    async fn apply_health(&self, updates: &[HealthUpdate]) -> PoolResult<Vec<HealthResult>>;

    /// Marks each proxy as under a health check, atomically per entry, in input order:
    /// a live record that is not EXTRACTED or REMOVED (whatever else its state) is
    /// marked until `now + hold` (pool time), and no extraction takes it while the mark
    /// lasts; an EXTRACTED or REMOVED one is refused, a missing one `NotFound`, and
    /// then the check must not go through the proxy. A mark of another check still in
    /// force is kept (the proxy stays marked until the later of the two ends).
    async fn begin_checks(&self, starts: &[CheckStart]) -> PoolResult<Vec<CheckMark>>;

    /// Ends the marks of these checks (their results were applied, or they will not
    /// run): each ends its own check's mark, never one of another check; `true` where
    /// it did. The proxy stays marked while an earlier check's mark it superseded lasts.
    async fn end_checks(&self, ends: &[CheckEnd]) -> PoolResult<Vec<bool>>;
}

/// Exclusive, idempotent extraction.
#[async_trait]
pub trait ExtractionStore: Send + Sync {
    /// One atomic extraction (see `docs/pool.md`).
    async fn extract(&self, request: &ExtractRequest) -> PoolResult<ExtractOutcome>;
}

/// Worker leases on proxies.
#[async_trait]
pub trait OwnershipRepository: Send + Sync {
    /// Leases an AVAILABLE, unowned, usable proxy to `worker` (lease capped at
    /// `usable_until`) under a new, never reused epoch.
    async fn assign(&self, request: &LeaseRequest) -> PoolResult<Assignment>;
    /// Extends a lease; worker and epoch must match; capped at `usable_until`.
    async fn renew(&self, claim: &Claim, lease: Duration) -> PoolResult<Assignment>;
    /// [`OwnershipRepository::assign`] for up to `MAX_UPDATE_BATCH` requests in one
    /// atomic step: each request is judged alone (in input order, each under its own
    /// new epoch), and its result is in the same position of the answer. More
    /// requests are refused as invalid before anything is written.
    async fn assign_many(
        &self,
        requests: &[LeaseRequest],
    ) -> PoolResult<Vec<PoolResult<Assignment>>>;
    /// [`OwnershipRepository::renew`] for up to `MAX_UPDATE_BATCH` claims in one atomic
    /// step, each judged alone, results in input order; more are refused as invalid.
    async fn renew_many(
        &self,
        claims: &[Claim],
        lease: Duration,
    ) -> PoolResult<Vec<PoolResult<Assignment>>>;
    /// Starts draining; idempotent for the same assignment.
    async fn begin_drain(&self, claim: &Claim) -> PoolResult<Assignment>;
    /// Releases a draining assignment once `active` and `reserved` are both zero.
    async fn acknowledge_drain(&self, ack: &DrainAck) -> PoolResult<()>;
    /// The current assignment of a proxy.
    async fn get(&self, proxy: &ProxyId) -> PoolResult<Option<Assignment>>;
    /// Releases at most `limit` expired leases.
    async fn expire(&self, limit: u32) -> PoolResult<ExpiredAssignments>;
    /// One page of the live assignments, about `limit` of them, starting at `cursor`
    /// (`None`: the beginning; then the `next` of the previous page). Walking the
    /// pages until `next` is `None` returns every assignment that was live during the
    /// whole walk at least once (possibly more than once), and never one whose lease
    /// had ended or whose record was gone when its page was read. A restarted
    /// controller adopts the leases it finds this way.
    async fn leases(&self, cursor: Option<&str>, limit: u32) -> PoolResult<LeasePage>;
}

/// Worker sessions and the snapshot ACK bound.
#[async_trait]
pub trait SessionWriter: Send + Sync {
    /// Creates a session, replacing (and fencing) any earlier one of the worker.
    async fn register(&self, registration: &SessionRegistration) -> PoolResult<WorkerSession>;
    /// Records a positive ACK of (version, epoch), opens the fence, renews the session.
    async fn acknowledge(&self, ack: &SnapshotAck) -> PoolResult<WorkerSession>;
    /// Records a negative ACK: closes the runtime write fence until the next positive ACK.
    async fn reject_snapshot(&self, reject: &SnapshotReject) -> PoolResult<WorkerSession>;
    /// The live session of a worker (`None` when missing or expired).
    async fn session(&self, worker: &WorkerId) -> PoolResult<Option<WorkerSession>>;
}

/// Worker runtime reports.
#[async_trait]
pub trait ReportWriter: Send + Sync {
    /// Stores a complete sparse report (see the rules in `docs/pool.md`).
    async fn write_report(&self, report: &RuntimeReport) -> PoolResult<ReportAck>;
}

/// Reads runtime reports; missing, expired or corrupt reads as `None` (fail closed).
#[async_trait]
pub trait RuntimeReader: Send + Sync {
    /// The worker's current report.
    async fn runtime(&self, worker: &WorkerId) -> PoolResult<Option<WorkerRuntime>>;
}

/// Low-frequency inventory figures.
#[async_trait]
pub trait InventoryReader: Send + Sync {
    /// Managed and Available Slots of one upstream, scanning only its indexes;
    /// `ScanBudgetExhausted` when they exceed the budget.
    async fn inventory(&self, upstream: &UpstreamId) -> PoolResult<UpstreamInventory>;
    /// When the current pool generation began (`docs/pool.md`, "Pool generations");
    /// `None` while a new store has not had its first upsert.
    async fn generation(&self) -> PoolResult<Option<crate::clock::Timestamp>>;
}

/// Reads records (control plane, tests, admin).
#[async_trait]
pub trait ProxyCatalog: Send + Sync {
    /// Records by ID, in input order (`None` when purged or never present).
    async fn records(&self, ids: &[ProxyId]) -> PoolResult<Vec<Option<ProxyRecord>>>;
    /// Up to `limit` AVAILABLE, unowned, usable proxies of `upstream`, freshest first.
    async fn assignable(&self, upstream: &UpstreamId, limit: u32) -> PoolResult<Vec<ProxyId>>;
    /// The change feed: up to `limit` (1 to `MAX_SWEEP`) proxies whose record was
    /// written after cursor `since` (a page's `next`; `None`: start following now,
    /// which reports `lost`). The feed keeps the last `CHANGE_FEED_CAPACITY` changes;
    /// a cursor older than that, or from before a reset of the store, reports `lost`.
    /// Ownership writes that leave the record as it is (assign, renew) are not in it:
    /// their caller has their result.
    async fn changes(&self, since: Option<u64>, limit: u32) -> PoolResult<ChangePage>;
}

/// Bounded cleanup.
#[async_trait]
pub trait Maintenance: Send + Sync {
    /// Purges at most `limit` records past hard expiry (and as many expired sessions
    /// and reports); says whether more remain.
    async fn purge_expired(&self, limit: u32) -> PoolResult<PurgeReport>;
}

/// Everything a full pool implements; for composition roots and tests only. The two
/// pools ([`crate::MemoryPool`], [`crate::RedisPool`]) implement it.
pub trait ActivityPool:
    Upserter
    + HealthStore
    + ExtractionStore
    + OwnershipRepository
    + SessionWriter
    + ReportWriter
    + RuntimeReader
    + InventoryReader
    + ProxyCatalog
    + Maintenance
{
}
