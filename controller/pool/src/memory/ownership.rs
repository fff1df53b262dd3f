//! Worker leases: assign, renew, drain, expire.

use std::time::Duration;

use async_trait::async_trait;

use super::MemoryPool;
use super::state::State;
use crate::clock::Timestamp;
use crate::error::{ConflictReason, PoolError, PoolResult};
use crate::model::{
    Assignment, Claim, DrainAck, ExpiredAssignments, LeasePage, LeaseRequest, ProxyId, ProxyState,
};
use crate::ports::OwnershipRepository;
use crate::validate::{check_ownership_batch, check_page_limit, check_sweep_limit};

/// The live assignment of `proxy`, matching `worker` and `epoch` with an unexpired lease.
/// The live assignment `claim` names, unexpired.
fn matching(st: &State, claim: &Claim, now: Timestamp) -> PoolResult<Assignment> {
    if st.live(&claim.proxy_id, now).is_none() {
        return Err(PoolError::NotFound);
    }
    let a = st
        .owners
        .get(&claim.proxy_id)
        .filter(|a| a.worker_id == claim.worker_id)
        .ok_or(PoolError::Conflict(ConflictReason::NotOwner))?;
    if a.epoch != claim.epoch {
        return Err(PoolError::Conflict(ConflictReason::EpochMismatch));
    }
    if a.lease_expires_at <= now {
        return Err(PoolError::Conflict(ConflictReason::LeaseExpired));
    }
    Ok(a.clone())
}

fn set_lease(st: &mut State, a: &mut Assignment, end: Timestamp) {
    st.owner_expiry
        .remove(&(a.lease_expires_at.0, a.proxy_id.clone()));
    a.lease_expires_at = end;
    st.owner_expiry.insert((end.0, a.proxy_id.clone()));
    st.owners.insert(a.proxy_id.clone(), a.clone());
}

/// Leases an AVAILABLE, unowned, usable proxy under a new epoch.
fn assign_one(st: &mut State, request: &LeaseRequest, now: Timestamp) -> PoolResult<Assignment> {
    let proxy = &request.proxy_id;
    let Some(s) = st.live(proxy, now) else {
        return Err(PoolError::NotFound);
    };
    let r = s.record.clone();
    if r.state != ProxyState::Available
        || st.owners.contains_key(proxy)
        || r.usable_until <= now
        || st.held(&r.upstream, now).is_some()
    {
        return Err(PoolError::Conflict(ConflictReason::NotAssignable));
    }
    let floor = u64::try_from(now.0).unwrap_or(0).saturating_mul(1000);
    st.epoch = (st.epoch + 1).max(floor);
    let mut a = Assignment {
        proxy_id: proxy.clone(),
        upstream: r.upstream.clone(),
        worker_id: request.worker_id.clone(),
        epoch: st.epoch,
        lease_expires_at: now.plus(request.lease).min(r.usable_until),
        draining: false,
    };
    st.unindex(&r);
    let end = a.lease_expires_at;
    set_lease(st, &mut a, end);
    st.index(&r, now);
    Ok(a)
}

/// Extends a matching lease, capped at `usable_until`.
fn renew_one(
    st: &mut State,
    claim: &Claim,
    lease: Duration,
    now: Timestamp,
) -> PoolResult<Assignment> {
    let mut a = matching(st, claim, now)?;
    let usable_until = st
        .live(&claim.proxy_id, now)
        .map(|s| s.record.usable_until)
        .unwrap_or(now);
    set_lease(st, &mut a, now.plus(lease).min(usable_until));
    Ok(a)
}

#[async_trait]
impl OwnershipRepository for MemoryPool {
    async fn assign(&self, request: &LeaseRequest) -> PoolResult<Assignment> {
        let (mut st, now) = self.locked();
        st.purge_expired(now, self.options.opportunistic_purge);
        assign_one(&mut st, request, now)
    }

