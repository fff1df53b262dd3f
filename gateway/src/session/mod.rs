//! Sticky sessions: `(client, routing, session)` → the proxy it is bound to, with a
//! TTL from binding and an idle timeout from last use. Bounded: a fixed number of
//! shards, each with a fixed capacity; a full shard first drops dead bindings, then
//! the least recently used one. Each client holds at most its quota of bindings: a
//! client flooding session IDs gets no more bindings (its requests are still served,
//! unpinned) and cannot push other clients' sessions out.
//!
//! Sharded `parking_lot` mutexes, never held across `.await`; sharding keeps cores from
//! queueing on one lock. Each critical section is one hash-map operation plus O(1)
//! list splices: a shard threads its bindings on index-linked lists (per policy, in use
//! order and in bind order), so eviction never scans the shard.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;
use tokio::time::Instant;

use proxy_pool_api::controlplane::model::Sticky;

use crate::proxy_id::ProxyId;

const SHARDS: usize = 64;

/// How long a binding lives: a routing's sticky-session times, as the table keeps
/// them per binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StickyPolicy {
    /// Longest life of a session's binding to one proxy.
    pub ttl: Duration,
    /// A binding unused this long is forgotten.
    pub idle_timeout: Duration,
}

impl From<&Sticky> for StickyPolicy {
    fn from(s: &Sticky) -> Self {
        Self {
            ttl: s.session_ttl,
            idle_timeout: s.idle_timeout,
        }
    }
}

/// Identifies a session without storing its strings: two independent keyed hashes,
/// and a keyed hash of the client alone (its quota's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey(u64, u64, u64);

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

/// "No node": the end of a list.
const NIL: u32 = u32::MAX;

/// A node's neighbours in one of its shard's lists.
#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
};

/// First and last node of one list.
#[derive(Debug, Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
}

const EMPTY: Ends = Ends {
    head: NIL,
    tail: NIL,
};

/// One `T` for each of the two [`Order`]s.
#[derive(Debug, Clone, Copy)]
struct PerOrder<T> {
    by_use: T,
    by_bind: T,
}

impl<T: Copy> PerOrder<T> {
    /// `value` for both orders.
    const fn both(value: T) -> Self {
        Self {
            by_use: value,
            by_bind: value,
        }
    }

    fn get(&mut self, order: Order) -> &mut T {
        match order {
            Order::Use => &mut self.by_use,
            Order::Bind => &mut self.by_bind,
        }
    }
}

/// The two orders each policy group keeps.
#[derive(Debug, Clone, Copy)]
enum Order {
    /// Least recently used first (`last_used`, then touch sequence).
    Use,
    /// Oldest binding first (`bound_at`).
    Bind,
}

#[derive(Debug)]
struct Binding {
    key: SessionKey,
    proxy: ProxyId,
    bound_at: Instant,
    last_used: Instant,
    /// The shard's touch counter at the last bind or use: orders equal `last_used`.
    touched: u64,
    /// Index of its policy group in `Shard::groups`.
    group: u32,
    /// Its neighbours in its group's lists.
    links: PerOrder<Link>,
}

/// The bindings of one shard made under one policy. With one `ttl` and one
/// `idle_timeout`, the idle-out bindings are a prefix of the use order and the
/// TTL-expired ones a prefix of the bind order, so dead bindings are found in O(1) each.
#[derive(Debug)]
struct Group {
    policy: StickyPolicy,
    /// Bindings in the group; 0 = a vacant slot, reused by the next new policy.
    len: usize,
    /// Ends of its lists.
    ends: PerOrder<Ends>,
}

/// One shard: a dense slab of bindings threaded on index-linked lists per policy
/// group, and a map from key to slab index. Every operation is O(1) per binding it
/// adds, touches or drops, plus O(policies present in the shard) for a full shard's
/// eviction — never a scan of the bindings.
#[derive(Debug, Default)]
struct Shard {
    index: HashMap<SessionKey, u32>,
    nodes: Vec<Binding>,
    groups: Vec<Group>,
    /// Latest instant stamped: stored times never go back, so the lists stay sorted
    /// even when two callers' `Instant::now()` reach the lock out of order.
    clock: Option<Instant>,
    touches: u64,
    /// Clients of bindings removed since the table last settled its quota counts.
    released: Vec<u64>,
}

impl Shard {
    fn stamp(&mut self, now: Instant) -> (Instant, u64) {
        let t = match self.clock {
            Some(c) if c > now => c,
            _ => now,
        };
        self.clock = Some(t);
        self.touches += 1;
        (t, self.touches)
    }

    fn idle_out(&self, i: u32, now: Instant) -> bool {
        let b = &self.nodes[i as usize];
        now.saturating_duration_since(b.last_used)
            >= self.groups[b.group as usize].policy.idle_timeout
    }

