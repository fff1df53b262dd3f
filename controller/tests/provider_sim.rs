//! The provider reconciler against the vendor simulator's API and hostile HTTP servers,
//! writing into the activity pool on memory and on a real `redis-server`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{
    Label, Protocol as PoolProtocol, ProxyId, ProxyState, Secret, UpstreamId,
};
use activity_pool::ports::ActivityPool;
use activity_pool::testkit::RedisServer;
use proxy_pool_controller::provider::{
    BackoffOptions, FetchError, HttpVendorSource, ProviderError, ProviderMetrics, ProviderOptions,
    ProviderReconciler, StaticSource, VendorAuth, VendorFormat, VendorProxy, parse_time, stable_id,
};
use proxy_pool_e2e::sim::{SimConfig, Simulator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

mod sim_support;
use sim_support::{on_both_pools, pool_id, sim_source};

struct Pool {
    pool: Arc<dyn ActivityPool>,
    _server: Option<RedisServer>,
}

async fn pool(redis: bool) -> Pool {
    let (pool, server) = sim_support::pool(redis).await;
    Pool {
        pool,
        _server: server,
    }
}

fn upstream() -> UpstreamId {
    UpstreamId::new("sim-vendor").unwrap()
}

fn options(protocol: PoolProtocol) -> ProviderOptions {
    let mut o = ProviderOptions::new(upstream(), protocol, Duration::from_secs(60));
    o.defaults.region = Some(Label::new("default-region").unwrap());
    // The simulator's proxies are on loopback: opted in explicitly.
    o.defaults.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    // The simulator's vendor API never offers a proxy again: no quarantine needed.
    o.quarantine = Duration::ZERO;
    o.safety_margin = Duration::from_secs(5);
    o.chunk_size = 2;
    o.budget.request_timeout = Duration::from_secs(5);
    o
}

fn reconciler(
    o: ProviderOptions,
    source: HttpVendorSource,
    pool: &Pool,
    m: &ProviderMetrics,
) -> ProviderReconciler {
    ProviderReconciler::new(o, Arc::new(source), pool.pool.clone(), m.clone()).unwrap()
}

async fn fetch_json_into_pool(redis: bool) {
    let p = pool(redis).await;
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let source = sim_source(&sim, "count=5&protocol=socks5");
    let metrics = ProviderMetrics::default();
    let opts = options(PoolProtocol::Http);
    let r = reconciler(opts.clone(), source, &p, &metrics);
    let out = r.reconcile_once().await.unwrap();
    assert_eq!(
        (out.offered, out.report.inserted, out.report.dropped_total()),
        (5, 5, 0)
    );
    assert_eq!(metrics.upserted("sim-vendor"), 5);
    assert_eq!(metrics.fetched("sim-vendor"), 5);
    assert_eq!(metrics.fetches("sim-vendor", "ok"), 1);

    let live = sim.live_proxies();
    assert_eq!(live.len(), 5);
    let ids: Vec<ProxyId> = live
        .iter()
        .map(|s| pool_id(&upstream(), &s.proxy.id, &opts.defaults))
        .collect();
    let records = p.pool.records(&ids).await.unwrap();
    for (s, rec) in live.iter().zip(records) {
        let rec = rec.expect("record in the pool");
        assert_eq!(rec.state, ProxyState::Fetched);
        assert_eq!(
            rec.dial.protocol,
            PoolProtocol::Socks5,
            "vendor protocol wins over the default"
        );
        assert_eq!(
            (rec.dial.host.as_str(), rec.dial.port),
            (s.proxy.host.to_string().as_str(), s.proxy.port)
        );
        let creds = rec.dial.credentials.expect("credentials");
        assert_eq!(creds.username, s.proxy.username);
        assert_eq!(creds.password.expose(), s.proxy.password);
        assert_eq!(
            rec.labels.region.as_ref().map(Label::as_str),
            Some(s.proxy.region.as_str())
        );
        assert_eq!(
            rec.labels.carrier.as_ref().map(Label::as_str),
            Some(s.proxy.carrier.as_str())
        );
        let ttl = rec.expires_at.since(rec.fetched_at);
        assert!(
            ttl <= Duration::from_secs(s.proxy.ttl_seconds),
            "never longer than stated"
        );
        let stated = parse_time(&s.proxy.expires_at).expect("vendor expiresAt");
        let skew = (rec.expires_at.millis() - stated.millis()).abs();
        assert!(
            skew <= 1_500,
            "expiry follows the vendor's expiresAt ({skew} ms off)"
        );
        assert_eq!(
            rec.usable_until,
            rec.expires_at.minus(Duration::from_secs(5))
        );
    }
}

async fn fetch_lines_into_pool(redis: bool) {
    let p = pool(redis).await;
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let url = format!("{}/v1/proxies?count=3&format=lines", sim.vendor_url());
    let c = sim.credentials();
    let auth = VendorAuth::Basic {
        username: c.username.clone(),
        password: c.password.clone(),
    };
    let source = HttpVendorSource::new(&url, VendorFormat::Lines, auth).unwrap();
    let metrics = ProviderMetrics::default();
    let opts = options(PoolProtocol::Socks5);
    let r = reconciler(opts.clone(), source, &p, &metrics);
    let out = r.reconcile_once().await.unwrap();
    assert_eq!((out.offered, out.report.inserted), (3, 3));
    for s in sim.live_proxies() {
        let v = VendorProxy {
            protocol: Some(PoolProtocol::Http),
            username: Some(s.proxy.username.clone()),
            ..VendorProxy::at(s.proxy.host.to_string(), s.proxy.port)
        };
        let id = stable_id(&upstream(), &v, &opts.defaults).unwrap();
        let rec = p
            .pool
            .records(&[id])
            .await
            .unwrap()
            .remove(0)
            .expect("record");
        assert_eq!(rec.dial.protocol, PoolProtocol::Http);
        assert_eq!(
            rec.dial.credentials.unwrap().password.expose(),
            s.proxy.password
        );
        assert_eq!(
            rec.labels.region.as_ref().map(Label::as_str),
            Some("default-region")
        );
        assert_eq!(rec.labels.carrier, None);
        assert_eq!(
            rec.expires_at.since(rec.fetched_at),
            Duration::from_secs(s.proxy.ttl_seconds),
            "TTL from X-Proxy-TTL-Seconds"
        );
    }
}

async fn wrong_credentials_count_a_failure_back_off_and_write_nothing(redis: bool) {
    let p = pool(redis).await;
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let url = format!("{}/v1/proxies?count=5", sim.vendor_url());
    let source = HttpVendorSource::new(
        &url,
        VendorFormat::Json,
        VendorAuth::api_key(Secret::new("wrong-key")),
    )
    .unwrap();
    let metrics = ProviderMetrics::default();
    let mut opts = options(PoolProtocol::Http);
    opts.fetch_interval = Duration::from_secs(3600);
    opts.backoff = BackoffOptions {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(200),
    };
    let r = reconciler(opts, source, &p, &metrics);
    let err = r.reconcile_once().await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Fetch(FetchError::Unauthorized(401))),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("wrong-key"));
    assert_eq!(metrics.fetches("sim-vendor", "unauthorized"), 1);

    let shutdown = CancellationToken::new();
    let task = tokio::spawn(r.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    shutdown.cancel();
    task.await.unwrap();
    let failures = metrics.fetches("sim-vendor", "unauthorized");
    // Backoff 50..=200 ms between tries: a handful in one second, not a tight loop.
    assert!((4..=13).contains(&failures), "{failures} fetches");
    assert!(metrics.consecutive_failures("sim-vendor") >= 3);
    assert_eq!(metrics.upserted("sim-vendor"), 0);
    assert!(sim.live_proxies().is_empty(), "the vendor issued nothing");
    let inv = p.pool.inventory(&upstream()).await.unwrap();
    assert_eq!(inv.unextracted, 0, "nothing written");
}

