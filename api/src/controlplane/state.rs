//! A worker's snapshot state, the checksum and the delta rules — shared by the
//! controller (which publishes through it) and the workers (which apply through it), so
//! both ends compute the same checksum by construction.
//!
//! # Checksum
//!
//! `SHA-256("proxy-pool/snapshot/v1" ‖ version ‖ ownership_epoch ‖ R ‖ n ‖ S)` with
//! integers as little-endian `u64`, `R` = SHA-256 of the canonical encoding of the
//! ordered routings, `n` the number of proxies and `S` the sum modulo 2²⁵⁶ of the
//! SHA-256 of each proxy's canonical encoding. The sum makes the checksum independent
//! of proxy order and lets a delta update it in O(changes). `generated_at` and
//! `valid_until` are not covered (they are freshness metadata). A proxy's canonical
//! encoding is its deterministic protobuf encoding (fields in number order, proto3
//! defaults omitted — exactly what prost writes; [`super::wire::encode_proxy`]), which
//! the controller also caches to send full snapshots without re-encoding. The routings'
//! canonical encoding writes every field in proto field order: strings as a `u32`
//! little-endian length then the bytes, integers little-endian, presence bytes for
//! optional values, list lengths before lists.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

pub use super::checksum::routings_digest;
use super::checksum::{Sum, checksum_of};
use super::model::{Checksum, Delta, Routing, Snapshot, SnapshotProxy};

/// Why a snapshot or delta cannot be applied; the worker answers with a negative ACK
/// (and, for a delta, re-opens the watch to get a full snapshot).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The delta's base is not the local version.
    #[error("delta base {base} does not match local version {local}")]
    BaseMismatch {
        /// Delta base.
        base: u64,
        /// Local version.
        local: u64,
    },
    /// The content does not hash to the announced checksum.
    #[error("checksum mismatch")]
    ChecksumMismatch,
    /// A delta removes a proxy the local state does not hold, or lists one twice.
    #[error("delta does not fit the local state")]
    Inconsistent,
    /// Versions must increase.
    #[error("version does not increase")]
    VersionRegression,
}

pub use super::model::Header;

#[derive(Clone)]
struct Entry {
    proxy: SnapshotProxy,
    /// Its protobuf encoding (see [`super::wire::encode_proxy`]).
    wire: Vec<u8>,
    digest: [u8; 32],
}

impl std::fmt::Debug for Entry {
    // The cached encoding holds the dial password: print only its length.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("proxy", &self.proxy)
            .field("wire_len", &self.wire.len())
            .finish()
    }
}

impl Entry {
    fn new(proxy: SnapshotProxy) -> Self {
        let mut wire = Vec::with_capacity(160);
        super::wire::encode_proxy(&proxy, &mut wire);
        let digest = Sha256::digest(&wire).into();
        Self {
            proxy,
            wire,
            digest,
        }
    }
}

/// SHA-256 of one proxy's canonical encoding: its deterministic protobuf encoding
/// (fields in number order, proto3 defaults omitted; [`super::wire::encode_proxy`]).
pub fn proxy_digest(p: &SnapshotProxy) -> [u8; 32] {
    Entry::new(p.clone()).digest
}

/// One worker's snapshot content with per-proxy digests (version 0 = nothing yet).
#[derive(Clone, Debug, Default)]
pub struct SnapshotState {
    header: Option<Header>,
    routings: Vec<Routing>,
    routings_digest: [u8; 32],
    proxies: BTreeMap<String, Entry>,
    sum: Sum,
    checksum: Checksum,
}

impl SnapshotState {
    /// An empty state at version 0.
    pub fn new() -> Self {
        Self {
            routings_digest: routings_digest(&[]),
            ..Self::default()
        }
    }

    /// Builds a state from a full snapshot, verifying its checksum.
    pub fn from_snapshot(s: Snapshot) -> Result<Self, StateError> {
        let st = Self::build(s.header, s.routings, s.proxies)?;
        if st.checksum != s.checksum {
            return Err(StateError::ChecksumMismatch);
        }
        Ok(st)
    }

