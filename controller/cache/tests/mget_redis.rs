//! The MGet cache on a real `redis-server`: batching, sharing, cancellation, errors,
//! TTLs, negative entries and Redis failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use activity_pool::testkit::RedisServer;
use async_trait::async_trait;
use proxy_pool_cache::{Answer, Cache, CacheError, CacheStore, Loader, Namespace, RedisStore};
use tokio::sync::Semaphore;

#[derive(Debug, Default)]
struct Source {
    calls: parking::Calls,
    /// Keys divisible by this are absent.
    absent_mod: u32,
    fail: std::sync::atomic::AtomicBool,
    omit_odd: bool,
    delay: Option<Duration>,
    gate: Option<Arc<Semaphore>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

mod parking {
    #[derive(Debug, Default)]
    pub struct Calls(pub std::sync::Mutex<Vec<Vec<u32>>>);
}

#[async_trait]
impl Loader<u32, String> for Source {
    async fn load(&self, keys: &[u32]) -> Result<HashMap<u32, Answer<String>>, CacheError> {
        self.calls.0.lock().unwrap().push(keys.to_vec());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        struct Running<'a>(&'a AtomicUsize);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _running = Running(&self.running);
        if let Some(g) = &self.gate {
            let _p = g.acquire().await.unwrap();
        }
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        if self.fail.load(Ordering::SeqCst) {
            return Err(CacheError::Source("backend down".into()));
        }
        let mut m = HashMap::new();
        for &k in keys {
            if self.omit_odd && k % 2 == 1 {
                continue;
            }
            if self.absent_mod > 0 && k % self.absent_mod == 0 {
                m.insert(k, Answer::Absent);
            } else {
                m.insert(k, Answer::Found(format!("v{k}"), None));
            }
        }
        Ok(m)
    }
}

impl Source {
    fn calls(&self) -> Vec<Vec<u32>> {
        self.calls.0.lock().unwrap().clone()
    }
}

/// Finds every key, key 1 with a TTL of its own (3 s).
#[derive(Debug)]
struct Capped;

#[async_trait]
impl Loader<u32, String> for Capped {
    async fn load(&self, keys: &[u32]) -> Result<HashMap<u32, Answer<String>>, CacheError> {
        Ok(keys
            .iter()
            .map(|&k| {
                let cap = (k == 1).then(|| Duration::from_secs(3));
                (k, Answer::Found(format!("v{k}"), cap))
            })
            .collect())
    }
}

