//! Control-plane behaviour through real gRPC: a tonic client against the server on
//! `127.0.0.1:0` (loopback fixture), over the activity pool on memory and on a real
//! `redis-server`. Pool time is a `ManualClock`; ownership passes are run by hand.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::time::Duration;

use activity_pool::model::WorkerId;
use controlplane_support::*;
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport, connect};
use proxy_pool_api::controlplane::model::Routing;
use proxy_pool_api::controlplane::model::{CheckTier, Delta, OutcomeStage, Protocol};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::checker_control_plane_client::CheckerControlPlaneClient;
use proxy_pool_api::controlplane::state::{Header, SnapshotState};
use proxy_pool_controller::controlplane::{ControlPlaneConfig, DrainRequest, RoutingSpec};
use tonic::Code;

on_both!(
    incompatible_protocol_version_fails_registration,
    new_session_fences_the_old_instance,
    ack_only_issued_triples_and_negative_ack_closes_the_fence,
    full_then_deltas_and_resync_on_mismatch,
    runtime_report_rules_through_grpc,
    outcomes_dedupe_and_highest_accepted,
    drain_then_extraction_of_a_formerly_owned_proxy,
    crashed_worker_proxies_move_only_after_lease_expiry,
);

async fn incompatible_protocol_version_fails_registration(kind: Kind) {
    let h = Harness::new(kind).await;
    let mut c = h.client().await;
    let mut req = register_req("gw-0", "i-1");
    req.supported_protocol_versions = vec![2];
    assert_precondition(
        c.register_worker(req).await,
        "incompatible_protocol_version",
    );
    let w = WorkerId::new("gw-0").expect("w");
    assert!(h.pool.session(&w).await.expect("session").is_none());
}

async fn new_session_fences_the_old_instance(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("p", 2, 600).await;
    let mut old = Worker::acked(&h, "gw-0").await;
    old.report(&[]).await.expect("report");

    let mut c = h.client().await;
    let new = c
        .register_worker(register_req("gw-0", "i-2"))
        .await
        .expect("register")
        .into_inner();
    assert_ne!(new.session_id, old.session);
    // The old instance's writes are fenced, and its stream ends.
    assert_precondition(old.report(&[]).await, "stale_session");
    assert_precondition(old.ack(true).await, "stale_session");
    let end = old.stream_end("ends").await;
    assert_eq!(end.expect_err("stale").code(), Code::FailedPrecondition);
}

async fn ack_only_issued_triples_and_negative_ack_closes_the_fence(kind: Kind) {
    let h = Harness::with(kind, many_slots(), 16).await;
    h.available("p", 2, 600).await;
    let mut w = Worker::watching(&h, "gw-0").await;
    assert!(!w.apply_next().await, "first update is a full snapshot");
    assert_eq!(w.state.len(), 2);

    // Triples the controller never issued: wrong checksum, wrong epoch, future version.
    let h1 = w.state.header().expect("header");
    let sum = w.state.checksum().0.to_vec();
    for (version, epoch, checksum) in [
        (h1.version, h1.ownership_epoch, vec![0u8; 32]),
        (h1.version, h1.ownership_epoch + 1, sum.clone()),
        (h1.version + 1, h1.ownership_epoch, sum.clone()),
    ] {
        let r = w
            .client
            .acknowledge_snapshot(pb::AcknowledgeSnapshotRequest {
                worker_id: w.id.clone(),
                session_id: w.session.clone(),
                version,
                ownership_epoch: epoch,
                checksum,
                accepted: true,
                reason: String::new(),
            })
            .await;
        assert_precondition(r, "snapshot_not_issued");
    }
    // Before any ACK there is no bound to report against.
    assert_precondition(w.report(&[]).await, "bound_mismatch");
    let ack = w.ack(true).await.expect("ack");
    assert!(ack.runtime_fence_open);
    w.report(&[]).await.expect("report after ACK");

    // A negative ACK closes the fence until the next positive ACK.
    let ack = w.ack(false).await.expect("negative ack");
    assert!(!ack.runtime_fence_open);
    assert_precondition(w.report(&[]).await, "fence_closed");
    // A new version arrives; its positive ACK reopens the fence.
    h.available("q", 1, 600).await;
    h.pass().await;
    assert!(w.apply_next().await);
    let ack = w.ack(true).await.expect("ack v2");
    assert!(ack.runtime_fence_open);
    w.report(&[]).await.expect("report after reopening");
}

