//! The Redis adapter of the activity pool (production).
//!
//! Owns every Redis detail: key names (`keys.rs`), the Lua scripts (`lua/`, composed in
//! `scripts.rs`), the stored encodings (`codec.rs`) and the connection (`conn.rs`). Every
//! state change is one `EVALSHA` of a preloaded script; every script reads Redis `TIME`
//! once (or the test clock override from `ARGV`). It must never put a password, a
//! credential reference or raw Redis error text into a key, a log line or an error.

#[allow(dead_code)] // skeleton: filled in next
mod connector;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use connector::RedisConnector;

use crate::clock::Clock;
use crate::error::{PoolError, PoolResult};
use crate::model::{
    Assignment, ExpiredAssignments, ExtractOutcome, ExtractRequest, FetchedBatch, HealthResult,
    HealthUpdate, ProxyId, ProxyRecord, PurgeReport, RemoveResult, ReportAck, RuntimeReport,
    SessionId, SessionRegistration, UpsertReport, UpstreamId, UpstreamInventory, WorkerId,
    WorkerRuntime, WorkerSession,
};
use crate::options::PoolOptions;
use crate::ports::{
    ExtractionStore, HealthStore, InventoryReader, Maintenance, OwnershipRepository, ProxyCatalog,
    ReportWriter, RuntimeReader, SessionWriter, Upserter,
};

/// Options of the Redis adapter.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Pool semantics shared with every implementation.
    pub pool: PoolOptions,
    /// Bound on one Redis round trip (and on connecting); past it the call is `Unavailable`.
    pub command_timeout: Duration,
    /// Tests only: take "now" from this clock instead of Redis `TIME`.
    pub clock_override: Option<Arc<dyn Clock>>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            pool: PoolOptions::default(),
            command_timeout: Duration::from_millis(500),
            clock_override: None,
        }
    }
}

/// The activity pool on Redis. Cheap to clone.
#[derive(Clone, Debug)]
#[allow(dead_code)] // skeleton: filled in next
pub struct RedisPool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
#[allow(dead_code)] // skeleton: filled in next
struct Inner {
    connector: RedisConnector,
    options: RedisOptions,
}

fn todo_err<T>() -> PoolResult<T> {
    Err(PoolError::Unavailable("not implemented yet".into()))
}

impl RedisPool {
    /// Connects (failing with `Unavailable` when Redis cannot be reached) and preloads
    /// every script.
    pub async fn new(connector: RedisConnector, options: RedisOptions) -> PoolResult<Self> {
        Ok(Self {
            inner: Arc::new(Inner { connector, options }),
        })
    }
}

#[async_trait]
impl Upserter for RedisPool {
    async fn upsert(&self, _batch: FetchedBatch) -> PoolResult<UpsertReport> {
        todo_err()
    }
    async fn remove(
        &self,
        _upstream: &UpstreamId,
        _ids: &[ProxyId],
    ) -> PoolResult<Vec<RemoveResult>> {
        todo_err()
    }
}

#[async_trait]
impl HealthStore for RedisPool {
    async fn apply_health(&self, _updates: &[HealthUpdate]) -> PoolResult<Vec<HealthResult>> {
        todo_err()
    }
}

#[async_trait]
impl ExtractionStore for RedisPool {
    async fn extract(&self, _request: &ExtractRequest) -> PoolResult<ExtractOutcome> {
        todo_err()
    }
}

#[async_trait]
impl OwnershipRepository for RedisPool {
    async fn assign(
        &self,
        _p: &ProxyId,
        _w: &WorkerId,
        _lease: Duration,
    ) -> PoolResult<Assignment> {
        todo_err()
    }
    async fn renew(
        &self,
        _p: &ProxyId,
        _w: &WorkerId,
        _e: u64,
        _lease: Duration,
    ) -> PoolResult<Assignment> {
        todo_err()
    }
    async fn begin_drain(&self, _p: &ProxyId, _w: &WorkerId, _e: u64) -> PoolResult<Assignment> {
        todo_err()
    }
    async fn acknowledge_drain(
        &self,
        _p: &ProxyId,
        _w: &WorkerId,
        _e: u64,
        _a: u32,
        _r: u32,
    ) -> PoolResult<()> {
        todo_err()
    }
    async fn get(&self, _p: &ProxyId) -> PoolResult<Option<Assignment>> {
        todo_err()
    }
    async fn expire(&self, _limit: u32) -> PoolResult<ExpiredAssignments> {
        todo_err()
    }
}

#[async_trait]
impl SessionWriter for RedisPool {
    async fn register(&self, _r: &SessionRegistration) -> PoolResult<WorkerSession> {
        todo_err()
    }
    async fn acknowledge(
        &self,
        _w: &WorkerId,
        _s: &SessionId,
        _v: u64,
        _e: u64,
        _ttl: Duration,
    ) -> PoolResult<WorkerSession> {
        todo_err()
    }
    async fn reject_snapshot(
        &self,
        _w: &WorkerId,
        _s: &SessionId,
        _ttl: Duration,
    ) -> PoolResult<WorkerSession> {
        todo_err()
    }
    async fn session(&self, _w: &WorkerId) -> PoolResult<Option<WorkerSession>> {
        todo_err()
    }
}

#[async_trait]
impl ReportWriter for RedisPool {
    async fn write_report(&self, _report: &RuntimeReport) -> PoolResult<ReportAck> {
        todo_err()
    }
}

#[async_trait]
impl RuntimeReader for RedisPool {
    async fn runtime(&self, _w: &WorkerId) -> PoolResult<Option<WorkerRuntime>> {
        todo_err()
    }
}

#[async_trait]
impl InventoryReader for RedisPool {
    async fn inventory(&self, _u: &UpstreamId) -> PoolResult<UpstreamInventory> {
        todo_err()
    }
}

#[async_trait]
impl ProxyCatalog for RedisPool {
    async fn records(&self, _ids: &[ProxyId]) -> PoolResult<Vec<Option<ProxyRecord>>> {
        todo_err()
    }
    async fn assignable(&self, _u: &UpstreamId, _limit: u32) -> PoolResult<Vec<ProxyId>> {
        todo_err()
    }
}

#[async_trait]
impl Maintenance for RedisPool {
    async fn purge_expired(&self, _limit: u32) -> PoolResult<PurgeReport> {
        todo_err()
    }
}