/// A hostile vendor: answers by path.
async fn hostile_vendor() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let ok = "HTTP/1.1 200 OK\r\nConnection: close\r\n";
                match path.as_str() {
                    "/declared-big" => {
                        let _ = s
                            .write_all(format!("{ok}Content-Length: 10000000\r\n\r\n{{").as_bytes())
                            .await;
                    }
                    "/streamed-big" => {
                        let _ = s
                            .write_all(format!("{ok}Transfer-Encoding: chunked\r\n\r\n").as_bytes())
                            .await;
                        let chunk = format!("4000\r\n{}\r\n", "x".repeat(0x4000));
                        for _ in 0..64 {
                            if s.write_all(chunk.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                    "/garbage" | "/mixed" => {
                        let body = if path == "/garbage" {
                            "{\"proxies\": [ {\"host\": "
                        } else {
                            "http://u:p@127.0.0.2:1000\nnot-a-proxy\nftp://x:1\nhttp://u:p@127.0.0.3:1001\n"
                        };
                        let answer = format!("{ok}Content-Length: {}\r\n\r\n{body}", body.len());
                        let _ = s.write_all(answer.as_bytes()).await;
                    }
                    "/slow" => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                    _ => {
                        let _ = s
                            .write_all(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n")
                            .await;
                    }
                }
            });
        }
    });
    addr
}