async fn conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(redis.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// One command's reply (it must succeed).
async fn query<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> T {
    cmd.query_async(conn).await.unwrap()
}

/// A cache of `ns` over `redis` loading from `loader`, and a connection of its own.
async fn cache(
    redis: &RedisServer,
    ns: Namespace,
    loader: Arc<dyn Loader<u32, String>>,
) -> (Cache<u32, String>, redis::aio::MultiplexedConnection) {
    let c = conn(redis).await;
    let store: Arc<dyn CacheStore> = Arc::new(RedisStore::new(c.clone()));
    (Cache::new(ns, "t", Some(store), loader), c)
}

fn ns() -> Namespace {
    let mut n = Namespace::new("secret");
    n.redis_timeout = Duration::from_millis(500);
    n
}

#[tokio::test]
async fn batches_of_100_dedup_and_only_misses_reach_the_loader() {
    let redis = RedisServer::start();
    let src = Arc::new(Source::default());
    let (c, _) = cache(&redis, ns(), src.clone()).await;
    let mut keys: Vec<u32> = (0..250).collect();
    keys.extend(0..50); // duplicates
    let r = c.mget(&keys).await;
    assert_eq!(r.len(), 250);
    assert_eq!(r[&7].as_ref().unwrap().as_deref(), Some("v7"));
    let calls = src.calls();
    assert!(calls.iter().all(|b| b.len() <= 100), "{calls:?}");
    assert_eq!(calls.iter().map(Vec::len).sum::<usize>(), 250);
    // Second round: all hits, plus two new keys which alone reach the loader.
    let r = c.mget(&[1, 2, 300, 301]).await;
    assert_eq!(r[&300].as_ref().unwrap().as_deref(), Some("v300"));
    assert_eq!(src.calls().last().unwrap(), &vec![300, 301]);
    let m = c.metrics();
    assert_eq!(m.hits, 2);
    assert_eq!(m.misses, 252);
}

#[tokio::test]
async fn in_flight_loads_are_shared_per_key_and_waiters_cancel_independently() {
    let redis = RedisServer::start();
    let gate = Arc::new(Semaphore::new(0));
    let src = Arc::new(Source {
        gate: Some(gate.clone()),
        ..Source::default()
    });
    let (c, _) = cache(&redis, ns(), src.clone()).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.mget(&[1, 2, 3]).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = tokio::spawn({
        let c = c.clone();
        async move { c.mget(&[2, 3, 4]).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A third waiter on the same keys gives up; the others must not notice.
    let gone = tokio::time::timeout(Duration::from_millis(50), c.mget(&[1, 2])).await;
    assert!(gone.is_err());
    a.abort(); // the first caller cancels too: its load still completes for `b`.
    gate.add_permits(10);
    let rb = b.await.unwrap();
    assert_eq!(rb[&2].as_ref().unwrap().as_deref(), Some("v2"));
    assert_eq!(rb[&4].as_ref().unwrap().as_deref(), Some("v4"));
    let calls = src.calls();
    assert_eq!(calls, vec![vec![1, 2, 3], vec![4]], "shared keys load once");
    assert!(c.metrics().shared_waits >= 2);
    // The cancelled caller's load was still stored.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = c.mget(&[1]).await;
    assert_eq!(r[&1].as_ref().unwrap().as_deref(), Some("v1"));
    assert_eq!(src.calls().len(), 2);
}

#[tokio::test]
async fn loader_errors_reach_every_waiter_and_are_never_stored() {
    let redis = RedisServer::start();
    let mut n = ns();
    n.negative_ttl = Some(Duration::from_secs(5));
    let src = Arc::new(Source::default());
    src.fail.store(true, Ordering::SeqCst);
    let (c, mut conn) = cache(&redis, n, src.clone()).await;
    let r = c.mget(&[1, 2]).await;
    assert!(matches!(r[&1], Err(CacheError::Source(_))));
    let keys: Vec<String> = query(&mut conn, redis::cmd("KEYS").arg("*")).await;
    assert!(keys.is_empty(), "nothing stored after an error: {keys:?}");
    src.fail.store(false, Ordering::SeqCst);
    assert_eq!(c.get(1).await.unwrap().as_deref(), Some("v1"));
    assert_eq!(c.metrics().loader_errors, 1);
}

#[tokio::test]
async fn negative_entries_only_when_the_loader_answered_every_key() {
    let redis = RedisServer::start();
    let mut n = ns();
    n.negative_ttl = Some(Duration::from_secs(5));
    let src = Arc::new(Source {
        absent_mod: 10,
        ..Source::default()
    });
    let (c, mut conn) = cache(&redis, n.clone(), src).await;
    assert_eq!(c.get(10).await.unwrap(), None);
    let ttl: i64 = query(&mut conn, redis::cmd("PTTL").arg("t:cache:v1:secret:10")).await;
    assert!(ttl > 0 && ttl <= 5_000, "negative ttl {ttl}");
    assert_eq!(c.get(10).await.unwrap(), None);
    assert_eq!(c.metrics().negative_hits, 1);

    // Incomplete answer (odd keys omitted): no negative entry for the batch.
    let src = Arc::new(Source {
        absent_mod: 10,
        omit_odd: true,
        ..Source::default()
    });
    let (c, mut conn) = cache(
        &redis,
        {
            let mut m = n;
            m.name = "token_review".into();
            m
        },
        src,
    )
    .await;
    let r = c.mget(&[20, 21, 22]).await;
    assert_eq!(r[&20].as_ref().unwrap(), &None);
    assert_eq!(r[&21].as_ref().unwrap(), &None);
    let n20: bool = query(
        &mut conn,
        redis::cmd("EXISTS").arg("t:cache:v1:token_review:20"),
    )
    .await;
    let n22: bool = query(
        &mut conn,
        redis::cmd("EXISTS").arg("t:cache:v1:token_review:22"),
    )
    .await;
    assert!(!n20, "no negative entry from an incomplete batch");
    assert!(n22, "positive entries are still stored");
}

#[tokio::test]
async fn hard_ttl_with_jitter_and_per_value_cap() {
    let redis = RedisServer::start();
    let mut n = ns();
    n.ttl = Duration::from_secs(100);
    n.jitter_percent = 10;
    let (c, mut conn) = cache(&redis, n, Arc::new(Capped)).await;
    let _ = c.mget(&[1, 2]).await;
    let t1: i64 = query(&mut conn, redis::cmd("PTTL").arg("t:cache:v1:secret:1")).await;
    let t2: i64 = query(&mut conn, redis::cmd("PTTL").arg("t:cache:v1:secret:2")).await;
    assert!(t1 > 0 && t1 <= 3_000, "capped {t1}");
    assert!((89_000..=100_000).contains(&t2), "jittered {t2}");
    // An envelope past its hard expiry is a miss even while Redis keeps the key.
    let stale = proxy_pool_cache::encode(Some(&"old".to_owned()), 1).unwrap();
    let _: () = query(
        &mut conn,
        redis::cmd("SET").arg("t:cache:v1:secret:3").arg(stale),
    )
    .await;
    let _: () = query(
        &mut conn,
        redis::cmd("SET").arg("t:cache:v1:secret:4").arg("garbage"),
    )
    .await;
    let r = c.mget(&[3, 4]).await;
    assert_eq!(r[&3].as_ref().unwrap().as_deref(), Some("v3"));
    assert_eq!(r[&4].as_ref().unwrap().as_deref(), Some("v4"));
    assert_eq!(c.metrics().decode_errors, 1);
}

#[tokio::test]
async fn redis_failure_goes_straight_to_the_source() {
    let mut redis = RedisServer::start();
    let src = Arc::new(Source::default());
    let (c, _) = cache(&redis, ns(), src.clone()).await;
    redis.stop();
    let r = c.mget(&[1, 2]).await;
    assert_eq!(r[&1].as_ref().unwrap().as_deref(), Some("v1"));
    assert!(c.metrics().redis_errors >= 1);
    assert_eq!(src.calls().len(), 1);
}

#[tokio::test]
async fn loader_time_and_concurrency_are_capped() {
    let redis = RedisServer::start();
    let mut n = ns();
    n.loader_timeout = Duration::from_millis(100);
    n.loader_concurrency = 2;
    n.batch_size = 1;
    let src = Arc::new(Source {
        delay: Some(Duration::from_millis(300)),
        ..Source::default()
    });
    let (c, _) = cache(&redis, n, src.clone()).await;
    let started = std::time::Instant::now();
    let r = c.mget(&[1]).await;
    assert!(matches!(r[&1], Err(CacheError::Timeout)));
    assert!(started.elapsed() < Duration::from_millis(290));
    // Six concurrent single-key batches: never more than two loader calls at once.
    let mut tasks = Vec::new();
    for k in 10..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move { c.get(k).await }));
    }
    for t in tasks {
        let _ = t.await.unwrap();
    }
    assert!(src.max_running.load(Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn disabled_cache_goes_to_the_source_every_time() {
    let src = Arc::new(Source::default());
    let c: Cache<u32, String> = Cache::new(ns(), "t", None, src.clone());
    assert_eq!(c.get(1).await.unwrap().as_deref(), Some("v1"));
    assert_eq!(c.get(1).await.unwrap().as_deref(), Some("v1"));
    assert_eq!(src.calls().len(), 2);
}

/// TokenReview through the cache: keyed by digest (the token never reaches Redis),
/// cached at most 120 s and never past the token's expiry, rejections never cached.
#[tokio::test]
async fn token_reviews_are_cached_by_digest_within_the_token_rule() {
    use proxy_pool_cache::{TokenKey, token_review_ttl};
    use std::time::SystemTime;

    #[derive(Debug, Default)]
    struct Reviewer {
        calls: AtomicUsize,
    }
    #[async_trait]
    impl Loader<TokenKey, String> for Reviewer {
        async fn load(
            &self,
            keys: &[TokenKey],
        ) -> Result<HashMap<TokenKey, Answer<String>>, CacheError> {
            self.calls.fetch_add(keys.len(), Ordering::SeqCst);
            let now = SystemTime::now();
            Ok(keys
                .iter()
                .filter(|k| k.token != "bad-token") // rejected: not answered, never cached
                .map(|k| {
                    let exp = if k.token == "short-token" { 5 } else { 3600 };
                    let ttl = token_review_ttl(Some(now + Duration::from_secs(exp)), now);
                    (
                        k.clone(),
                        Answer::Found(
                            format!("system:serviceaccount:ns:{}", k.token.len()),
                            Some(ttl),
                        ),
                    )
                })
                .collect())
        }
    }
    let redis = RedisServer::start();
    let mut n = ns();
    n.name = "token_review".into();
    n.ttl = Duration::from_secs(120);
    let reviewer = Arc::new(Reviewer::default());
    let mut conn = conn(&redis).await;
    let store: Arc<dyn CacheStore> = Arc::new(RedisStore::new(conn.clone()));
    let c: Cache<TokenKey, String> = Cache::new(n, "t", Some(store), reviewer.clone());
    let key = |t: &str| TokenKey {
        audience: "proxy-pool".into(),
        token: t.into(),
    };
    let r = c
        .mget(&[key("long-token"), key("short-token"), key("bad-token")])
        .await;
    assert!(r[&key("long-token")].as_ref().unwrap().is_some());
    assert_eq!(r[&key("bad-token")].as_ref().unwrap(), &None);
    let names: Vec<String> = query(&mut conn, redis::cmd("KEYS").arg("*")).await;
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| !n.contains("token") || n.starts_with("t:cache:v1:token_review:"))
    );
    assert!(
        names
            .iter()
            .all(|n| !n.contains("long-token") && !n.contains("short-token"))
    );
    for n in &names {
        let ttl: i64 = query(&mut conn, redis::cmd("PTTL").arg(n)).await;
        assert!(ttl > 0 && ttl <= 120_000, "{n}: {ttl}");
    }
    let short = format!(
        "t:cache:v1:token_review:{}",
        proxy_pool_cache::token_key("proxy-pool", "short-token")
    );
    let ttl: i64 = query(&mut conn, redis::cmd("PTTL").arg(&short)).await;
    assert!(ttl <= 5_000, "never past the token's expiry: {ttl}");
    let _ = c.mget(&[key("long-token"), key("bad-token")]).await;
    assert_eq!(
        reviewer.calls.load(Ordering::SeqCst),
        4,
        "the rejected token is asked again"
    );
    assert!(!format!("{:?}", key("long-token")).contains("long-token"));
}

#[tokio::test]
async fn metrics_are_exported_per_namespace() {
    let src = Arc::new(Source::default());
    let c: Cache<u32, String> = Cache::new(ns(), "t", None, src);
    let _ = c.get(1).await;
    let collector = proxy_pool_cache::CacheMetricsCollector::default();
    collector.add(c.namespace(), c.metrics_handle());
    let mut registry = prometheus_client::registry::Registry::with_prefix("proxy_pool_controller");
    registry.register_collector(Box::new(collector));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
    assert!(
        out.contains(r#"proxy_pool_controller_cache_misses_total{cache="secret"} 1"#),
        "{out}"
    );
    assert!(out.contains(r#"proxy_pool_controller_cache_loader_calls_total{cache="secret"} 1"#));
}
