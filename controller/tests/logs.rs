//! Captures every log line of a full run (memory and Redis stores, static upstream
//! with credentials, every auth method, successes, replays and errors) and proves that
//! no proxy host, proxy password, API key, Basic password or bearer token appears,
//! while each request left exactly one access line.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::time::Duration;

use activity_pool::testkit::RedisServer;
use base64::Engine;
use common::{
    BASIC_PASSWORD, BASIC_USER, BEARER, Harness, KEY_FULL, KEY_GATEWAY, KEY_LIMITED, KEY_SLOW, Kind,
};
use proxy_pool_e2e::logs::LogCapture;

const STATIC_PASSWORD: &str = "static-upstream-pw-61c2";

/// Request headers, as (name, value) pairs.
type Headers<'a> = &'a [(&'a str, &'a str)];

async fn full_run(kind: Kind) -> usize {
    let redis = (kind == Kind::Redis).then(RedisServer::start);
    let yaml = common::config_yaml(&common::store_yaml(kind, redis.as_ref()), "").replace(
        "upstreams:\n",
        &format!(
            "upstreams:\n  - {{name: st, ttl: 1m, quarantine: 0s, maxSize: 100, fetchInterval: 200ms, labels: {{region: shanghai}}, source: {{static: {{proxies: [\"st1.secret-host.test:8080\", \"192.0.2.77:3128\"], credentials: {{username: stuser, password: {STATIC_PASSWORD}}}}}}}}}\n"
        ),
    );
    let h = Harness::start_yaml(&yaml, redis, |p| p).await;
    h.seed("up-a", 20, "shanghai", "telecom").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{BASIC_USER}:{BASIC_PASSWORD}"))
    );
    let bearer = format!("Bearer {BEARER}");
    // In order: the idempotency key and the slow client's budget carry over.
    let requests: [(&str, Headers, u16); 13] = [
        (
            r#"{"count":2,"filters":{"allowedUpstreams":["st"]}}"#,
            &[],
            200,
        ),
        (r#"{"count":2}"#, &[("authorization", basic.as_str())], 200),
        (r#"{"count":2}"#, &[("authorization", bearer.as_str())], 200),
        (r#"{"count":1}"#, &[("x-api-key", KEY_LIMITED)], 200),
        (r#"{"count":1}"#, &[("idempotency-key", "k1")], 200),
        (r#"{"count":1}"#, &[("idempotency-key", "k1")], 200),
        (r#"{"count":2}"#, &[("idempotency-key", "k1")], 409),
        (r#"{"count":100,"fulfillment":"allOrNothing"}"#, &[], 409),
        (r#"{"count":1}"#, &[("x-api-key", KEY_GATEWAY)], 403),
        (r#"{"count":1}"#, &[("x-api-key", "not-a-key-9f")], 401),
        (r#"{"count":0}"#, &[], 422),
        (r#"{"count":1}"#, &[("x-api-key", KEY_SLOW)], 200),
        (r#"{"count":1}"#, &[("x-api-key", KEY_SLOW)], 429),
    ];
    for (body, headers, status) in requests {
        assert_eq!(
            h.extract(body, headers).await.status,
            status,
            "{body} {headers:?}"
        );
    }
    assert_eq!(h.admin_get("/api/v1/inventory").await.status, 200);
    assert_eq!(h.admin_get("/metrics").await.status, 200);
    h.stop().await;
    requests.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_carry_no_address_or_secret() {
    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "trace,hyper=info,hyper_util=info,h2=info,tower=info,mio=info,redis=debug",
        ))
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("one subscriber per test binary");

    let mut requests = full_run(Kind::Memory).await;
    requests += full_run(Kind::Redis).await;

    let logs = capture.text();
    let access = logs
        .lines()
        .filter(|l| l.contains(" access:") || l.contains("access: extract"))
        .count();
    assert_eq!(access, requests, "one access line per request\n{logs}");
    assert!(logs.contains("request_id=req_"), "{logs}");
    assert!(logs.contains("filters=\"upstreams=[st]\""), "{logs}");
    for needle in [
        "secret-host.test",
        "192.0.2.77",
        "proxy-password-",
        STATIC_PASSWORD,
        KEY_FULL,
        KEY_LIMITED,
        KEY_GATEWAY,
        KEY_SLOW,
        "not-a-key-9f",
        BASIC_PASSWORD,
        BEARER,
    ] {
        assert!(!logs.contains(needle), "the logs contain {needle}");
    }
}