    fn expired(&self, i: u32, now: Instant) -> bool {
        let b = &self.nodes[i as usize];
        now.saturating_duration_since(b.bound_at) >= self.groups[b.group as usize].policy.ttl
    }

    /// Whether binding `i` is dead by `order`'s measure: idle out (use order) or past
    /// its TTL (bind order).
    fn dead_by(&self, order: Order, i: u32, now: Instant) -> bool {
        match order {
            Order::Use => self.idle_out(i, now),
            Order::Bind => self.expired(i, now),
        }
    }

    fn push_back(&mut self, i: u32, order: Order) {
        let g = self.nodes[i as usize].group as usize;
        let tail = self.groups[g].ends.get(order).tail;
        *self.nodes[i as usize].links.get(order) = Link {
            prev: tail,
            next: NIL,
        };
        self.set_next(g, order, tail, i);
        self.set_prev(g, order, NIL, i);
    }

    /// Makes `to` follow `prev` in group `g`'s `order` list (`prev` NIL: the list's
    /// head).
    fn set_next(&mut self, g: usize, order: Order, prev: u32, to: u32) {
        if prev == NIL {
            self.groups[g].ends.get(order).head = to;
        } else {
            self.nodes[prev as usize].links.get(order).next = to;
        }
    }

    /// Makes `to` precede `next` in group `g`'s `order` list (`next` NIL: the list's
    /// tail).
    fn set_prev(&mut self, g: usize, order: Order, next: u32, to: u32) {
        if next == NIL {
            self.groups[g].ends.get(order).tail = to;
        } else {
            self.nodes[next as usize].links.get(order).prev = to;
        }
    }

    fn unlink(&mut self, i: u32, order: Order) {
        let g = self.nodes[i as usize].group as usize;
        let Link { prev, next } = *self.nodes[i as usize].links.get(order);
        self.set_next(g, order, prev, next);
        self.set_prev(g, order, next, prev);
        *self.nodes[i as usize].links.get(order) = UNLINKED;
    }

    /// Points the neighbours, group ends and index entry of the node now at `i`
    /// (moved there by `swap_remove`) to `i`.
    fn relocated(&mut self, i: u32) {
        let g = self.nodes[i as usize].group as usize;
        for order in [Order::Use, Order::Bind] {
            let Link { prev, next } = *self.nodes[i as usize].links.get(order);
            self.set_next(g, order, prev, i);
            self.set_prev(g, order, next, i);
        }
        let key = self.nodes[i as usize].key;
        self.index.insert(key, i);
    }

    fn remove(&mut self, i: u32) {
        self.unlink(i, Order::Use);
        self.unlink(i, Order::Bind);
        let b = self.nodes.swap_remove(i as usize);
        self.groups[b.group as usize].len -= 1;
        self.index.remove(&b.key);
        self.released.push(b.key.2);
        if (i as usize) < self.nodes.len() {
            self.relocated(i);
        }
    }

    /// The group for `policy`: its current one, else a vacant slot, else a new one.
    fn group_for(&mut self, policy: StickyPolicy) -> u32 {
        if let Some(g) = self
            .groups
            .iter()
            .position(|g| g.len > 0 && g.policy == policy)
        {
            return g as u32;
        }
        let vacant = Group {
            policy,
            len: 0,
            ends: PerOrder::both(EMPTY),
        };
        match self.groups.iter().position(|g| g.len == 0) {
            Some(g) => {
                self.groups[g] = vacant;
                g as u32
            }
            None => {
                self.groups.push(vacant);
                (self.groups.len() - 1) as u32
            }
        }
    }

    /// Drops every binding idle for its `idle_timeout` or past its `ttl`: the dead
    /// prefixes of each group's two orders.
    fn drop_dead(&mut self, now: Instant) {
        for g in 0..self.groups.len() {
            for order in [Order::Use, Order::Bind] {
                loop {
                    let head = self.groups[g].ends.get(order).head;
                    if head == NIL || !self.dead_by(order, head, now) {
                        break;
                    }
                    self.remove(head);
                }
            }
        }
    }

    /// The least recently used binding: the oldest of the groups' use-order heads.
    fn least_recently_used(&self) -> Option<u32> {
        self.groups
            .iter()
            .filter(|g| g.len > 0)
            .map(|g| g.ends.by_use.head)
            .min_by_key(|&i| {
                let b = &self.nodes[i as usize];
                (b.last_used, b.touched)
            })
    }