    /// Builds a state from its content (any order); refuses duplicate IDs.
    pub fn build(
        header: Header,
        routings: Vec<Routing>,
        mut proxies: Vec<SnapshotProxy>,
    ) -> Result<Self, StateError> {
        proxies.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        if proxies.windows(2).any(|w| w[0].id == w[1].id) {
            return Err(StateError::Inconsistent);
        }
        let mut sum = Sum::default();
        let entries: BTreeMap<String, Entry> = proxies
            .into_iter()
            .map(|p| {
                let e = Entry::new(p);
                sum.add(&e.digest);
                (e.proxy.id.clone(), e)
            })
            .collect();
        let rd = routings_digest(&routings);
        let checksum = checksum_of(
            header.version,
            header.ownership_epoch,
            &rd,
            entries.len(),
            &sum,
        );
        Ok(Self {
            header: Some(header),
            routings,
            routings_digest: rd,
            proxies: entries,
            sum,
            checksum,
        })
    }

    /// The complete encoding of a `SnapshotUpdate` carrying the full snapshot of the
    /// current version, from the cached per-proxy encodings (no message is built).
    pub fn encode_full_update(&self) -> bytes::Bytes {
        let head = self.to_message_head();
        super::wire::encode_full(&head, self.proxies.values().map(|e| e.wire.as_slice()))
    }

    /// The wire message of the current version without its proxies.
    fn to_message_head(&self) -> super::pb::WorkerSnapshot {
        let h = self.header.unwrap_or_default();
        super::pb::WorkerSnapshot {
            version: h.version,
            ownership_epoch: h.ownership_epoch,
            generated_at_ms: h.generated_at_ms,
            valid_until_ms: h.valid_until_ms,
            routings: self.routings.iter().map(super::pb::Routing::from).collect(),
            proxies: Vec::new(),
            checksum: self.checksum.0.to_vec(),
        }
    }

    /// The full snapshot of the current version as its wire message (one copy of
    /// each field, no intermediate domain snapshot).
    pub fn to_message(&self) -> super::pb::WorkerSnapshot {
        let mut message = self.to_message_head();
        message.proxies = self
            .proxies
            .values()
            .map(|e| super::pb::SnapshotProxy::from(&e.proxy))
            .collect();
        message
    }

    /// Current version (0 before the first snapshot).
    pub fn version(&self) -> u64 {
        self.header.map_or(0, |h| h.version)
    }

    /// Header of the current version.
    pub fn header(&self) -> Option<Header> {
        self.header
    }

    /// Current checksum.
    pub fn checksum(&self) -> Checksum {
        self.checksum
    }

    /// Routings in match order.
    pub fn routings(&self) -> &[Routing] {
        &self.routings
    }

    /// Proxies by ID order.
    pub fn proxies(&self) -> impl Iterator<Item = &SnapshotProxy> {
        self.proxies.values().map(|e| &e.proxy)
    }

    /// One proxy.
    pub fn proxy(&self, id: &str) -> Option<&SnapshotProxy> {
        self.proxies.get(id).map(|e| &e.proxy)
    }

    /// Number of proxies.
    pub fn len(&self) -> usize {
        self.proxies.len()
    }

    /// No proxies.
    pub fn is_empty(&self) -> bool {
        self.proxies.is_empty()
    }

    /// The full snapshot of the current version.
    pub fn to_snapshot(&self) -> Snapshot {
        Snapshot {
            header: self.header.unwrap_or_default(),
            routings: self.routings.clone(),
            proxies: self.proxies().cloned().collect(),
            checksum: self.checksum,
        }
    }

    /// Applies a delta: only onto its base version, and only if the result hashes to
    /// its checksum. On error nothing changes.
    pub fn apply_delta(&mut self, d: Delta) -> Result<(), StateError> {
        let local = self.version();
        if d.base_version != local || self.header.is_none() {
            return Err(StateError::BaseMismatch {
                base: d.base_version,
                local,
            });
        }
        if d.header.version <= local {
            return Err(StateError::VersionRegression);
        }
        let header = d.header;
        let plan = self.plan(&header, d.upserts, &d.removals, d.routings.as_deref())?;
        if plan.checksum != d.checksum {
            return Err(StateError::ChecksumMismatch);
        }
        self.commit(plan, &d.removals, header, d.routings);
        Ok(())
    }

    /// Controller side: moves to `header` with the desired proxies (any order) and,
    /// when given, new routings; returns the delta from the previous version.
    pub fn advance(
        &mut self,
        header: Header,
        routings: Option<Vec<Routing>>,
        desired: &[SnapshotProxy],
    ) -> Result<Delta, StateError> {
        let changes = self.diff(routings, desired);
        self.apply(header, changes)
    }

