//! Sticky sessions: `(client, routing, session)` → the proxy it is bound to, with a
//! TTL from binding and an idle timeout from last use. Bounded: a fixed number of
//! shards, each with a fixed capacity; a full shard first drops dead bindings, then
//! the least recently used one.
//!
//! Sharded `parking_lot` mutexes: each critical section is one hash-map operation,
//! never held across `.await`; sharding keeps cores from queueing on one lock.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use tokio::time::Instant;

use crate::snapshot::{ProxyId, StickyPolicy};

const SHARDS: usize = 64;

/// Identifies a session without storing its strings: two independent keyed hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey(u64, u64);

/// What the table knows about a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Bound and alive: use this proxy if it can still take the request.
    Bound(ProxyId),
    /// The binding outlived its TTL: choose again and say it moved.
    Expired,
    /// No binding (new or idle-forgotten).
    Unknown,
}

/// Why a session's proxy changed (sent in `X-Proxy-Pool-Session-Moved`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveReason {
    /// The session's TTL ran out.
    Expired,
    /// The proxy left the snapshot or passed its `usable_until`.
    ProxyGone,
    /// The proxy had no free slot.
    ProxyFull,
    /// Dialing or the handshake through the proxy failed.
    ProxyFailed,
}

impl MoveReason {
    /// Header value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Expired => "session-expired",
            Self::ProxyGone => "proxy-unavailable",
            Self::ProxyFull => "proxy-full",
            Self::ProxyFailed => "proxy-failed",
        }
    }
}

#[derive(Debug)]
struct Binding {
    proxy: ProxyId,
    bound_at: Instant,
    last_used: Instant,
    ttl: std::time::Duration,
    idle: std::time::Duration,
}

impl Binding {
    fn idle_out(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_used) >= self.idle
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.bound_at) >= self.ttl
    }
}

/// The session table.
#[derive(Debug)]
pub struct SessionTable {
    shards: Vec<Mutex<HashMap<SessionKey, Binding>>>,
    per_shard: usize,
    h1: RandomState,
    h2: RandomState,
}

impl SessionTable {
    /// A table holding at most about `max_sessions` bindings.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: max_sessions.div_ceil(SHARDS).max(1),
            h1: RandomState::new(),
            h2: RandomState::new(),
        }
    }

    /// The key of a session.
    pub fn key(&self, client: &str, routing: &str, session: &str) -> SessionKey {
        let parts = (client, routing, session);
        SessionKey(self.h1.hash_one(parts), self.h2.hash_one(parts))
    }

    fn shard(&self, key: SessionKey) -> &Mutex<HashMap<SessionKey, Binding>> {
        &self.shards[(key.0 as usize) % SHARDS]
    }

    /// Looks a session up, touching it when bound.
    pub fn lookup(&self, key: SessionKey, now: Instant) -> Lookup {
        let mut shard = self.shard(key).lock();
        let Some(b) = shard.get_mut(&key) else {
            return Lookup::Unknown;
        };
        if b.idle_out(now) {
            shard.remove(&key);
            return Lookup::Unknown;
        }
        if b.expired(now) {
            return Lookup::Expired;
        }
        b.last_used = now;
        Lookup::Bound(b.proxy.clone())
    }

    /// Binds (or re-binds) a session to a proxy; its TTL starts now.
    pub fn bind(&self, key: SessionKey, proxy: ProxyId, policy: StickyPolicy, now: Instant) {
        let mut shard = self.shard(key).lock();
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            shard.retain(|_, b| !b.idle_out(now) && !b.expired(now));
            if shard.len() >= self.per_shard
                && let Some(oldest) = shard
                    .iter()
                    .min_by_key(|(_, b)| b.last_used)
                    .map(|(k, _)| *k)
            {
                shard.remove(&oldest);
            }
        }
        shard.insert(
            key,
            Binding {
                proxy,
                bound_at: now,
                last_used: now,
                ttl: policy.ttl,
                idle: policy.idle_timeout,
            },
        );
    }

    /// Bindings held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no binding is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every dead binding (called periodically, off the request path).
    pub fn sweep(&self, now: Instant) {
        for shard in &self.shards {
            shard
                .lock()
                .retain(|_, b| !b.idle_out(now) && !b.expired(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const POLICY: StickyPolicy = StickyPolicy {
        ttl: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(10),
    };

    #[test]
    fn binding_lives_until_ttl_and_idle_timeout() {
        let table = SessionTable::new(100);
        let key = table.key("c", "r", "s1");
        let t0 = Instant::now();
        assert_eq!(table.lookup(key, t0), Lookup::Unknown);
        table.bind(key, ProxyId::from("p"), POLICY, t0);
        let t = t0 + Duration::from_secs(9);
        assert_eq!(table.lookup(key, t), Lookup::Bound(ProxyId::from("p")));
        for step in 2..=6 {
            let t = t0 + Duration::from_secs(9 * step);
            assert_eq!(
                table.lookup(key, t),
                Lookup::Bound(ProxyId::from("p")),
                "touched"
            );
        }
        assert_eq!(
            table.lookup(key, t0 + Duration::from_secs(61)),
            Lookup::Expired
        );
        assert_eq!(
            table.lookup(key, t0 + Duration::from_secs(200)),
            Lookup::Unknown
        );
        assert!(table.is_empty());
    }

    #[test]
    fn keys_separate_clients_routings_and_sessions() {
        let table = SessionTable::new(10);
        let a = table.key("c", "r", "s");
        assert_ne!(a, table.key("c2", "r", "s"));
        assert_ne!(a, table.key("c", "r2", "s"));
        assert_ne!(a, table.key("c", "r", "s2"));
        assert_eq!(a, table.key("c", "r", "s"));
    }

    #[test]
    fn table_is_bounded() {
        let table = SessionTable::new(SHARDS);
        let now = Instant::now();
        for i in 0..10_000 {
            let key = table.key("c", "r", &i.to_string());
            table.bind(key, ProxyId::from("p"), POLICY, now);
        }
        assert!(table.len() <= SHARDS, "{}", table.len());
    }
}
