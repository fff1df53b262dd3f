//! Throttling of failed authentications, per source address and per user name: the
//! brute-force brake of the gateway's proxy credentials and the Distribution API's
//! HTTP Basic. One definition for both.
//!
//! Each key (a source address, a user name) has a leaky bucket of failures: every
//! failure adds one, one drains away every `refill`; a key whose bucket holds more than
//! `burst` failures is throttled — its next attempts are refused *before* their
//! credentials are judged, right or wrong, until the bucket drained below the limit.
//! Successes never fill a bucket. So a guesser gets `burst` tries, then one per
//! `refill`, from any one address and against any one user name.
//!
//! A user name's bucket does not stop an address that authenticated as that user a
//! short while ago (`trust_for`): a guesser elsewhere cannot lock a working client out.
//!
//! Bounded: at most `capacity` keys; the oldest key goes first when a new one needs
//! room. Sharded mutexes, never held across an await; each critical section is one
//! hash-map operation.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SHARDS: usize = 16;

/// Settings of a throttle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleConfig {
    /// Failures a key may accumulate before it is throttled.
    pub burst: u32,
    /// One failure drains away per this interval.
    pub refill: Duration,
    /// Keys (addresses and user names) remembered at most.
    pub capacity: usize,
    /// How long a success exempts its (address, user) pair from the user's bucket.
    pub trust_for: Duration,
}

impl Default for ThrottleConfig {
    /// 10 failures, then one more every 6 s (10 a minute); 65,536 keys.
    fn default() -> Self {
        Self {
            burst: 10,
            refill: Duration::from_secs(6),
            capacity: 65_536,
            trust_for: Duration::from_secs(3600),
        }
    }
}

/// What a throttle says about an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Judge the credentials.
    Allow,
    /// Refuse without judging; the bucket drains below the limit after this long.
    Throttled(Duration),
}

/// A key: a source address or a user name, digested with a per-process seed.
type Key = (u8, u64);

#[derive(Debug, Default)]
struct Shard {
    /// Theoretical time the bucket is empty again.
    empty_at: HashMap<Key, Instant>,
    order: VecDeque<Key>,
}

/// The throttle.
#[derive(Debug)]
pub struct AuthThrottle {
    config: ThrottleConfig,
    shards: Vec<Mutex<Shard>>,
    seed: RandomState,
}

const SOURCE: u8 = 0;
const USER: u8 = 1;
const PAIR: u8 = 2;

impl AuthThrottle {
    /// A throttle with `config`.
    pub fn new(config: ThrottleConfig) -> Self {
        Self {
            config,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            seed: RandomState::new(),
        }
    }

    fn key_source(&self, ip: IpAddr) -> Key {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        (SOURCE, self.seed.hash_one(ip))
    }

    fn key_user(&self, user: &[u8]) -> Key {
        (USER, self.seed.hash_one(user))
    }

