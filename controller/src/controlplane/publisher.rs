//! The snapshot publisher: one [`SnapshotState`] per worker, advanced off the request
//! path by the ownership loop, with a bounded history of encoded deltas and of issued
//! (version, epoch, checksum) triples. Watch streams only copy out bytes encoded here
//! (a full snapshot is encoded once per version, from cached per-proxy encodings).
//!
//! Lock choice: one `parking_lot::Mutex` per worker (held while diffing or encoding,
//! never across I/O) and one for the worker map.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use activity_pool::model::WorkerId;
use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message;
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

/// What a watch stream sends next: an encoded `SnapshotUpdate` (full or delta).
/// `Debug` prints the length of the bytes only (they hold dial passwords).
#[derive(Clone)]
pub struct Update {
    /// Version the worker holds after applying it.
    pub version: u64,
    /// Its checksum.
    pub checksum: Checksum,
    /// `true` for a full snapshot.
    pub full: bool,
    /// The encoded `SnapshotUpdate`.
    pub bytes: Bytes,
}

impl std::fmt::Debug for Update {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Update")
            .field("version", &self.version)
            .field("full", &self.full)
            .field("len", &self.bytes.len())
            .finish()
    }
}

#[derive(Debug)]
struct Channel {
    state: Mutex<WorkerState>,
    notify: watch::Sender<u64>,
}

#[derive(Debug)]
struct Encoded {
    base: u64,
    update: Update,
}

#[derive(Debug)]
struct WorkerState {
    snapshot: SnapshotState,
    /// Versions start above this (a forgotten worker's last version).
    floor: u64,
    history: VecDeque<Encoded>,
    issued: VecDeque<Issued>,
    full: Option<Update>,
    last_published_ms: i64,
}

/// Per-worker snapshots.
#[derive(Debug)]
pub struct Publisher {
    workers: Mutex<HashMap<WorkerId, Arc<Channel>>>,
    /// Last version of forgotten workers, so a returning worker's versions keep rising.
    tombstones: Mutex<HashMap<WorkerId, u64>>,
    history: usize,
}

/// Most tombstones kept (one `u64` each); beyond, the oldest-looking are dropped.
const MAX_TOMBSTONES: usize = 100_000;

impl Publisher {
    /// A publisher keeping `history` versions per worker.
    pub fn new(history: usize) -> Self {
        Self {
            workers: Mutex::new(HashMap::new()),
            tombstones: Mutex::new(HashMap::new()),
            history: history.max(1),
        }
    }

