//! The ownership manager: gives each live worker proxies by capacity and routing
//! demand, renews their leases, drains proxies that extraction needs (on request and
//! on extraction demand), and lets a dead worker's proxies go only through lease
//! expiry. Each pass ends by publishing every live worker's snapshot.
//!
//! Everything goes through the pool's ports, and every pool write of the manager is
//! made from a pass (one place to fence when several replicas run). Its own map is a
//! cache of the live assignments: a (re)started manager first adopts the leases it
//! finds in the pool, before it assigns or publishes anything, so a restart never
//! hands a worker's proxies to anyone while that worker may still use them.
//! Passes are serialised by a `tokio::sync::Mutex` held across the pass's I/O (one
//! pass at a time is the point); the revoke lists, drain requests and extraction
//! demand sit behind `parking_lot::Mutex`es that are never held across I/O.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use activity_pool::model::{
    Assignment, Claim, ProxyId, ProxyRecord, ProxyState, UpstreamId, WorkerId, WorkerSession,
};
use activity_pool::ports::{OwnershipRepository, ProxyCatalog, RuntimeReader, SessionWriter};
use activity_pool::{Clock, PoolError, PoolResult, Timestamp};
use tokio::sync::{Notify, watch};

use super::config::ControlPlaneConfig;
use crate::demand::{Demand, DrainDemand};

mod adopt;
mod assign;
mod demand;
mod drain;
mod publish;

use assign::slots_of;
pub use demand::MAX_DEMANDS;

use super::publisher::Publisher;
use super::registry::{Registry, WorkerInfo};
pub use publish::snapshot_proxy;

/// Most pending drain requests.
const MAX_DRAIN_REQUESTS: usize = 1_024;
/// Records read per catalog call.
const RECORD_CHUNK: usize = 1_000;
/// Most proxies held back for extraction at once.
const MAX_HELD: usize = 100_000;
/// Most `expire` calls per pass.
const MAX_EXPIRE_ROUNDS: usize = 16;
/// A pass that takes this long is logged (with what it did).
const SLOW_PASS: std::time::Duration = std::time::Duration::from_secs(1);
/// Leases renewed per pass beyond the urgent ones (`OwnershipManager::renew`).
const RENEW_PER_PASS: usize = 5_000;

/// A request to take proxies away from workers so extraction can have them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainRequest {
    /// Drain this proxy (wherever it is owned).
    Proxy(ProxyId),
    /// Drain up to `count` owned proxies of `upstream`.
    Upstream {
        /// Upstream.
        upstream: UpstreamId,
        /// How many.
        count: u32,
    },
}

/// Which routings must not use a proxy: TARGET checks of those routings' targets
/// failed through it (the health service keeps this; the publisher asks).
pub trait TargetExclusions: Send + Sync {
    /// Routings excluded for `proxy`, sorted and unique (empty: none).
    fn excluded(&self, proxy: &ProxyId) -> Vec<String>;
    /// A number that changes whenever some proxy's exclusions change (the publisher
    /// then republishes every worker; without a change, only the workers whose
    /// proxies changed). The default never changes.
    fn version(&self) -> u64 {
        0
    }
}

/// What one pass did (for tests and logs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Live leases adopted from the pool (first pass only).
    pub adopted: usize,
    /// Leases released by expiry.
    pub expired: usize,
    /// New assignments.
    pub assigned: usize,
    /// Renewed leases.
    pub renewed: usize,
    /// Drains begun.
    pub drains_begun: usize,
    /// Drains completed (ownership cleared).
    pub drains_released: usize,
    /// Live workers.
    pub live_workers: usize,
}

#[derive(Clone, Debug)]
struct Owned {
    assignment: Assignment,
    /// AVAILABLE (published) at the last read of its record, until a drain attempt
    /// finds otherwise.
    available: bool,
    drain_version: Option<u64>,
    /// The record as last read (published from until the change feed names it again).
    record: ProxyRecord,
}

impl Owned {
    fn new(rec: &ProxyRecord, assignment: Assignment) -> Self {
        Self {
            assignment,
            available: rec.state == ProxyState::Available,
            drain_version: None,
            record: rec.clone(),
        }
    }

