//! Distribution API benchmark on a real `redis-server` (started by the testkit).
//!
//! `cargo bench -p proxy-pool-controller --bench distribution` runs the controller on
//! loopback with the Redis store and measures, at count 1 and count 5:
//! - the raw extraction script rate: `ExtractionStore::extract` called directly on the
//!   controller's own `RedisPool` by 16 concurrent callers (the pool benchmark's
//!   concurrent figure, measured again in this run as the baseline);
//! - HTTP `POST /api/v1/proxies/extract` by 16 concurrent keep-alive clients (API-key
//!   auth, Redis rate limiter on, idempotency keys), with p50 / p99 latency.
//!
//! It prints req/s and the HTTP / script ratio (target ≥ 0.4), and per request the CPU
//! each side spent: Redis's own (`INFO cpu`, user + system, all its threads), the time
//! its scripts ran (`INFO commandstats`, `EVALSHA` and `EVAL`), and this process's
//! (`/proc/self/stat`: the controller and the callers together — in the HTTP phase the
//! HTTP clients too). These are the unit costs of the scale model (docs/scaling.md).
//! `BENCH_REQUESTS` sets the requests per phase (default 8000).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use activity_pool::model::{
    Candidate, ClientId, ExtractOutcome, ExtractRequest, FetchedBatch, Filters, Fulfillment, Label,
    Labels, OperationId, Protocol, ProxyId, RequestDigest, RequestId, UpstreamId,
};
use activity_pool::testkit::{RedisServer, bench_dial, commandstat};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use proxy_pool_controller::static_upstreams::available;
use proxy_pool_controller::store::Ports;
use proxy_pool_controller::{Controller, Listeners};

const CONCURRENCY: usize = 16;
const API_KEY: &str = "bench-api-key";

static NEXT: AtomicU64 = AtomicU64::new(0);

async fn seed(ports: &Ports, n: usize) {
    let base = NEXT.fetch_add(n as u64, Ordering::SeqCst) as usize;
    let cands: Vec<Candidate> = (base..base + n)
        .map(|i| Candidate {
            id: ProxyId::new(format!("b{i}")).unwrap(),
            dial: bench_dial(i, Protocol::Http),
            labels: Labels {
                region: Some(Label::new(format!("r{}", i % 10)).unwrap()),
                carrier: None,
                city: None,
            },
            ttl: Duration::from_secs(3600),
            max_concurrency: 8,
        })
        .collect();
    for chunk in cands.chunks(5000) {
        ports
            .upserter
            .upsert(FetchedBatch {
                quarantine: std::time::Duration::ZERO,
                upstream: UpstreamId::new("bench").unwrap(),
                operation_id: OperationId::new(format!(
                    "seed-{}",
                    NEXT.fetch_add(1, Ordering::SeqCst)
                ))
                .unwrap(),
                safety_margin: Duration::from_secs(10),
                max_size: NonZeroU32::new(10_000_000).unwrap(),
                candidates: chunk.to_vec(),
            })
            .await
            .unwrap();
        let updates = available(chunk);
        for u in updates.chunks(1000) {
            ports.health.apply_health(u).await.unwrap();
        }
    }
}

struct Figures {
    rate: f64,
    p50: Duration,
    p99: Duration,
}

/// CPU spent during one phase, in µs per request.
struct Cpu {
    redis: f64,
    scripts: f64,
    process: f64,
}

/// Redis's CPU seconds so far (`used_cpu_user` + `used_cpu_sys`) and the µs its
/// scripts have run since the last `CONFIG RESETSTAT` (`EVALSHA` + `EVAL`).
async fn redis_cpu(conn: &mut redis::aio::MultiplexedConnection) -> (f64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("everything")
        .query_async(conn)
        .await
        .unwrap();
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    (
        field("used_cpu_user:") + field("used_cpu_sys:"),
        commandstat(&info, "evalsha", "usec") + commandstat(&info, "eval", "usec"),
    )
}

/// This process's CPU seconds so far (utime + stime, all threads).
fn process_cpu() -> f64 {
    proxy_pool_e2e::hostile::procstat::cpu_seconds("self").unwrap()
}

/// Runs one phase and measures the CPU it cost, per request.
async fn measured<F: std::future::Future<Output = Figures>>(
    admin: &mut redis::aio::MultiplexedConnection,
    requests: usize,
    phase: F,
) -> (Figures, Cpu) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .unwrap();
    let (redis0, _) = redis_cpu(admin).await;
    let proc0 = process_cpu();
    let f = phase.await;
    let proc1 = process_cpu();
    let (redis1, scripts) = redis_cpu(admin).await;
    let per = |s: f64| s * 1e6 / requests as f64;
    let cpu = Cpu {
        redis: per(redis1 - redis0),
        scripts: scripts / requests as f64,
        process: per(proc1 - proc0),
    };
    (f, cpu)
}

