//! The generic batched read-through cache.
//!
//! `Cache::mget` dedups the keys, reads Redis in batches of at most `batch_size`, sends
//! only the misses to the loader, and shares one in-flight load per key between callers.
//! A load runs in its own task, so a caller that gives up (drops its future) cancels only
//! its own wait. Loader calls are capped in number (semaphore) and time. Loader errors
//! reach every waiter and are never stored; a Redis failure sends the batch straight to
//! the source. It must never cache an authorisation decision: callers cache facts
//! (a token's review, a Secret's value), and decide per request.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
// std's Mutex: the in-flight map is touched only in short critical sections (insert and
// remove of slots), never across an `.await`.
use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Mutex;
use tokio::sync::{Semaphore, watch};

use crate::envelope::{self, Cached};
use crate::metrics::{MetricsSnapshot, NamespaceMetrics};
use crate::options::Namespace;
use crate::store::CacheStore;

/// Longest key accepted for caching; longer keys bypass the cache.
pub const MAX_KEY_BYTES: usize = 256;

/// A key the cache can store: `cache_key` names it in Redis (it must not contain a
/// secret: a token key returns a digest) and `Eq`/`Hash` dedup it in memory.
pub trait CacheKey: Clone + Eq + Hash + Send + Sync + 'static {
    /// The key's name inside the namespace.
    fn cache_key(&self) -> String;
}

macro_rules! display_key {
    ($($t:ty),*) => {$(
        impl CacheKey for $t {
            fn cache_key(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
display_key!(String, u32, u64, i64);

/// What the loader says about one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<V> {
    /// The value, with an optional cap on how long it may be cached.
    Found(V, Option<Duration>),
    /// The source confirmed the key does not exist.
    Absent,
}

/// A failure that reaches the caller; never stored in the cache.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheError {
    /// The source failed.
    #[error("source failed: {0}")]
    Source(Arc<str>),
    /// The shared loader call exceeded its time budget.
    #[error("source timed out")]
    Timeout,
    /// The loading task ended without an answer.
    #[error("load abandoned")]
    Abandoned,
}

/// The slow source behind a cache. Keys missing from the returned map were not answered:
/// the caller sees them as absent, but no negative entry is written for that batch.
#[async_trait]
pub trait Loader<K, V>: Send + Sync + 'static {
    /// Loads a batch (at most `batch_size` distinct keys).
    async fn load(&self, keys: &[K]) -> Result<HashMap<K, Answer<V>>, CacheError>;
}

type Slot<V> = Option<Result<Option<V>, CacheError>>;

/// A cache for one namespace. Cheap to clone.
pub struct Cache<K, V> {
    inner: Arc<Inner<K, V>>,
}

impl<K, V> Clone for Cache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, V> Debug for Cache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("namespace", &self.inner.ns.name)
            .finish_non_exhaustive()
    }
}

