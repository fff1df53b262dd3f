//! Worker sessions, runtime reports and inventory figures.

use std::time::Duration;

use async_trait::async_trait;

use super::MemoryPool;
use super::state::{Index, State, StoredReport, upstream_combos};
use crate::clock::Timestamp;
use crate::error::{ConflictReason, PoolError, PoolResult};
use crate::model::{
    ReportAck, RuntimeReport, SessionId, SessionRegistration, SnapshotAck, SnapshotReject,
    UpstreamId, UpstreamInventory, WorkerId, WorkerRuntime, WorkerSession,
};
use crate::ports::{InventoryReader, ReportWriter, RuntimeReader, SessionWriter};
use crate::validate::{check_positive, check_report, report_digest};

fn put_session(st: &mut State, s: WorkerSession) {
    if let Some(old) = st.sessions.get(&s.worker_id) {
        st.session_expiry
            .remove(&(old.expires_at.0, old.worker_id.clone()));
    }
    st.session_expiry
        .insert((s.expires_at.0, s.worker_id.clone()));
    st.sessions.insert(s.worker_id.clone(), s);
}

fn drop_runtime(st: &mut State, worker: &WorkerId) {
    if let Some(old) = st.runtime.remove(worker) {
        st.runtime_expiry
            .remove(&(old.runtime.expires_at.0, worker.clone()));
    }
}

fn matching_session(
    st: &State,
    worker: &WorkerId,
    session: &SessionId,
    now: Timestamp,
) -> PoolResult<WorkerSession> {
    st.live_session(worker, now)
        .filter(|s| &s.session_id == session)
        .cloned()
        .ok_or(PoolError::Conflict(ConflictReason::StaleSession))
}

impl MemoryPool {
    /// A snapshot ACK, positive or negative: `answer` applied to the worker's live
    /// session `session`, which is renewed for `ttl`; in one atomic step.
    fn answer_snapshot(
        &self,
        worker: &WorkerId,
        session: &SessionId,
        ttl: Duration,
        answer: impl FnOnce(&mut WorkerSession),
    ) -> PoolResult<WorkerSession> {
        check_positive("ttl", ttl)?;
        let (mut st, now) = self.locked();
        let mut s = matching_session(&st, worker, session, now)?;
        answer(&mut s);
        s.expires_at = now.plus(ttl);
        put_session(&mut st, s.clone());
        Ok(s)
    }
}

#[async_trait]
impl SessionWriter for MemoryPool {
    async fn register(&self, reg: &SessionRegistration) -> PoolResult<WorkerSession> {
        check_positive("ttl", reg.ttl)?;
        let (mut st, now) = self.locked();
        let session = WorkerSession {
            worker_id: reg.worker_id.clone(),
            instance_id: reg.instance_id.clone(),
            session_id: reg.session_id.clone(),
            acked_version: None,
            acked_epoch: None,
            fence_open: true,
            expires_at: now.plus(reg.ttl),
        };
        drop_runtime(&mut st, &reg.worker_id);
        put_session(&mut st, session.clone());
        Ok(session)
    }

    async fn acknowledge(&self, ack: &SnapshotAck) -> PoolResult<WorkerSession> {
        self.answer_snapshot(&ack.worker_id, &ack.session_id, ack.ttl, |s| {
            s.acked_version = Some(ack.version);
            s.acked_epoch = Some(ack.epoch);
            s.fence_open = true;
        })
    }

    async fn reject_snapshot(&self, reject: &SnapshotReject) -> PoolResult<WorkerSession> {
        self.answer_snapshot(&reject.worker_id, &reject.session_id, reject.ttl, |s| {
            s.fence_open = false;
        })
    }

    async fn session(&self, worker: &WorkerId) -> PoolResult<Option<WorkerSession>> {
        Ok(self.read(|st, now| st.live_session(worker, now).cloned()))
    }
}

