//! Admission rate limits: a global and a per-client token bucket (GCRA), checked before
//! any inventory is touched.
//!
//! [`LocalLimiter`] keeps state in process (authoritative with the memory store, an
//! early reject in front of Redis otherwise), at most [`MAX_LOCAL_BUCKETS`] client
//! buckets: a new client in a full table pushes out the oldest bucket, so a flood of
//! distinct client IDs costs memory-bounded churn and never refuses anyone else;
//! an evicted client starts again with a full burst, as a new client would; [`RedisLimiter`] is authoritative across
//! replicas: one Lua script, Redis server time, client IDs digested before they enter a
//! key. A limiter that cannot answer is an error (503), never an implicit allow.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use proxy_pool_api::config::Rate;
use sha2::{Digest, Sha256};

use crate::redis_link::RedisLink;

/// Most client buckets the local limiter keeps.
pub const MAX_LOCAL_BUCKETS: usize = 100_000;

/// The answer of a limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// Over the limit; retry after this long.
    Deny(Duration),
}

/// The limiter could not decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimiterError {
    /// Storage unreachable or too slow.
    #[error("rate limiter unavailable")]
    Unavailable,
}

/// A rate limiter.
#[async_trait]
pub trait RateLimiter: Send + Sync + std::fmt::Debug {
    /// Admits one request of `client` under `client_rate` and the global rate.
    async fn admit(
        &self,
        client: &str,
        client_rate: Option<Rate>,
    ) -> Result<Decision, LimiterError>;
}

/// Emission interval and tolerance of a rate, in microseconds.
fn gcra(rate: Rate) -> (u64, u64) {
    let t = 1_000_000 / u64::from(rate.requests_per_second.get());
    (t.max(1), t.max(1) * u64::from(rate.burst.get()))
}

/// In-process GCRA buckets.
#[derive(Debug)]
pub struct LocalLimiter {
    global: Option<Rate>,
    origin: Instant,
    state: Mutex<LocalState>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct LocalState {
    global_tat: u64,
    clients: HashMap<[u8; 16], u64>,
    /// Client keys in first-seen order (the eviction order).
    order: VecDeque<[u8; 16]>,
}

impl LocalLimiter {
    /// A limiter with this global rate (`None`: no global limit).
    pub fn new(global: Option<Rate>) -> Self {
        Self::with_capacity(global, MAX_LOCAL_BUCKETS)
    }

    /// A limiter keeping at most `capacity` client buckets.
    pub fn with_capacity(global: Option<Rate>, capacity: usize) -> Self {
        Self {
            global,
            origin: Instant::now(),
            state: Mutex::new(LocalState::default()),
            capacity: capacity.max(1),
        }
    }

    /// Client buckets held now.
    pub fn buckets(&self) -> usize {
        self.state.lock().clients.len()
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX) + 1
    }

    /// Synchronous admission (no I/O).
    pub fn admit_now(
        &self,
        client: &str,
        client_rate: Option<Rate>,
    ) -> Result<Decision, LimiterError> {
        let now = self.now_us();
        let key = client_key(client);
        // One short critical section, no await inside: a plain mutex is the simplest
        // correct choice here.
        let mut st = self.state.lock();
        let mut retry = 0u64;
        let mut next_global = None;
        if let Some(rate) = self.global {
            let (t, tol) = gcra(rate);
            let new = st.global_tat.max(now) + t;
            if new - now > tol {
                retry = retry.max(new - now - tol);
            }
            next_global = Some(new);
        }
        let mut next_client = None;
        if let Some(rate) = client_rate {
            let (t, tol) = gcra(rate);
            let tat = st.clients.get(&key).copied().unwrap_or(0);
            let new = tat.max(now) + t;
            if new - now > tol {
                retry = retry.max(new - now - tol);
            }
            next_client = Some(new);
        }
        if retry > 0 {
            return Ok(Decision::Deny(Duration::from_micros(retry)));
        }
        if let Some(g) = next_global {
            st.global_tat = g;
        }
        if let Some(c) = next_client
            && st.clients.insert(key, c).is_none()
        {
            st.order.push_back(key);
            // Oldest first out: O(1) per new client, whatever the flood.
            while st.clients.len() > self.capacity {
                let Some(old) = st.order.pop_front() else {
                    break;
                };
                st.clients.remove(&old);
            }
        }
        Ok(Decision::Allow)
    }
}

#[async_trait]
impl RateLimiter for LocalLimiter {
    async fn admit(
        &self,
        client: &str,
        client_rate: Option<Rate>,
    ) -> Result<Decision, LimiterError> {
        self.admit_now(client, client_rate)
    }
}

fn client_key(client: &str) -> [u8; 16] {
    let d = Sha256::digest(client.as_bytes());
    let mut k = [0u8; 16];
    k.copy_from_slice(&d[..16]);
    k
}

