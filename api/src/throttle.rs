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

/// Open connections per source address, for a listener's per-source cap: a flood from
/// one address takes at most its share of the listener's connections, and every other
/// address is still served. One short critical section at accept and at close.
#[derive(Debug, Default)]
pub struct SourceSlots {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in [`SourceSlots`], given back on drop.
#[derive(Debug)]
pub struct SourceSlot {
    table: std::sync::Arc<SourceSlots>,
    ip: IpAddr,
}

impl SourceSlots {
    /// A place for a connection from `ip`, unless `ip` already holds `max`.
    pub fn acquire(self: &std::sync::Arc<Self>, ip: IpAddr, max: usize) -> Option<SourceSlot> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= max.max(1) {
            return None;
        }
        *n += 1;
        Some(SourceSlot {
            table: self.clone(),
            ip,
        })
    }

    /// Connections `ip` holds now.
    pub fn held_by(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_slots_cap_each_address_and_come_back() {
        let slots = std::sync::Arc::new(SourceSlots::default());
        let a = ip("192.0.2.1");
        let held: Vec<_> = (0..3).filter_map(|_| slots.acquire(a, 3)).collect();
        assert_eq!(held.len(), 3);
        assert!(slots.acquire(a, 3).is_none());
        assert!(
            slots.acquire(ip("::ffff:192.0.2.1"), 3).is_none(),
            "same source"
        );
        assert!(slots.acquire(ip("192.0.2.2"), 3).is_some());
        drop(held);
        assert_eq!(slots.held_by(a), 0);
        assert!(slots.acquire(a, 3).is_some());
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