struct Inner<K, V> {
    ns: Namespace,
    key_prefix: String,
    store: Option<Arc<dyn CacheStore>>,
    loader: Arc<dyn Loader<K, V>>,
    inflight: Mutex<HashMap<K, watch::Receiver<Slot<V>>>>,
    permits: Arc<Semaphore>,
    metrics: Arc<NamespaceMetrics>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl<K, V> Cache<K, V>
where
    K: CacheKey,
    V: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// A cache in front of `loader`. `store = None` means disabled: straight to the
    /// source. Keys are stored as `<key_prefix>:cache:v1:<namespace>:<key>`.
    pub fn new(
        ns: Namespace,
        key_prefix: &str,
        store: Option<Arc<dyn CacheStore>>,
        loader: Arc<dyn Loader<K, V>>,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(ns.loader_concurrency.max(1)));
        Self {
            inner: Arc::new(Inner {
                key_prefix: format!("{key_prefix}:cache:v1:{}:", ns.name),
                ns,
                store,
                loader,
                inflight: Mutex::new(HashMap::new()),
                permits,
                metrics: Arc::default(),
            }),
        }
    }

    /// The namespace's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// The live counters, for a metrics collector.
    pub fn metrics_handle(&self) -> Arc<NamespaceMetrics> {
        Arc::clone(&self.inner.metrics)
    }

    /// The namespace's name.
    pub fn namespace(&self) -> &str {
        &self.inner.ns.name
    }

    /// One key.
    pub async fn get(&self, key: K) -> Result<Option<V>, CacheError> {
        let mut m = self.mget(std::slice::from_ref(&key)).await;
        m.remove(&key).unwrap_or(Ok(None))
    }

    /// Every distinct key's result (`Ok(None)` = absent).
    pub async fn mget(&self, keys: &[K]) -> HashMap<K, Result<Option<V>, CacheError>> {
        let mut distinct: Vec<K> = Vec::with_capacity(keys.len());
        {
            let mut seen = std::collections::HashSet::with_capacity(keys.len());
            for k in keys {
                if seen.insert(k) {
                    distinct.push(k.clone());
                }
            }
        }
        let mut out = HashMap::with_capacity(distinct.len());
        let batch = self.inner.ns.batch_size.max(1);
        for chunk in distinct.chunks(batch) {
            self.batch(chunk, &mut out).await;
        }
        out
    }

    async fn batch(&self, keys: &[K], out: &mut HashMap<K, Result<Option<V>, CacheError>>) {
        let inner = &self.inner;
        let (misses, write_back) = match &inner.store {
            None => (keys.to_vec(), false),
            Some(store) => self.read_store(store.as_ref(), keys, out).await,
        };
        NamespaceMetrics::add(&inner.metrics.misses, misses.len() as u64);
        if misses.is_empty() {
            return;
        }
        let mut waits = Vec::with_capacity(misses.len());
        let mut to_load = Vec::new();
        {
            let mut map = match inner.inflight.lock() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            for k in misses {
                if let Some(rx) = map.get(&k) {
                    NamespaceMetrics::add(&inner.metrics.shared_waits, 1);
                    waits.push((k, rx.clone()));
                } else {
                    let (tx, rx) = watch::channel(None);
                    map.insert(k.clone(), rx.clone());
                    waits.push((k.clone(), rx));
                    to_load.push((k, tx));
                }
            }
        }
        if !to_load.is_empty() {
            let this = self.clone();
            tokio::spawn(async move { this.load(to_load, write_back).await });
        }
        for (k, mut rx) in waits {
            let r = match rx.wait_for(Option::is_some).await {
                Ok(v) => v.clone().unwrap_or(Err(CacheError::Abandoned)),
                Err(_) => Err(CacheError::Abandoned),
            };
            out.insert(k, r);
        }
    }

    /// Reads one batch from the store; returns the misses and whether write-back is sane.
    async fn read_store(
        &self,
        store: &dyn CacheStore,
        keys: &[K],
        out: &mut HashMap<K, Result<Option<V>, CacheError>>,
    ) -> (Vec<K>, bool) {
        let inner = &self.inner;
        let (cacheable, long): (Vec<&K>, Vec<&K>) = keys
            .iter()
            .partition(|k| k.cache_key().len() <= MAX_KEY_BYTES);
        let mut misses: Vec<K> = long.into_iter().cloned().collect();
        let names: Vec<String> = cacheable
            .iter()
            .map(|k| format!("{}{}", inner.key_prefix, k.cache_key()))
            .collect();
        let values = match store.mget(&names, inner.ns.redis_timeout).await {
            Ok(v) if v.len() == names.len() => v,
            Ok(_) | Err(_) => {
                NamespaceMetrics::add(&inner.metrics.redis_errors, 1);
                tracing::debug!(namespace = %inner.ns.name, "cache read failed; going to the source");
                misses.extend(cacheable.into_iter().cloned());
                return (misses, false);
            }
        };
        let now = now_ms();
        for (k, v) in cacheable.into_iter().zip(values) {
            match v.map(|b| envelope::decode::<V>(&b, now)) {
                Some(Ok(Some(Cached::Found(v)))) => {
                    NamespaceMetrics::add(&inner.metrics.hits, 1);
                    out.insert(k.clone(), Ok(Some(v)));
                }
                Some(Ok(Some(Cached::Absent))) => {
                    NamespaceMetrics::add(&inner.metrics.negative_hits, 1);
                    out.insert(k.clone(), Ok(None));
                }
                Some(Err(_)) => {
                    NamespaceMetrics::add(&inner.metrics.decode_errors, 1);
                    misses.push(k.clone());
                }
                Some(Ok(None)) | None => misses.push(k.clone()),
            }
        }
        (misses, true)
    }

    /// Runs one shared loader call and publishes its answers. Runs in its own task.
    async fn load(self, slots: Vec<(K, watch::Sender<Slot<V>>)>, write_back: bool) {
        let inner = &self.inner;
        let keys: Vec<K> = slots.iter().map(|(k, _)| k.clone()).collect();
        let started = Instant::now();
        let result = match Arc::clone(&inner.permits).acquire_owned().await {
            Ok(_permit) => {
                NamespaceMetrics::add(&inner.metrics.loader_calls, 1);
                match tokio::time::timeout(inner.ns.loader_timeout, inner.loader.load(&keys)).await
                {
                    Ok(r) => r,
                    Err(_) => Err(CacheError::Timeout),
                }
            }
            Err(_) => Err(CacheError::Abandoned),
        };
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        NamespaceMetrics::add(&inner.metrics.loader_micros, micros);
        let mut entries = Vec::new();
        match &result {
            Ok(answers) => {
                let complete = keys.iter().all(|k| answers.contains_key(k));
                if write_back {
                    entries = self.entries(answers, complete);
                }
            }
            Err(e) => {
                NamespaceMetrics::add(&inner.metrics.loader_errors, 1);
                tracing::debug!(namespace = %inner.ns.name, error = %e, "cache loader failed");
            }
        }
        if let (Some(store), false) = (&inner.store, entries.is_empty())
            && store.mset(&entries, inner.ns.redis_timeout).await.is_err()
        {
            NamespaceMetrics::add(&inner.metrics.redis_errors, 1);
        }
        let mut map = match inner.inflight.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (k, tx) in slots {
            let v = match &result {
                Ok(answers) => Ok(match answers.get(&k) {
                    Some(Answer::Found(v, _)) => Some(v.clone()),
                    Some(Answer::Absent) | None => None,
                }),
                Err(e) => Err(e.clone()),
            };
            tx.send_replace(Some(v));
            if map
                .get(&k)
                .is_some_and(|rx| rx.same_channel(&tx.subscribe()))
            {
                map.remove(&k);
            }
        }
    }

    fn entries(
        &self,
        answers: &HashMap<K, Answer<V>>,
        complete: bool,
    ) -> Vec<(String, Vec<u8>, Duration)> {
        let ns = &self.inner.ns;
        let now = now_ms();
        let mut out = Vec::new();
        for (k, a) in answers {
            let name = format!("{}{}", self.inner.key_prefix, k.cache_key());
            if name.len() > MAX_KEY_BYTES + self.inner.key_prefix.len() {
                continue;
            }
            let (bytes, ttl) = match a {
                Answer::Found(v, cap) => {
                    let ttl = jittered(ns.ttl, ns.jitter_percent);
                    let ttl = cap.map_or(ttl, |c| ttl.min(c));
                    if ttl < Duration::from_millis(1) {
                        continue;
                    }
                    (envelope::encode(Some(v), now + ms(ttl)), ttl)
                }
                Answer::Absent => match (ns.negative_ttl, complete) {
                    (Some(ttl), true) => (envelope::encode::<V>(None, now + ms(ttl)), ttl),
                    _ => continue,
                },
            };
            match bytes {
                Ok(b) if b.len() <= ns.max_entry_bytes => out.push((name, b, ttl)),
                Ok(_) => NamespaceMetrics::add(&self.inner.metrics.oversized, 1),
                Err(_) => NamespaceMetrics::add(&self.inner.metrics.decode_errors, 1),
            }
        }
        out
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `ttl` shortened by a random 0..=`percent`% — jitter never extends the hard TTL.
pub fn jittered(ttl: Duration, percent: u8) -> Duration {
    let span = ms(ttl).saturating_mul(u64::from(percent.min(100))) / 100;
    if span == 0 {
        return ttl;
    }
    let cut = rand::rng().random_range(0..=span);
    ttl.saturating_sub(Duration::from_millis(cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_under_the_hard_ttl() {
        let ttl = Duration::from_secs(100);
        for _ in 0..1000 {
            let j = jittered(ttl, 10);
            assert!(j <= ttl && j >= Duration::from_secs(90));
        }
        assert_eq!(jittered(ttl, 0), ttl);
    }
}
