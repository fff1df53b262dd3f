//! The data of the in-memory pool and the record-level helpers every operation shares
//! (indexing, counters, purge). Mirrors the Redis key space one to one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::clock::Timestamp;
use crate::combo;
use crate::model::{
    Assignment, Extraction, Label, ProxyId, ProxyRecord, ProxyState, UpsertReport, UpstreamId,
    WorkerId, WorkerRuntime, WorkerSession,
};

/// A ZSET: members ordered by (score, member), as Redis orders them.
pub(super) type Index = BTreeSet<(i64, ProxyId)>;

/// A stored record; `owner` lives in `State::owners`, never here.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub record: ProxyRecord,
    pub unique: String,
}

/// A stored operation / idempotency result.
#[derive(Debug, Clone)]
pub(super) enum StoredResult {
    Upsert(UpsertReport),
    Extract {
        digest: String,
        extraction: Extraction,
    },
}

#[derive(Debug, Clone)]
pub(super) struct StoredReport {
    pub runtime: WorkerRuntime,
    pub digest: String,
}

/// A proxy's check mark (`docs/pool.md`, "Check marks"); the Redis record's `ck`,
/// `cf` and `ct` fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mark {
    /// When the mark ends: the later of the current check's end and `floor`.
    pub until: Timestamp,
    /// The end of the earlier checks' marks this one superseded: they can no longer be
    /// ended early, so the mark lasts at least that long.
    pub floor: Option<Timestamp>,
    /// The check whose end may end the mark early (`None` once it ended).
    pub check: Option<u64>,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub records: HashMap<ProxyId, Stored>,
    pub unique: HashMap<String, ProxyId>,
    pub expiry: Index,
    pub available: Index,
    /// One availability index per label combination (`combo_of`); only non-empty ones
    /// are kept (the Redis `combos` registry).
    pub combos: BTreeMap<String, Index>,
    pub owned: HashMap<UpstreamId, Index>,
    pub owners: HashMap<ProxyId, Assignment>,
    pub owner_expiry: Index,
    pub epoch: u64,
    pub inventory: HashMap<UpstreamId, i64>,
    pub managed: HashMap<UpstreamId, i64>,
    pub sessions: HashMap<WorkerId, WorkerSession>,
    pub session_expiry: BTreeSet<(i64, WorkerId)>,
    pub runtime: HashMap<WorkerId, StoredReport>,
    pub runtime_expiry: BTreeSet<(i64, WorkerId)>,
    pub results: HashMap<String, (i64, StoredResult)>,
    /// When the pool generation began: the first upsert into this pool (the memory
    /// store loses everything when its process stops, so every start is a new store).
    pub generation: Option<Timestamp>,
    /// Upstream → the end of its hold-back (generation start + its quarantine).
    pub held: HashMap<UpstreamId, Timestamp>,
    /// Check marks by proxy (deleted with the record).
    pub marks: HashMap<ProxyId, Mark>,
    /// The change feed: (sequence, proxy) of the latest record writes, oldest first,
    /// at most `CHANGE_FEED_CAPACITY`; sequences are contiguous.
    pub feed: std::collections::VecDeque<(u64, ProxyId)>,
    /// The sequence of the latest change (0: none yet).
    pub feed_seq: u64,
}

/// The availability combination of a record (`crate::combo::name`), as the Redis key
/// suffix `avail:<…>`.
pub(super) fn combo_of(r: &ProxyRecord) -> String {
    combo::name(
        r.upstream.as_str(),
        r.dial.protocol,
        &r.labels.map(Label::as_str),
    )
}

/// The combination indexes of `upstream`'s proxies.
pub(super) fn upstream_combos<'a>(
    st: &'a State,
    upstream: &'a UpstreamId,
) -> impl Iterator<Item = &'a Index> + 'a {
    st.combos
        .iter()
        .filter(move |(name, _)| {
            combo::parse(name).is_some_and(|c| c.upstream == upstream.as_str())
        })
        .map(|(_, ix)| ix)
}