    fn key_pair(&self, source: IpAddr, user: &[u8]) -> Key {
        let ip = match source {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        (PAIR, self.seed.hash_one((ip, user)))
    }

    fn insert(&self, key: Key, until: Instant) {
        let per_shard = self.config.capacity.div_ceil(SHARDS).max(1);
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if shard.empty_at.insert(key, until).is_none() {
            shard.order.push_back(key);
            while shard.empty_at.len() > per_shard {
                let Some(old) = shard.order.pop_front() else {
                    break;
                };
                shard.empty_at.remove(&old);
            }
        }
        while shard.order.len() > 2 * per_shard {
            if let Some(old) = shard.order.pop_front() {
                shard.empty_at.remove(&old);
            }
        }
    }

    fn until(&self, key: Key) -> Option<Instant> {
        let shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        shard.empty_at.get(&key).copied()
    }

    fn shard(&self, key: Key) -> &Mutex<Shard> {
        &self.shards[(key.1 as usize) % SHARDS]
    }

    /// The limit of a bucket, as time ahead of now.
    fn tolerance(&self) -> Duration {
        self.config.refill * self.config.burst
    }

    fn verdict(&self, key: Key, now: Instant) -> Verdict {
        let shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        match shard.empty_at.get(&key) {
            Some(at) => {
                let ahead = at.saturating_duration_since(now);
                let tolerance = self.tolerance();
                if ahead > tolerance {
                    Verdict::Throttled(ahead - tolerance)
                } else {
                    Verdict::Allow
                }
            }
            None => Verdict::Allow,
        }
    }

    fn fail(&self, key: Key, now: Instant) {
        let start = self.until(key).filter(|at| *at > now).unwrap_or(now);
        // Capped: a bucket never holds more than one refill past the limit, so a key
        // hammered for hours is free again a short while after it stops.
        let cap = now + self.tolerance() + self.config.refill;
        self.insert(key, (start + self.config.refill).min(cap));
    }

    /// Whether an attempt from `source` as `user` (if known) may be judged now.
    pub fn check(&self, source: IpAddr, user: Option<&[u8]>, now: Instant) -> Verdict {
        let by_source = self.verdict(self.key_source(source), now);
        let trusted = |u: &[u8]| {
            self.until(self.key_pair(source, u))
                .is_some_and(|until| until > now)
        };
        let by_user = match user {
            Some(u) if !trusted(u) => self.verdict(self.key_user(u), now),
            _ => Verdict::Allow,
        };
        match (by_source, by_user) {
            (Verdict::Throttled(a), Verdict::Throttled(b)) => Verdict::Throttled(a.max(b)),
            (Verdict::Throttled(a), _) | (_, Verdict::Throttled(a)) => Verdict::Throttled(a),
            _ => Verdict::Allow,
        }
    }

    /// Records a failed attempt from `source` as `user` (if one was named).
    pub fn failed(&self, source: IpAddr, user: Option<&[u8]>, now: Instant) {
        self.fail(self.key_source(source), now);
        if let Some(u) = user {
            self.fail(self.key_user(u), now);
        }
    }

    /// Records a success of `source` as `user`: that pair is not held back by the
    /// user's bucket for `trust_for`. Cheap when already recorded recently.
    pub fn succeeded(&self, source: IpAddr, user: &[u8], now: Instant) {
        let key = self.key_pair(source, user);
        let fresh = self
            .until(key)
            .is_some_and(|until| until > now + self.config.trust_for / 2);
        if !fresh {
            self.insert(key, now + self.config.trust_for);
        }
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).empty_at.len())
            .sum()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for AuthThrottle {
    fn default() -> Self {
        Self::new(ThrottleConfig::default())
    }
}

/// The open connections of one listener, capped in total and per source address and
/// shared fairly between sources. A connection over its source's cap is refused. When
/// the listener is full, a connection from a source holding fewer connections than the
/// largest holder (by two or more) displaces that holder's oldest connection, whose
/// [`SourceSlot::evicted`] resolves (its task closes it); otherwise it is refused. So a
/// flood from many addresses cannot lock out an address that holds little: every
/// source can get about `total / sources` connections, whatever the others do.
///
/// One short critical section at accept and at close (hash map and ordered-count
/// updates); memory is bounded by `total` entries.
#[derive(Debug)]
pub struct SourceSlots {
    total: usize,
    per_source: usize,
    state: Mutex<SlotState>,
    evictions: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct SlotState {
    /// Per source, its connections oldest first.
    open: HashMap<IpAddr, VecDeque<Held>>,
    /// Sources by how many connections they hold (for the largest holder).
    by_count: std::collections::BTreeMap<usize, std::collections::HashSet<IpAddr>>,
    held: usize,
    next_id: u64,
}

#[derive(Debug)]
struct Held {
    id: u64,
    evict: std::sync::Arc<tokio::sync::Notify>,
}

impl SlotState {
    fn count(&self, ip: IpAddr) -> usize {
        self.open.get(&ip).map_or(0, VecDeque::len)
    }

    fn recount(&mut self, ip: IpAddr, from: usize, to: usize) {
        if from > 0
            && let Some(set) = self.by_count.get_mut(&from)
        {
            set.remove(&ip);
            if set.is_empty() {
                self.by_count.remove(&from);
            }
        }
        if to > 0 {
            self.by_count.entry(to).or_default().insert(ip);
        } else {
            self.open.remove(&ip);
        }
    }

