//! Health as the composed controller runs it (`Controller::build` + `run` on
//! `127.0.0.1:0`, the vendor simulator as vendor, a real checker task loop, a gateway
//! speaking gRPC): per-Routing TARGET health — a proxy whose TARGET checks fail for one
//! routing's target is excluded from that routing's candidates in the gateway snapshot,
//! not from the other routing's and not from extraction — and gateway outcomes feeding
//! the reducer — a proxy that fails every gateway attempt leaves AVAILABLE (and the
//! snapshot) after a bounded number of outcomes, while one with many target-side
//! failures stays.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::time::Duration;

use controlplane_support::{Worker, post, spawn_checker, start_composed};
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport, connect};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_e2e::sim::{SimConfig, Simulator};

const API_KEY: &str = "health-routing-key";
const EXTRACT: &str = "/api/v1/proxies/extract";

/// Applies and ACKs snapshot updates until `done` holds for the worker's state.
async fn until(w: &mut Worker, what: &str, done: impl Fn(&Worker) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(w) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        let next = tokio::time::timeout(
            Duration::from_secs(2),
            w.stream.as_mut().expect("watching").message(),
        )
        .await;
        match next {
            Ok(Ok(Some(u))) => {
                w.apply(u.update.expect("update"));
                w.ack(true).await.expect("ack");
            }
            Ok(other) => panic!("stream: {other:?}"),
            // Nothing new: keep the session alive.
            Err(_) => {
                if w.state.header().is_some() {
                    w.ack(true).await.expect("ack");
                }
            }
        }
    }
}

fn outcome(proxy: &str, stage: pb::OutcomeStage, code: &str) -> pb::Outcome {
    pb::Outcome {
        proxy_id: proxy.into(),
        routing: "good".into(),
        stage: stage as i32,
        success: code.is_empty(),
        latency_ms: 5,
        failure_code: code.into(),
        observed_at_ms: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routing_target_health_and_gateway_outcomes_reach_the_snapshots() {
    let sim = Simulator::start(SimConfig {
        ttl_min_seconds: 300,
        ttl_max_seconds: 600,
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    // Nothing listens here: TARGET checks of the routing `bad` fail at the target.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let echo = sim.echo_http_addr().port();
    let controller = start_composed(&sim, "health-routing", 3, API_KEY, |source| {
        format!(
            r#"
distribution:
  listen: 127.0.0.1:0
  auth: {{mode: any, methods: [{{type: apiKey}}]}}
admin: {{listen: 127.0.0.1:0}}
controlPlane: {{enabled: true, listen: 127.0.0.1:0, loopbackPlaintext: true, targetSlotsPerWorker: 12}}
upstreams:
  - name: sim
    protocol: http
    ttl: 10m
    quarantine: 0s
    safetyMargin: 10s
    maxConcurrencyPerProxy: 4
    maxSize: 6
    fetchInterval: 2s
    health: {{interval: 1s, timeout: 500ms}}
    source: {source}
routings:
  - {{name: good, priority: 1, upstreams: [sim], targetHosts: ["127.0.0.1"], targetCheckPort: {echo}}}
  - {{name: bad, priority: 2, upstreams: [sim], targetHosts: ["127.0.0.1"], targetCheckPort: {closed}}}
"#
        )
    })
    .await;
    let (api, cp) = (controller.api, controller.cp);
    let (checker_stop, checker) = spawn_checker(cp, "health-checker", sim.echo_http_addr());

    // A gateway: it gets proxies, and after three TARGET rounds each is excluded from
    // `bad` (its target is unreachable through any proxy) but not from `good`.
    let channel = connect(
        &format!("http://{cp}"),
        &ClientTransport::LoopbackPlaintext,
        &ClientOptions::default(),
    )
    .await
    .expect("connect");
    let mut w = Worker::register_on(WorkerControlPlaneClient::new(channel), "gw-health").await;
    w.watch().await;
    until(&mut w, "proxies excluded from `bad` only", |w| {
        w.state.len() >= 2
            && w.state
                .proxies()
                .all(|p| p.excluded_routings == vec!["bad".to_string()])
    })
    .await;
    let ids: Vec<String> = w.proxy_ids();

    // Gateway outcomes. Target-side failures, however many, say nothing about the
    // proxy; proxy-side failures in a row (5) take it out of AVAILABLE.
    let (healthy, failing) = (ids[0].clone(), ids[1].clone());
    let mut batch: Vec<pb::Outcome> = Vec::new();
    for _ in 0..20 {
        batch.push(outcome(
            &healthy,
            pb::OutcomeStage::ResponseHeaders,
            "upstream-io",
        ));
        batch.push(outcome(
            &healthy,
            pb::OutcomeStage::ProxyHandshake,
            "target-unreachable",
        ));
        batch.push(outcome(&healthy, pb::OutcomeStage::Tunnel, "tunnel-io"));
    }
    batch.push(outcome(
        &healthy,
        pb::OutcomeStage::Dial,
        "upstream-dial-failed",
    ));
    batch.push(outcome(&healthy, pb::OutcomeStage::Dial, ""));
    for _ in 0..5 {
        batch.push(outcome(
            &failing,
            pb::OutcomeStage::Dial,
            "upstream-dial-failed",
        ));
    }
    let r = w
        .client
        .report_outcomes(pb::ReportOutcomesRequest {
            worker_id: w.id.clone(),
            session_id: w.session.clone(),
            batch_sequence: 1,
            outcomes: batch,
        })
        .await
        .expect("outcomes")
        .into_inner();
    assert_eq!(r.dropped, 0);
    let failing_id = failing.clone();
    until(
        &mut w,
        "the failing proxy to leave the snapshot",
        move |w| w.state.proxy(&failing_id).is_none(),
    )
    .await;
    assert!(
        w.state.proxy(&healthy).is_some(),
        "target-side failures condemned a proxy"
    );

    // Excluded from `bad` is not excluded from extraction.
    let mut got = post(api, API_KEY, EXTRACT, r#"{"count":6}"#).await.1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while got["returned"].as_u64().unwrap_or(0) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing extractable: {got}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        got = post(api, API_KEY, EXTRACT, r#"{"count":6}"#).await.1;
    }

    controller.stop().await;
    checker_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), checker).await;
}
