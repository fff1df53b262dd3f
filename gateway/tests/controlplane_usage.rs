//! Per-Routing usage from real traffic through the gateway reaches the controller in
//! runtime reports (a scripted `WorkerControlPlane` on loopback): exact counts per
//! client identity; a report refused with FAILED_PRECONDITION (nothing counted) has its
//! usage resent in a later report; one that fails otherwise (the controller may have
//! counted it) is dropped and counted as lost, never sent twice.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;
mod fake_controller;

use common::*;
use fake_controller::*;
use parking_lot::Mutex;
use proxy_pool_api::controlplane::model;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::state::{Header, SnapshotState};
use proxy_pool_api::egress::PortRanges;
use proxy_pool_e2e::sim::{Protocol, SimProxy};
use proxy_pool_gateway::clock;
use proxy_pool_gateway::controlplane::Agent;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Code;

fn now_ms() -> i64 {
    clock::to_model_ms(clock::now_ms())
}

fn snapshot(p: &SimProxy, version: u64) -> pb::SnapshotUpdate {
    let header = Header {
        version,
        ownership_epoch: 1,
        generated_at_ms: now_ms(),
        valid_until_ms: now_ms() + 600_000,
    };
    let proxy = wire_proxy(p);
    let routings = vec![model::Routing {
        name: "all".into(),
        // The simulator's targets listen on random ports.
        connect_ports: PortRanges::any(),
        ..Default::default()
    }];
    let state = SnapshotState::build(header, routings, vec![proxy]).unwrap();
    pb::SnapshotUpdate::new(pb::snapshot_update::Update::Full(state.to_message()))
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("in time")
        .expect("open")
}

/// (requests, requests of team-a) in a report's usage.
fn totals(r: &pb::ReportRuntimeRequest) -> (u64, u64) {
    let all = r.usage.iter().find(|u| u.routing == "all");
    let requests = all.map_or(0, |u| u.requests);
    let team_a = all
        .and_then(|u| u.clients.iter().find(|c| c.identity == "team-a"))
        .map_or(0, |c| c.requests);
    (requests, team_a)
}

#[tokio::test]
async fn usage_from_traffic_is_reported_once_or_counted_lost() {
    let mut h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let script = Arc::new(Mutex::new(VecDeque::from([
        Code::FailedPrecondition,
        Code::Ok,
        Code::Unavailable,
    ])));
    let (endpoint, seen) = fake_controller(script.clone()).await;
    let (mut streams, mut reports) = (seen.streams, seen.reports);
    let outcomes = std::mem::replace(&mut h.outcomes, proxy_pool_gateway::outcome::queue(1).1);
    let agent = Agent::new(agent_config(endpoint), h.handle.clone(), outcomes)
        .with_usage(h.gateway.usage().clone());
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    // Every watch stream (the first and each after a reconnect) gets the snapshot.
    // Each one a newer version: the agent keeps its state across reconnects.
    let first = snapshot(&a, 1);
    let second = snapshot(&a, 2);
    let third = snapshot(&a, 3);
    tokio::spawn(async move {
        let mut versions = vec![third, second, first];
        while let Some((_, updates)) = streams.recv().await {
            let Some(update) = versions.pop() else {
                panic!("more sessions than scripted");
            };
            let _ = updates.send(Ok(update)).await;
            // Keep the stream open while the session lives.
            tokio::spawn(async move {
                updates.closed().await;
            });
        }
    });

    // Three requests: the first report with them is refused (FAILED_PRECONDITION),
    // the agent reconnects and resends the same usage, which is accepted.
    while h.handle.load().is_none() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..3 {
        let r = h.get(&format!("/u{i}")).await;
        assert_eq!(r.status, 200);
    }
    let mut accepted = (0, 0);
    let mut refused = (0, 0);
    while accepted.0 < 3 {
        let (report, code) = next(&mut reports).await;
        let t = totals(&report);
        match code {
            Code::Ok => accepted = (accepted.0 + t.0, accepted.1 + t.1),
            Code::FailedPrecondition => refused = (refused.0 + t.0, refused.1 + t.1),
            other => panic!("unexpected {other:?}"),
        }
    }
    // A report tick may fall between the requests: the refused report carried one to
    // three of them, all resent.
    assert!(
        refused.0 >= 1 && refused == (refused.0, refused.0),
        "{refused:?}"
    );
    assert_eq!(
        accepted,
        (3, 3),
        "resent once, exactly, with the identity (never a user password)"
    );

    // Two more requests; their report fails with UNAVAILABLE: dropped and counted.
    for i in 0..2 {
        let r = h.get(&format!("/v{i}")).await;
        assert_eq!(r.status, 200);
    }
    let mut before = 0;
    let lost = loop {
        let (report, code) = next(&mut reports).await;
        if code == Code::Unavailable {
            break totals(&report);
        }
        before += totals(&report).0;
    };
    assert!(lost.0 >= 1 && lost == (lost.0, lost.0), "{lost:?}");
    // Later reports do not resend it: every request is reported once or lost once.
    let mut after = 0;
    for _ in 0..5 {
        let (report, _) = next(&mut reports).await;
        after += totals(&report).0;
    }
    assert_eq!(before + lost.0 + after, 2);
    let metrics = h.gateway.render_metrics();
    assert!(
        metrics.contains(&format!(
            "proxy_pool_gateway_usage_requests_lost_total {}",
            lost.0
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("proxy_pool_gateway_usage_requests_total 5"),
        "{metrics}"
    );
    assert!(script.lock().is_empty());
    stop.cancel();
}