/// Whether the earliest entry of an expiry set is due at `now`.
pub(super) fn first_due<K: Ord>(expiry: &BTreeSet<(i64, K)>, now: Timestamp) -> bool {
    expiry.first().is_some_and(|(t, _)| *t <= now.0)
}

/// Drops at most `limit` entries of a worker expiry set due at `now`, with the values
/// they time in `values` (sessions, runtime reports); returns how many.
pub(super) fn purge_due_workers<V>(
    expiry: &mut BTreeSet<(i64, WorkerId)>,
    values: &mut HashMap<WorkerId, V>,
    now: Timestamp,
    limit: u32,
) -> u32 {
    let mut purged = 0;
    while purged < limit {
        let Some(entry) = expiry.first().filter(|(t, _)| *t <= now.0).cloned() else {
            break;
        };
        expiry.remove(&entry);
        values.remove(&entry.1);
        purged += 1;
    }
    purged
}

impl State {
    /// When `upstream`'s hold-back ends, while it lasts (`docs/pool.md`, "Pool
    /// generations"): its proxies are neither extractable nor assignable before.
    pub fn held(&self, upstream: &UpstreamId, now: Timestamp) -> Option<Timestamp> {
        self.held.get(upstream).copied().filter(|t| now < *t)
    }

    /// Whether a check mark keeps the proxy from extraction at `now`.
    pub fn marked(&self, id: &ProxyId, now: Timestamp) -> bool {
        self.marks.get(id).is_some_and(|m| m.until > now)
    }

    pub fn live(&self, id: &ProxyId, now: Timestamp) -> Option<&Stored> {
        self.records.get(id).filter(|s| s.record.expires_at > now)
    }

    /// The state of a live record.
    pub fn live_state(&self, id: &ProxyId, now: Timestamp) -> Option<ProxyState> {
        self.live(id, now).map(|s| s.record.state)
    }

    /// Removes a record from every AVAILABLE index and its upstream's owned index.
    pub fn unindex(&mut self, r: &ProxyRecord) {
        let member = (r.usable_until.0, r.id.clone());
        self.available.remove(&member);
        let key = combo_of(r);
        if let Some(ix) = self.combos.get_mut(&key) {
            ix.remove(&member);
            if ix.is_empty() {
                self.combos.remove(&key);
            }
        }
        if let Some(ix) = self.owned.get_mut(&r.upstream) {
            ix.remove(&member);
            if ix.is_empty() {
                self.owned.remove(&r.upstream);
            }
        }
    }

    /// Puts a record where the membership rule says it belongs.
    pub fn index(&mut self, r: &ProxyRecord, now: Timestamp) {
        if r.state != ProxyState::Available || r.usable_until <= now {
            return;
        }
        let member = (r.usable_until.0, r.id.clone());
        if self.owners.contains_key(&r.id) {
            self.owned
                .entry(r.upstream.clone())
                .or_default()
                .insert(member);
        } else {
            self.available.insert(member.clone());
            self.combos.entry(combo_of(r)).or_default().insert(member);
        }
    }

    /// Re-indexes a stored record after a change made by `f`, keeping counters right.
    pub fn update(&mut self, id: &ProxyId, now: Timestamp, f: impl FnOnce(&mut ProxyRecord)) {
        let Some(stored) = self.records.get(id) else {
            return;
        };
        let before = stored.record.clone();
        self.unindex(&before);
        let mut after = before.clone();
        f(&mut after);
        self.count(&before.upstream, before.state, -1);
        self.count(&after.upstream, after.state, 1);
        if before.expires_at != after.expires_at {
            self.expiry.remove(&(before.expires_at.0, id.clone()));
            self.expiry.insert((after.expires_at.0, id.clone()));
        }
        self.index(&after, now);
        if let Some(stored) = self.records.get_mut(id) {
            stored.record = after;
        }
        self.changed(id);
    }

    /// Notes a write of `id`'s record in the change feed.
    pub fn changed(&mut self, id: &ProxyId) {
        self.feed_seq += 1;
        self.feed.push_back((self.feed_seq, id.clone()));
        if self.feed.len() > crate::options::CHANGE_FEED_CAPACITY {
            self.feed.pop_front();
        }
    }