async fn full_then_deltas_and_resync_on_mismatch(kind: Kind) {
    let h = Harness::with(kind, many_slots(), 16).await;
    h.available("p", 3, 600).await;
    let mut w = Worker::watching(&h, "gw-0").await;
    assert!(!w.apply_next().await);
    assert_eq!(w.state.len(), 3);
    let p0 = w.state.proxies().next().expect("proxy").clone();
    assert_eq!(
        p0.dial.credentials.as_ref().map(|c| c.password.expose()),
        Some("s3cr3t-pass")
    );
    assert!(p0.usable_until_ms < p0.expires_at_ms);
    assert_eq!(w.state.routings().len(), 1);

    // New proxies arrive: a delta on the open stream.
    h.available("q", 2, 600).await;
    h.pass().await;
    assert!(w.apply_next().await, "second update is a delta");
    assert_eq!(w.state.len(), 5);
    let v2 = (w.state.version(), w.state.checksum());

    // Re-opening with the current (version, checksum) gets the next change as a delta.
    w.watch().await;
    h.available("r", 1, 600).await;
    h.pass().await;
    assert!(
        w.apply_next().await,
        "resume with a matching base is a delta"
    );
    assert_eq!(w.state.len(), 6);

    // A base with a checksum the controller did not issue: a full snapshot.
    w.watch_from(v2.0, vec![7u8; 32]).await;
    assert!(
        !w.apply_next().await,
        "checksum mismatch resyncs with a full snapshot"
    );
    assert_eq!(w.state.len(), 6);

    // A delta whose base is not the local version is refused locally, unchanged.
    let mut stale = SnapshotState::new();
    let header = Header {
        version: 1,
        ownership_epoch: 0,
        generated_at_ms: 0,
        valid_until_ms: 0,
    };
    stale.advance(header, None, &[]).expect("advance");
    h.available("s", 1, 600).await;
    h.pass().await;
    match w.next().await {
        pb::snapshot_update::Update::Delta(d) => {
            let d = Delta::try_from(d).expect("convert");
            assert!(stale.apply_delta(d.clone()).is_err());
            let mut tampered = d.clone();
            tampered.checksum.0[3] ^= 0xff;
            assert!(w.state.clone().apply_delta(tampered).is_err());
            w.state.apply_delta(d).expect("applies on the right base");
        }
        other => panic!("expected a delta, got {other:?}"),
    }
    assert_eq!(w.state.len(), 7);
}

async fn runtime_report_rules_through_grpc(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("p", 2, 600).await;
    let mut w = Worker::acked(&h, "gw-0").await;
    let ids = w.proxy_ids();
    assert_eq!(ids.len(), 2);

    let r5 = w.runtime_req(5, &[(&ids[0], 1)]);
    w.client.report_runtime(r5.clone()).await.expect("seq 5");
    let replay = w.send_report(r5).await.expect("replay");
    assert!(replay.replayed);
    let other = w.runtime_req(5, &[(&ids[0], 2)]);
    assert_precondition(
        w.client.report_runtime(other).await,
        "sequence_replay_mismatch",
    );
    let lower = w.runtime_req(4, &[]);
    assert_precondition(w.client.report_runtime(lower).await, "sequence_regression");
    // A count on a proxy the worker does not own.
    h.available("foreign", 1, 600).await;
    let foreign = w.runtime_req(6, &[("foreign-0", 1)]);
    assert_precondition(w.client.report_runtime(foreign).await, "ownership_mismatch");
    // A version ahead of the ACKed bound.
    let mut ahead = w.runtime_req(7, &[]);
    ahead.snapshot_version += 1;
    assert_precondition(w.client.report_runtime(ahead).await, "bound_mismatch");
    // An empty report clears the counts.
    let empty = w.runtime_req(8, &[]);
    w.client.report_runtime(empty).await.expect("empty report");
    let worker = WorkerId::new("gw-0").expect("w");
    let rt = h
        .pool
        .runtime(&worker)
        .await
        .expect("runtime")
        .expect("stored");
    assert!(rt.entries.is_empty());
    // Malformed input never reaches the pool.
    let mut bad = w.runtime_req(9, &[]);
    bad.counts.push(pb::RuntimeCount {
        proxy_id: "bad id!".into(),
        ..Default::default()
    });
    let err = w.client.report_runtime(bad).await.expect_err("invalid");
    assert_eq!(err.code(), Code::InvalidArgument);
}