    fn channel(&self, worker: &WorkerId) -> Arc<Channel> {
        if let Some(ch) = self.workers.lock().get(worker) {
            return ch.clone();
        }
        let floor = self.tombstones.lock().remove(worker).unwrap_or(0);
        self.workers
            .lock()
            .entry(worker.clone())
            .or_insert_with(|| {
                Arc::new(Channel {
                    state: Mutex::new(WorkerState {
                        snapshot: SnapshotState::new(),
                        floor,
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

    /// Whether `worker` has nothing published yet, or its last version is at least
    /// `heartbeat_ms` old (a `publish` would issue a new one even without a change).
    pub fn due(&self, worker: &WorkerId, now_ms: i64, heartbeat_ms: i64) -> bool {
        self.existing(worker).is_none_or(|ch| {
            now_ms.saturating_sub(ch.state.lock().last_published_ms) >= heartbeat_ms
        })
    }

    fn existing(&self, worker: &WorkerId) -> Option<Arc<Channel>> {
        self.workers.lock().get(worker).cloned()
    }

    /// Drops a worker's snapshot state (a dead worker that owns nothing any more); its
    /// last version is remembered so versions keep rising if it comes back.
    pub fn forget(&self, worker: &WorkerId) {
        let Some(ch) = self.workers.lock().remove(worker) else {
            return;
        };
        let last = {
            let st = ch.state.lock();
            st.snapshot.version().max(st.floor)
        };
        let mut t = self.tombstones.lock();
        if t.len() >= MAX_TOMBSTONES
            && let Some(k) = t.keys().next().cloned()
        {
            t.remove(&k);
        }
        t.insert(worker.clone(), last);
    }

    /// Workers with published state.
    pub fn workers(&self) -> Vec<WorkerId> {
        self.workers.lock().keys().cloned().collect()
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
        let changes = st.snapshot.diff(Some(routings), &proxies);
        let stale = now_ms.saturating_sub(st.last_published_ms) >= heartbeat_ms;
        if changes.is_empty() && cur.is_some_and(|h| h.ownership_epoch == epoch_now) && !stale {
            return st.snapshot.version();
        }
        let header = Header {
            version: st.snapshot.version().max(st.floor) + 1,
            ownership_epoch: epoch_now,
            generated_at_ms: now_ms,
            valid_until_ms: now_ms.saturating_add(validity_ms),
        };
        let Ok(delta) = st.snapshot.apply(header, changes) else {
            // Unreachable by construction (a diff always fits its own state).
            tracing::error!(worker = %worker, "snapshot delta did not fit its state");
            return st.snapshot.version();
        };
        st.issued.push_back(Issued {
            version: delta.header.version,
            epoch: delta.header.ownership_epoch,
            checksum: delta.checksum,
        });
        // A delta from nothing, or one touching most of a large snapshot, is not kept:
        // a worker that needs it is better served by the full snapshot.
        let touched = delta.upserts.len() + delta.removals.len();
        if delta.base_version > 0 && touched <= (st.snapshot.len() / 2).max(1_024) {
            let msg = pb::SnapshotUpdate::new(pb::snapshot_update::Update::Delta(
                pb::SnapshotDelta::from(&delta),
            ));
            st.history.push_back(Encoded {
                base: delta.base_version,
                update: Update {
                    version: delta.header.version,
                    checksum: delta.checksum,
                    full: false,
                    bytes: Bytes::from(msg.encode_to_vec()),
                },
            });
        } else {
            st.history.clear();
        }
        while st.history.len() > self.history {
            st.history.pop_front();
        }
        while st.issued.len() > self.history {
            st.issued.pop_front();
        }
        st.full = None;
        st.last_published_ms = now_ms;
        let version = delta.header.version;
        drop(st);
        ch.notify.send_replace(version);
        tracing::debug!(worker = %worker, version, changed = touched, "snapshot published");
        version
    }

    /// Whether the controller issued this triple to the worker (within the history).
    pub fn was_issued(&self, worker: &WorkerId, issued: &Issued) -> bool {
        self.existing(worker)
            .is_some_and(|ch| ch.state.lock().issued.iter().any(|i| i == issued))
    }

    /// Current version of a worker's snapshot (0: none yet).
    pub fn version(&self, worker: &WorkerId) -> u64 {
        self.existing(worker)
            .map_or(0, |ch| ch.state.lock().snapshot.version())
    }

    /// Current ownership epoch of a worker's snapshot.
    pub fn epoch(&self, worker: &WorkerId) -> u64 {
        self.existing(worker).map_or(0, |ch| {
            ch.state
                .lock()
                .snapshot
                .header()
                .map_or(0, |h| h.ownership_epoch)
        })
    }

    /// A receiver woken at every new version of the worker's snapshot.
    pub fn subscribe(&self, worker: &WorkerId) -> watch::Receiver<u64> {
        self.channel(worker).notify.subscribe()
    }

    /// The next update for a worker that holds `have` (version, checksum): `None` when
    /// it is current or nothing was published yet; the delta from `have` when `have` is
    /// an issued version in the history; the full snapshot otherwise.
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
            if known && let Some(d) = st.history.iter().find(|d| d.base == v) {
                return Some(d.update.clone());
            }
        }
        if st.full.is_none() {
            let full = Update {
                version: current,
                checksum: st.snapshot.checksum(),
                full: true,
                bytes: st.snapshot.encode_full_update(),
            };
            st.full = Some(full);
        }
        st.full.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_api::controlplane::model::{Dial, Labels, Protocol};

    fn proxy(id: &str) -> SnapshotProxy {
        SnapshotProxy {
            id: id.into(),
            upstream: "u".into(),
            dial: Dial {
                protocol: Protocol::Http,
                host: "h".into(),
                port: 1,
                credentials: None,
            },
            labels: Labels {
                region: None,
                carrier: None,
                city: None,
            },
            max_concurrency: 1,
            expires_at_ms: 10,
            usable_until_ms: 5,
            assignment_epoch: 3,
            draining: false,
            lease_expires_at_ms: 0,
            excluded_routings: Vec::new(),
        }
    }

    #[test]
    fn unchanged_content_is_not_republished_until_the_heartbeat() {
        let p = Publisher::new(8);
        let w = WorkerId::new("w").unwrap();
        assert_eq!(p.publish(&w, vec![], vec![proxy("a")], 0, 100, 50), 1);
        assert_eq!(p.publish(&w, vec![], vec![proxy("a")], 10, 100, 50), 1);
        assert_eq!(p.publish(&w, vec![], vec![proxy("a")], 60, 100, 50), 2);
        assert_eq!(p.epoch(&w), 3);
        let u = p.next_update(&w, None).unwrap();
        assert!(u.full);
        assert!(p.was_issued(
            &w,
            &Issued {
                version: 2,
                epoch: 3,
                checksum: u.checksum
            }
        ));
        // Versions keep rising across forget.
        p.forget(&w);
        assert_eq!(p.version(&w), 0);
        assert!(!p.was_issued(
            &w,
            &Issued {
                version: 2,
                epoch: 3,
                checksum: u.checksum
            }
        ));
        assert_eq!(p.publish(&w, vec![], vec![], 70, 100, 50), 3);
    }

    #[test]
    fn lagging_worker_gets_delta_chain_then_full_beyond_history() {
        let p = Publisher::new(2);
        let w = WorkerId::new("w").unwrap();
        p.publish(&w, vec![], vec![proxy("a")], 0, 100, 1_000);
        let v1 = p.next_update(&w, None).unwrap();
        p.publish(&w, vec![], vec![proxy("a"), proxy("b")], 1, 100, 1_000);
        let d = p.next_update(&w, Some((v1.version, v1.checksum))).unwrap();
        assert!(!d.full);
        assert_eq!(d.version, 2);
        p.publish(&w, vec![], vec![proxy("b")], 2, 100, 1_000);
        p.publish(&w, vec![], vec![proxy("c")], 3, 100, 1_000);
        // v1's successor fell out of the 2-version history: full snapshot.
        assert!(
            p.next_update(&w, Some((v1.version, v1.checksum)))
                .unwrap()
                .full
        );
    }
}
