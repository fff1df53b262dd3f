//! Per-client limits (`gatewayLimits` in the clients file) against real sockets:
//! concurrent connections (HTTP CONNECT and SOCKS5), request rate, the daily quota and
//! the group share, each from the controller's runtime report answers (a scripted
//! `WorkerControlPlane` on loopback).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;
mod fake_controller;

use common::*;
use fake_controller::*;
use parking_lot::Mutex;
use proxy_pool_api::client_limits::GatewayLimits;
use proxy_pool_api::controlplane::model;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::state::{Header, SnapshotState};
use proxy_pool_api::egress::PortRanges;
use proxy_pool_e2e::sim::{Protocol, SimProxy};
use proxy_pool_gateway::clock;
use proxy_pool_gateway::controlplane::Agent;
use proxy_pool_gateway::limits::LimitKind;
use proxy_pool_gateway::snapshot::ClientCredential;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

fn limits(conns: Option<u32>, rps: Option<u32>, burst: Option<u32>) -> GatewayLimits {
    GatewayLimits {
        max_connections: conns.and_then(NonZeroU32::new),
        requests_per_second: rps.and_then(NonZeroU32::new),
        burst: burst.and_then(NonZeroU32::new),
        daily_bytes: None,
    }
}

fn alice(l: GatewayLimits) -> Vec<ClientCredential> {
    vec![ClientCredential::from_password("team-a", USER, PASS).with_limits(l)]
}

async fn harness(l: GatewayLimits) -> Harness {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Http).await;
    h.install_clients(vec![upstream(&p, 50)], vec![any_port(all())], alice(l));
    h
}

/// A CONNECT to the echo target: the tunnel, or the refusal.
async fn tunnel(h: &Harness) -> Result<TcpStream, Response> {
    let (resp, s) = h.connect_echo().await;
    if resp.status == 200 { Ok(s) } else { Err(resp) }
}