async fn hostile_responses_are_refused(redis: bool) {
    let p = pool(redis).await;
    let addr = hostile_vendor().await;
    let metrics = ProviderMetrics::default();
    let mut opts = options(PoolProtocol::Http);
    opts.budget.max_response_bytes = 64 * 1024;
    opts.budget.request_timeout = Duration::from_millis(500);
    for (path, format, kind) in [
        ("/declared-big", VendorFormat::Json, "too_large"),
        ("/streamed-big", VendorFormat::Lines, "too_large"),
        ("/garbage", VendorFormat::Json, "invalid_document"),
        ("/slow", VendorFormat::Json, "timeout"),
        ("/other", VendorFormat::Json, "status"),
    ] {
        let source =
            HttpVendorSource::new(&format!("http://{addr}{path}"), format, VendorAuth::None)
                .unwrap();
        let r = reconciler(opts.clone(), source, &p, &metrics);
        let err = r.reconcile_once().await.unwrap_err();
        assert_eq!(err.kind(), kind, "{path}: {err}");
        assert!(metrics.fetches("sim-vendor", kind) >= 1, "{kind} counted");
    }
    assert_eq!(p.pool.inventory(&upstream()).await.unwrap().unextracted, 0);

    let source = HttpVendorSource::new(
        &format!("http://{addr}/mixed"),
        VendorFormat::Lines,
        VendorAuth::None,
    )
    .unwrap();
    let out = reconciler(opts.clone(), source, &p, &metrics)
        .reconcile_once()
        .await
        .unwrap();
    assert_eq!(
        (out.offered, out.report.inserted, out.parse_dropped),
        (4, 2, 2)
    );
    assert_eq!(metrics.dropped("sim-vendor", "malformed"), 1);
    assert_eq!(metrics.dropped("sim-vendor", "unsupported_protocol"), 1);
    assert_eq!(p.pool.inventory(&upstream()).await.unwrap().unextracted, 2);
}

#[tokio::test]
async fn static_source_refreshes_and_counts_pool_drops() {
    let p = pool(false).await;
    let entry = |port| VendorProxy {
        username: Some("u".into()),
        password: Some(Secret::new("p")),
        ..VendorProxy::at("127.0.0.9", port)
    };
    let mut short = entry(3);
    short.ttl = Some(Duration::from_secs(2));
    let source = StaticSource::new(vec![entry(1), entry(2), short]);
    let metrics = ProviderMetrics::default();
    let mut opts = options(PoolProtocol::Http);
    opts.assume_healthy = true;
    let r = ProviderReconciler::new(opts, Arc::new(source), p.pool.clone(), metrics.clone())
        .unwrap()
        .with_health_store(p.pool.clone());
    let first = r.reconcile_once().await.unwrap();
    assert_eq!(first.report.inserted, 2);
    assert_eq!(metrics.dropped("sim-vendor", "ttl_too_short"), 1);
    let second = r.reconcile_once().await.unwrap();
    assert_eq!((second.report.inserted, second.report.refreshed), (0, 2));
    assert_eq!(metrics.refreshed("sim-vendor"), 2);
    assert_eq!(
        p.pool.assignable(&upstream(), 10).await.unwrap().len(),
        2,
        "assumed healthy"
    );
}

#[tokio::test]
async fn run_stops_promptly_on_shutdown_even_mid_fetch() {
    let p = pool(false).await;
    let addr = hostile_vendor().await;
    let mut opts = options(PoolProtocol::Http);
    opts.budget.request_timeout = Duration::from_secs(30);
    let source = HttpVendorSource::new(
        &format!("http://{addr}/slow"),
        VendorFormat::Json,
        VendorAuth::None,
    )
    .unwrap();
    let r = reconciler(opts, source, &p, &ProviderMetrics::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(r.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .expect("run returns within a second of shutdown")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// Commits the first call, then reports the connection as lost (as a dropped reply).
struct LosesFirstReply {
    inner: Arc<dyn ActivityPool>,
    calls: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl activity_pool::ports::Upserter for LosesFirstReply {
    async fn upsert(
        &self,
        batch: activity_pool::model::FetchedBatch,
    ) -> activity_pool::PoolResult<activity_pool::model::UpsertReport> {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let report = self.inner.upsert(batch).await?;
        if n == 0 {
            return Err(activity_pool::PoolError::Unavailable("reply lost".into()));
        }
        Ok(report)
    }

    async fn remove(
        &self,
        upstream: &UpstreamId,
        ids: &[ProxyId],
    ) -> activity_pool::PoolResult<Vec<activity_pool::model::RemoveResult>> {
        self.inner.remove(upstream, ids).await
    }
}

async fn a_lost_reply_is_retried_with_the_same_operation_id(redis: bool) {
    let p = pool(redis).await;
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let source = sim_source(&sim, "count=3");
    let flaky = Arc::new(LosesFirstReply {
        inner: p.pool.clone(),
        calls: std::sync::atomic::AtomicU32::new(0),
    });
    let metrics = ProviderMetrics::default();
    let mut opts = options(PoolProtocol::Http);
    opts.chunk_size = 10;
    let r =
        ProviderReconciler::new(opts, Arc::new(source), flaky.clone(), metrics.clone()).unwrap();
    let out = r.reconcile_once().await.unwrap();
    assert_eq!(
        flaky.calls.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "retried once"
    );
    assert_eq!(out.report.inserted, 3, "the stored result, not a refresh");
    assert_eq!(metrics.upserted("sim-vendor"), 3);
    assert_eq!(metrics.refreshed("sim-vendor"), 0);
    assert_eq!(p.pool.inventory(&upstream()).await.unwrap().unextracted, 3);
}

on_both_pools!(
    fetch_json_into_pool,
    fetch_lines_into_pool,
    wrong_credentials_count_a_failure_back_off_and_write_nothing,
    hostile_responses_are_refused,
    a_lost_reply_is_retried_with_the_same_operation_id,
);