    fn insert(&mut self, key: SessionKey, proxy: ProxyId, policy: StickyPolicy, now: Instant) {
        let group = self.group_for(policy);
        let (t, touched) = self.stamp(now);
        let i = self.nodes.len() as u32;
        self.nodes.push(Binding {
            key,
            proxy,
            bound_at: t,
            last_used: t,
            touched,
            group,
            links: PerOrder::both(UNLINKED),
        });
        self.groups[group as usize].len += 1;
        self.push_back(i, Order::Use);
        self.push_back(i, Order::Bind);
        self.index.insert(key, i);
    }
}

/// The session table.
#[derive(Debug)]
pub struct SessionTable {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    h1: RandomState,
    h2: RandomState,
    /// Most bindings of one client.
    quota: usize,
    /// Bindings held per client, sharded by client (locked after a session shard,
    /// never before one).
    held: Vec<Mutex<HashMap<u64, u32>>>,
}

impl SessionTable {
    /// A table holding at most about `max_sessions` bindings.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            // Slab indices are u32 with `NIL` reserved.
            per_shard: max_sessions.div_ceil(SHARDS).clamp(1, (NIL - 1) as usize),
            h1: RandomState::new(),
            h2: RandomState::new(),
            quota: max_sessions.max(1),
            held: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    /// Limits each client to `quota` bindings.
    #[must_use]
    pub fn with_client_quota(mut self, quota: usize) -> Self {
        self.quota = quota.max(1);
        self
    }

    /// The key of a session.
    pub fn key(&self, client: &str, routing: &str, session: &str) -> SessionKey {
        let parts = (client, routing, session);
        SessionKey(
            self.h1.hash_one(parts),
            self.h2.hash_one(parts),
            self.h2.hash_one(client),
        )
    }

    fn held(&self, client: u64) -> &Mutex<HashMap<u64, u32>> {
        &self.held[(client as usize) % SHARDS]
    }

    /// Settles the quota counts of the bindings `shard` removed.
    fn settle(&self, shard: &mut Shard) {
        for client in shard.released.drain(..) {
            let mut held = self.held(client).lock();
            if let Some(n) = held.get_mut(&client) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    held.remove(&client);
                }
            }
        }
    }

    /// Bindings `client` holds now (by the keyed hash in a [`SessionKey`]).
    fn held_by(&self, client: u64) -> usize {
        self.held(client)
            .lock()
            .get(&client)
            .map_or(0, |n| *n as usize)
    }

    fn shard(&self, key: SessionKey) -> &Mutex<Shard> {
        &self.shards[(key.0 as usize) % SHARDS]
    }

    /// Looks a session up, touching it when bound.
    pub fn lookup(&self, key: SessionKey, now: Instant) -> Lookup {
        let mut shard = self.shard(key).lock();
        let Some(&i) = shard.index.get(&key) else {
            return Lookup::Unknown;
        };
        if shard.idle_out(i, now) {
            shard.remove(i);
            self.settle(&mut shard);
            return Lookup::Unknown;
        }
        if shard.expired(i, now) {
            return Lookup::Expired;
        }
        let (t, touched) = shard.stamp(now);
        let b = &mut shard.nodes[i as usize];
        b.last_used = t;
        b.touched = touched;
        let proxy = b.proxy.clone();
        shard.unlink(i, Order::Use);
        shard.push_back(i, Order::Use);
        Lookup::Bound(proxy)
    }

    /// Binds (or re-binds) a session to a proxy; its TTL starts now. A new session of
    /// a client at its quota is not bound (returns `false`). A new session in a full
    /// shard first drops the shard's dead bindings, then (if still full) its least
    /// recently used one.
    pub fn bind(
        &self,
        key: SessionKey,
        proxy: ProxyId,
        policy: StickyPolicy,
        now: Instant,
    ) -> bool {
        let mut shard = self.shard(key).lock();
        if let Some(&i) = shard.index.get(&key) {
            shard.remove(i);
        } else {
            if self.held_by(key.2) >= self.quota {
                // Dead bindings of this shard may still count: drop them, then judge.
                shard.drop_dead(now);
                self.settle(&mut shard);
                if self.held_by(key.2) >= self.quota {
                    return false;
                }
            }
            if shard.index.len() >= self.per_shard {
                shard.drop_dead(now);
                if shard.index.len() >= self.per_shard
                    && let Some(lru) = shard.least_recently_used()
                {
                    shard.remove(lru);
                }
            }
        }
        shard.insert(key, proxy, policy, now);
        self.settle(&mut shard);
        *self.held(key.2).lock().entry(key.2).or_insert(0) += 1;
        true
    }

    /// Bindings held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().index.len()).sum()
    }

    /// Whether no binding is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every dead binding (called periodically, off the request path).
    pub fn sweep(&self, now: Instant) {
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.drop_dead(now);
            self.settle(&mut shard);
        }
    }
}

#[cfg(test)]
mod tests;