async fn outcomes_dedupe_and_highest_accepted(kind: Kind) {
    let mut h = Harness::with(kind, config(), 3).await;
    let mut w = Worker::register(&h, "gw-0").await;
    let session = w.session.clone();
    let batch = |seq: u64, n: usize| pb::ReportOutcomesRequest {
        worker_id: "gw-0".into(),
        session_id: session.clone(),
        batch_sequence: seq,
        outcomes: (0..n)
            .map(|i| pb::Outcome {
                proxy_id: format!("p-{i}"),
                routing: "default".into(),
                stage: pb::OutcomeStage::ProxyHandshake as i32,
                success: false,
                latency_ms: 12,
                failure_code: "http_407".into(),
                observed_at_ms: 1,
            })
            .collect(),
    };
    let r = outcomes(&mut w, batch(1, 2), "b1").await;
    assert_eq!((r.highest_accepted_sequence, r.dropped), (1, 0));
    // A retry of batch 1 is a no-op that still answers the highest accepted.
    let r = outcomes(&mut w, batch(1, 2), "retry").await;
    assert_eq!((r.highest_accepted_sequence, r.dropped), (1, 0));
    // Batch 3 after a lost batch 2 is accepted; the queue of 3 is then full, so one of
    // its outcomes is dropped (and counted) rather than waited for.
    let r = outcomes(&mut w, batch(3, 2), "b3").await;
    assert_eq!((r.highest_accepted_sequence, r.dropped), (3, 1));
    // Batch 2 arriving late is a duplicate now.
    let r = outcomes(&mut w, batch(2, 1), "b2").await;
    assert_eq!((r.highest_accepted_sequence, r.dropped), (3, 0));
    let mut got = Vec::new();
    while let Ok(o) = h.outcomes_rx.try_recv() {
        got.push(o);
    }
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].outcome.stage, OutcomeStage::ProxyHandshake);
    assert_eq!(got[0].outcome.failure_code.as_deref(), Some("http_407"));
    // Unknown stages are refused whole and do not move the sequence.
    let mut bad = batch(4, 1);
    bad.outcomes[0].stage = 99;
    let err = w.client.report_outcomes(bad).await.expect_err("bad");
    assert_eq!(err.code(), Code::InvalidArgument);
    let r = outcomes(&mut w, batch(4, 0), "b4").await;
    assert_eq!(r.highest_accepted_sequence, 4);
    // Oversized batches are refused.
    let err = w
        .client
        .report_outcomes(batch(5, 1_001))
        .await
        .expect_err("big");
    assert_eq!(err.code(), Code::InvalidArgument);
}

async fn drain_then_extraction_of_a_formerly_owned_proxy(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("p", 2, 600).await;
    let mut w = Worker::acked(&h, "gw-0").await;
    assert_eq!(w.state.len(), 2);
    // Everything is owned: extraction finds nothing.
    assert!(extracted(&h.pool, 1).await.is_empty());

    let target = "p-0";
    w.report(&[(target, 1)]).await.expect("busy report");
    assert!(
        h.cp.ownership()
            .request_drain(DrainRequest::Proxy(pid(target)))
    );
    h.pass().await;
    assert!(w.apply_next().await);
    assert!(w.state.proxy(target).expect("still listed").draining);
    // Until the worker ACKs the draining snapshot, nothing is released.
    h.pass().await;
    assert_eq!(h.owner(target).await.as_deref(), Some("gw-0"));
    w.ack(true).await.expect("ack draining snapshot");
    let r = w.report(&[(target, 1)]).await.expect("still busy");
    assert_eq!(r.revoke_proxy_ids, vec![target.to_string()]);
    h.pass().await;
    assert_eq!(h.owner(target).await.as_deref(), Some("gw-0"), "busy: kept");
    assert!(extracted(&h.pool, 1).await.is_empty());
    // The worker reports zero: ownership clears, and only then can extraction take it.
    w.report(&[]).await.expect("idle");
    h.pass().await;
    assert_eq!(h.owner(target).await, None);
    assert!(w.apply_next().await);
    assert!(w.state.proxy(target).is_none(), "dropped from the snapshot");
    let got = extracted(&h.pool, 1).await;
    assert_eq!(got, vec![target.to_string()]);
}