    async fn renew(&self, claim: &Claim, lease: Duration) -> PoolResult<Assignment> {
        let (mut st, now) = self.locked();
        renew_one(&mut st, claim, lease, now)
    }

    async fn assign_many(
        &self,
        requests: &[LeaseRequest],
    ) -> PoolResult<Vec<PoolResult<Assignment>>> {
        check_ownership_batch(requests.len())?;
        let (mut st, now) = self.locked();
        st.purge_expired(now, self.options.opportunistic_purge);
        Ok(requests
            .iter()
            .map(|r| assign_one(&mut st, r, now))
            .collect())
    }

    async fn renew_many(
        &self,
        claims: &[Claim],
        lease: Duration,
    ) -> PoolResult<Vec<PoolResult<Assignment>>> {
        check_ownership_batch(claims.len())?;
        let (mut st, now) = self.locked();
        Ok(claims
            .iter()
            .map(|c| renew_one(&mut st, c, lease, now))
            .collect())
    }

    async fn begin_drain(&self, claim: &Claim) -> PoolResult<Assignment> {
        let (mut st, now) = self.locked();
        let mut a = matching(&st, claim, now)?;
        if a.draining {
            return Ok(a);
        }
        a.draining = true;
        let proxy = &claim.proxy_id;
        st.owners.insert(proxy.clone(), a.clone());
        st.update(proxy, now, |r| r.state = ProxyState::Draining);
        Ok(a)
    }

    async fn acknowledge_drain(&self, ack: &DrainAck) -> PoolResult<()> {
        let (mut st, now) = self.locked();
        let a = matching(&st, &ack.claim, now)?;
        if !a.draining {
            return Err(PoolError::Conflict(ConflictReason::NotDraining));
        }
        if ack.active > 0 || ack.reserved > 0 {
            return Err(PoolError::Conflict(ConflictReason::Busy));
        }
        st.release(&ack.claim.proxy_id, now);
        Ok(())
    }

    async fn get(&self, proxy: &ProxyId) -> PoolResult<Option<Assignment>> {
        Ok(self.read(|st, now| {
            st.live(proxy, now)
                .and_then(|_| st.owners.get(proxy).cloned())
        }))
    }

    async fn expire(&self, limit: u32) -> PoolResult<ExpiredAssignments> {
        check_sweep_limit(limit)?;
        let (mut st, now) = self.locked();
        let due: Vec<ProxyId> = st
            .owner_expiry
            .iter()
            .take_while(|(t, _)| *t <= now.0)
            .take(limit as usize)
            .map(|(_, id)| id.clone())
            .collect();
        let mut released = Vec::with_capacity(due.len());
        for id in &due {
            if let Some(a) = st.release(id, now) {
                released.push(a);
            }
        }
        let more = st.owner_expiry.first().is_some_and(|(t, _)| *t <= now.0);
        Ok(ExpiredAssignments { released, more })
    }

    async fn leases(&self, cursor: Option<&str>, limit: u32) -> PoolResult<LeasePage> {
        check_page_limit(limit)?;
        if cursor.is_some_and(|c| ProxyId::new(c).is_err()) {
            return Err(PoolError::invalid("cursor", "not a cursor of this pool"));
        }
        let (st, now) = self.locked();
        // Pages in proxy ID order; the cursor is the last ID of the previous page.
        let mut ids: Vec<&ProxyId> = st
            .owners
            .keys()
            .filter(|id| cursor.is_none_or(|c| id.as_str() > c))
            .collect();
        ids.sort();
        let more = ids.len() > limit as usize;
        ids.truncate(limit as usize);
        let next = more.then(|| ids.last().map(|id| id.to_string())).flatten();
        let leases = ids
            .into_iter()
            .filter(|id| st.live(id, now).is_some())
            .filter_map(|id| st.owners.get(id))
            .filter(|a| a.lease_expires_at > now)
            .cloned()
            .collect();
        Ok(LeasePage { leases, next })
    }
}
