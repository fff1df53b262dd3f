//! Provider upsert, removal, health and catalog reads.

use async_trait::async_trait;

use super::MemoryPool;
use super::extract::merged;
use super::state::{
    Mark, State, Stored, StoredResult, first_due, purge_due_workers, upstream_combos,
};
use crate::clock::Timestamp;
use crate::error::PoolResult;
use crate::model::{
    ChangePage, CheckEnd, CheckMark, CheckStart, DropReason, HealthResult, HealthUpdate, ProxyId,
    ProxyRecord, ProxyState, PurgeReport, RemoveResult, UpsertReport, UpstreamId,
};
use crate::options::UPSERT_CHUNK;
use crate::ports::{HealthStore, Maintenance, ProxyCatalog, Upserter};
use crate::validate::{
    PreparedBatch, PreparedCandidate, check_check_ends, check_check_starts, check_health_batch,
    check_id_batch, check_page_limit, check_sweep_limit, key_digest, prepare_batch,
};

impl MemoryPool {
    /// Answers each of `items` with `one`, in order, all in one atomic step (after an
    /// opportunistic purge when `purge`).
    fn per_item<T, R>(
        &self,
        items: &[T],
        purge: bool,
        mut one: impl FnMut(&mut State, Timestamp, &T) -> R,
    ) -> Vec<R> {
        let (mut st, now) = self.locked();
        if purge {
            st.purge_expired(now, self.options.opportunistic_purge);
        }
        items.iter().map(|item| one(&mut st, now, item)).collect()
    }
}

fn drop(report: &mut UpsertReport, reason: DropReason) {
    *report.dropped.entry(reason).or_default() += 1;
}

fn upsert_one(
    st: &mut State,
    batch: &PreparedBatch,
    c: &PreparedCandidate,
    now: Timestamp,
    report: &mut UpsertReport,
) {
    let upstream = &batch.batch.upstream;
    let id = &c.candidate.id;
    if let Some(other) = st.unique.get(&c.unique).cloned()
        && &other != id
    {
        {
            match st.live(&other, now) {
                Some(o) if &o.record.upstream != upstream => {
                    return drop(report, DropReason::IncumbentOtherUpstream);
                }
                Some(_) => return drop(report, DropReason::IdConflict),
                None => st.purge(&other),
            }
        }
    }
    if st.records.contains_key(id) && st.live(id, now).is_none() {
        st.purge(id);
    }
    let expires_at = now.plus(c.candidate.ttl);
    let usable_until = expires_at.minus(batch.batch.safety_margin);
    if let Some(existing) = st.records.get(id) {
        let r = &existing.record;
        let reason = if existing.unique != c.unique {
            Some(DropReason::IdConflict)
        } else if &r.upstream != upstream {
            Some(DropReason::IncumbentOtherUpstream)
        } else if r.state == ProxyState::Extracted {
            Some(DropReason::AlreadyExtracted)
        } else if r.state == ProxyState::Removed {
            Some(DropReason::AlreadyRemoved)
        } else {
            None
        };
        if let Some(reason) = reason {
            return drop(report, reason);
        }
        let cand = &c.candidate;
        st.update(id, now, |r| {
            r.expires_at = expires_at;
            r.usable_until = usable_until;
            r.dial.credentials = cand.dial.credentials.clone();
            r.labels = cand.labels.clone();
            r.max_concurrency = cand.max_concurrency;
        });
        report.refreshed += 1;
        return;
    }
    let inventory = st.inventory.get(upstream).copied().unwrap_or(0);
    if inventory >= i64::from(batch.batch.max_size.get()) {
        return drop(report, DropReason::PoolFull);
    }
    let cand = &c.candidate;
    let record = ProxyRecord {
        id: id.clone(),
        upstream: upstream.clone(),
        dial: cand.dial.clone(),
        labels: cand.labels.clone(),
        state: ProxyState::Fetched,
        health: Default::default(),
        fetched_at: now,
        expires_at,
        usable_until,
        max_concurrency: cand.max_concurrency,
        extracted_at: None,
        owner: None,
    };
    st.count(upstream, ProxyState::Fetched, 1);
    st.expiry.insert((expires_at.0, id.clone()));
    st.unique.insert(c.unique.clone(), id.clone());
    st.records.insert(
        id.clone(),
        Stored {
            record,
            unique: c.unique.clone(),
        },
    );
    st.changed(id);
    report.inserted += 1;
}