async fn crashed_worker_proxies_move_only_after_lease_expiry(kind: Kind) {
    let h = Harness::new(kind).await;
    let ids = h.available("p", 2, 3_600).await;
    let a = Worker::acked(&h, "gw-a").await;
    assert_eq!(a.state.len(), 2);
    drop(a); // crash: no more ACKs or reports

    // Past A's session TTL (30 s) but inside its 60 s lease: B gets nothing yet.
    h.advance(35);
    let mut b = Worker::register(&h, "gw-b").await;
    h.pass().await;
    for id in &ids {
        assert_eq!(h.owner(id).await.as_deref(), Some("gw-a"));
    }
    b.watch().await;
    b.apply_next().await;
    assert_eq!(b.state.len(), 0);
    b.ack(true).await.expect("ack b");
    // Past the lease (and inside B's session): the leases expire, B gets the proxies.
    h.advance(26);
    h.pass().await;
    for id in &ids {
        assert_eq!(h.owner(id).await.as_deref(), Some("gw-b"));
    }
    assert!(b.apply_next().await);
    assert_eq!(b.state.len(), 2);
}

/// [`config`] with room for every proxy on one worker.
fn many_slots() -> ControlPlaneConfig {
    let mut cfg = config();
    cfg.ownership.target_slots_per_worker = 1_000;
    cfg
}

async fn outcomes(
    w: &mut Worker,
    req: pb::ReportOutcomesRequest,
    what: &str,
) -> pb::ReportOutcomesResponse {
    w.client
        .report_outcomes(req)
        .await
        .expect(what)
        .into_inner()
}

async fn next_task(s: &mut tonic::Streaming<pb::CheckTask>) -> pb::CheckTask {
    tokio::time::timeout(Duration::from_secs(10), s.message())
        .await
        .expect("task in time")
        .expect("ok")
        .expect("open")
}

fn observations_req(
    session: &str,
    observations: Vec<pb::Observation>,
) -> pb::ReportObservationsRequest {
    pb::ReportObservationsRequest {
        checker_id: "chk-0".into(),
        session_id: session.into(),
        observations,
    }
}

