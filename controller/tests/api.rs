//! The Distribution API over real sockets, on the memory pool and on a real
//! `redis-server`: every status code of the contract, idempotency, client constraints,
//! disjoint results under 32 parallel clients, retries after a client-side timeout.
//! Every response is checked against the OpenAPI file by the harness.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::PoolError;
use base64::Engine;
use common::{
    BASIC_PASSWORD, BASIC_USER, BEARER, Harness, KEY_FULL, KEY_GATEWAY, KEY_LIMITED, KEY_SLOW, Kind,
};

macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Memory).await })*
        }
        mod redis {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Redis).await })*
        }
    };
}

both_stores!(
    extract_returns_every_contract_field,
    the_city_filter_selects_by_city,
    each_auth_method_works_and_bad_credentials_are_401,
    malformed_requests_are_400,
    business_errors_are_422_and_name_the_field,
    media_type_and_size_limits,
    permission_and_client_constraints_are_403_and_consume_nothing,
    all_or_nothing_shortfall_is_409_and_consumes_nothing,
    idempotent_replays_and_key_reuse,
    rate_limits_are_429_with_retry_after,
    pool_failures_are_503_and_internal_errors_500,
    parallel_clients_get_disjoint_proxies,
    retry_after_client_timeout_returns_the_same_proxies,
    unknown_routes_and_methods,
    admin_endpoints,
);