    /// Takes the record as now read.
    fn refresh(&mut self, rec: &ProxyRecord) {
        self.available = rec.state == ProxyState::Available;
        self.record.clone_from(rec);
    }
}

type Owners = HashMap<WorkerId, BTreeMap<ProxyId, Owned>>;

/// A worker whose session is current: its ID, what the registry knows of it, and its
/// session in the pool.
type Live = (WorkerId, WorkerInfo, WorkerSession);

/// What each step of a pass works on: the ownership map, the live workers, and the
/// pass's time.
struct Pass<'a> {
    owners: &'a mut Owners,
    live: &'a [Live],
    now: Timestamp,
}

/// The ports the manager uses.
#[derive(Clone)]
pub struct OwnershipPorts {
    /// Leases.
    pub ownership: Arc<dyn OwnershipRepository>,
    /// Records.
    pub catalog: Arc<dyn ProxyCatalog>,
    /// Sessions (liveness, ACKed bound).
    pub sessions: Arc<dyn SessionWriter>,
    /// Runtime reports (drain completion).
    pub runtime: Arc<dyn RuntimeReader>,
    /// Time.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for OwnershipPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnershipPorts")
    }
}

/// The ownership manager.
pub struct OwnershipManager {
    ports: OwnershipPorts,
    config: ControlPlaneConfig,
    registry: Arc<Registry>,
    publisher: Arc<Publisher>,
    owners: tokio::sync::Mutex<Owners>,
    /// The live leases of the pool were adopted (a pass does it before anything else).
    adopted: AtomicBool,
    requests: parking_lot::Mutex<VecDeque<DrainRequest>>,
    demands: parking_lot::Mutex<demand::Demands>,
    held: parking_lot::Mutex<HashMap<ProxyId, Timestamp>>,
    revoke: parking_lot::Mutex<HashMap<WorkerId, Vec<String>>>,
    released: watch::Sender<u64>,
    exclusions: OnceLock<Arc<dyn TargetExclusions>>,
    wake: Notify,
    /// Where the pool's change feed was read up to (`None`: not yet, or lost: the next
    /// publish re-reads every owned record).
    feed: parking_lot::Mutex<Option<u64>>,
    /// Workers whose owned proxies changed since their last publish.
    dirty: parking_lot::Mutex<std::collections::HashSet<WorkerId>>,
    /// The exclusions version every live worker was last published with (`None`: no
    /// publish of every worker yet).
    full_publish: parking_lot::Mutex<Option<u64>>,
}

