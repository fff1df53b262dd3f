//! The snapshot publisher: one [`SnapshotState`] per worker, advanced off the request
//! path by the ownership loop, with a bounded history of deltas and issued
//! (version, epoch, checksum) triples. Watch streams read it; they never build.
//!
//! Lock choice: one `parking_lot::Mutex` per worker (held only while diffing or
//! copying out an update, never across I/O) and one for the worker map.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use activity_pool::model::WorkerId;
use parking_lot::Mutex;
use proxy_pool_api::controlplane::model::{Checksum, Routing, SnapshotProxy};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::state::{Header, SnapshotState};
use tokio::sync::watch;

/// One (version, epoch, checksum) the controller sent to a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    /// Version.
    pub version: u64,
    /// Ownership epoch.
    pub epoch: u64,
    /// Checksum.
    pub checksum: Checksum,
}

/// What a watch stream sends next.
#[derive(Clone, Debug)]
pub enum Update {
    /// A full snapshot (shared: encoded once per version).
    Full(Arc<pb::WorkerSnapshot>),
    /// A delta from the stream's last version.
    Delta(Arc<pb::SnapshotDelta>),
}

impl Update {
    /// The version the worker holds after applying it.
    pub fn version(&self) -> u64 {
        match self {
            Self::Full(s) => s.version,
            Self::Delta(d) => d.version,
        }
    }
}

#[derive(Debug)]
struct Channel {
    state: Mutex<WorkerState>,
    notify: watch::Sender<u64>,
}

#[derive(Debug)]
struct WorkerState {
    snapshot: SnapshotState,
    history: VecDeque<Arc<pb::SnapshotDelta>>,
    issued: VecDeque<Issued>,
    full: Option<Arc<pb::WorkerSnapshot>>,
    last_published_ms: i64,
}

/// Per-worker snapshots.
#[derive(Debug)]
pub struct Publisher {
    workers: Mutex<HashMap<WorkerId, Arc<Channel>>>,
    history: usize,
}

impl Publisher {
    /// A publisher keeping `history` versions per worker.
    pub fn new(history: usize) -> Self {
        Self {
            workers: Mutex::new(HashMap::new()),
            history: history.max(1),
        }
    }

    fn channel(&self, worker: &WorkerId) -> Arc<Channel> {
        self.workers
            .lock()
            .entry(worker.clone())
            .or_insert_with(|| {
                Arc::new(Channel {
                    state: Mutex::new(WorkerState {
                        snapshot: SnapshotState::new(),
                        history: VecDeque::new(),
                        issued: VecDeque::new(),
                        full: None,
                        last_published_ms: i64::MIN,
                    }),
                    notify: watch::channel(0).0,
                })
            })
            .clone()
    }

    /// Publishes the worker's content if it changed (or when `heartbeat_ms` passed
    /// since the last version). Returns the version the worker should hold.
    pub fn publish(
        &self,
        worker: &WorkerId,
        routings: Vec<Routing>,
        proxies: Vec<SnapshotProxy>,
        now_ms: i64,
        validity_ms: i64,
        heartbeat_ms: i64,
    ) -> u64 {
        let ch = self.channel(worker);
        let mut st = ch.state.lock();
        let cur = st.snapshot.header();
        let epoch_now = proxies
            .iter()
            .map(|p| p.assignment_epoch)
            .max()
            .unwrap_or(0)
            .max(cur.map_or(0, |h| h.ownership_epoch));
        let changes = st.snapshot.diff(Some(routings), proxies);
        let stale = now_ms.saturating_sub(st.last_published_ms) >= heartbeat_ms;
        if changes.is_empty() && cur.is_some_and(|h| h.ownership_epoch == epoch_now) && !stale {
            return st.snapshot.version();
        }
        let header = Header {
            version: st.snapshot.version() + 1,
            ownership_epoch: epoch_now,
            generated_at_ms: now_ms,
            valid_until_ms: now_ms.saturating_add(validity_ms),
        };
        let Ok(delta) = st.snapshot.apply(header, changes) else {
            // Unreachable by construction (a diff always fits its own state).
            tracing::error!(worker = %worker, "snapshot delta did not fit its state");
            return st.snapshot.version();
        };
        let issued = Issued {
            version: delta.version,
            epoch: delta.ownership_epoch,
            checksum: delta.checksum,
        };
        st.history
            .push_back(Arc::new(pb::SnapshotDelta::from(&delta)));
        st.issued.push_back(issued);
        while st.history.len() > self.history {
            st.history.pop_front();
        }
        while st.issued.len() > self.history {
            st.issued.pop_front();
        }
        st.full = None;
        st.last_published_ms = now_ms;
        let version = delta.version;
        drop(st);
        ch.notify.send_replace(version);
        tracing::debug!(worker = %worker, version, "snapshot published");
        version
    }

    /// Whether the controller issued this triple to the worker (within the history).
    pub fn was_issued(&self, worker: &WorkerId, issued: &Issued) -> bool {
        let ch = self.channel(worker);
        let st = ch.state.lock();
        st.issued.iter().any(|i| i == issued)
    }

    /// Current version of a worker's snapshot (0: none yet).
    pub fn version(&self, worker: &WorkerId) -> u64 {
        self.channel(worker).state.lock().snapshot.version()
    }

    /// Current ownership epoch of a worker's snapshot.
    pub fn epoch(&self, worker: &WorkerId) -> u64 {
        self.channel(worker)
            .state
            .lock()
            .snapshot
            .header()
            .map_or(0, |h| h.ownership_epoch)
    }

    /// A receiver woken at every new version of the worker's snapshot.
    pub fn subscribe(&self, worker: &WorkerId) -> watch::Receiver<u64> {
        self.channel(worker).notify.subscribe()
    }

    /// The next update for a worker that holds `have` (version, checksum): `None` when
    /// it is current or nothing was published yet; a delta when `have` is in the
    /// history and matches; a full snapshot otherwise.
    pub fn next_update(&self, worker: &WorkerId, have: Option<(u64, Checksum)>) -> Option<Update> {
        let ch = self.channel(worker);
        let mut st = ch.state.lock();
        let current = st.snapshot.version();
        if current == 0 {
            return None;
        }
        if let Some((v, sum)) = have {
            if v == current && sum == st.snapshot.checksum() {
                return None;
            }
            let known = st
                .issued
                .iter()
                .any(|i| i.version == v && i.checksum == sum);
            if known && let Some(d) = st.history.iter().find(|d| d.base_version == v) {
                return Some(Update::Delta(d.clone()));
            }
        }
        let full = match &st.full {
            Some(f) => f.clone(),
            None => {
                let f = Arc::new(pb::WorkerSnapshot::from(&st.snapshot.to_snapshot()));
                st.full = Some(f.clone());
                f
            }
        };
        Some(Update::Full(full))
    }
}

/// The issued triple of a pb checksum field, if well-formed.
pub fn checksum_of(bytes: &[u8]) -> Option<Checksum> {
    <[u8; 32]>::try_from(bytes).ok().map(Checksum)
}