/// Waits (bounded) until the gateway has closed every connection but `open`.
async fn open_connections(h: &Harness, open: i64) {
    for _ in 0..500 {
        if h.gateway.metrics().open_connections.get() == open {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("connections still open");
}

#[tokio::test]
async fn connections_beyond_the_share_are_refused_until_one_closes() {
    let h = harness(limits(Some(2), None, None)).await;
    let first = tunnel(&h).await.expect("1st");
    let _second = tunnel(&h).await.expect("2nd");
    let refused = tunnel(&h).await.expect_err("3rd refused");
    refused.assert_refused(429, "client-connection-limit");
    // SOCKS5: reply 0x02 (connection not allowed by ruleset).
    let err = socks5(h.socks, USER, PASS, h.echo(), 1)
        .await
        .expect_err("socks refused");
    assert_eq!(err, ("reply".to_owned(), 0x02));
    // A plain request on a new connection is a connection of the client too.
    h.get("/x")
        .await
        .assert_refused(429, "client-connection-limit");
    drop(first);
    open_connections(&h, 1).await;
    let _third = tunnel(&h).await.expect("admitted again after one closed");
    assert_eq!(
        h.gateway.metrics().limit_refusals(LimitKind::Connections),
        3
    );
    let text = h.gateway.render_metrics();
    assert!(
        text.contains(
            "proxy_pool_gateway_client_limit_refusals_total{reason=\"client-connection-limit\"} 3"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_kept_alive_connection_holds_one_slot_for_all_its_requests() {
    let h = harness(limits(Some(1), None, None)).await;
    let mut c = ProxyClient::connect(h.http, USER, PASS).await;
    for i in 0..3 {
        assert_eq!(c.get(h.echo(), &format!("/k{i}")).await.status, 200);
    }
    h.get("/other")
        .await
        .assert_refused(429, "client-connection-limit");
}

#[tokio::test]
async fn rate_admits_the_burst_then_refuses() {
    // One request a second, bursts of 3: the 4th at once is refused.
    let h = harness(limits(None, Some(1), Some(3))).await;
    for i in 0..3 {
        assert_eq!(
            h.get(&format!("/r{i}")).await.status,
            200,
            "within the burst"
        );
    }
    h.get("/r3").await.assert_refused(429, "client-rate-limit");
    assert_eq!(h.gateway.metrics().limit_refusals(LimitKind::Rate), 1);
}

fn now_ms() -> i64 {
    clock::to_model_ms(clock::now_ms())
}

fn snapshot(p: &SimProxy) -> pb::SnapshotUpdate {
    let header = Header {
        version: 1,
        ownership_epoch: 1,
        generated_at_ms: now_ms(),
        valid_until_ms: now_ms() + 600_000,
    };
    let routings = vec![model::Routing {
        name: "all".into(),
        connect_ports: PortRanges::any(),
        ..Default::default()
    }];
    let state = SnapshotState::build(header, routings, vec![wire_proxy(p)]).unwrap();
    pb::SnapshotUpdate::new(pb::snapshot_update::Update::Full(state.to_message()))
}

/// The harness served by an agent against the fake controller, `team-a` with `l`.
async fn with_controller(
    l: GatewayLimits,
) -> (
    Harness,
    Arc<Mutex<Knobs>>,
    tokio::sync::mpsc::UnboundedReceiver<(pb::ReportRuntimeRequest, tonic::Code)>,
    CancellationToken,
) {
    let mut h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let knobs = Arc::new(Mutex::new(Knobs {
        report_interval_ms: 50,
        ..Knobs::default()
    }));
    let (endpoint, seen) = fake_controller_with(Arc::default(), knobs.clone()).await;
    let mut streams = seen.streams;
    let outcomes = std::mem::replace(&mut h.outcomes, proxy_pool_gateway::outcome::queue(1).1);
    let mut config = agent_config(endpoint);
    config.clients = alice(l);
    let agent =
        Agent::new(config, h.handle.clone(), outcomes).with_usage(h.gateway.usage().clone());
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    let update = snapshot(&a);
    tokio::spawn(async move {
        while let Some((_, updates)) = streams.recv().await {
            let _ = updates.send(Ok(update.clone())).await;
            tokio::spawn(async move { updates.closed().await });
        }
    });
    for _ in 0..500 {
        if h.handle.load().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(h.handle.load().is_some(), "snapshot installed");
    (h, knobs, seen.reports, stop)
}

/// Waits for two reports answered after the knobs changed (those seen before are
/// skipped): the first one's answer is applied before the second is sent.
async fn answered_twice(
    reports: &mut tokio::sync::mpsc::UnboundedReceiver<(pb::ReportRuntimeRequest, tonic::Code)>,
) {
    while reports.try_recv().is_ok() {}
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(10), reports.recv())
            .await
            .expect("a report in time")
            .expect("open");
    }
}

#[tokio::test]
async fn quota_exhausted_in_an_answer_refuses_until_an_answer_clears_it() {
    let (h, knobs, mut reports, stop) = with_controller(limits(None, None, None)).await;
    assert_eq!(h.get("/q0").await.status, 200);
    knobs.lock().budgets = Some(pb::ClientBudgets {
        group_gateways: 1,
        quota_exhausted_clients: vec!["team-a".into()],
    });
    answered_twice(&mut reports).await;
    h.get("/q1").await.assert_refused(429, "quota-exceeded");
    let err = socks5(h.socks, USER, PASS, h.echo(), 1)
        .await
        .expect_err("socks refused");
    assert_eq!(err, ("reply".to_owned(), 0x02));
    knobs.lock().budgets = Some(pb::ClientBudgets {
        group_gateways: 1,
        quota_exhausted_clients: Vec::new(),
    });
    answered_twice(&mut reports).await;
    assert_eq!(
        h.get("/q2").await.status,
        200,
        "cleared by the later answer"
    );
    stop.cancel();
}

#[tokio::test]
async fn two_gateways_in_the_group_halve_the_connection_budget() {
    let (h, knobs, mut reports, stop) = with_controller(limits(Some(4), None, None)).await;
    // Before an answer says otherwise, this gateway enforces the whole budget.
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(
            tunnel(&h)
                .await
                .unwrap_or_else(|r| panic!("tunnel {i}: {}", r.head)),
        );
    }
    drop(held);
    open_connections(&h, 0).await;
    knobs.lock().budgets = Some(pb::ClientBudgets {
        group_gateways: 2,
        quota_exhausted_clients: Vec::new(),
    });
    answered_twice(&mut reports).await;
    let _a = tunnel(&h).await.expect("1st of 2");
    let _b = tunnel(&h).await.expect("2nd of 2");
    tunnel(&h)
        .await
        .expect_err("3rd beyond the share")
        .assert_refused(429, "client-connection-limit");
    stop.cancel();
}