async fn extract_returns_every_contract_field(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 3, "shanghai", "telecom").await;
    let r = h
        .extract(
            r#"{"count":5,"fulfillment":"partial","filters":{"regions":["shanghai"]}}"#,
            &[("x-request-id", "req_01J4EXAMPLE")],
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    assert_eq!(r.headers["x-request-id"], "req_01J4EXAMPLE");
    let j = r.json();
    assert_eq!(j["requestId"], "req_01J4EXAMPLE");
    assert_eq!(j["requested"], 5);
    assert_eq!(j["returned"], 3);
    let proxies = j["proxies"].as_array().unwrap();
    assert_eq!(proxies.len(), 3);
    for p in proxies {
        let url = p["url"].as_str().unwrap();
        let expected = format!(
            "{}://{}:{}@{}:{}",
            p["protocol"].as_str().unwrap(),
            p["username"].as_str().unwrap(),
            p["password"].as_str().unwrap(),
            p["host"].as_str().unwrap(),
            p["port"]
        );
        assert_eq!(url, expected);
        assert_eq!(p["region"], "shanghai");
        assert_eq!(p["carrier"], "telecom");
        assert_eq!(p["upstream"], "up-a");
        let ttl = p["remainingTtlSeconds"].as_u64().unwrap();
        assert!((590..=600).contains(&ttl), "{ttl}");
    }
    // Nothing left: partial returns zero, still 200; a generated request ID is echoed.
    let r = h.extract(r#"{"count":1}"#, &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["returned"], 0);
    let rid = r.headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(rid.starts_with("req_"), "{rid}");
    assert_eq!(r.json()["requestId"], rid.as_str());
    h.stop().await;
}

/// `filters.cities` narrows inside the region (the country); each proxy names its city.
async fn the_city_filter_selects_by_city(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 3, "shanghai", "telecom").await;
    let pudong = h
        .seed_in("up-a", 2, "shanghai", "telecom", Some("pudong"))
        .await;
    h.seed_in("up-a", 2, "beijing", "telecom", Some("haidian"))
        .await;
    let r = h
        .extract(
            r#"{"count":5,"filters":{"regions":["shanghai"],"cities":["pudong"]}}"#,
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    let j = r.json();
    let proxies = j["proxies"].as_array().unwrap();
    let got: HashSet<&str> = proxies.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(got, pudong.iter().map(String::as_str).collect());
    for p in proxies {
        assert_eq!(
            (&p["region"], &p["city"]),
            (&"shanghai".into(), &"pudong".into())
        );
    }
    // AND across: no Beijing proxy is in Pudong.
    let r = h
        .extract(
            r#"{"count":1,"fulfillment":"allOrNothing","filters":{"regions":["beijing"],"cities":["pudong"]}}"#,
            &[],
        )
        .await;
    assert_eq!(r.status, 409, "{:?}", r.json());
    // A proxy without a city says so.
    let r = h
        .extract(
            r#"{"count":1,"filters":{"carriers":["telecom"],"regions":["shanghai"]}}"#,
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.json()["proxies"][0]["city"].is_null(), "{:?}", r.json());
    h.stop().await;
}

async fn each_auth_method_works_and_bad_credentials_are_401(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 10, "shanghai", "telecom").await;
    // Authentication and permission come before the body is read: an oversized,
    // mistyped body still gets 401 / 403.
    let big = "x".repeat(4096);
    let r = h
        .post_extract(&[("content-type", "text/plain")], &big)
        .await;
    assert_eq!(r.status, 401);
    let r = h
        .post_extract(
            &[("content-type", "text/plain"), ("x-api-key", KEY_GATEWAY)],
            &big,
        )
        .await;
    assert_eq!(r.status, 403);
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{BASIC_USER}:{BASIC_PASSWORD}"));
    let basic_header = format!("Basic {basic}");
    let bearer_header = format!("Bearer {BEARER}");
    for auth in [
        ("authorization", basic_header.as_str()),
        ("authorization", bearer_header.as_str()),
        ("x-api-key", KEY_FULL),
    ] {
        let r = h.extract(r#"{"count":1}"#, &[auth]).await;
        assert_eq!(r.status, 200, "{auth:?}: {:?}", r.json());
        assert_eq!(r.json()["returned"], 1);
    }
    let wrong_basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:nope")
    );
    for auth in [
        ("x-api-key", "wrong-key"),
        ("authorization", "Bearer wrong"),
        ("authorization", wrong_basic.as_str()),
    ] {
        let r = h.extract(r#"{"count":1}"#, &[auth]).await;
        assert_eq!(r.status, 401, "{auth:?}");
        assert_eq!(r.code(), "UNAUTHENTICATED");
        assert!(r.headers.contains_key("www-authenticate"));
    }
    let r = h
        .post_extract(&[("content-type", "application/json")], r#"{"count":1}"#)
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["status"], 401);
    h.stop().await;
}

async fn malformed_requests_are_400(kind: Kind) {
    let h = Harness::start(kind).await;
    for body in [
        "{",
        r#"{"count":1,"bogus":true}"#,
        r#"{"count":"1"}"#,
        r#"{"count":1,"filters":{"zones":[]}}"#,
    ] {
        let r = h.extract(body, &[]).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.code(), "INVALID_JSON");
        assert!(r.json()["requestId"].as_str().unwrap().starts_with("req_"));
    }
    let r = h
        .extract(r#"{"count":1}"#, &[("x-request-id", "bad id with spaces")])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "INVALID_HEADER");
    let r = h
        .extract(r#"{"count":1}"#, &[("idempotency-key", "\"unbalanced")])
        .await;
    assert_eq!(r.status, 400);
    let long = "x".repeat(20 * 1024);
    let r = h
        .extract(r#"{"count":1}"#, &[("x-padding", long.as_str())])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "HEADERS_TOO_LARGE");
    h.stop().await;
}

async fn business_errors_are_422_and_name_the_field(kind: Kind) {
    let h = Harness::start(kind).await;
    let cases = [
        (r#"{"count":0}"#, "count"),
        (r#"{}"#, "count"),
        (r#"{"count":201}"#, "count"),
        (r#"{"count":1,"fulfillment":"some"}"#, "fulfillment"),
        (
            r#"{"count":1,"filters":{"protocols":["ftp"]}}"#,
            "filters.protocols[0]",
        ),
        (
            r#"{"count":1,"filters":{"regions":["a","a"]}}"#,
            "filters.regions[1]",
        ),
        (
            r#"{"count":1,"filters":{"allowedUpstreams":["bad name"]}}"#,
            "filters.allowedUpstreams[0]",
        ),
        (
            r#"{"count":1,"filters":{"cities":["boston","new york"]}}"#,
            "filters.cities[1]",
        ),
    ];
    for (body, field) in cases {
        let r = h.extract(body, &[]).await;
        assert_eq!(r.status, 422, "{body}");
        assert_eq!(r.code(), "VALIDATION_FAILED");
        assert_eq!(r.json()["field"], field, "{body}");
    }
    let many: Vec<String> = (0..65).map(|i| format!("\"c{i}\"")).collect();
    let r = h
        .extract(
            &format!(
                r#"{{"count":1,"filters":{{"carriers":[{}]}}}}"#,
                many.join(",")
            ),
            &[],
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["field"], "filters.carriers");
    h.stop().await;
}

async fn media_type_and_size_limits(kind: Kind) {
    let h = Harness::start(kind).await;
    let r = h
        .post_extract(
            &[("content-type", "text/plain"), ("x-api-key", KEY_FULL)],
            r#"{"count":1}"#,
        )
        .await;
    assert_eq!(r.status, 415);
    assert_eq!(r.code(), "UNSUPPORTED_MEDIA_TYPE");
    let big = format!(r#"{{"count":1,"pad":"{}"}}"#, "x".repeat(2000));
    let r = h.extract(&big, &[]).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.code(), "PAYLOAD_TOO_LARGE");
    h.stop().await;
}

async fn permission_and_client_constraints_are_403_and_consume_nothing(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 4, "shanghai", "telecom").await;
    h.seed("up-b", 4, "beijing", "unicom").await;
    let gw = [("x-api-key", KEY_GATEWAY)];
    let r = h.extract(r#"{"count":1}"#, &gw).await;
    assert_eq!((r.status, r.code().as_str()), (403, "PERMISSION_DENIED"));
    let lim = [("x-api-key", KEY_LIMITED)];
    let r = h.extract(r#"{"count":3}"#, &lim).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, "COUNT_EXCEEDS_CLIENT_LIMIT")
    );
    let r = h
        .extract(
            r#"{"count":1,"filters":{"allowedUpstreams":["up-a","up-b"]}}"#,
            &lim,
        )
        .await;
    assert_eq!((r.status, r.code().as_str()), (403, "UPSTREAM_NOT_ALLOWED"));
    assert_eq!(r.json()["field"], "filters.allowedUpstreams[1]");
    let r = h
        .extract(r#"{"count":1,"filters":{"regions":["beijing"]}}"#, &lim)
        .await;
    assert_eq!((r.status, r.code().as_str()), (403, "REGION_NOT_ALLOWED"));
    // No filter given: the allowed sets apply (only up-a / shanghai).
    let mut seen = HashSet::new();
    for _ in 0..3 {
        let r = h.extract(r#"{"count":2}"#, &lim).await;
        assert_eq!(r.status, 200);
        for p in r.json()["proxies"].as_array().unwrap() {
            assert_eq!(p["upstream"], "up-a");
            assert!(seen.insert(p["id"].as_str().unwrap().to_owned()));
        }
    }
    assert_eq!(seen.len(), 4, "the refused requests consumed nothing");
    let r = h
        .extract(
            r#"{"count":10,"filters":{"allowedUpstreams":["up-b"]}}"#,
            &[],
        )
        .await;
    assert_eq!(r.json()["returned"], 4);
    h.stop().await;
}

async fn all_or_nothing_shortfall_is_409_and_consumes_nothing(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 6, "shanghai", "telecom").await;
    let r = h
        .extract(
            r#"{"count":10,"fulfillment":"allOrNothing"}"#,
            &[("x-request-id", "req_aon")],
        )
        .await;
    assert_eq!(r.status, 409);
    let j = r.json();
    assert_eq!(
        j["type"],
        "https://proxy-pool.local/problems/insufficient-proxies"
    );
    assert_eq!(j["title"], "Insufficient proxies");
    assert_eq!(j["code"], "INSUFFICIENT_PROXIES");
    assert_eq!(
        j["detail"],
        "requested 10 proxies but only 6 are currently eligible"
    );
    assert_eq!(j["requestId"], "req_aon");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    let r = h
        .extract(r#"{"count":6,"fulfillment":"allOrNothing"}"#, &[])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["returned"], 6);
    h.stop().await;
}

async fn idempotent_replays_and_key_reuse(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 10, "shanghai", "telecom").await;
    let first = h
        .extract(r#"{"count":3}"#, &[("idempotency-key", "extract-001")])
        .await;
    assert_eq!(first.status, 200);
    assert!(!first.headers.contains_key("idempotent-replayed"));
    let again = h
        .extract(
            r#"{ "count": 3, "fulfillment": "partial" }"#,
            &[("idempotency-key", "\"extract-001\"")],
        )
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(first.ids(), again.ids());
    assert_eq!(
        first.json()["proxies"][0]["extractedAt"],
        again.json()["proxies"][0]["extractedAt"]
    );
    let other = h
        .extract(r#"{"count":4}"#, &[("idempotency-key", "extract-001")])
        .await;
    assert_eq!(
        (other.status, other.code().as_str()),
        (409, "IDEMPOTENCY_KEY_REUSED")
    );
    // Keys are per client: another client may use the same key.
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{BASIC_USER}:{BASIC_PASSWORD}"));
    let r = h
        .extract(
            r#"{"count":1}"#,
            &[("idempotency-key", "extract-001"), ("x-api-key", KEY_SLOW)],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_ne!(r.ids(), first.ids());
    let _ = basic;
    // The request ID is for correlation only: without an idempotency key the same
    // X-Request-ID twice is two extractions.
    let one = h
        .extract(r#"{"count":2}"#, &[("x-request-id", "req_same_twice")])
        .await;
    let two = h
        .extract(r#"{"count":2}"#, &[("x-request-id", "req_same_twice")])
        .await;
    assert_eq!((one.status, two.status), (200, 200));
    assert!(!two.headers.contains_key("idempotent-replayed"));
    assert_eq!((one.ids().len(), two.ids().len()), (2, 2));
    assert!(
        one.ids().iter().all(|id| !two.ids().contains(id)),
        "two extractions"
    );
    h.stop().await;
}

async fn rate_limits_are_429_with_retry_after(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 5, "shanghai", "telecom").await;
    let slow = [("x-api-key", KEY_SLOW)];
    assert_eq!(h.extract(r#"{"count":1}"#, &slow).await.status, 200);
    let r = h.extract(r#"{"count":1}"#, &slow).await;
    assert_eq!((r.status, r.code().as_str()), (429, "RATE_LIMITED"));
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry));
    // Other clients are not affected; the limited one recovers.
    assert_eq!(h.extract(r#"{"count":1}"#, &[]).await.status, 200);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(h.extract(r#"{"count":1}"#, &slow).await.status, 200);
    h.stop().await;
    // A global limit covers every client.
    let h = Harness::start_custom(
        kind,
        "  rateLimit: {global: {requestsPerSecond: 1, burst: 2}}",
        |p| p,
    )
    .await;
    assert_eq!(h.extract(r#"{"count":1}"#, &[]).await.status, 200);
    assert_eq!(
        h.extract(r#"{"count":1}"#, &[("x-api-key", KEY_LIMITED)])
            .await
            .status,
        200
    );
    assert_eq!(h.extract(r#"{"count":1}"#, &[]).await.status, 429);
    h.stop().await;
}

async fn pool_failures_are_503_and_internal_errors_500(kind: Kind) {
    let (h, faulty) = Harness::start_faulty(kind, "").await;
    h.seed("up-a", 2, "shanghai", "telecom").await;
    *faulty.fail.lock() = Some(PoolError::Unavailable("secret-internal-text".into()));
    let r = h.extract(r#"{"count":1}"#, &[]).await;
    assert_eq!((r.status, r.code().as_str()), (503, "POOL_UNAVAILABLE"));
    assert!(r.headers.contains_key("retry-after"));
    *faulty.fail.lock() = Some(PoolError::ScanBudgetExhausted);
    let r = h.extract(r#"{"count":1}"#, &[]).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (503, "EXTRACTION_UNAVAILABLE")
    );
    *faulty.fail.lock() = Some(PoolError::Internal("secret-internal-text".into()));
    let r = h.extract(r#"{"count":1}"#, &[]).await;
    assert_eq!((r.status, r.code().as_str()), (500, "INTERNAL_ERROR"));
    assert!(!String::from_utf8_lossy(&r.body).contains("secret-internal-text"));
    *faulty.fail.lock() = None;
    assert_eq!(h.extract(r#"{"count":2}"#, &[]).await.json()["returned"], 2);
    h.stop().await;
}

async fn parallel_clients_get_disjoint_proxies(kind: Kind) {
    let h = Arc::new(Harness::start(kind).await);
    const CLIENTS: usize = 32;
    const ROUNDS: usize = 12;
    let total = CLIENTS * ROUNDS * 2;
    h.seed("up-a", total, "shanghai", "telecom").await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let client = common::client();
            let mut ids = Vec::new();
            for round in 0..ROUNDS {
                let count = 1 + (c + round) % 3;
                let key = format!("k-{c}-{round}");
                let r = common::send(
                    &client,
                    h.api,
                    "POST",
                    "/api/v1/proxies/extract",
                    &[
                        ("content-type", "application/json"),
                        ("x-api-key", KEY_FULL),
                        ("idempotency-key", &key),
                    ],
                    format!(r#"{{"count":{count}}}"#),
                )
                .await;
                assert_eq!(r.status, 200, "{:?}", r.json());
                assert_eq!(
                    r.json()["returned"].as_u64().unwrap() as usize,
                    r.ids().len()
                );
                ids.extend(r.ids());
            }
            ids
        }));
    }
    let mut all = HashSet::new();
    let mut n = 0;
    for t in tasks {
        for id in t.await.unwrap() {
            n += 1;
            assert!(all.insert(id.clone()), "{id} handed out twice");
        }
    }
    let expected: usize = (0..CLIENTS)
        .flat_map(|c| (0..ROUNDS).map(move |r| 1 + (c + r) % 3))
        .sum();
    assert_eq!(n, expected.min(total));
    let h = Arc::try_unwrap(h).ok().expect("sole owner");
    h.stop().await;
}

async fn retry_after_client_timeout_returns_the_same_proxies(kind: Kind) {
    let (h, faulty) = Harness::start_faulty(kind, "").await;
    h.seed("up-a", 10, "shanghai", "telecom").await;
    // The pool commits, then the answer is slow: the client gives up before it.
    *faulty.delay_after.lock() = Duration::from_millis(400);
    let slow = tokio::time::timeout(
        Duration::from_millis(100),
        h.extract(r#"{"count":3}"#, &[("idempotency-key", "retry-me")]),
    )
    .await;
    assert!(slow.is_err(), "the client gave up first");
    tokio::time::sleep(Duration::from_millis(500)).await;
    *faulty.delay_after.lock() = Duration::ZERO;
    let retry = h
        .extract(r#"{"count":3}"#, &[("idempotency-key", "retry-me")])
        .await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    let rest = h.extract(r#"{"count":10}"#, &[]).await;
    assert_eq!(
        rest.json()["returned"],
        7,
        "the timed-out request extracted exactly once"
    );
    let retry_ids: HashSet<String> = retry.ids().into_iter().collect();
    assert!(rest.ids().iter().all(|id| !retry_ids.contains(id)));
    h.stop().await;
}

async fn unknown_routes_and_methods(kind: Kind) {
    let h = Harness::start(kind).await;
    let r = h
        .request(
            "GET",
            "/api/v1/proxies/extract",
            &[("x-api-key", KEY_FULL)],
            "",
        )
        .await;
    assert_eq!((r.status, r.code().as_str()), (405, "METHOD_NOT_ALLOWED"));
    assert_eq!(r.headers["allow"], "POST");
    let r = h.request("GET", "/nope", &[], "").await;
    assert_eq!((r.status, r.code().as_str()), (404, "NOT_FOUND"));
    assert_eq!(r.headers["content-type"], "application/problem+json");
    h.stop().await;
}

async fn admin_endpoints(kind: Kind) {
    let h = Harness::start(kind).await;
    h.seed("up-a", 5, "shanghai", "telecom").await;
    assert_eq!(h.extract(r#"{"count":2}"#, &[]).await.status, 200);
    assert_eq!(h.admin_get("/healthz").await.status, 200);
    assert_eq!(h.admin_get("/readyz").await.status, 200);
    let inv = h.admin_get("/api/v1/inventory").await;
    assert_eq!(inv.status, 200);
    let j = inv.json();
    assert_eq!(j["upstreams"][0]["name"], "up-a");
    assert_eq!(j["upstreams"][0]["unextracted"], 3);
    assert_eq!(j["upstreams"][0]["managed"], 3);
    assert_eq!(j["upstreams"][0]["availableSlots"], 12);
    assert_eq!(j["upstreams"][0]["available"], 3);
    assert!(j["upstreams"][0]["fetchError"].is_null());
    let m = h.admin_get("/metrics").await;
    let text = String::from_utf8_lossy(&m.body).to_string();
    assert!(
        text.contains("proxy_pool_controller_distribution_requests_total{status=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("proxy_pool_controller_distribution_extracted_proxies_total 2"),
        "{text}"
    );
    assert!(text.contains("proxy_pool_controller_distribution_request_duration_seconds_bucket"));
    assert!(
        text.contains(
            "proxy_pool_controller_pool_inventory{upstream=\"up-a\",kind=\"available_slots\"} 12"
        ),
        "{text}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_bound_and_request_timeout_are_503() {
    // maxInFlight 1: a second request while one is in progress is refused at once.
    let yaml = common::config_yaml("{backend: memory}", "").replace(
        "limits: {maxBodyBytes: 1024, requestTimeout: 5s}",
        "limits: {maxBodyBytes: 1024, requestTimeout: 1s, maxInFlight: 1}",
    );
    let (h, slow) = Harness::start_yaml_faulty(&yaml, None).await;
    h.seed("up-a", 5, "shanghai", "telecom").await;
    *slow.delay.lock() = Duration::from_millis(400);
    let first = h.spawn_extract(r#"{"count":1}"#);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = h.extract(r#"{"count":1}"#, &[]).await;
    assert_eq!((r.status, r.code().as_str()), (503, "OVERLOADED"));
    assert_eq!(first.await.unwrap().status, 200);
    // requestTimeout 1s: a stuck pool call ends in 503 TIMEOUT, not a hung client.
    *slow.delay.lock() = Duration::from_millis(1500);
    let r = h.extract(r#"{"count":1}"#, &[]).await;
    assert_eq!((r.status, r.code().as_str()), (503, "TIMEOUT"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_503_then_service_resumes() {
    let h = Harness::start(Kind::Redis).await;
    h.seed("up-a", 50, "shanghai", "telecom").await;
    let mut handed = HashSet::new();
    for _ in 0..5 {
        let r = h.extract(r#"{"count":2}"#, &[]).await;
        assert_eq!(r.status, 200);
        handed.extend(r.ids());
    }
    let mut h = h;
    h.redis.as_mut().unwrap().stop();
    for i in 0..5 {
        let r = h
            .extract(
                r#"{"count":2}"#,
                &[("idempotency-key", &format!("during-{i}"))],
            )
            .await;
        // The full client has no rate limit: the pool itself answers unavailable.
        assert_eq!(r.status, 503, "{:?}", r.json());
        assert_eq!(r.code(), "POOL_UNAVAILABLE");
        assert!(r.json().get("proxies").is_none());
    }
    // A rate-limited client is stopped earlier, by the unavailable Redis limiter.
    let r = h
        .extract(r#"{"count":1}"#, &[("x-api-key", KEY_SLOW)])
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (503, "RATE_LIMITER_UNAVAILABLE")
    );
    assert_eq!(h.admin_get("/readyz").await.status, 503);
    h.redis.as_mut().unwrap().restart();
    // The restarted Redis is empty (a new pool generation): refill and extract again.
    let mut ok = false;
    for _ in 0..50 {
        if h.admin_get("/readyz").await.status == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "ready again after the restart");
    let refill = h.seed("up-a", 5, "shanghai", "telecom").await;
    let mut r = h.extract(r#"{"count":5}"#, &[]).await;
    for _ in 0..20 {
        if r.status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        r = h.extract(r#"{"count":5}"#, &[]).await;
    }
    assert_eq!(r.status, 200, "{:?}", r.json());
    let got: HashSet<String> = r.ids().into_iter().collect();
    assert_eq!(got, refill.into_iter().collect::<HashSet<_>>());
    assert!(got.is_disjoint(&handed));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_only_from_trusted_proxies() {
    // Anonymous mode: the client is its source address; a per-client limit of one
    // request shows which address counted.
    let yaml = common::config_yaml("{backend: memory}", "")
        .replace("auth: {mode: any}", "auth: {mode: none}\n  rateLimit: {perClient: {requestsPerSecond: 1, burst: 1}}\n  trustedProxies: [127.0.0.1/32]")
        .replace("clients:", "ignored_clients:");
    let yaml =
        yaml.split("ignored_clients:").next().unwrap().to_owned() + "shutdown: {gracePeriod: 5s}\n";
    let h = Harness::start_yaml(&yaml, None, |p| p).await;
    h.seed("up-a", 10, "shanghai", "telecom").await;
    let json = ("content-type", "application/json");
    let ex = |xff: &'static str| {
        let h = &h;
        async move {
            h.post_extract(&[json, ("x-forwarded-for", xff)], r#"{"count":1}"#)
                .await
                .status
        }
    };
    assert_eq!(ex("198.51.100.1").await, 200);
    assert_eq!(ex("198.51.100.1").await, 429);
    assert_eq!(
        ex("198.51.100.2").await,
        200,
        "another forwarded client has its own bucket"
    );
    h.stop().await;
    // Source control: only allowed CIDRs may call (after forwarded-header resolution).
    let yaml = yaml.replace(
        "trustedProxies: [127.0.0.1/32]",
        "trustedProxies: [127.0.0.1/32]\n  allowedSources: [198.51.100.0/24]",
    );
    let h = Harness::start_yaml(&yaml, None, |p| p).await;
    h.seed("up-a", 2, "shanghai", "telecom").await;
    let r = h
        .post_extract(
            &[json, ("x-forwarded-for", "203.0.113.5")],
            r#"{"count":1}"#,
        )
        .await;
    assert_eq!((r.status, r.code().as_str()), (403, "SOURCE_NOT_ALLOWED"));
    let r = h
        .post_extract(
            &[json, ("x-forwarded-for", "198.51.100.9")],
            r#"{"count":1}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    h.stop().await;
}