    /// Displaces the oldest connection of the largest holder if it holds at least two
    /// more than `ip`; whether one was.
    fn displace_for(&mut self, ip: IpAddr) -> bool {
        let own = self.count(ip);
        let Some((&top, set)) = self.by_count.last_key_value() else {
            return false;
        };
        if top < own + 2 {
            return false;
        }
        let Some(&victim) = set.iter().next() else {
            return false;
        };
        let Some(held) = self.open.get_mut(&victim).and_then(VecDeque::pop_front) else {
            return false;
        };
        held.evict.notify_one();
        self.held -= 1;
        self.recount(victim, top, top - 1);
        true
    }
}

/// One connection's place in [`SourceSlots`], given back on drop.
#[derive(Debug)]
pub struct SourceSlot {
    table: std::sync::Arc<SourceSlots>,
    ip: IpAddr,
    id: u64,
    evict: std::sync::Arc<tokio::sync::Notify>,
}

impl SourceSlots {
    /// A listener's table: at most `total` connections, at most `per_source` from one
    /// address (both at least 1).
    pub fn new(total: usize, per_source: usize) -> Self {
        Self {
            total: total.max(1),
            per_source: per_source.max(1),
            state: Mutex::new(SlotState::default()),
            evictions: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A place for a connection from `ip`: refused when `ip` already holds its cap, or
    /// when the listener is full and no source holds two or more connections than `ip`
    /// (otherwise the largest holder's oldest connection is displaced).
    pub fn acquire(self: &std::sync::Arc<Self>, ip: IpAddr) -> Option<SourceSlot> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let own = state.count(ip);
        if own >= self.per_source {
            return None;
        }
        if state.held >= self.total {
            if !state.displace_for(ip) {
                return None;
            }
            self.evictions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let id = state.next_id;
        state.next_id += 1;
        let evict = std::sync::Arc::new(tokio::sync::Notify::new());
        state.open.entry(ip).or_default().push_back(Held {
            id,
            evict: evict.clone(),
        });
        state.held += 1;
        state.recount(ip, own, own + 1);
        Some(SourceSlot {
            table: self.clone(),
            ip,
            id,
            evict,
        })
    }

    /// Connections `ip` holds now.
    pub fn held_by(&self, ip: IpAddr) -> usize {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.count(ip)
    }

    /// Connections held now (displaced ones no longer count).
    pub fn held(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).held
    }

    /// Connections displaced so far.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl SourceSlot {
    /// Resolves when a connection from a smaller holder displaced this one: the owner
    /// closes its connection then. Owns what it waits on (it may outlive the borrow).
    pub fn evicted(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let evict = self.evict.clone();
        async move { evict.notified().await }
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut state = self.table.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(list) = state.open.get_mut(&self.ip) else {
            return;
        };
        // Displaced slots were taken out already.
        let Some(at) = list.iter().position(|h| h.id == self.id) else {
            return;
        };
        list.remove(at);
        let now = list.len();
        state.held -= 1;
        state.recount(self.ip, now + 1, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_slots_cap_each_address_and_come_back() {
        let slots = std::sync::Arc::new(SourceSlots::new(100, 3));
        let a = ip("192.0.2.1");
        let held: Vec<_> = (0..3).filter_map(|_| slots.acquire(a)).collect();
        assert_eq!(held.len(), 3);
        assert!(slots.acquire(a).is_none());
        assert!(
            slots.acquire(ip("::ffff:192.0.2.1")).is_none(),
            "same source"
        );
        assert!(slots.acquire(ip("192.0.2.2")).is_some());
        drop(held);
        assert_eq!(slots.held_by(a), 0);
        assert_eq!(slots.held(), 0);
        assert!(slots.acquire(a).is_some());
    }

    #[tokio::test]
    async fn a_full_listener_displaces_the_largest_holder_for_a_small_one() {
        let slots = std::sync::Arc::new(SourceSlots::new(6, 6));
        let (flooder, other, newcomer) = (ip("192.0.2.1"), ip("192.0.2.2"), ip("192.0.2.3"));
        let flood: Vec<_> = (0..4).filter_map(|_| slots.acquire(flooder)).collect();
        let others: Vec<_> = (0..2).filter_map(|_| slots.acquire(other)).collect();
        assert_eq!((flood.len(), others.len(), slots.held()), (4, 2, 6));
        // Full: the newcomer displaces the flooder's oldest connection.
        let first = slots
            .acquire(newcomer)
            .expect("displaces the largest holder");
        assert_eq!(slots.held(), 6);
        assert_eq!(slots.held_by(flooder), 3);
        tokio::time::timeout(Duration::from_secs(1), flood[0].evicted())
            .await
            .expect("the oldest connection is told");
        // Dropping the displaced slot changes nothing more.
        let mut flood = flood;
        drop(flood.remove(0));
        assert_eq!((slots.held(), slots.held_by(flooder)), (6, 3));
        // A second newcomer connection displaces again (3 vs 1), a third cannot take
        // from anyone holding only one more than it: the flooder and the newcomer then
        // hold 2 each, the other source 2.
        let second = slots.acquire(newcomer).expect("3 vs 1");
        assert_eq!(slots.held_by(flooder), 2);
        assert!(slots.acquire(newcomer).is_none(), "2 vs 2: refused");
        assert!(
            slots.acquire(flooder).is_none(),
            "the largest holder never displaces"
        );
        assert_eq!(slots.evictions(), 2);
        drop((first, second, others, flood));
        assert_eq!(slots.held(), 0);
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn throttle(burst: u32, capacity: usize) -> AuthThrottle {
        AuthThrottle::new(ThrottleConfig {
            burst,
            refill: Duration::from_secs(1),
            capacity,
            trust_for: Duration::from_secs(60),
        })
    }

    #[test]
    fn a_source_gets_burst_tries_then_one_per_refill() {
        let t = throttle(3, 100);
        let now = Instant::now();
        let a = ip("192.0.2.1");
        for _ in 0..3 {
            assert_eq!(t.check(a, None, now), Verdict::Allow);
            t.failed(a, None, now);
        }
        assert_eq!(
            t.check(a, None, now),
            Verdict::Allow,
            "the 4th try is judged"
        );
        t.failed(a, None, now);
        assert!(matches!(t.check(a, None, now), Verdict::Throttled(_)));
        assert_eq!(t.check(ip("192.0.2.2"), None, now), Verdict::Allow);
        assert_eq!(
            t.check(a, None, now + Duration::from_secs(1)),
            Verdict::Allow,
            "one try back per refill"
        );
        assert_eq!(
            t.check(ip("::ffff:192.0.2.1"), None, now),
            t.check(a, None, now),
            "an IPv4-mapped address is the same source"
        );
    }

    #[test]
    fn a_user_is_throttled_from_any_source() {
        let t = throttle(2, 100);
        let now = Instant::now();
        for i in 0..3 {
            t.failed(ip(&format!("198.51.100.{i}")), Some(b"alice"), now);
        }
        assert!(matches!(
            t.check(ip("203.0.113.9"), Some(b"alice"), now),
            Verdict::Throttled(_)
        ));
        assert_eq!(
            t.check(ip("203.0.113.9"), Some(b"bob"), now),
            Verdict::Allow
        );
    }

    #[test]
    fn memory_is_bounded_and_hammering_is_capped() {
        let t = throttle(2, 64);
        let now = Instant::now();
        for i in 0..10_000u32 {
            t.failed(IpAddr::from(i.to_be_bytes()), None, now);
        }
        assert!(t.len() <= 64 + SHARDS, "{}", t.len());
        let a = ip("192.0.2.1");
        for _ in 0..1_000 {
            t.failed(a, None, now);
        }
        assert!(matches!(t.check(a, None, now), Verdict::Throttled(_)));
        assert_eq!(
            t.check(a, None, now + Duration::from_secs(2)),
            Verdict::Allow
        );
    }

    #[test]
    fn a_guesser_elsewhere_cannot_lock_out_a_working_client() {
        let t = throttle(2, 100);
        let now = Instant::now();
        let client = ip("192.0.2.10");
        t.succeeded(client, b"alice", now);
        for i in 0..10 {
            t.failed(ip(&format!("198.51.100.{i}")), Some(b"alice"), now);
        }
        assert_eq!(t.check(client, Some(b"alice"), now), Verdict::Allow);
        assert!(matches!(
            t.check(ip("203.0.113.1"), Some(b"alice"), now),
            Verdict::Throttled(_)
        ));
        // The exemption lasts `trust_for`, no longer.
        let later = now + Duration::from_secs(61);
        for i in 0..10 {
            t.failed(ip(&format!("198.51.100.{i}")), Some(b"alice"), later);
        }
        assert!(matches!(
            t.check(client, Some(b"alice"), later),
            Verdict::Throttled(_)
        ));
    }
}
