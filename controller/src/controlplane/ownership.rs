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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use activity_pool::model::{
    Assignment, ProxyId, ProxyRecord, ProxyState, UpstreamId, WorkerId, WorkerSession,
};
use activity_pool::ports::{OwnershipRepository, ProxyCatalog, RuntimeReader, SessionWriter};
use activity_pool::{Clock, ConflictReason, PoolError, PoolResult, Timestamp};
use proxy_pool_api::controlplane::model::{Credentials, Protocol, Secret, SnapshotProxy};

use super::config::ControlPlaneConfig;
use super::publisher::Publisher;
use super::registry::{Registry, WorkerInfo};

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

    async fn begin_drains(&self, owners: &mut Owners) -> PoolResult<usize> {
        let requests: Vec<DrainRequest> = self.requests.lock().drain(..).collect();
        let mut targets: Vec<(WorkerId, ProxyId)> = Vec::new();
        for r in requests {
            match r {
                DrainRequest::Proxy(id) => {
                    if let Some((w, _)) = owners.iter().find(|(_, m)| m.contains_key(&id)) {
                        targets.push((w.clone(), id));
                    }
                }
                DrainRequest::Upstream { upstream, count } => {
                    let mut picked = 0;
                    for (w, m) in owners.iter() {
                        for (id, o) in m {
                            if picked >= count {
                                break;
                            }
                            if !o.assignment.draining && o.assignment.upstream == upstream {
                                targets.push((w.clone(), id.clone()));
                                picked += 1;
                            }
                        }
                    }
                }
            }
        }
        let mut begun = 0;
        for (worker, id) in targets {
            let Some(o) = owners.get_mut(&worker).and_then(|m| m.get_mut(&id)) else {
                continue;
            };
            if o.assignment.draining {
                continue;
            }
            match self
                .ports
                .ownership
                .begin_drain(&id, &worker, o.assignment.epoch)
                .await
            {
                Ok(a) => {
                    o.assignment = a;
                    o.drain_version = None;
                    begun += 1;
                    tracing::info!(proxy = %id, worker = %worker, "drain begun");
                }
                Err(e @ (PoolError::Conflict(_) | PoolError::NotFound)) => {
                    tracing::debug!(proxy = %id, worker = %worker, error = %e, "drain refused");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(begun)
    }

    /// Keeps a proxy drained for extraction out of assignment for `drain_hold`.
    fn hold(&self, id: ProxyId, now: Timestamp) {
        let mut held = self.held.lock();
        held.retain(|_, until| *until > now);
        if held.len() < MAX_HELD {
            held.insert(id, now.plus(self.config.ownership.drain_hold));
        }
    }

    fn is_held(&self, id: &ProxyId, now: Timestamp) -> bool {
        self.held.lock().get(id).is_some_and(|until| *until > now)
    }

    fn upstreams_for(&self, group: &str) -> Vec<UpstreamId> {
        let all = &self.config.ownership.upstreams;
        let mut wanted: Vec<UpstreamId> = Vec::new();
        for r in self.config.routings.iter().filter(|r| r.visible_to(group)) {
            if r.routing.upstreams.is_empty() {
                return all.clone();
            }
            for u in all {
                if r.routing.upstreams.iter().any(|n| n == u.as_str()) && !wanted.contains(u) {
                    wanted.push(u.clone());
                }
            }
        }
        if self.config.routings.is_empty() {
            return all.clone();
        }
        wanted
    }

    async fn assign(
        &self,
        owners: &mut Owners,
        live: &[(WorkerId, WorkerInfo, WorkerSession)],
        now: Timestamp,
    ) -> PoolResult<usize> {
        let cfg = &self.config.ownership;
        let mut order: Vec<(u64, &WorkerId, &WorkerInfo)> = live
            .iter()
            .map(|(w, i, _)| (slots_of(owners.get(w)), w, i))
            .collect();
        order.sort_by_key(|(s, _, _)| *s);
        let mut assigned = 0;
        for (slots, worker, info) in order {
            let mut missing = cfg.target_slots_per_worker.saturating_sub(slots);
            let upstreams = self.upstreams_for(&info.group);
            if missing == 0 || upstreams.is_empty() {
                continue;
            }
            let per_upstream = cfg.assign_batch.div_ceil(upstreams.len() as u32).max(1);
            for upstream in upstreams {
                if missing == 0 {
                    break;
                }
                let count = owners.get(worker).map_or(0, BTreeMap::len);
                if count >= cfg.max_proxies_per_worker {
                    break;
                }
                let ids = self
                    .ports
                    .catalog
                    .assignable(
                        &upstream,
                        per_upstream.saturating_add(cfg.extraction_reserve),
                    )
                    .await?;
                let ids: Vec<ProxyId> = ids
                    .into_iter()
                    .skip(cfg.extraction_reserve as usize)
                    .collect();
                if ids.is_empty() {
                    continue;
                }
                let records = self.ports.catalog.records(&ids).await?;
                for rec in records.into_iter().flatten() {
                    if missing == 0 {
                        break;
                    }
                    if rec.state != ProxyState::Available
                        || rec.owner.is_some()
                        || rec.usable_until <= now
                        || self.is_held(&rec.id, now)
                    {
                        continue;
                    }
                    match self
                        .ports
                        .ownership
                        .assign(&rec.id, worker, cfg.lease)
                        .await
                    {
                        Ok(a) => {
                            let slots = u64::from(rec.max_concurrency);
                            missing = missing.saturating_sub(slots);
                            owners.entry(worker.clone()).or_default().insert(
                                rec.id.clone(),
                                Owned {
                                    assignment: a,
                                    slots,
                                    usable_until: rec.usable_until,
                                    drain_version: None,
                                },
                            );
                            assigned += 1;
                        }
                        Err(
                            PoolError::Conflict(ConflictReason::NotAssignable)
                            | PoolError::NotFound,
                        ) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(assigned)
    }

    async fn publish(
        &self,
        owners: &mut Owners,
        live: &[(WorkerId, WorkerInfo, WorkerSession)],
        now: Timestamp,
    ) -> PoolResult<()> {
        let validity = activity_pool::clock::duration_millis(self.config.snapshot_validity);
        for (worker, info, _) in live {
            let m = owners.entry(worker.clone()).or_default();
            let ids: Vec<ProxyId> = m.keys().cloned().collect();
            let mut proxies = Vec::with_capacity(ids.len());
            let mut gone = HashSet::new();
            for chunk in ids.chunks(RECORD_CHUNK) {
                let records = self.ports.catalog.records(chunk).await?;
                for (id, rec) in chunk.iter().zip(records) {
                    let Some(o) = m.get_mut(id) else { continue };
                    match rec {
                        Some(rec)
                            if rec.owner.as_ref().is_some_and(|a| {
                                a.worker_id == *worker && a.epoch == o.assignment.epoch
                            }) && rec.expires_at > now =>
                        {
                            o.slots = u64::from(rec.max_concurrency);
                            o.usable_until = rec.usable_until;
                            if matches!(rec.state, ProxyState::Available | ProxyState::Draining) {
                                proxies.push(snapshot_proxy(&rec, &o.assignment));
                            }
                        }
                        _ => {
                            gone.insert(id.clone());
                        }
                    }
                }
            }
            for id in &gone {
                m.remove(id);
            }
            let version = self.publisher.publish(
                worker,
                self.routings_for(&info.group),
                proxies,
                now.millis(),
                validity,
                validity / 2,
            );
            for o in m.values_mut() {
                if o.assignment.draining && o.drain_version.is_none() {
                    o.drain_version = Some(version);
                }
            }
        }
        Ok(())
    }

    async fn finish_drains(
        &self,
        owners: &mut Owners,
        live: &[(WorkerId, WorkerInfo, WorkerSession)],
        now: Timestamp,
    ) -> PoolResult<usize> {
        let mut released = 0;
        for (worker, _, session) in live {
            let Some(m) = owners.get_mut(worker) else {
                continue;
            };
            let draining: Vec<(ProxyId, u64, u64)> = m
                .iter()
                .filter_map(|(id, o)| {
                    let v = o.drain_version.filter(|_| o.assignment.draining)?;
                    Some((id.clone(), o.assignment.epoch, v))
                })
                .collect();
            if draining.is_empty() {
                continue;
            }
            let Some(runtime) = self.ports.runtime.runtime(worker).await? else {
                continue;
            };
            let acked = session.acked_version.unwrap_or(0);
            for (id, epoch, drain_version) in draining {
                // The worker must hold the snapshot that marks the proxy draining, and
                // its counts must come from a report bound to it or a later one.
                if acked < drain_version || runtime.snapshot_version < drain_version {
                    continue;
                }
                let (active, reserved) = runtime
                    .entries
                    .iter()
                    .find(|e| e.proxy_id == id)
                    .map_or((0, 0), |e| (e.active, e.reserved));
                match self
                    .ports
                    .ownership
                    .acknowledge_drain(&id, worker, epoch, active, reserved)
                    .await
                {
                    Ok(()) => {
                        m.remove(&id);
                        self.hold(id.clone(), now);
                        released += 1;
                        tracing::info!(proxy = %id, worker = %worker, "drain complete; ownership cleared");
                    }
                    Err(PoolError::Conflict(ConflictReason::Busy)) => {}
                    Err(PoolError::Conflict(_) | PoolError::NotFound) => {
                        m.remove(&id);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(released)
    }
}

fn slots_of(m: Option<&BTreeMap<ProxyId, Owned>>) -> u64 {
    m.map_or(0, |m| {
        m.values()
            .filter(|o| !o.assignment.draining)
            .map(|o| o.slots)
            .sum()
    })
}

/// A pool record as a worker's snapshot entry.
pub fn snapshot_proxy(rec: &ProxyRecord, a: &Assignment) -> SnapshotProxy {
    SnapshotProxy {
        id: rec.id.to_string(),
        upstream: rec.upstream.to_string(),
        protocol: match rec.protocol {
            activity_pool::model::Protocol::Http => Protocol::Http,
            activity_pool::model::Protocol::Socks5 => Protocol::Socks5,
        },
        host: rec.host.clone(),
        port: rec.port,
        credentials: rec.credentials.as_ref().map(|c| Credentials {
            username: c.username.clone(),
            password: Secret::new(c.password.expose()),
        }),
        region: rec.region.as_ref().map(ToString::to_string),
        carrier: rec.carrier.as_ref().map(ToString::to_string),
        max_concurrency: rec.max_concurrency,
        expires_at_ms: rec.expires_at.millis(),
        usable_until_ms: rec.usable_until.millis(),
        assignment_epoch: a.epoch,
        draining: a.draining,
    }
}