/// The GCRA script: every bucket in `KEYS` with (interval, tolerance) pairs in `ARGV`;
/// all admit or none is charged. Time is Redis server time.
const SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local retry = 0
local news = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if tat < now then tat = now end
  local new = tat + interval
  local over = new - now - tolerance
  if over > 0 and over > retry then retry = over end
  news[i] = new
end
if retry > 0 then return {0, string.format('%.0f', retry)} end
for i = 1, #KEYS do
  local ttl_ms = math.floor((news[i] - now) / 1000) + 1000
  redis.call('SET', KEYS[i], string.format('%.0f', news[i]), 'PX', ttl_ms)
end
return {1, '0'}
"#;

/// The authoritative limiter on Redis, with a local early reject in front.
#[derive(Debug)]
pub struct RedisLimiter {
    link: Arc<RedisLink>,
    script: redis::Script,
    global: Option<Rate>,
    early: LocalLimiter,
}

impl RedisLimiter {
    /// A limiter on `link`.
    pub fn new(link: Arc<RedisLink>, global: Option<Rate>) -> Self {
        Self {
            link,
            script: redis::Script::new(SCRIPT),
            global,
            early: LocalLimiter::new(global),
        }
    }
}

#[async_trait]
impl RateLimiter for RedisLimiter {
    async fn admit(
        &self,
        client: &str,
        client_rate: Option<Rate>,
    ) -> Result<Decision, LimiterError> {
        if self.global.is_none() && client_rate.is_none() {
            return Ok(Decision::Allow);
        }
        if let Decision::Deny(d) = self.early.admit_now(client, client_rate)? {
            return Ok(Decision::Deny(d));
        }
        let mut inv = self.script.prepare_invoke();
        if let Some(rate) = self.global {
            let (t, tol) = gcra(rate);
            inv.key("pp:{ratelimit}:global").arg(t).arg(tol);
        }
        if let Some(rate) = client_rate {
            let (t, tol) = gcra(rate);
            inv.key(format!(
                "pp:{{ratelimit}}:client:{}",
                hex::encode(client_key(client))
            ))
            .arg(t)
            .arg(tol);
        }
        let (allowed, retry): (i64, String) = self
            .link
            .invoke(&inv)
            .await
            .map_err(|_| LimiterError::Unavailable)?;
        if allowed == 1 {
            Ok(Decision::Allow)
        } else {
            let us: u64 = retry.parse().unwrap_or(1_000_000);
            Ok(Decision::Deny(Duration::from_micros(us)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    fn rate(rps: u32, burst: u32) -> Rate {
        Rate {
            requests_per_second: NonZeroU32::new(rps).expect("rps"),
            burst: NonZeroU32::new(burst).expect("burst"),
        }
    }

    #[test]
    fn a_client_gets_its_burst_then_is_denied() {
        let l = LocalLimiter::new(None);
        for _ in 0..3 {
            assert_eq!(l.admit_now("a", Some(rate(1, 3))), Ok(Decision::Allow));
        }
        assert!(
            matches!(l.admit_now("a", Some(rate(1, 3))), Ok(Decision::Deny(d)) if d > Duration::from_millis(500))
        );
        assert_eq!(l.admit_now("b", Some(rate(1, 3))), Ok(Decision::Allow));
    }

    #[test]
    fn the_global_bucket_covers_every_client() {
        let l = LocalLimiter::new(Some(rate(1, 2)));
        assert_eq!(l.admit_now("a", None), Ok(Decision::Allow));
        assert_eq!(l.admit_now("b", None), Ok(Decision::Allow));
        assert!(matches!(l.admit_now("c", None), Ok(Decision::Deny(_))));
    }

    #[test]
    fn a_flood_of_distinct_clients_never_refuses_anyone() {
        let l = LocalLimiter::with_capacity(None, 1_000);
        let r = Some(rate(1, 1));
        assert_eq!(l.admit_now("steady", r), Ok(Decision::Allow));
        // 100 times the table's size in distinct IDs, each one request (its burst).
        for i in 0..100_000 {
            assert_eq!(
                l.admit_now(&format!("anon:{i}"), r),
                Ok(Decision::Allow),
                "{i}"
            );
        }
        assert!(l.buckets() <= 1_000, "bounded: {}", l.buckets());
        // A newcomer and the steady client are answered (not "unavailable").
        assert_eq!(l.admit_now("newcomer", r), Ok(Decision::Allow));
        assert!(matches!(l.admit_now("newcomer", r), Ok(Decision::Deny(_))));
        assert!(l.admit_now("steady", r).is_ok());
        let full = LocalLimiter::new(None);
        for i in 0..(MAX_LOCAL_BUCKETS + 10) {
            assert!(full.admit_now(&format!("c{i}"), r).is_ok());
        }
        assert_eq!(full.buckets(), MAX_LOCAL_BUCKETS);
    }
}