fn observation(task: &pb::CheckTask, success: bool) -> pb::Observation {
    pb::Observation {
        task_id: task.task_id.clone(),
        proxy_id: task.proxy_id.clone(),
        tier: task.tier,
        success,
        latency_ms: 40,
        failure_code: if success {
            String::new()
        } else {
            "dial_timeout".into()
        },
        egress_address: "203.0.113.7".into(),
        anonymity_leak: false,
        routing: String::new(),
        observed_at_ms: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checker_tasks_respect_tiers_concurrency_and_deadlines() {
    let mut h = Harness::new(Kind::Memory).await;
    let mut c = CheckerControlPlaneClient::new(h.channel().await);
    let reg = c
        .register_checker(checker_req(
            "chk-0",
            1,
            &[pb::CheckTier::Basic, pb::CheckTier::Egress],
        ))
        .await
        .expect("register")
        .into_inner();
    assert_eq!(reg.protocol_version, 1);
    let mut stream = c
        .stream_tasks(stream_tasks_req("chk-0", &reg.session_id))
        .await
        .expect("stream")
        .into_inner();
    assert!(h.checker.enqueue(check_task(
        &h,
        "t-target",
        CheckTier::Target,
        30,
        Protocol::Socks5
    )));
    assert!(h.checker.enqueue(check_task(
        &h,
        "t-1",
        CheckTier::Basic,
        30,
        Protocol::Socks5
    )));
    assert!(h.checker.enqueue(check_task(
        &h,
        "t-2",
        CheckTier::Egress,
        30,
        Protocol::Socks5
    )));
    let t1 = next_task(&mut stream).await;
    assert_eq!(t1.task_id, "t-1", "TARGET is not a tier this checker runs");
    // Concurrency 1: t-2 comes only after t-1 is reported.
    let early = tokio::time::timeout(Duration::from_millis(300), stream.message()).await;
    assert!(early.is_err(), "no second task while one is outstanding");
    let r = c
        .report_observations(observations_req(
            &reg.session_id,
            vec![observation(&t1, true)],
        ))
        .await
        .expect("report")
        .into_inner();
    assert_eq!((r.accepted, r.discarded), (1, 0));
    let t2 = next_task(&mut stream).await;
    assert_eq!(t2.task_id, "t-2");
    // Past its deadline, t-2's result is discarded; a duplicate of t-1 too.
    h.advance(31);
    let r = c
        .report_observations(observations_req(
            &reg.session_id,
            vec![observation(&t2, false), observation(&t1, true)],
        ))
        .await
        .expect("report")
        .into_inner();
    assert_eq!((r.accepted, r.discarded), (0, 2));
    let got = h.observations.try_recv().expect("one observation");
    assert_eq!(got.checker_id, "chk-0");
    assert_eq!(
        got.observation.egress,
        Some(std::net::IpAddr::from([203, 0, 113, 7]))
    );
    assert!(h.observations.try_recv().is_err());
    assert_eq!(
        h.checker.queued(),
        0,
        "the expired TARGET task was dropped too"
    );
    // A stale session is refused.
    let r = c
        .report_observations(observations_req("c-old", vec![]))
        .await;
    assert_precondition(r, "stale_session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_and_the_server() {
    let mut h = Harness::new(Kind::Memory).await;
    h.available("p", 1, 600).await;
    let mut w = Worker::joined(&h, "gw-0").await;
    drop(h.stop.take());
    let end = w.stream_end("stream ends").await;
    assert_eq!(end.expect_err("shutting down").code(), Code::Unavailable);
    let server = h.server_task.take().expect("task");
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server stops")
        .expect("join")
        .expect("clean stop");
    let again = connect(
        &h.endpoint,
        &ClientTransport::LoopbackPlaintext,
        &ClientOptions::default(),
    )
    .await;
    assert!(again.is_err(), "no new connections after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_count_and_duration_are_limited() {
    let mut cfg = config();
    cfg.limits.max_open_streams = 1;
    cfg.limits.max_stream_duration = Duration::from_millis(300);
    let h = Harness::with(Kind::Memory, cfg, 16).await;
    h.available("p", 1, 600).await;
    let mut w = Worker::joined(&h, "gw-0").await;
    // A second open stream is over the limit.
    let second = w
        .client
        .watch_snapshots(pb::WatchSnapshotsRequest {
            worker_id: w.id.clone(),
            session_id: w.session.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(second.expect_err("limit").code(), Code::ResourceExhausted);
    // The first ends cleanly at its maximum duration; re-opening resumes from the
    // worker's version (nothing new: no update until the next publish).
    let end = w.stream_end("ends in time").await;
    assert!(matches!(end, Ok(None)), "{end:?}");
    w.watch().await;
    h.available("q", 1, 600).await;
    h.pass().await;
    assert!(w.apply_next().await, "resumed with a delta");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routings_and_upstreams_follow_the_gateway_group() {
    let mut cfg = many_slots();
    cfg.ownership.upstreams = vec![up("vendor-a"), up("vendor-b")];
    // Routing `only-<x>`: upstream `vendor-<x>`, served to gateway group `group-<x>`.
    cfg.routings = ["a", "b"]
        .map(|x| RoutingSpec {
            routing: Routing {
                name: format!("only-{x}"),
                upstreams: vec![format!("vendor-{x}")],
                ..Routing::default()
            },
            gateway_groups: vec![format!("group-{x}")],
        })
        .into();
    let h = Harness::with(Kind::Memory, cfg, 16).await;
    h.available_in("vendor-a", "a", 2, 600).await;
    h.available_in("vendor-b", "b", 3, 600).await;
    let mut client = h.client().await;
    let mut req = register_req("gw-b", "i-1");
    req.gateway_group = "group-b".into();
    let reg = client
        .register_worker(req)
        .await
        .expect("register")
        .into_inner();
    let mut w = Worker {
        id: "gw-b".into(),
        client,
        session: reg.session_id,
        state: SnapshotState::new(),
        stream: None,
        report_seq: 0,
    };
    h.pass().await;
    w.watch().await;
    w.apply_next().await;
    let names: Vec<&str> = w.state.routings().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, vec!["only-b"]);
    assert_eq!(w.state.len(), 3);
    assert!(w.state.proxies().all(|p| p.upstream == "vendor-b"));
}