impl std::fmt::Debug for OwnershipManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnershipManager")
            .field("adopted", &self.adopted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl OwnershipManager {
    /// A manager over `ports`.
    pub fn new(
        ports: OwnershipPorts,
        config: ControlPlaneConfig,
        registry: Arc<Registry>,
        publisher: Arc<Publisher>,
    ) -> Self {
        Self {
            ports,
            config,
            registry,
            publisher,
            owners: tokio::sync::Mutex::new(HashMap::new()),
            adopted: AtomicBool::new(false),
            requests: parking_lot::Mutex::new(VecDeque::new()),
            demands: parking_lot::Mutex::new(demand::Demands::default()),
            held: parking_lot::Mutex::new(HashMap::new()),
            revoke: parking_lot::Mutex::new(HashMap::new()),
            released: watch::channel(0).0,
            exclusions: OnceLock::new(),
            wake: Notify::new(),
            feed: parking_lot::Mutex::new(None),
            dirty: parking_lot::Mutex::new(std::collections::HashSet::new()),
            full_publish: parking_lot::Mutex::new(None),
        }
    }

    /// Sets where per-routing TARGET exclusions come from (once; later calls are
    /// ignored and return `false`).
    pub fn set_target_exclusions(&self, exclusions: Arc<dyn TargetExclusions>) -> bool {
        self.exclusions.set(exclusions).is_ok()
    }

    /// Asks for a pass now (a registration, a drain that may complete, new demand).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves when a pass was asked for.
    pub(super) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Notes that `worker`'s snapshot content changed (published by the next pass).
    fn touch(&self, worker: &WorkerId) {
        let mut d = self.dirty.lock();
        if !d.contains(worker) {
            d.insert(worker.clone());
        }
    }

    /// Whether the pool's records changed since the last publish read the change feed
    /// (a failure to tell counts as a change: the pass finds out).
    pub(super) async fn pool_changed(&self) -> bool {
        let Some(cursor) = *self.feed.lock() else {
            return true;
        };
        match self.ports.catalog.changes(Some(cursor), 1).await {
            Ok(page) => page.lost || !page.ids.is_empty(),
            Err(_) => true,
        }
    }

    /// Queues a drain; `false` when the bounded queue is full.
    pub fn request_drain(&self, request: DrainRequest) -> bool {
        let mut q = self.requests.lock();
        if q.len() >= MAX_DRAIN_REQUESTS {
            return false;
        }
        q.push_back(request);
        self.wake();
        true
    }

    /// Whether the worker has draining proxies (its next report may complete them).
    pub fn has_draining(&self, worker: &WorkerId) -> bool {
        self.revoke
            .lock()
            .get(worker)
            .is_some_and(|ids| !ids.is_empty())
    }

    /// The worker's draining proxies (sent as `revoke_proxy_ids`).
    pub fn revoked(&self, worker: &WorkerId) -> Vec<String> {
        self.revoke.lock().get(worker).cloned().unwrap_or_default()
    }

    /// Routings visible to a worker of `group`, in match order.
    pub fn routings_for(&self, group: &str) -> Vec<proxy_pool_api::controlplane::model::Routing> {
        self.config
            .routings
            .iter()
            .filter(|r| r.visible_to(group))
            .map(|r| r.routing.clone())
            .collect()
    }

    /// One assign / renew / drain / expire / publish pass. A pool failure ends the
    /// pass early; the next pass starts over from the pool's state.
    pub async fn pass(&self) -> PoolResult<PassReport> {
        let mut owners = self.owners.lock().await;
        let mut report = PassReport::default();
        let started = std::time::Instant::now();
        let result = self.pass_inner(&mut owners, &mut report).await;
        let took = started.elapsed();
        if took >= SLOW_PASS {
            tracing::info!(
                took_ms = took.as_millis() as u64,
                ?report,
                "slow ownership pass"
            );
        }
        let revoke: HashMap<WorkerId, Vec<String>> = owners
            .iter()
            .map(|(w, m)| {
                let ids = m
                    .iter()
                    .filter(|(_, o)| o.assignment.draining)
                    .map(|(id, _)| id.to_string())
                    .collect();
                (w.clone(), ids)
            })
            .collect();
        *self.revoke.lock() = revoke;
        result.map(|()| report)
    }

    async fn pass_inner(&self, owners: &mut Owners, report: &mut PassReport) -> PoolResult<()> {
        report.expired = self.expire(owners).await?;
        if !self.adopted.load(Ordering::Acquire) {
            report.adopted = self.adopt(owners).await?;
            self.adopted.store(true, Ordering::Release);
        }
        let live = self.live_workers().await?;
        report.live_workers = live.len();
        let now = self.ports.clock.now();
        let mut pass = Pass {
            owners,
            live: &live,
            now,
        };
        report.renewed = self.renew(&mut pass).await?;
        report.drains_released = self.finish_drains(&mut pass).await?;
        report.drains_begun = self.begin_drains(pass.owners).await?;
        report.drains_begun += self.drain_for_demand(&mut pass).await?;
        report.assigned = self.assign(&mut pass).await?;
        self.publish(&mut pass).await?;
        self.forget_dead(pass.owners, &live);
        Ok(())
    }

    /// Dead workers that own nothing any more leave the manager and the publisher.
    fn forget_dead(&self, owners: &mut Owners, live: &[Live]) {
        let is_live = |w: &WorkerId| live.iter().any(|(l, _, _)| l == w);
        owners.retain(|w, m| is_live(w) || !m.is_empty());
        for w in self.publisher.workers() {
            if !is_live(&w) && !owners.contains_key(&w) && self.registry.get(&w).is_none() {
                self.publisher.forget(&w);
            }
        }
    }

    async fn expire(&self, owners: &mut Owners) -> PoolResult<usize> {
        let mut released = 0;
        for _ in 0..MAX_EXPIRE_ROUNDS {
            let batch = self
                .ports
                .ownership
                .expire(self.config.ownership.expire_batch)
                .await?;
            for a in &batch.released {
                if let Some(m) = owners.get_mut(&a.worker_id)
                    && m.get(&a.proxy_id)
                        .is_some_and(|o| o.assignment.epoch == a.epoch)
                {
                    m.remove(&a.proxy_id);
                    self.touch(&a.worker_id);
                }
                tracing::info!(proxy = %a.proxy_id, worker = %a.worker_id, "lease expired; ownership released");
            }
            released += batch.released.len();
            if !batch.more {
                break;
            }
        }
        Ok(released)
    }

    async fn live_workers(&self) -> PoolResult<Vec<Live>> {
        let mut live = Vec::new();
        for (worker, info) in self.registry.workers() {
            match self.ports.sessions.session(&worker).await? {
                Some(s) if s.session_id == info.session_id => live.push((worker, info, s)),
                Some(_) => {}
                None => {
                    tracing::info!(worker = %worker, "worker session expired; its leases will lapse");
                    self.registry.remove_if(&worker, &info.session_id);
                }
            }
        }
        Ok(live)
    }

    /// Renews leases a worker at a time, `MAX_UPDATE_BATCH` claims per pool call: once
    /// a worker's earliest lease has less than `renew_before` left, all its leases
    /// (those not already at `usable_until`) are renewed together, so its lease ends
    /// line up and its snapshot changes for renewals once per renewal period, not in
    /// every pass. Workers due are taken earliest lease first, up to `RENEW_PER_PASS`
    /// leases a pass, plus every worker with a lease under a third of `renew_before`
    /// left: leases handed out together (a fleet's first pass) come due over several
    /// passes, never all in one.
    async fn renew(&self, pass: &mut Pass<'_>) -> PoolResult<usize> {
        let (owners, live, now) = (&mut *pass.owners, pass.live, pass.now);
        let cfg = &self.config.ownership;
        let urgent = cfg.renew_before / 3;
        let mut workers: Vec<(Timestamp, Vec<Claim>)> = Vec::new();
        for (worker, _, _) in live {
            let Some(m) = owners.get(worker) else {
                continue;
            };
            let renewable = || {
                m.iter()
                    .filter(|(_, o)| o.assignment.lease_expires_at < o.record.usable_until)
            };
            let Some(earliest) = renewable()
                .map(|(_, o)| o.assignment.lease_expires_at)
                .min()
            else {
                continue;
            };
            if earliest.since(now) >= cfg.renew_before {
                continue;
            }
            let claims = renewable()
                .map(|(id, o)| Claim {
                    proxy_id: id.clone(),
                    worker_id: worker.clone(),
                    epoch: o.assignment.epoch,
                })
                .collect();
            workers.push((earliest, claims));
        }
        workers.sort_by_key(|(earliest, _)| *earliest);
        let mut due: Vec<Claim> = Vec::new();
        for (earliest, claims) in workers {
            if due.len() >= RENEW_PER_PASS && earliest.since(now) >= urgent {
                break;
            }
            due.extend(claims);
        }
        let mut renewed = 0;
        for chunk in due.chunks(activity_pool::options::MAX_UPDATE_BATCH) {
            let results = self.ports.ownership.renew_many(chunk, cfg.lease).await?;
            for (claim, result) in chunk.iter().zip(results) {
                let Some(m) = owners.get_mut(&claim.worker_id) else {
                    continue;
                };
                self.touch(&claim.worker_id);
                match result {
                    Ok(a) => {
                        if let Some(o) = m.get_mut(&claim.proxy_id) {
                            o.assignment = a;
                        }
                        renewed += 1;
                    }
                    Err(PoolError::Conflict(_) | PoolError::NotFound) => {
                        m.remove(&claim.proxy_id);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(renewed)
    }
}

impl DrainDemand for OwnershipManager {
    fn request(&self, demand: Demand) -> bool {
        let now = self.ports.clock.now();
        let queued = self.demands.lock().push(demand, now);
        if queued {
            self.wake();
        }
        queued
    }

    fn released(&self) -> watch::Receiver<u64> {
        self.released.subscribe()
    }
}