    /// The changes that turn this state into `desired` (any order; of duplicate IDs the
    /// first wins) with `routings` (when given). Reads only; clones only what changed.
    pub fn diff(&self, routings: Option<Vec<Routing>>, desired: &[SnapshotProxy]) -> Changes {
        let mut want: Vec<&SnapshotProxy> = desired.iter().collect();
        want.sort_by(|a, b| a.id.cmp(&b.id));
        want.dedup_by(|a, b| a.id == b.id);
        let mut removals = Vec::new();
        let mut upserts = Vec::new();
        let mut want = want.into_iter().peekable();
        for (id, e) in &self.proxies {
            while want.peek().is_some_and(|p| p.id < *id) {
                upserts.extend(want.next().cloned());
            }
            match want.peek() {
                Some(p) if p.id == *id => {
                    if let Some(p) = want.next()
                        && *p != e.proxy
                    {
                        upserts.push(p.clone());
                    }
                }
                _ => removals.push(id.clone()),
            }
        }
        upserts.extend(want.cloned());
        Changes {
            upserts,
            removals,
            routings: routings.filter(|r| *r != self.routings),
        }
    }

    /// Controller side: applies `changes` as version `header` and returns the delta.
    pub fn apply(&mut self, header: Header, changes: Changes) -> Result<Delta, StateError> {
        if header.version <= self.version() {
            return Err(StateError::VersionRegression);
        }
        let Changes {
            upserts,
            removals,
            routings,
        } = changes;
        let base_version = self.version();
        let plan = self.plan(&header, upserts.clone(), &removals, routings.as_deref())?;
        let checksum = plan.checksum;
        self.commit(plan, &removals, header, routings.clone());
        Ok(Delta {
            base_version,
            header,
            upserts,
            removals,
            routings,
            checksum,
        })
    }

    /// What `header` with these changes would hold (new routings, when given), and its
    /// checksum; nothing changes yet.
    fn plan(
        &self,
        header: &Header,
        upserts: Vec<SnapshotProxy>,
        removals: &[String],
        routings: Option<&[Routing]>,
    ) -> Result<Plan, StateError> {
        let mut sum = self.sum;
        let mut count = self.proxies.len();
        let mut seen = std::collections::HashSet::with_capacity(removals.len() + upserts.len());
        for id in removals {
            let e = self.proxies.get(id).ok_or(StateError::Inconsistent)?;
            if !seen.insert(id.as_str()) {
                return Err(StateError::Inconsistent);
            }
            sum.sub(&e.digest);
            count -= 1;
        }
        let mut entries = Vec::with_capacity(upserts.len());
        for p in upserts {
            if seen.contains(p.id.as_str()) {
                return Err(StateError::Inconsistent);
            }
            match self.proxies.get(&p.id) {
                Some(old) => sum.sub(&old.digest),
                None => count += 1,
            }
            let e = Entry::new(p);
            sum.add(&e.digest);
            entries.push(e);
        }
        let mut ids: Vec<&str> = entries.iter().map(|e| e.proxy.id.as_str()).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(StateError::Inconsistent);
        }
        let routings_digest = routings.map_or(self.routings_digest, routings_digest);
        let checksum = checksum_of(
            header.version,
            header.ownership_epoch,
            &routings_digest,
            count,
            &sum,
        );
        Ok(Plan {
            entries,
            sum,
            routings_digest,
            checksum,
        })
    }

    fn commit(
        &mut self,
        plan: Plan,
        removals: &[String],
        header: Header,
        routings: Option<Vec<Routing>>,
    ) {
        for id in removals {
            self.proxies.remove(id);
        }
        for e in plan.entries {
            self.proxies.insert(e.proxy.id.clone(), e);
        }
        if let Some(r) = routings {
            self.routings = r;
        }
        self.routings_digest = plan.routings_digest;
        self.sum = plan.sum;
        self.checksum = plan.checksum;
        self.header = Some(header);
    }
}

/// Content changes between two versions (see [`SnapshotState::diff`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Added or changed proxies, sorted by ID.
    pub upserts: Vec<SnapshotProxy>,
    /// Removed IDs, sorted.
    pub removals: Vec<String>,
    /// New routings, when they changed.
    pub routings: Option<Vec<Routing>>,
}

impl Changes {
    /// Nothing changes.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.removals.is_empty() && self.routings.is_none()
    }
}

struct Plan {
    entries: Vec<Entry>,
    sum: Sum,
    routings_digest: [u8; 32],
    checksum: Checksum,
}

#[cfg(test)]
#[path = "state_tests.rs"]
pub(super) mod tests;
