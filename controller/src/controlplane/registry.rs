//! The controller's in-memory view of registered workers: current session, gateway
//! group, ACK order and the outcome batch sequence. The pool's session is the
//! authority for fencing; this registry only adds what the pool does not keep.
//!
//! Lock choice: one `parking_lot::Mutex` over a small map, never held across I/O.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use activity_pool::model::{InstanceId, SessionId, WorkerId};
use parking_lot::Mutex;
use tokio::sync::watch;

/// What the registry knows of one worker.
#[derive(Clone, Debug)]
pub struct WorkerInfo {
    /// Current session.
    pub session_id: SessionId,
    /// Current process.
    pub instance_id: InstanceId,
    /// Gateway group (routing visibility).
    pub group: String,
    /// Highest snapshot version acknowledged (either way) in this session.
    pub last_ack_version: u64,
    /// Highest outcome batch sequence accepted in this session.
    pub outcome_sequence: u64,
}

#[derive(Debug)]
struct Entry {
    info: WorkerInfo,
    session_tx: watch::Sender<SessionId>,
    /// When this session registered.
    registered: Instant,
    /// The last snapshot version sent on the session's stream, and when.
    pushed: Option<(u64, Instant)>,
    /// The last version the worker accepted, and when it was sent to it.
    accepted: Option<(u64, Instant)>,
}

impl Entry {
    fn new(info: WorkerInfo, session_tx: watch::Sender<SessionId>) -> Self {
        Self {
            info,
            session_tx,
            registered: Instant::now(),
            pushed: None,
            accepted: None,
        }
    }
}

/// A registered worker's snapshot as the metrics show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// The worker.
    pub worker: WorkerId,
    /// The last version it accepted in this session (0: none yet).
    pub accepted_version: u64,
    /// Time since that snapshot was sent to it (since the session registered when it
    /// accepted none yet).
    pub age: Duration,
}

/// Registered workers.
#[derive(Debug, Default)]
pub struct Registry {
    workers: Mutex<HashMap<WorkerId, Entry>>,
}

/// Outcome of offering an outcome batch sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceVerdict {
    /// New: forward the batch.
    Accept,
    /// Already accepted: a retry; drop it.
    Duplicate,
}

impl Registry {
    /// Records a new session (replacing any earlier one) and wakes streams of the old.
    pub fn register(&self, worker: &WorkerId, info: WorkerInfo) {
        let mut map = self.workers.lock();
        match map.get_mut(worker) {
            Some(e) => {
                e.session_tx.send_replace(info.session_id.clone());
                e.info = info;
                e.registered = Instant::now();
                e.pushed = None;
                e.accepted = None;
            }
            None => {
                let (session_tx, _) = watch::channel(info.session_id.clone());
                map.insert(worker.clone(), Entry::new(info, session_tx));
            }
        }
    }

    /// The worker's registry entry.
    pub fn get(&self, worker: &WorkerId) -> Option<WorkerInfo> {
        self.workers.lock().get(worker).map(|e| e.info.clone())
    }

    /// Every registered worker.
    pub fn workers(&self) -> Vec<(WorkerId, WorkerInfo)> {
        self.workers
            .lock()
            .iter()
            .map(|(w, e)| (w.clone(), e.info.clone()))
            .collect()
    }

    /// Registered workers of gateway group `group` (the caller included when it is
    /// registered), at least 1. Entries whose pool session expired are dropped by the
    /// ownership pass, so a gateway that stopped counts until its session TTL and the
    /// next pass.
    pub fn group_size(&self, group: &str) -> u32 {
        let n = self
            .workers
            .lock()
            .values()
            .filter(|e| e.info.group == group)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX).max(1)
    }

    /// Drops a worker whose session ended, if `session` is still its current one.
    pub fn remove_if(&self, worker: &WorkerId, session: &SessionId) {
        let mut map = self.workers.lock();
        if map
            .get(worker)
            .is_some_and(|e| e.info.session_id == *session)
        {
            map.remove(worker);
        }
    }

    /// `true` when `session` is the worker's current session here.
    pub fn is_current(&self, worker: &WorkerId, session: &SessionId) -> bool {
        self.workers
            .lock()
            .get(worker)
            .is_some_and(|e| e.info.session_id == *session)
    }

    /// A receiver that changes when the worker registers a new session.
    pub fn session_changes(&self, worker: &WorkerId) -> Option<watch::Receiver<SessionId>> {
        self.workers
            .lock()
            .get(worker)
            .map(|e| e.session_tx.subscribe())
    }

    /// Orders ACKs within a session: an ACK older than one already recorded is
    /// refused (a delayed ACK cannot reopen a fence a later negative ACK closed).
    pub fn note_ack(&self, worker: &WorkerId, session: &SessionId, version: u64) -> bool {
        let mut map = self.workers.lock();
        match map.get_mut(worker) {
            Some(e) if e.info.session_id == *session && version >= e.info.last_ack_version => {
                e.info.last_ack_version = version;
                true
            }
            _ => false,
        }
    }

    /// Records that `version` was sent to the worker on `session`'s stream.
    pub fn note_pushed(&self, worker: &WorkerId, session: &SessionId, version: u64) {
        let mut map = self.workers.lock();
        if let Some(e) = map.get_mut(worker)
            && e.info.session_id == *session
        {
            e.pushed = Some((version, Instant::now()));
        }
    }

    /// Records that the worker accepted `version` on `session`; the time since that
    /// version was sent to it (push → ACK), when it was the last one sent.
    pub fn note_accepted(
        &self,
        worker: &WorkerId,
        session: &SessionId,
        version: u64,
    ) -> Option<Duration> {
        let mut map = self.workers.lock();
        let e = map
            .get_mut(worker)
            .filter(|e| e.info.session_id == *session)?;
        let (pushed, at) = e.pushed?;
        if pushed != version {
            return None;
        }
        e.accepted = Some((version, at));
        Some(at.elapsed())
    }

    /// The snapshot status of every registered worker.
    pub fn snapshot_status(&self) -> Vec<SnapshotStatus> {
        let now = Instant::now();
        self.workers
            .lock()
            .iter()
            .map(|(w, e)| SnapshotStatus {
                worker: w.clone(),
                accepted_version: e.accepted.map_or(0, |(v, _)| v),
                age: now.saturating_duration_since(e.accepted.map_or(e.registered, |(_, at)| at)),
            })
            .collect()
    }

    /// Offers an outcome batch sequence; returns the verdict and the highest accepted.
    pub fn offer_outcomes(
        &self,
        worker: &WorkerId,
        session: &SessionId,
        sequence: u64,
    ) -> Option<(SequenceVerdict, u64)> {
        let mut map = self.workers.lock();
        let e = map
            .get_mut(worker)
            .filter(|e| e.info.session_id == *session)?;
        if sequence <= e.info.outcome_sequence {
            return Some((SequenceVerdict::Duplicate, e.info.outcome_sequence));
        }
        e.info.outcome_sequence = sequence;
        Some((SequenceVerdict::Accept, sequence))
    }
}
