//! The control-plane agent against a scripted `WorkerControlPlane` server on loopback
//! (plaintext fixture): full snapshot then deltas, checksum-verified and ACKed,
//! traffic served from what arrived, runtime reports bound to the ACKed version, a
//! corrupt delta NACKed and followed by a full resync, outcomes shipped.

mod common;
mod fake_controller;

use common::*;
use fake_controller::*;
use proxy_pool_api::controlplane::model;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::state::{Header, SnapshotState};
use proxy_pool_e2e::sim::{Protocol, SimProxy};
use proxy_pool_gateway::controlplane::Agent;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn header(version: u64) -> Header {
    Header {
        version,
        ownership_epoch: 1,
        generated_at_ms: now_ms(),
        valid_until_ms: now_ms() + 600_000,
    }
}

fn wire_proxy(p: &SimProxy) -> model::SnapshotProxy {
    model::SnapshotProxy {
        id: p.id.clone(),
        upstream: "sim".into(),
        protocol: match p.protocol {
            Protocol::Http => model::Protocol::Http,
            Protocol::Socks5 => model::Protocol::Socks5,
        },
        host: p.host.to_string(),
        port: p.port,
        credentials: Some(model::Credentials {
            username: p.username.clone(),
            password: model::Secret::new(p.password.clone()),
        }),
        region: Some(p.region.clone()),
        carrier: Some(p.carrier.clone()),
        max_concurrency: 4,
        expires_at_ms: now_ms() + 600_000,
        usable_until_ms: now_ms() + 590_000,
        assignment_epoch: 1,
        draining: false,
    }
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("in time")
        .expect("open")
}

#[tokio::test]
async fn agent_applies_snapshots_and_deltas_acks_reports_and_resyncs() {
    let mut h = Harness::start().await;
    let (endpoint, mut seen) = fake_controller(Default::default()).await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Socks5).await;
    let outcomes = std::mem::replace(&mut h.outcomes, proxy_pool_gateway::outcome::queue(1).1);
    let agent = Agent::new(agent_config(endpoint), h.handle.clone(), outcomes);
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));

    // Full snapshot v1 with proxy A.
    let (watch, updates) = next(&mut seen.streams).await;
    assert_eq!((watch.worker_id.as_str(), watch.last_version), ("gw-0", 0));
    let routings = vec![model::Routing {
        name: "all".into(),
        ..Default::default()
    }];
    let mut state = SnapshotState::build(header(1), routings, vec![wire_proxy(&a)]).unwrap();
    let full = pb::snapshot_update::Update::Full(state.to_message());
    updates
        .send(Ok(pb::SnapshotUpdate::new(full)))
        .await
        .unwrap();
    let ack = next(&mut seen.acks).await;
    assert!(ack.accepted, "{}", ack.reason);
    assert_eq!(
        (ack.version, ack.checksum.as_slice()),
        (1, &state.checksum().0[..])
    );
    let r = get_once(h.http, USER, h.echo(), "/v1").await;
    assert_eq!(
        r.remote_ip(),
        h.egress(&a),
        "served from the control-plane snapshot"
    );

    // Delta v2 adds proxy B.
    let delta = state
        .advance(header(2), None, &[wire_proxy(&a), wire_proxy(&b)])
        .unwrap();
    let msg = pb::snapshot_update::Update::Delta(pb::SnapshotDelta::from(&delta));
    updates
        .send(Ok(pb::SnapshotUpdate::new(msg)))
        .await
        .unwrap();
    let ack = next(&mut seen.acks).await;
    assert!(ack.accepted && ack.version == 2, "{ack:?}");
    let live = h.handle.load();
    assert_eq!(live.as_ref().unwrap().proxies.len(), 2);
    drop(live);

    // A tunnel held open shows up in a runtime report bound to v2.
    let (resp, tunnel) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 200);
    let report = loop {
        let report = next(&mut seen.reports).await.0;
        if report.counts.iter().any(|c| c.active == 1) {
            break report;
        }
    };
    assert_eq!((report.snapshot_version, report.ownership_epoch), (2, 1));
    assert_eq!(report.counts.len(), 1);
    assert_eq!(report.counts[0].assignment_epoch, 1);
    drop(tunnel);

    // Outcome observations from the traffic above arrive in batches.
    let batch = next(&mut seen.outcomes).await;
    assert!(!batch.outcomes.is_empty() && batch.outcomes.len() <= 50);
    assert_eq!(batch.batch_sequence, 1);
    assert!(
        batch.outcomes.iter().all(|o| o.routing == "all"),
        "{batch:?}"
    );

    // A delta with a bad checksum is refused, and the agent resyncs from scratch.
    let mut bad = state.advance(header(3), None, &[wire_proxy(&b)]).unwrap();
    bad.checksum.0[0] ^= 0xff;
    let msg = pb::snapshot_update::Update::Delta(pb::SnapshotDelta::from(&bad));
    updates
        .send(Ok(pb::SnapshotUpdate::new(msg)))
        .await
        .unwrap();
    let nack = next(&mut seen.acks).await;
    assert!(!nack.accepted && nack.version == 3, "{nack:?}");
    assert_eq!(
        h.handle.load().as_ref().unwrap().version,
        2,
        "v2 stays in service"
    );
    let (watch, _updates) = next(&mut seen.streams).await;
    assert_eq!(
        watch.last_version, 0,
        "re-opened without a base: full resync"
    );
    stop.cancel();
}