#[async_trait]
impl Upserter for MemoryPool {
    async fn upsert(&self, batch: crate::model::FetchedBatch) -> PoolResult<UpsertReport> {
        let prepared = prepare_batch(batch, &self.options)?;
        let mut total = UpsertReport {
            dropped: prepared.dropped.clone(),
            ..Default::default()
        };
        for (i, chunk) in prepared.candidates.chunks(UPSERT_CHUNK).enumerate() {
            let op_key = format!(
                "op:{}",
                key_digest(&[
                    "upsert",
                    prepared.batch.operation_id.as_str(),
                    &i.to_string()
                ])
            );
            let (mut st, now) = self.locked();
            if let Some(StoredResult::Upsert(stored)) = st.result(&op_key, now) {
                total.merge(&stored.clone());
                continue;
            }
            st.purge_expired(now, self.options.opportunistic_purge);
            let mut report = UpsertReport::default();
            // A new store's generation begins at its first upsert.
            let start = match st.generation {
                Some(start) => start,
                None => {
                    st.generation = Some(now);
                    report.generation_started = Some(now);
                    now
                }
            };
            let held = start.plus(prepared.batch.quarantine);
            st.held.insert(prepared.batch.upstream.clone(), held);
            report.held_until = (now < held).then_some(held);
            for c in chunk {
                upsert_one(&mut st, &prepared, c, now, &mut report);
            }
            let expires = now.plus(self.options.operation_ttl);
            st.store_result(op_key, expires, now, StoredResult::Upsert(report.clone()));
            total.merge(&report);
        }
        Ok(total)
    }

    async fn remove(
        &self,
        upstream: &UpstreamId,
        ids: &[ProxyId],
    ) -> PoolResult<Vec<RemoveResult>> {
        check_id_batch(ids)?;
        Ok(self.per_item(ids, true, |st, now, id| {
            let Some(s) = st.live(id, now).filter(|s| &s.record.upstream == upstream) else {
                return RemoveResult::NotFound;
            };
            if s.record.state.is_final() {
                return RemoveResult::Ignored;
            }
            let r = s.record.clone();
            st.unindex(&r);
            if let Some(a) = st.owners.remove(id) {
                st.owner_expiry.remove(&(a.lease_expires_at.0, id.clone()));
            }
            st.update(id, now, |r| r.state = ProxyState::Removed);
            RemoveResult::Removed
        }))
    }
}

#[async_trait]
impl HealthStore for MemoryPool {
    async fn apply_health(&self, updates: &[HealthUpdate]) -> PoolResult<Vec<HealthResult>> {
        check_health_batch(updates)?;
        Ok(self.per_item(updates, true, |st, now, u| {
            let Some(state) = st.live_state(&u.proxy_id, now) else {
                return HealthResult::NotFound;
            };
            if state == ProxyState::Draining || state.is_final() {
                return HealthResult::Ignored(state);
            }
            st.update(&u.proxy_id, now, |r| {
                r.state = u.verdict.state();
                r.health.last_check_at = Some(now);
                if u.success {
                    r.health.last_success_at = Some(now);
                }
                if let Some(l) = u.latency {
                    r.health.latency_ms = Some(u64::try_from(l.as_millis()).unwrap_or(u64::MAX));
                }
                r.health.failure = u.failure.clone();
            });
            HealthResult::Applied(u.verdict.state())
        }))
    }

    async fn begin_checks(&self, starts: &[CheckStart]) -> PoolResult<Vec<CheckMark>> {
        check_check_starts(starts)?;
        Ok(self.per_item(starts, false, |st, now, s| {
            let Some(state) = st.live_state(&s.proxy_id, now) else {
                return CheckMark::NotFound;
            };
            if state.is_final() {
                return CheckMark::Refused(state);
            }
            let end = now.plus(s.hold);
            let mark = match st.marks.get(&s.proxy_id) {
                // The same check again (a second wire task of one task): extended.
                Some(m) if m.check == Some(s.check) => Mark {
                    until: m.until.max(end),
                    ..m.clone()
                },
                // Another check's mark still in force becomes the floor.
                other => {
                    let floor = other.map(|m| m.until).filter(|t| *t > now);
                    Mark {
                        until: floor.map_or(end, |f| f.max(end)),
                        floor,
                        check: Some(s.check),
                    }
                }
            };
            let until = mark.until;
            st.marks.insert(s.proxy_id.clone(), mark);
            CheckMark::Marked(until)
        }))
    }

