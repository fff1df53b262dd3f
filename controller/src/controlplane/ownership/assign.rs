//! Assignment by capacity and routing demand.

use std::collections::BTreeMap;

use activity_pool::model::{LeaseRequest, ProxyId, ProxyRecord, ProxyState, UpstreamId, WorkerId};
use activity_pool::{ConflictReason, PoolError, PoolResult};

use super::{Owned, OwnershipManager, Pass};
use crate::controlplane::registry::WorkerInfo;

impl OwnershipManager {
    pub(super) fn upstreams_for(&self, group: &str) -> Vec<UpstreamId> {
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

    pub(super) async fn assign(&self, pass: &mut Pass<'_>) -> PoolResult<usize> {
        let (owners, live, now) = (&mut *pass.owners, pass.live, pass.now);
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
                // The freshest proxies stay for extraction: the configured reserve
                // plus what unmet extraction demand still wants.
                let reserve = cfg
                    .extraction_reserve
                    .saturating_add(self.demand_reserve(upstream.as_str(), now));
                let limit = per_upstream
                    .saturating_add(reserve)
                    .min(activity_pool::options::MAX_SWEEP);
                let ids = self.ports.catalog.assignable(&upstream, limit).await?;
                let ids: Vec<ProxyId> = ids.into_iter().skip(reserve as usize).collect();
                if ids.is_empty() {
                    continue;
                }
                let records = self.ports.catalog.records(&ids).await?;
                // The candidates, until their slots cover what is missing; leased in
                // one pool call (each judged alone), so a pass costs a few calls per
                // worker, not one per proxy.
                let mut wanted = 0u64;
                let candidates: Vec<ProxyRecord> = records
                    .into_iter()
                    .flatten()
                    .filter(|rec| {
                        rec.state == ProxyState::Available
                            && rec.owner.is_none()
                            && rec.usable_until > now
                            && !self.is_held(&rec.id, now)
                    })
                    .take_while(|rec| {
                        let more = wanted < missing;
                        wanted = wanted.saturating_add(u64::from(rec.max_concurrency));
                        more
                    })
                    .take(activity_pool::options::MAX_UPDATE_BATCH)
                    .collect();
                if candidates.is_empty() {
                    continue;
                }
                let requests: Vec<LeaseRequest> = candidates
                    .iter()
                    .map(|rec| LeaseRequest {
                        proxy_id: rec.id.clone(),
                        worker_id: worker.clone(),
                        lease: cfg.lease,
                    })
                    .collect();
                let results = self.ports.ownership.assign_many(&requests).await?;
                for (rec, result) in candidates.into_iter().zip(results) {
                    match result {
                        Ok(a) => {
                            self.touch(worker);
                            missing = missing.saturating_sub(u64::from(rec.max_concurrency));
                            owners
                                .entry(worker.clone())
                                .or_default()
                                .insert(rec.id.clone(), Owned::new(&rec, a));
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
}

pub(super) fn slots_of(m: Option<&BTreeMap<ProxyId, Owned>>) -> u64 {
    m.map_or(0, |m| {
        m.values()
            .filter(|o| !o.assignment.draining)
            .map(|o| u64::from(o.record.max_concurrency))
            .sum()
    })
}
