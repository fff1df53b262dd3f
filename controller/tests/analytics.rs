//! Usage analytics in a live controller (real Redis, real PostgreSQL): the `migrate`
//! command applies the schema and `run` refuses an unmigrated database; extractions
//! through the Distribution API appear in the stats API after a flush (exact PV, UV
//! within the HyperLogLog error — exact for these small sets), idempotent replays count
//! once, failed extractions not at all; the dashboard is served; every stats answer is
//! `no-store` and conforms to the OpenAPI file; shutdown makes the final flush; with two
//! replicas both record usage and only the leader flushes.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::process::Command;
use std::time::Duration;

use activity_pool::testkit::{RedisSentinel, RedisServer};
use common::usage::{analytics_yaml, start_built};
use common::{BASIC_PASSWORD, BASIC_USER, Harness, KEY_LIMITED, Kind, Resp};
use proxy_pool_analytics::PgStore;
use proxy_pool_analytics::testkit::{Postgres, summary_subjects};
use proxy_pool_e2e::procs::succeeded;
use serde_json::Value;

fn yaml(redis: &RedisServer, analytics: &str) -> String {
    format!(
        "{}{analytics}",
        common::config_yaml(&common::store_yaml(Kind::Redis, Some(redis)), "")
    )
}

fn migrate_cli(config: &str) -> std::process::Output {
    let path = std::env::temp_dir().join(format!(
        "pp-analytics-migrate-{}-{}.yaml",
        std::process::id(),
        config.len()
    ));
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_proxy-pool-controller"))
        .arg("migrate")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run the controller binary");
    let _ = std::fs::remove_file(path);
    out
}

/// A stats GET with a credential holding `stats:read` (the `full` client declares no
/// permissions, so it has every one), checked against the OpenAPI file and for
/// `Cache-Control: no-store`.
async fn stats(h: &Harness, path: &str) -> Resp {
    let r = h
        .admin_get_with(path, &[("x-api-key", common::KEY_FULL)])
        .await;
    let template = match path.split('?').next().unwrap_or("") {
        "/api/v1/stats/summary" => "/api/v1/stats/summary",
        "/stats" => "/stats",
        _ => "/api/v1/stats/{kind}/{name}",
    };
    let ct = r.headers.get("content-type").and_then(|v| v.to_str().ok());
    common::openapi::check(template, "get", r.status, ct, &r.body);
    assert_eq!(r.headers["cache-control"], "no-store", "{path}");
    r
}

