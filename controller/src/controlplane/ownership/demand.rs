//! Drain on demand: an extraction that found too few unowned proxies records a
//! [`Demand`]; each pass drains gateway-owned proxies that match it — at most
//! `drain_batch` per pass, each time from the worker that holds the most capacity,
//! its least loaded proxy first — and, while a demand is unmet, keeps that many
//! proxies of its upstreams back from assignment.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use activity_pool::model::{Filters, ProxyId, WorkerId};
use activity_pool::{ConflictReason, PoolError, PoolResult, Timestamp};

use super::{Live, Owned, Owners, OwnershipManager, Pass, slots_of};
use crate::demand::Demand;

/// Most demands waiting at once; more are dropped (the request still gets its answer).
pub const MAX_DEMANDS: usize = 1_024;
/// How long a demand lasts (a client that gave up is not served forever).
const DEMAND_TTL: Duration = Duration::from_secs(15);
/// Life a drained proxy must have beyond the demand's `min_remaining_ttl`: the drain
/// itself takes a moment.
const DRAIN_SLACK: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Pending {
    demand: Demand,
    remaining: u32,
    until: Timestamp,
}

/// Unmet extraction demand, oldest first.
#[derive(Debug, Default)]
pub(super) struct Demands {
    queue: VecDeque<Pending>,
}

impl Demands {
    /// Queues a demand; `false` when the queue is full.
    pub(super) fn push(&mut self, demand: Demand, now: Timestamp) -> bool {
        self.queue.retain(|p| p.until > now && p.remaining > 0);
        if self.queue.len() >= MAX_DEMANDS || demand.count == 0 {
            return false;
        }
        self.queue.push_back(Pending {
            remaining: demand.count,
            demand,
            until: now.plus(DEMAND_TTL),
        });
        true
    }

    /// Proxies of `upstream` unmet demand may still take.
    pub(super) fn wanted(&self, upstream: &str, now: Timestamp) -> u32 {
        self.queue
            .iter()
            .filter(|p| p.until > now && admits_upstream(&p.demand.filters, upstream))
            .fold(0u32, |n, p| n.saturating_add(p.remaining))
    }
}

fn admits_upstream(f: &Filters, upstream: &str) -> bool {
    f.upstreams.is_empty() || f.upstreams.iter().any(|u| u.as_str() == upstream)
}

/// Whether an owned proxy may be drained for `demand`.
fn matches(o: &Owned, demand: &Demand, now: Timestamp) -> bool {
    !o.assignment.draining
        && o.available
        && demand.filters.admits(
            &o.assignment.upstream,
            o.record.dial.protocol,
            &o.record.labels,
        )
        && o.record.usable_until > now.plus(DRAIN_SLACK)
        && o.record.expires_at.since(now) >= demand.min_remaining_ttl + DRAIN_SLACK
}

impl OwnershipManager {
    /// Begins drains for the oldest unmet demands; returns how many began.
    pub(super) async fn drain_for_demand(&self, pass: &mut Pass<'_>) -> PoolResult<usize> {
        let (owners, live, now) = (&mut *pass.owners, pass.live, pass.now);
        let mut queue = {
            let mut d = self.demands.lock();
            d.queue.retain(|p| p.until > now && p.remaining > 0);
            if d.queue.is_empty() {
                return Ok(0);
            }
            std::mem::take(&mut d.queue)
        };
        let result = self.drain_queue(owners, live, &mut queue, now).await;
        // Put back what is left, ahead of demand that arrived meanwhile.
        let mut d = self.demands.lock();
        queue.retain(|p| p.remaining > 0);
        while let Some(p) = queue.pop_back() {
            d.queue.push_front(p);
        }
        while d.queue.len() > MAX_DEMANDS {
            d.queue.pop_back();
        }
        result
    }

    async fn drain_queue(
        &self,
        owners: &mut Owners,
        live: &[Live],
        queue: &mut VecDeque<Pending>,
        now: Timestamp,
    ) -> PoolResult<usize> {
        let loads = self.loads(live).await?;
        let load =
            |w: &WorkerId, id: &ProxyId| loads.get(w).and_then(|m| m.get(id)).copied().unwrap_or(0);
        let mut budget = self.config.ownership.drain_batch;
        let mut begun = 0;
        for pending in queue.iter_mut() {
            while pending.remaining > 0 && budget > 0 {
                // The worker with the most capacity left that holds a match, and its
                // least loaded match (the longest-lived among equals).
                let pick = owners
                    .iter()
                    .filter(|(w, _)| live.iter().any(|(l, _, _)| l == *w))
                    .filter_map(|(w, m)| {
                        let best = m
                            .iter()
                            .filter(|(_, o)| matches(o, &pending.demand, now))
                            .min_by_key(|(id, o)| {
                                (load(w, id), std::cmp::Reverse(o.record.expires_at))
                            })?;
                        Some((slots_of(Some(m)), w.clone(), best.0.clone()))
                    })
                    .max_by_key(|(slots, _, _)| *slots);
                let Some((_, worker, id)) = pick else {
                    break;
                };
                budget -= 1;
                let Some(o) = owners.get_mut(&worker).and_then(|m| m.get_mut(&id)) else {
                    break;
                };
                match self.begin_drain(&worker, &id, o).await {
                    Ok(()) => {
                        pending.remaining -= 1;
                        begun += 1;
                        tracing::debug!(proxy = %id, worker = %worker, "drain begun for extraction");
                    }
                    Err(
                        PoolError::Conflict(
                            ConflictReason::NotOwner
                            | ConflictReason::EpochMismatch
                            | ConflictReason::LeaseExpired,
                        )
                        | PoolError::NotFound,
                    ) => {
                        // Not ours any more: forget it and try another.
                        if let Some(m) = owners.get_mut(&worker) {
                            m.remove(&id);
                        }
                    }
                    Err(PoolError::Conflict(_)) => o.available = false,
                    Err(e) => return Err(e),
                }
            }
        }
        if begun > 0 {
            tracing::info!(drains = begun, "drains begun for extraction demand");
        }
        Ok(begun)
    }

    /// Active + Reserved per proxy from each live worker's runtime report.
    async fn loads(&self, live: &[Live]) -> PoolResult<HashMap<WorkerId, HashMap<ProxyId, u32>>> {
        let mut out = HashMap::new();
        for (w, _, _) in live {
            if let Some(rt) = self.ports.runtime.runtime(w).await? {
                out.insert(
                    w.clone(),
                    rt.entries
                        .iter()
                        .map(|e| (e.proxy_id.clone(), e.active.saturating_add(e.reserved)))
                        .collect(),
                );
            }
        }
        Ok(out)
    }

    /// Proxies of `upstream` kept back from assignment for unmet demand.
    pub(super) fn demand_reserve(&self, upstream: &str, now: Timestamp) -> u32 {
        self.demands.lock().wanted(upstream, now)
    }
}