    /// Adjusts the inventory and managed counters for one record in `state`.
    pub fn count(&mut self, upstream: &UpstreamId, state: ProxyState, delta: i64) {
        if state.is_unextracted() {
            let n = self.inventory.entry(upstream.clone()).or_default();
            *n += delta;
            if *n == 0 {
                self.inventory.remove(upstream);
            }
        }
        if state.is_managed() {
            let n = self.managed.entry(upstream.clone()).or_default();
            *n += delta;
            if *n == 0 {
                self.managed.remove(upstream);
            }
        }
    }

    /// Deletes a record and everything that points at it.
    pub fn purge(&mut self, id: &ProxyId) {
        let Some(stored) = self.records.remove(id) else {
            return;
        };
        self.changed(id);
        let r = &stored.record;
        if self.unique.get(&stored.unique) == Some(id) {
            self.unique.remove(&stored.unique);
        }
        self.expiry.remove(&(r.expires_at.0, id.clone()));
        self.unindex(r);
        if let Some(a) = self.owners.remove(id) {
            self.owner_expiry
                .remove(&(a.lease_expires_at.0, id.clone()));
        }
        self.marks.remove(id);
        self.count(&r.upstream, r.state, -1);
    }

    /// Purges at most `limit` records past hard expiry; returns how many.
    pub fn purge_expired(&mut self, now: Timestamp, limit: u32) -> u32 {
        self.purge_expired_where(now, limit, |_| true)
    }

    /// Of the first `limit` records past hard expiry, purges those `keep` accepts.
    pub fn purge_expired_where(
        &mut self,
        now: Timestamp,
        limit: u32,
        keep: impl Fn(&ProxyRecord) -> bool,
    ) -> u32 {
        let due: Vec<ProxyId> = self
            .expiry
            .iter()
            .take_while(|(t, _)| *t <= now.0)
            .take(limit as usize)
            .filter(|(_, id)| self.records.get(id).is_none_or(|s| keep(&s.record)))
            .map(|(_, id)| id.clone())
            .collect();
        for id in &due {
            self.purge(id);
        }
        due.len() as u32
    }

    /// A stored result still answering at `now`.
    pub fn result(&self, key: &str, now: Timestamp) -> Option<&StoredResult> {
        self.results
            .get(key)
            .filter(|(exp, _)| *exp > now.0)
            .map(|(_, r)| r)
    }

    pub fn store_result(
        &mut self,
        key: String,
        expires: Timestamp,
        now: Timestamp,
        result: StoredResult,
    ) {
        self.results.retain(|_, (exp, _)| *exp > now.0);
        self.results.insert(key, (expires.0, result));
    }

    /// Releases an assignment: deleted, DRAINING back to AVAILABLE, re-indexed.
    pub fn release(&mut self, id: &ProxyId, now: Timestamp) -> Option<Assignment> {
        let a = self.owners.get(id)?.clone();
        // Unindex while the owner is still known, then drop it and re-index.
        if let Some(stored) = self.records.get(id) {
            let r = stored.record.clone();
            self.unindex(&r);
        }
        self.owners.remove(id);
        self.owner_expiry
            .remove(&(a.lease_expires_at.0, id.clone()));
        self.update(id, now, |r| {
            if r.state == ProxyState::Draining {
                r.state = ProxyState::Available;
            }
        });
        Some(a)
    }

    /// A worker's session if live.
    pub fn live_session(&self, worker: &WorkerId, now: Timestamp) -> Option<&WorkerSession> {
        self.sessions.get(worker).filter(|s| s.expires_at > now)
    }

    /// A worker's runtime if readable (unexpired, bound to its live session).
    pub fn readable_runtime(&self, worker: &WorkerId, now: Timestamp) -> Option<&WorkerRuntime> {
        let session = self.live_session(worker, now)?;
        let stored = self.runtime.get(worker)?;
        (stored.runtime.expires_at > now && stored.runtime.header.session_id == session.session_id)
            .then_some(&stored.runtime)
    }
}