fn figures(mut lat: Vec<Duration>, elapsed: Duration) -> Figures {
    lat.sort();
    let pick = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    Figures {
        rate: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

async fn raw(ports: &Ports, count: u32, requests: usize) -> Figures {
    let per = requests / CONCURRENCY;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let store = ports.extraction.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per);
            for _ in 0..per {
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let req = ExtractRequest {
                    client_id: ClientId::new("client:bench").unwrap(),
                    request_id: RequestId::new(format!("raw-{n}")).unwrap(),
                    idempotency_key: None,
                    request_digest: RequestDigest::of(b"bench"),
                    count: NonZeroU32::new(count).unwrap(),
                    fulfillment: Fulfillment::Partial,
                    filters: Filters::default(),
                    min_remaining_ttl: Duration::from_secs(5),
                    max_health_check_age: None,
                    reserve_for_gateway: 0,
                    idempotency_ttl: Duration::from_secs(600),
                };
                let t = Instant::now();
                let out = store.extract(&req).await.unwrap();
                lat.push(t.elapsed());
                let ExtractOutcome::Extracted(x) = out else {
                    panic!("insufficient")
                };
                assert_eq!(x.proxies.len(), count as usize, "pool ran dry");
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    figures(lat, started.elapsed())
}

async fn http(api: std::net::SocketAddr, count: u32, requests: usize) -> Figures {
    let per = requests / CONCURRENCY;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        tasks.push(tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let mut lat = Vec::with_capacity(per);
            let body = Bytes::from(format!(r#"{{"count":{count}}}"#));
            for _ in 0..per {
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let req = http::Request::post(format!("http://{api}/api/v1/proxies/extract"))
                    .header("content-type", "application/json")
                    .header("x-api-key", API_KEY)
                    .header("idempotency-key", format!("bench-{n}"))
                    .body(Full::new(body.clone()))
                    .unwrap();
                let t = Instant::now();
                let resp = client.request(req).await.unwrap();
                let status = resp.status();
                let bytes = resp.into_body().collect().await.unwrap().to_bytes();
                lat.push(t.elapsed());
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    figures(lat, started.elapsed())
}

fn main() {
    let requests: usize = std::env::var("BENCH_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let redis = RedisServer::start();
        let yaml = format!(
            r#"
store: {{backend: redis, redis: {{address: "{}"}}}}
distribution:
  listen: 127.0.0.1:0
  maxCountPerRequest: 100
  limits: {{maxInFlight: 1024}}
  rateLimit:
    global: {{requestsPerSecond: 1000000, burst: 1000000}}
    perClient: {{requestsPerSecond: 1000000, burst: 1000000}}
admin: {{listen: 127.0.0.1:0}}
clients:
  - name: bench
    apiKeys: [{{sha256: {}}}]
"#,
            redis.url(),
            proxy_pool_controller::distribution::hash_secret(API_KEY)
        );
        let config = proxy_pool_api::config::load_yaml(&yaml).unwrap();
        let listeners = Listeners::bind(&config).await.unwrap();
        let api = listeners.distribution.local_addr().unwrap();
        let controller = Controller::build(config).await.unwrap();
        let ports = controller.ports();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(controller.run(listeners, async move {
            let _ = rx.await;
        }));
        println!(
            "distribution benchmark: {requests} requests per phase, {CONCURRENCY} concurrent callers, real redis-server on loopback"
        );
        let mut admin = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        println!(
            "{:<28} {:>10} {:>10} {:>10} {:>12} {:>12} {:>14}",
            "phase", "req/s", "p50", "p99", "redis µs/req", "script µs/req", "process µs/req"
        );
        for count in [1u32, 5] {
            seed(&ports, requests * count as usize * 2 + 1000).await;
            // Warm-up.
            let _ = raw(&ports, count, CONCURRENCY * 20).await;
            let _ = http(api, count, CONCURRENCY * 20).await;
            let (r, rc) = measured(&mut admin, requests, raw(&ports, count, requests)).await;
            let (h, hc) = measured(&mut admin, requests, http(api, count, requests)).await;
            for (name, f, c) in [
                (format!("script extract count={count}"), &r, &rc),
                (format!("HTTP extract count={count}"), &h, &hc),
            ] {
                println!(
                    "{:<28} {:>10.0} {:>8.2}ms {:>8.2}ms {:>12.1} {:>12.1} {:>14.1}",
                    name,
                    f.rate,
                    f.p50.as_secs_f64() * 1000.0,
                    f.p99.as_secs_f64() * 1000.0,
                    c.redis,
                    c.scripts,
                    c.process
                );
            }
            println!("{:<28} {:>10.2}", format!("HTTP / script count={count}"), h.rate / r.rate);
        }
        let _ = tx.send(());
        let _ = task.await;
    });
}
