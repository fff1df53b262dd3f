//! Drains: beginning them on request, completing them when the worker reports zero,
//! and holding released proxies back for extraction.

use activity_pool::model::{Claim, DrainAck, ProxyId, WorkerId};
use activity_pool::{ConflictReason, PoolError, PoolResult, Timestamp};

use super::{DrainRequest, Live, MAX_HELD, Owned, Owners, OwnershipManager, Pass};

impl OwnershipManager {
    pub(super) async fn begin_drains(&self, owners: &mut Owners) -> PoolResult<usize> {
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
            match self.begin_drain(&worker, &id, o).await {
                Ok(()) => {
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

    /// Begins draining `id` on `worker` under its assignment's epoch; the next
    /// published snapshot gives the version the drain waits for.
    pub(super) async fn begin_drain(
        &self,
        worker: &WorkerId,
        id: &ProxyId,
        o: &mut Owned,
    ) -> PoolResult<()> {
        let claim = Claim {
            proxy_id: id.clone(),
            worker_id: worker.clone(),
            epoch: o.assignment.epoch,
        };
        o.assignment = self.ports.ownership.begin_drain(&claim).await?;
        o.drain_version = None;
        self.touch(worker);
        Ok(())
    }

    /// Keeps a proxy drained for extraction out of assignment for `drain_hold`.
    pub(super) fn hold(&self, id: ProxyId, now: Timestamp) {
        let mut held = self.held.lock();
        held.retain(|_, until| *until > now);
        if held.len() < MAX_HELD {
            held.insert(id, now.plus(self.config.ownership.drain_hold));
        }
    }

    pub(super) fn is_held(&self, id: &ProxyId, now: Timestamp) -> bool {
        self.held.lock().get(id).is_some_and(|until| *until > now)
    }

    /// Clears the ownership of every drained proxy whose worker reports it idle, and
    /// tells waiting extractions once per pass (after the last release of the pass,
    /// so drains begun for one demand reach its request together, not one by one).
    pub(super) async fn finish_drains(&self, pass: &mut Pass<'_>) -> PoolResult<usize> {
        let (owners, live, now) = (&mut *pass.owners, pass.live, pass.now);
        let mut released = 0;
        let result = self.release_drained(owners, live, now, &mut released).await;
        if released > 0 {
            self.released.send_modify(|n| *n += 1);
        }
        result.map(|()| released)
    }

    async fn release_drained(
        &self,
        owners: &mut Owners,
        live: &[Live],
        now: Timestamp,
        released: &mut usize,
    ) -> PoolResult<()> {
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
                if acked < drain_version || runtime.header.snapshot_version < drain_version {
                    continue;
                }
                let (active, reserved) = runtime
                    .entries
                    .iter()
                    .find(|e| e.proxy_id == id)
                    .map_or((0, 0), |e| (e.active, e.reserved));
                let ack = DrainAck {
                    claim: Claim {
                        proxy_id: id.clone(),
                        worker_id: worker.clone(),
                        epoch,
                    },
                    active,
                    reserved,
                };
                match self.ports.ownership.acknowledge_drain(&ack).await {
                    Ok(()) => {
                        m.remove(&id);
                        self.touch(worker);
                        self.hold(id.clone(), now);
                        *released += 1;
                        tracing::info!(proxy = %id, worker = %worker, "drain complete; ownership cleared");
                    }
                    Err(PoolError::Conflict(ConflictReason::Busy)) => {}
                    Err(PoolError::Conflict(_) | PoolError::NotFound) => {
                        m.remove(&id);
                        self.touch(worker);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}
