//! The ownership manager: gives each live worker proxies by capacity and routing
//! demand, renews their leases, drains proxies that extraction needs, and lets a dead
//! worker's proxies go only through lease expiry. Each pass ends by publishing every
//! live worker's snapshot.
//!
//! Everything goes through the pool's ports; the manager's own map is a cache of the
//! assignments it made (after a controller restart, unknown leases simply expire).
//! Passes are serialised by a `tokio::sync::Mutex` held across the pass's I/O (one
//! pass at a time is the point); the revoke lists read by `ReportRuntime` sit behind a
//! separate `parking_lot::Mutex` that is never held across I/O.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use activity_pool::model::{Assignment, ProxyId, UpstreamId, WorkerId, WorkerSession};
use activity_pool::ports::{OwnershipRepository, ProxyCatalog, RuntimeReader, SessionWriter};
use activity_pool::{Clock, PoolError, PoolResult, Timestamp};

use super::config::ControlPlaneConfig;

mod assign;
mod drain;
mod publish;

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

/// What one pass did (for tests and logs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
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
    slots: u64,
    usable_until: Timestamp,
    drain_version: Option<u64>,
}

type Owners = HashMap<WorkerId, BTreeMap<ProxyId, Owned>>;

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
#[derive(Debug)]
pub struct OwnershipManager {
    ports: OwnershipPorts,
    config: ControlPlaneConfig,
    registry: Arc<Registry>,
    publisher: Arc<Publisher>,
    owners: tokio::sync::Mutex<Owners>,
    requests: parking_lot::Mutex<VecDeque<DrainRequest>>,
    held: parking_lot::Mutex<HashMap<ProxyId, Timestamp>>,
    revoke: parking_lot::Mutex<HashMap<WorkerId, Vec<String>>>,
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
            requests: parking_lot::Mutex::new(VecDeque::new()),
            held: parking_lot::Mutex::new(HashMap::new()),
            revoke: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Queues a drain; `false` when the bounded queue is full.
    pub fn request_drain(&self, request: DrainRequest) -> bool {
        let mut q = self.requests.lock();
        if q.len() >= MAX_DRAIN_REQUESTS {
            return false;
        }
        q.push_back(request);
        true
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
        let result = self.pass_inner(&mut owners, &mut report).await;
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
        let live = self.live_workers().await?;
        report.live_workers = live.len();
        let now = self.ports.clock.now();
        report.renewed = self.renew(owners, &live, now).await?;
        report.drains_released = self.finish_drains(owners, &live, now).await?;
        report.drains_begun = self.begin_drains(owners).await?;
        report.assigned = self.assign(owners, &live, now).await?;
        self.publish(owners, &live, now).await?;
        self.forget_dead(owners, &live);
        Ok(())
    }

    /// Dead workers that own nothing any more leave the manager and the publisher.
    fn forget_dead(&self, owners: &mut Owners, live: &[(WorkerId, WorkerInfo, WorkerSession)]) {
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

    async fn live_workers(&self) -> PoolResult<Vec<(WorkerId, WorkerInfo, WorkerSession)>> {
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

    async fn renew(
        &self,
        owners: &mut Owners,
        live: &[(WorkerId, WorkerInfo, WorkerSession)],
        now: Timestamp,
    ) -> PoolResult<usize> {
        let cfg = &self.config.ownership;
        let mut renewed = 0;
        for (worker, _, _) in live {
            let Some(m) = owners.get_mut(worker) else {
                continue;
            };
            let due: Vec<ProxyId> = m
                .iter()
                .filter(|(_, o)| {
                    o.assignment.lease_expires_at < o.usable_until
                        && o.assignment.lease_expires_at.since(now) < cfg.renew_before
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in due {
                let Some(epoch) = m.get(&id).map(|o| o.assignment.epoch) else {
                    continue;
                };
                match self
                    .ports
                    .ownership
                    .renew(&id, worker, epoch, cfg.lease)
                    .await
                {
                    Ok(a) => {
                        if let Some(o) = m.get_mut(&id) {
                            o.assignment = a;
                        }
                        renewed += 1;
                    }
                    Err(PoolError::Conflict(_) | PoolError::NotFound) => {
                        m.remove(&id);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(renewed)
    }
}
