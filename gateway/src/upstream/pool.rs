//! Idle kept-alive upstream connections for plain-HTTP forwarding, keyed by proxy
//! (and by target for SOCKS5 proxies, whose connections are tunnels to one target).
//! Idle connections hold no capacity slot: a request takes an Active slot when it
//! checks one out and releases it when it checks it back in.
//!
//! Bounded per key and in total; sharded `parking_lot` mutexes around plain maps,
//! each critical section a push or pop, never held across `.await`.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use super::Target;
use crate::io::BufConn;
use crate::proxy_id::ProxyId;

const SHARDS: usize = 16;

/// Pool key: a proxy, plus the target for SOCKS5 tunnels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    proxy: ProxyId,
    target: Option<Target>,
}

impl PoolKey {
    /// Key for connections to an HTTP proxy (any target).
    pub fn http(proxy: ProxyId) -> Self {
        Self {
            proxy,
            target: None,
        }
    }

    /// Key for SOCKS5 tunnels to one target.
    pub fn tunnel(proxy: ProxyId, target: Target) -> Self {
        Self {
            proxy,
            target: Some(target),
        }
    }
}

#[derive(Debug)]
struct Idle {
    conn: BufConn,
    since: Instant,
}

/// The pool.
#[derive(Debug)]
pub struct IdlePool {
    shards: Vec<Mutex<HashMap<PoolKey, Vec<Idle>>>>,
    hasher: RandomState,
    total: AtomicUsize,
    max_per_key: usize,
    max_total: usize,
    idle_timeout: Duration,
}

impl IdlePool {
    /// A pool with the given bounds.
    pub fn new(max_per_key: usize, max_total: usize, idle_timeout: Duration) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            total: AtomicUsize::new(0),
            max_per_key,
            max_total,
            idle_timeout,
        }
    }

    fn shard(&self, key: &PoolKey) -> &Mutex<HashMap<PoolKey, Vec<Idle>>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// Takes the most recently used live connection for `key`, if any.
    pub fn checkout(&self, key: &PoolKey) -> Option<BufConn> {
        let now = Instant::now();
        let mut shard = self.shard(key).lock();
        let list = shard.get_mut(key)?;
        let mut found = None;
        while let Some(idle) = list.pop() {
            self.total.fetch_sub(1, Ordering::Relaxed);
            if now.saturating_duration_since(idle.since) < self.idle_timeout && !idle.conn.is_dead()
            {
                found = Some(idle.conn);
                break;
            }
        }
        if list.is_empty() {
            shard.remove(key);
        }
        found
    }

    /// Returns a connection for reuse; dropped (closed) when a bound is reached.
    /// `in_use` is how many requests the proxy is serving right now (this one
    /// included): a key keeps up to `max(max_per_key, in_use)` idle connections, so a
    /// proxy busier than `max_per_key` does not close and re-dial a connection per
    /// request. The total bound holds regardless.
    pub fn checkin(&self, key: PoolKey, conn: BufConn, in_use: usize) {
        if self.max_per_key == 0 || self.total.load(Ordering::Relaxed) >= self.max_total {
            return;
        }
        let mut shard = self.shard(&key).lock();
        let list = shard.entry(key).or_default();
        if list.len() >= self.max_per_key.max(in_use) {
            return;
        }
        list.push(Idle {
            conn,
            since: Instant::now(),
        });
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// Closes connections idle past the timeout or to proxies `keep` rejects.
    pub fn sweep(&self, keep: impl Fn(&ProxyId) -> bool) {
        let now = Instant::now();
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.retain(|key, list| {
                let before = list.len();
                if keep(&key.proxy) {
                    list.retain(|i| now.saturating_duration_since(i.since) < self.idle_timeout);
                } else {
                    list.clear();
                }
                self.total.fetch_sub(before - list.len(), Ordering::Relaxed);
                !list.is_empty()
            });
        }
    }

    /// Idle connections held now.
    pub fn len(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Whether no connection is idle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    /// A pool keeping `per_key` idle connections per key and `total` in all (30 s idle
    /// timeout), one HTTP proxy's key, and a listener to make connections on.
    async fn pool(per_key: usize, total: usize) -> (IdlePool, PoolKey, TcpListener) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = IdlePool::new(per_key, total, Duration::from_secs(30));
        (pool, PoolKey::http(ProxyId::from("p")), l)
    }

    async fn conn(l: &TcpListener) -> (BufConn, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (BufConn::new(c, 1024), s)
    }

    #[tokio::test]
    async fn reuses_live_connections_and_respects_bounds() {
        let (pool, key, l) = pool(1, 10).await;
        let (a, _pa) = conn(&l).await;
        let (b, _pb) = conn(&l).await;
        pool.checkin(key.clone(), a, 1);
        pool.checkin(key.clone(), b, 1);
        assert_eq!(pool.len(), 1, "per-key bound");
        assert!(pool.checkout(&key).is_some());
        assert!(pool.checkout(&key).is_none());
    }

    #[tokio::test]
    async fn a_busy_proxy_keeps_as_many_idle_connections_as_it_has_requests() {
        let (pool, key, l) = pool(1, 3).await;
        let mut peers = Vec::new();
        for _ in 0..4 {
            let (c, p) = conn(&l).await;
            peers.push(p);
            // Four requests in flight on the proxy: their connections come back.
            pool.checkin(key.clone(), c, 4);
        }
        assert_eq!(pool.len(), 3, "the total bound still holds");
        assert!(pool.checkout(&key).is_some());
        let (c, p) = conn(&l).await;
        peers.push(p);
        // Only this request in flight now: the per-key bound (1) applies again.
        pool.checkin(key.clone(), c, 1);
        assert_eq!(pool.len(), 2);
    }

    #[tokio::test]
    async fn closed_connections_are_not_handed_out() {
        let (pool, key, l) = pool(4, 10).await;
        let (a, peer) = conn(&l).await;
        pool.checkin(key.clone(), a, 1);
        drop(peer);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(pool.checkout(&key).is_none());
        assert!(pool.is_empty());
    }

    #[tokio::test]
    async fn sweep_drops_removed_proxies() {
        let (pool, _, l) = pool(4, 10).await;
        let (a, _pa) = conn(&l).await;
        pool.checkin(PoolKey::http(ProxyId::from("gone")), a, 1);
        pool.sweep(|id| id.as_str() != "gone");
        assert!(pool.is_empty());
    }
}