#[async_trait]
impl ReportWriter for MemoryPool {
    async fn write_report(&self, report: &RuntimeReport) -> PoolResult<ReportAck> {
        check_report(report)?;
        let digest = report_digest(report);
        let (mut st, now) = self.locked();
        let session = matching_session(
            &st,
            &report.header.worker_id,
            &report.header.session_id,
            now,
        )?;
        if !session.fence_open {
            return Err(PoolError::Conflict(ConflictReason::FenceClosed));
        }
        if session.acked_version != Some(report.header.snapshot_version)
            || session.acked_epoch != Some(report.header.epoch)
        {
            return Err(PoolError::Conflict(ConflictReason::BoundMismatch));
        }
        if let Some(prev) = st
            .runtime
            .get(&report.header.worker_id)
            .filter(|p| p.runtime.header.session_id == report.header.session_id)
        {
            if report.header.sequence < prev.runtime.header.sequence {
                return Err(PoolError::Conflict(ConflictReason::SequenceRegression));
            }
            if report.header.sequence == prev.runtime.header.sequence {
                return if prev.digest == digest {
                    Ok(ReportAck::Replayed)
                } else {
                    Err(PoolError::Conflict(ConflictReason::SequenceReplayMismatch))
                };
            }
        }
        for e in &report.entries {
            if e.active == 0 && e.reserved == 0 {
                continue;
            }
            let owned = st.live(&e.proxy_id, now).is_some()
                && e.epoch <= report.header.epoch
                && st
                    .owners
                    .get(&e.proxy_id)
                    .is_some_and(|a| a.worker_id == report.header.worker_id && a.epoch == e.epoch);
            if !owned {
                return Err(PoolError::Conflict(ConflictReason::OwnershipMismatch));
            }
        }
        let mut entries = report.entries.clone();
        entries.sort_by(|a, b| a.proxy_id.cmp(&b.proxy_id));
        let runtime = WorkerRuntime {
            header: report.header.clone(),
            entries,
            expires_at: now.plus(report.ttl),
        };
        drop_runtime(&mut st, &report.header.worker_id);
        st.runtime_expiry
            .insert((runtime.expires_at.0, report.header.worker_id.clone()));
        st.runtime.insert(
            report.header.worker_id.clone(),
            StoredReport { runtime, digest },
        );
        Ok(ReportAck::Accepted)
    }
}

#[async_trait]
impl RuntimeReader for MemoryPool {
    async fn runtime(&self, worker: &WorkerId) -> PoolResult<Option<WorkerRuntime>> {
        Ok(self.read(|st, now| st.readable_runtime(worker, now).cloned()))
    }
}

#[async_trait]
impl InventoryReader for MemoryPool {
    async fn inventory(&self, upstream: &UpstreamId) -> PoolResult<UpstreamInventory> {
        let (st, now) = self.locked();
        let unowned: Vec<&Index> = upstream_combos(&st, upstream).collect();
        let owned = st.owned.get(upstream);
        let members =
            unowned.iter().map(|ix| ix.len()).sum::<usize>() + owned.map_or(0, |ix| ix.len());
        if members > self.options.inventory_scan_budget as usize {
            return Err(PoolError::ScanBudgetExhausted);
        }
        let mut slots: u64 = 0;
        let mut available: u64 = 0;
        let held = st.held(upstream, now);
        // Held back: nothing unowned can be taken (owned proxies keep their capacity).
        let unowned = if held.is_some() { Vec::new() } else { unowned };
        for (score, id) in unowned.into_iter().flatten() {
            if *score > now.0
                && let Some(s) = st.live(id, now)
            {
                slots += u64::from(s.record.max_concurrency);
                available += 1;
            }
        }
        for (score, id) in owned.into_iter().flatten() {
            if *score <= now.0 {
                continue;
            }
            let (Some(s), Some(a)) = (st.live(id, now), st.owners.get(id)) else {
                continue;
            };
            let Some(rt) = st
                .readable_runtime(&a.worker_id, now)
                .filter(|rt| rt.header.epoch >= a.epoch)
            else {
                continue;
            };
            let used = rt
                .entries
                .iter()
                .find(|e| &e.proxy_id == id && e.epoch == a.epoch)
                .map_or(0, |e| u64::from(e.active) + u64::from(e.reserved));
            slots += u64::from(s.record.max_concurrency).saturating_sub(used);
        }
        let counter = |m: &std::collections::HashMap<UpstreamId, i64>| {
            u64::try_from(m.get(upstream).copied().unwrap_or(0)).unwrap_or(0)
        };
        Ok(UpstreamInventory {
            unextracted: counter(&st.inventory),
            managed: counter(&st.managed),
            available,
            available_slots: slots,
            quarantined_until: held,
        })
    }

    async fn generation(&self) -> PoolResult<Option<Timestamp>> {
        Ok(self.state.lock().generation)
    }
}