/// Waits (bounded) until the committed total of a subject reaches `requests`.
async fn committed(h: &Harness, subject: &str, requests: u64) -> Value {
    let path = format!("/api/v1/stats/{subject}?days=7");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = stats(h, &path).await;
        if r.status == 200 && r.json()["total"]["requests"].as_u64() == Some(requests) {
            return r.json();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{subject} never reached {requests} committed requests: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The committed stats of a subject now (must exist).
async fn current(h: &Harness, subject: &str) -> Value {
    let r = stats(h, &format!("/api/v1/stats/{subject}?days=7")).await;
    assert_eq!(
        r.status,
        200,
        "{subject}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

fn extract_body(count: u32, upstream: &str) -> String {
    format!(r#"{{"count":{count},"filters":{{"allowedUpstreams":["{upstream}"]}}}}"#)
}

/// The `total` of a stats answer: requests, proxies and unique identities.
#[track_caller]
fn assert_totals(stats: &Value, requests: u64, proxies: u64, identities: u64) {
    let total = &stats["total"];
    assert_eq!(
        (
            &total["requests"],
            &total["proxies"],
            &total["uniqueIdentities"]
        ),
        (
            &Value::from(requests),
            &Value::from(proxies),
            &Value::from(identities)
        ),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_then_count_extractions_through_the_api() {
    let redis = RedisServer::start();
    let pg = Postgres::start();
    let (section, _dsn) = analytics_yaml(&pg, ", flushInterval: 1s, shutdownFlushTimeout: 2s");
    let config = yaml(&redis, &section);

    // Without the schema the controller refuses to start analytics, naming the command.
    let parsed = proxy_pool_api::config::load_yaml(&config).unwrap();
    let err = proxy_pool_controller::Controller::build(parsed)
        .await
        .expect_err("an unmigrated database is refused")
        .to_string();
    assert!(err.contains("schema") && err.contains("migrate"), "{err}");

    // `migrate` applies it (and is idempotent).
    for _ in 0..2 {
        succeeded(migrate_cli(&config), "migrate");
    }
    PgStore::new(pg.config()).check_schema().await.unwrap();

    let h = start_built(&config, Some(redis)).await;
    h.seed("up-a", 40, "shanghai", "telecom").await;
    h.seed("up-b", 40, "beijing", "unicom").await;

    // client `full`: 3 extractions by API key (2 from up-a, 1 from up-b) …
    for (n, up) in [(2, "up-a"), (3, "up-a"), (4, "up-b")] {
        let r = h.extract(&extract_body(n, up), &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.ids().len(), n as usize);
    }
    // … 1 by HTTP Basic (a second credential of the same client) …
    let basic = format!(
        "Basic {}",
        base64_encode(&format!("{BASIC_USER}:{BASIC_PASSWORD}"))
    );
    let r = h
        .extract(&extract_body(1, "up-a"), &[("authorization", &basic)])
        .await;
    assert_eq!(r.status, 200);
    // … 1 with an Idempotency-Key, replayed twice (counted once) …
    for i in 0..3 {
        let r = h
            .extract(&extract_body(2, "up-b"), &[("idempotency-key", "once-7f")])
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.headers.get("idempotent-replayed").is_some(),
            i > 0,
            "replay {i}"
        );
    }
    // … and refusals that count nothing: allOrNothing shortfall, unknown key.
    let r = h
        .extract(
            r#"{"count":150,"fulfillment":"allOrNothing","filters":{"allowedUpstreams":["up-a"]}}"#,
            &[],
        )
        .await;
    assert_eq!(r.status, 409);
    let r = h
        .extract(&extract_body(1, "up-a"), &[("x-api-key", "nope")])
        .await;
    assert_eq!(r.status, 401);
    // client `limited`: 1 extraction from up-a.
    let r = h
        .extract(&extract_body(2, "up-a"), &[("x-api-key", KEY_LIMITED)])
        .await;
    assert_eq!(r.status, 200);

    // The worker applies events in order and a flush commits all it applied: once the
    // last request (limited's) is committed, so is every earlier one.
    let limited = committed(&h, "clients/limited", 1).await;
    assert_eq!(limited["total"]["proxies"], 2);
    assert_eq!(limited["total"]["uniqueIdentities"], 1);
    // full: 5 requests (2+3+4+1+2 = 12 proxies), 2 credentials.
    let full = current(&h, "clients/full").await;
    assert_totals(&full, 5, 12, 2);
    assert_eq!(full["today"]["requests"], 5);
    assert_eq!(full["range"]["requests"], 5);
    assert_eq!(full["range"]["uniqueIdentities"], 2);
    assert_eq!(full["timeZone"], "UTC");
    // up-a: 4 requests (2, 3, 1 by full; 2 by limited) = 8 proxies, 2 clients.
    let up_a = current(&h, "upstreams/up-a").await;
    assert_totals(&up_a, 4, 8, 2);
    // up-b: 2 requests (4, 2 by full) = 6 proxies, 1 client.
    let up_b = current(&h, "upstreams/up-b").await;
    assert_totals(&up_b, 2, 6, 1);

    let summary = stats(&h, "/api/v1/stats/summary?days=30").await;
    assert_eq!(summary.status, 200);
    let mut names = summary_subjects(&summary.json());
    names.sort();
    assert_eq!(
        names,
        [
            "clients/full",
            "clients/limited",
            "upstreams/up-a",
            "upstreams/up-b"
        ]
    );
    assert_eq!(stats(&h, "/api/v1/stats/clients/nobody").await.status, 404);
    assert_eq!(
        stats(&h, "/api/v1/stats/clients/full?days=8").await.status,
        400
    );

    let page = stats(&h, "/stats").await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains("usage statistics") && html.contains("api/v1/stats/summary"));

    // Per-client usage is not public: no credential 401, one without `stats:read` 403
    // (both documented), while health and metrics stay open for probes and Prometheus.
    for path in [
        "/api/v1/stats/summary",
        "/api/v1/stats/clients/full",
        "/stats",
    ] {
        let template = if path == "/stats" || path.ends_with("summary") {
            path
        } else {
            "/api/v1/stats/{kind}/{name}"
        };
        for (answer, status) in [
            (h.admin_get(path).await, 401),
            (
                h.admin_get_with(path, &[("x-api-key", common::KEY_GATEWAY)])
                    .await,
                403,
            ),
        ] {
            assert_eq!(answer.status, status, "{path}");
            let ct = answer
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok());
            common::openapi::check(template, "get", status, ct, &answer.body);
        }
    }
    assert_eq!(h.admin_get("/healthz").await.status, 200);

    let metrics = h.admin_get("/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    assert!(
        text.contains("proxy_pool_controller_analytics_events_accepted_total 6"),
        "{text}"
    );
    assert!(text.contains("proxy_pool_controller_analytics_events_dropped_total 0"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_makes_the_final_flush() {
    let redis = RedisServer::start();
    let pg = Postgres::start();
    let store = PgStore::new(pg.config());
    store.migrate().await.unwrap();
    // No periodic flush during the test: only the shutdown one can commit.
    let (section, _dsn) = analytics_yaml(&pg, ", flushInterval: 1h, shutdownFlushTimeout: 3s");
    let h = start_built(&yaml(&redis, &section), Some(redis)).await;
    h.seed("up-a", 10, "shanghai", "telecom").await;
    for _ in 0..3 {
        assert_eq!(h.extract(&extract_body(2, "up-a"), &[]).await.status, 200);
    }
    let before = stats(&h, "/api/v1/stats/clients/full").await;
    assert_eq!(before.status, 404, "nothing committed before shutdown");
    h.stop().await;
    let totals = store.totals().await.unwrap();
    let full = totals
        .iter()
        .find(|t| t.subject.name == "full")
        .expect("the client's total was committed at shutdown");
    assert_eq!((full.requests, full.proxies), (3, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_store_feeds_analytics_too() {
    let master = RedisServer::start();
    let sentinel = RedisSentinel::start("pp-master", master.port());
    let pg = Postgres::start();
    PgStore::new(pg.config()).migrate().await.unwrap();
    let store = format!(
        "{{backend: redis, redis: {{sentinel: {{masterName: pp-master, addresses: [\"{}\"]}}, commandTimeout: 500ms}}}}",
        sentinel.addr()
    );
    let (section, _dsn) = analytics_yaml(&pg, ", flushInterval: 1s, shutdownFlushTimeout: 2s");
    let config = format!("{}{section}", common::config_yaml(&store, ""));
    let h = start_built(&config, Some(master)).await;
    h.seed("up-a", 5, "shanghai", "telecom").await;
    assert_eq!(h.extract(&extract_body(3, "up-a"), &[]).await.status, 200);
    let full = committed(&h, "clients/full", 1).await;
    assert_eq!(full["total"]["proxies"], 3);
    h.stop().await;
    drop(sentinel);
}

/// A counter or gauge of this replica's `/metrics` (0 when absent).
async fn metric(h: &Harness, name: &str) -> u64 {
    let r = h.admin_get("/metrics").await;
    assert_eq!(r.status, 200, "GET /metrics");
    let text = String::from_utf8_lossy(&r.body);
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0, |v| v as u64)
}

/// Waits (bounded) until one of `hs` leads; returns its index.
async fn leader_of(hs: &[&Harness]) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        for (i, h) in hs.iter().enumerate() {
            if metric(h, "proxy_pool_controller_leader").await == 1 {
                return i;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no replica leads");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two controller replicas with analytics on one Redis and one PostgreSQL: usage
/// recorded on either replica is committed exactly once, only the leader flushes, and
/// after the leader stops the other replica takes the writer over (its own and the
/// earlier usage keep adding up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_record_usage_and_only_the_leader_flushes() {
    let redis = RedisServer::start();
    let pg = Postgres::start();
    PgStore::new(pg.config()).migrate().await.unwrap();
    let (section, _dsn) = analytics_yaml(&pg, ", flushInterval: 1s, shutdownFlushTimeout: 2s");
    let config = format!(
        "{}leadership: {{replicas: 2, lease: 2s, renewEvery: 500ms, retryEvery: 300ms}}\n",
        yaml(&redis, &section)
    );
    let a = start_built(&config, None).await;
    assert_eq!(leader_of(&[&a]).await, 0);
    let b = start_built(&config, Some(redis)).await;
    a.seed("up-a", 40, "shanghai", "telecom").await;

    for _ in 0..3 {
        assert_eq!(a.extract(&extract_body(1, "up-a"), &[]).await.status, 200);
    }
    for _ in 0..4 {
        assert_eq!(b.extract(&extract_body(2, "up-a"), &[]).await.status, 200);
    }
    // Both replicas' usage, committed by the leader, read through the follower.
    let full = committed(&b, "clients/full", 7).await;
    assert_eq!(full["total"]["proxies"], 11);
    let flushes = "proxy_pool_controller_analytics_flushes_total";
    assert!(metric(&a, flushes).await > 0, "the leader flushes");
    assert_eq!(metric(&b, flushes).await, 0, "a follower never flushes");
    assert_eq!(
        metric(&b, "proxy_pool_controller_analytics_events_applied_total").await,
        4,
        "the follower records its own usage into redis"
    );

    // The leader stops (its lease is released); the follower leads and flushes.
    a.stop().await;
    assert_eq!(leader_of(&[&b]).await, 0);
    for _ in 0..2 {
        assert_eq!(b.extract(&extract_body(1, "up-a"), &[]).await.status, 200);
    }
    let full = committed(&b, "clients/full", 9).await;
    assert_eq!(full["total"]["proxies"], 13);
    assert!(metric(&b, flushes).await > 0, "the new leader flushes");
    b.stop().await;
}

/// No-auth mode: callers are told apart by source address (here through a trusted
/// proxy's `X-Forwarded-For`). 500 distinct callers: PV exact, UV within 3 standard
/// errors of the HyperLogLog (0.81 % each) — for the client and, merged over the
/// range, equal to the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_callers_are_estimated_within_the_hll_error() {
    const CALLERS: u64 = 500;
    let redis = RedisServer::start();
    let pg = Postgres::start();
    PgStore::new(pg.config()).migrate().await.unwrap();
    let (section, _dsn) = analytics_yaml(&pg, ", flushInterval: 1s, shutdownFlushTimeout: 2s");
    let config = format!(
        r#"
store: {}
distribution:
  listen: 127.0.0.1:0
  trustedProxies: [127.0.0.1/32]
  # Callers identified by their (forwarded) address: anonymous access, written out.
  auth: {{mode: none}}
admin: {{listen: 127.0.0.1:0}}
upstreams:
  - {{name: up-a, ttl: 10m, maxSize: 100000, source: {{vendorApi: {{url: "http://127.0.0.1:9/", format: json}}}}}}
shutdown: {{gracePeriod: 5s}}
{section}"#,
        common::store_yaml(Kind::Redis, Some(&redis))
    );
    let h = start_built(&config, Some(redis)).await;
    h.seed("up-a", CALLERS as usize, "shanghai", "telecom")
        .await;
    for i in 0..CALLERS {
        let xff = format!("10.{}.{}.7", i / 200, i % 200);
        let r = h
            .post_extract(
                &[
                    ("content-type", "application/json"),
                    ("x-forwarded-for", &xff),
                ],
                r#"{"count":1}"#,
            )
            .await;
        assert_eq!(r.status, 200, "caller {i}");
    }
    let anon = committed(&h, "clients/anonymous", CALLERS).await;
    assert_eq!(anon["total"]["proxies"], CALLERS);
    let bound = (CALLERS as f64 * 3.0 * 0.0081).ceil() as u64;
    for uv in [
        &anon["total"]["uniqueIdentities"],
        &anon["today"]["uniqueIdentities"],
        &anon["range"]["uniqueIdentities"],
    ] {
        let uv = uv.as_u64().expect("a UV estimate");
        println!("UV estimate {uv} for {CALLERS} distinct callers (bound ±{bound})");
        assert!(
            uv.abs_diff(CALLERS) <= bound,
            "UV {uv} vs {CALLERS} ± {bound}"
        );
    }
    let up = current(&h, "upstreams/up-a").await;
    assert_eq!(up["total"]["requests"], CALLERS);
    assert_eq!(up["total"]["uniqueIdentities"], 1, "one client: anonymous");
    h.stop().await;
}

#[test]
fn validate_config_resolves_the_time_zone() {
    let path = std::env::temp_dir().join(format!("pp-analytics-tz-{}.yaml", std::process::id()));
    let base = "store: {backend: redis, redis: {address: \"redis://127.0.0.1:6379/0\"}}\n";
    let run = |zone: &str| {
        std::fs::write(
            &path,
            format!("{base}analytics: {{enabled: true, dsnFile: /run/dsn, timeZone: {zone}}}\n"),
        )
        .unwrap();
        Command::new(env!("CARGO_BIN_EXE_proxy-pool-controller"))
            .arg("validate-config")
            .arg(&path)
            .output()
            .unwrap()
    };
    let ok = run("Asia/Shanghai");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = run("Mars/Olympus_Mons");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("analytics.timeZone"), "{err}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn migrate_needs_analytics_in_the_config() {
    let out = migrate_cli("store: {backend: memory}\n");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("analytics is not enabled"), "{err}");
}

fn base64_encode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}