    async fn end_checks(&self, ends: &[CheckEnd]) -> PoolResult<Vec<bool>> {
        check_check_ends(ends)?;
        Ok(self.per_item(ends, false, |st, now, e| {
            let open = st
                .live_state(&e.proxy_id, now)
                .is_some_and(|state| !state.is_final());
            match st.marks.get_mut(&e.proxy_id) {
                Some(m) if open && m.check == Some(e.check) => {
                    // The earlier checks' mark it superseded still lasts to its floor.
                    match m.floor.filter(|f| *f > now) {
                        Some(until) => {
                            *m = Mark {
                                until,
                                floor: None,
                                check: None,
                            }
                        }
                        None => {
                            st.marks.remove(&e.proxy_id);
                        }
                    }
                    true
                }
                _ => false,
            }
        }))
    }
}

#[async_trait]
impl ProxyCatalog for MemoryPool {
    async fn records(&self, ids: &[ProxyId]) -> PoolResult<Vec<Option<ProxyRecord>>> {
        check_id_batch(ids)?;
        let (st, now) = self.locked();
        Ok(ids
            .iter()
            .map(|id| {
                st.records.get(id).map(|s| {
                    let mut r = s.record.clone();
                    if r.expires_at <= now {
                        r.state = ProxyState::Expired;
                    }
                    r.owner = st.owners.get(id).cloned();
                    r
                })
            })
            .collect())
    }

    async fn assignable(&self, upstream: &UpstreamId, limit: u32) -> PoolResult<Vec<ProxyId>> {
        check_sweep_limit(limit)?;
        let (st, now) = self.locked();
        if st.held(upstream, now).is_some() {
            return Ok(Vec::new());
        }
        let sources = upstream_combos(&st, upstream).collect();
        Ok(merged(sources, now).take(limit as usize).cloned().collect())
    }

    async fn changes(&self, since: Option<u64>, limit: u32) -> PoolResult<ChangePage> {
        check_page_limit(limit)?;
        let st = self.state.lock();
        let head = st.feed_seq;
        let Some(since) = since else {
            return Ok(ChangePage {
                next: head,
                lost: true,
                ..ChangePage::default()
            });
        };
        let first = st.feed.front().map_or(head + 1, |(s, _)| *s);
        if since > head || since + 1 < first {
            return Ok(ChangePage {
                next: head,
                lost: true,
                ..ChangePage::default()
            });
        }
        let skip = usize::try_from(since + 1 - first).unwrap_or(usize::MAX);
        let ids: Vec<ProxyId> = st
            .feed
            .iter()
            .skip(skip)
            .take(limit as usize)
            .map(|(_, id)| id.clone())
            .collect();
        let next = since + ids.len() as u64;
        Ok(ChangePage {
            ids,
            next,
            lost: false,
            more: next < head,
        })
    }
}

#[async_trait]
impl Maintenance for MemoryPool {
    async fn purge_expired(&self, limit: u32) -> PoolResult<PurgeReport> {
        check_sweep_limit(limit)?;
        let (mut guard, now) = self.locked();
        let st = &mut *guard;
        let purged = st.purge_expired(now, limit);
        let sessions_purged =
            purge_due_workers(&mut st.session_expiry, &mut st.sessions, now, limit)
                + purge_due_workers(&mut st.runtime_expiry, &mut st.runtime, now, limit);
        st.results.retain(|_, (exp, _)| *exp > now.0);
        let more = first_due(&st.expiry, now)
            || first_due(&st.session_expiry, now)
            || first_due(&st.runtime_expiry, now);
        Ok(PurgeReport {
            purged,
            sessions_purged,
            more,
        })
    }
}
