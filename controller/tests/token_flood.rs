//! TokenReview amplification: bad bearer tokens from many addresses while the API
//! server answers slowly (a reviewer that holds every review). The reviews in flight are
//! capped, the rest are refused at once, so they never hold the Distribution API's
//! in-flight slots: an API-key caller is served during the flood. Real sockets, the
//! controller as `main` builds it, with the TokenReview verifier plugged in.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{KEY_FULL, Kind};
use proxy_pool_cache::Namespace;
use proxy_pool_controller::distribution::review_testkit::{self, HeldReviewer};
use proxy_pool_controller::distribution::{MAX_CONCURRENT_REVIEWS, TokenReviewBearerVerifier};
use proxy_pool_controller::store::{self, Store};
use proxy_pool_controller::{Controller, Listeners};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A JWT-shaped token that passes the cheap checks (a fresh one each time).
fn jwt(i: usize) -> String {
    review_testkit::jwt("proxy-pool", i)
}

async fn extract(src: Ipv4Addr, addr: SocketAddr, credential: &str) -> String {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::from((src, 0))).expect("bind");
    let mut s = socket.connect(addr).await.expect("connect");
    let body = r#"{"count":1,"fulfillment":"partial"}"#;
    let req = format!(
        "POST /api/v1/proxies/extract HTTP/1.1\r\nHost: x\r\n{credential}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer).await;
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_caller_is_served_during_a_flood_of_bad_tokens() {
    let yaml = common::config_yaml(&common::store_yaml(Kind::Memory, None), "")
        .replace(
            "limits: {maxBodyBytes: 1024, requestTimeout: 5s}",
            "limits: {maxBodyBytes: 1024, requestTimeout: 30s, maxInFlight: 32}",
        )
        .replace(
            "auth: {mode: any}",
            "auth: {mode: any, methods: [{type: apiKey}, {type: basic}, {type: bearer, tokenReview: {audience: proxy-pool}}]}",
        );
    let config = proxy_pool_api::config::load_yaml(&yaml).expect("config");
    let listeners = Listeners::bind(&config).await.expect("bind");
    let api = listeners.distribution.local_addr().expect("addr");
    let built = store::build(&config).await.expect("store");
    let reviewer = Arc::new(HeldReviewer::holding());
    let controller = Controller::from_store(
        config,
        Store {
            ports: built.ports,
            redis: built.redis,
        },
    )
    .expect("controller")
    .with_bearer_verifier(Arc::new(TokenReviewBearerVerifier::new(
        "proxy-pool",
        reviewer.clone(),
        Namespace::new("token_review"),
        "",
        None,
        HashMap::new(),
    )));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(controller.run(listeners, async move {
        let _ = stopped.await;
    }));

    // 200 bad tokens at once, from 40 addresses (below each address's failure burst).
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..200 {
        flood.spawn(async move {
            extract(
                Ipv4Addr::new(127, 0, 5, 10 + (i % 40) as u8),
                api,
                &format!("Authorization: Bearer {}", jwt(i)),
            )
            .await
        });
    }
    // All but the reviews in flight are answered without waiting for a review.
    let early = review_testkit::answered_at_once(
        &mut flood,
        200 - MAX_CONCURRENT_REVIEWS,
        Duration::from_secs(20),
    )
    .await;
    // While the others' reviews still hang, an API-key caller is served.
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        extract(
            Ipv4Addr::new(127, 0, 6, 2),
            api,
            &format!("X-API-Key: {KEY_FULL}"),
        ),
    )
    .await
    .expect("the API-key caller is answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        reviewer.active.load(Ordering::SeqCst),
        MAX_CONCURRENT_REVIEWS,
        "the API-key caller was served while the bad tokens' reviews still hung"
    );
    // The reviews in flight are capped; everything else was refused at once (503).
    for answer in &early {
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("AUTH_UNAVAILABLE"), "{answer}");
    }
    assert_eq!(
        reviewer.calls.load(Ordering::SeqCst),
        MAX_CONCURRENT_REVIEWS
    );

    reviewer.release.notify_waiters();
    while let Some(r) = flood.join_next().await {
        let answer = r.expect("task");
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("stops")
        .expect("joined");
}
