//! What the harness changed in the pool and when, and how long each change took to be
//! ACKed by the gateway session it concerns.
//!
//! Every change of a batch is registered here *before* the pool write starts, with the
//! batch's start instant; a session that applies a snapshot update carrying the change
//! (an upsert with the new expiry, the removal, the new proxy) and has that update's ACK
//! answered by the controller takes it off the pending map and records the latency.
//! A change is counted once: by the one session that owns the proxy.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// What the harness did to one proxy.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Upserted again with a fresh TTL: seen as an upsert whose `expires_at_ms` is at
    /// least this (the batch's start plus the TTL, minus a clock-rounding margin).
    Refresh { min_expires_at_ms: i64 },
    /// Withdrawn (`Upserter::remove`): seen as a removal.
    Remove,
    /// A new proxy (upserted, marked AVAILABLE): seen when a session's snapshot first
    /// carries it (after the controller assigned it).
    Add,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    batch: usize,
    kind: Kind,
}

/// One change batch: when it started and what its changes' ACKs took.
#[derive(Debug)]
struct Batch {
    started: Instant,
    changes: usize,
    /// Latency of each ACKed change.
    acked: Vec<Duration>,
}

#[derive(Debug, Default)]
struct Inner {
    pending: HashMap<String, Pending>,
    batches: Vec<Batch>,
}

/// Shared by the churn driver and every session.
#[derive(Debug, Default)]
pub struct Tracker {
    inner: Mutex<Inner>,
}

/// A change a session saw in an update, to be confirmed once its ACK is answered.
#[derive(Debug)]
pub struct Seen {
    id: String,
    batch: usize,
}

impl Tracker {
    /// Opens a batch that starts now; returns its index.
    pub fn begin_batch(&self) -> usize {
        let mut g = self.inner.lock();
        g.batches.push(Batch {
            started: Instant::now(),
            changes: 0,
            acked: Vec::new(),
        });
        g.batches.len() - 1
    }

    /// Registers the changes of `batch` (before the pool write that makes them).
    pub fn expect(&self, batch: usize, changes: impl IntoIterator<Item = (String, Kind)>) {
        let mut g = self.inner.lock();
        let mut n = 0;
        for (id, kind) in changes {
            g.pending.insert(id, Pending { batch, kind });
            n += 1;
        }
        if let Some(b) = g.batches.get_mut(batch) {
            b.changes += n;
        }
    }

    /// The tracked changes an update carries: `upserts` as (id, expires_at_ms, new to
    /// this session), `removals` as ids.
    pub fn seen<'a>(
        &self,
        upserts: impl Iterator<Item = (&'a str, i64, bool)>,
        removals: impl Iterator<Item = &'a str>,
    ) -> Vec<Seen> {
        let g = self.inner.lock();
        if g.pending.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (id, expires_at_ms, new) in upserts {
            let Some(p) = g.pending.get(id) else { continue };
            let hit = match p.kind {
                Kind::Refresh { min_expires_at_ms } => expires_at_ms >= min_expires_at_ms,
                Kind::Add => new,
                Kind::Remove => false,
            };
            if hit {
                out.push(Seen {
                    id: id.to_owned(),
                    batch: p.batch,
                });
            }
        }
        for id in removals {
            if let Some(p) = g.pending.get(id)
                && matches!(p.kind, Kind::Remove)
            {
                out.push(Seen {
                    id: id.to_owned(),
                    batch: p.batch,
                });
            }
        }
        out
    }

    /// The ACK of the update that carried `seen` was answered now.
    pub fn acked(&self, seen: Vec<Seen>) {
        if seen.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut g = self.inner.lock();
        for s in seen {
            if g.pending.get(&s.id).is_some_and(|p| p.batch == s.batch) {
                g.pending.remove(&s.id);
                if let Some(b) = g.batches.get_mut(s.batch) {
                    let d = now.saturating_duration_since(b.started);
                    b.acked.push(d);
                }
            }
        }
    }

    /// Batches `from..to` (those started in the measured window) as figures.
    pub fn summary(&self, from: usize, to: usize) -> Summary {
        let g = self.inner.lock();
        let mut per_change = Vec::new();
        let mut per_batch = Vec::new();
        let mut changes = 0;
        let mut unacked = 0;
        let mut incomplete = 0;
        let to = to.min(g.batches.len());
        let from = from.min(to);
        for b in g.batches.get(from..to).unwrap_or_default() {
            changes += b.changes;
            unacked += b.changes.saturating_sub(b.acked.len());
            per_change.extend(b.acked.iter().copied());
            match b.acked.iter().max() {
                Some(max) if b.acked.len() == b.changes => per_batch.push(*max),
                _ => incomplete += 1,
            }
        }
        per_change.sort_unstable();
        per_batch.sort_unstable();
        Summary {
            batches: to - from,
            changes,
            unacked,
            incomplete,
            per_change,
            per_batch,
        }
    }

    /// How many batches were opened so far.
    pub fn batches(&self) -> usize {
        self.inner.lock().batches.len()
    }

    /// Changes not ACKed yet (all batches).
    pub fn pending(&self) -> usize {
        self.inner.lock().pending.len()
    }
}

/// Change latencies of the measured window.
#[derive(Debug)]
pub struct Summary {
    /// Batches started in the window.
    pub batches: usize,
    /// Changes made in them.
    pub changes: usize,
    /// Changes never ACKed by any session (not owned by one, or still in flight).
    pub unacked: usize,
    /// Batches with a change never ACKed (left out of `per_batch`).
    pub incomplete: usize,
    /// Each ACKed change's latency, sorted.
    pub per_change: Vec<Duration>,
    /// Each complete batch's slowest change: when every gateway it concerns had ACKed
    /// it. Sorted.
    pub per_batch: Vec<Duration>,
}

/// The `q` quantile (0..=1) of sorted `v`, in milliseconds (nearest rank).
pub fn quantile_ms(v: &[Duration], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v.get(rank - 1).map(|d| d.as_secs_f64() * 1e3)
}
