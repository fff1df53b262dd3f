//! The control-plane agent against a scripted `WorkerControlPlane` server on loopback
//! (plaintext fixture): full snapshot then deltas, checksum-verified and ACKed,
//! traffic served from what arrived, runtime reports bound to the ACKed version, a
//! corrupt delta NACKed and followed by a full resync, outcomes shipped; removed and
//! draining proxies keep their open tunnels and take no new work, revocation takes
//! effect before the next snapshot, and a controller gone silent past
//! `max_stale_age_ms` stops new traffic while open tunnels continue; an unanswered call
//! ends the session within its deadline; a report in flight is never overtaken by the
//! next ACK.
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
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn now_ms() -> i64 {
    clock::to_model_ms(clock::now_ms())
}

fn header(version: u64) -> Header {
    Header {
        version,
        ownership_epoch: 1,
        generated_at_ms: now_ms(),
        valid_until_ms: now_ms() + 600_000,
    }
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("in time")
        .expect("open")
}

/// The routings of every snapshot here: `all`, to any port (the simulator's targets
/// listen on random ports).
fn routings() -> Vec<model::Routing> {
    vec![model::Routing {
        name: "all".into(),
        connect_ports: PortRanges::any(),
        ..Default::default()
    }]
}

/// Full snapshot `version` with `proxies`: the state deltas build on, and the update.
fn full(version: u64, proxies: Vec<model::SnapshotProxy>) -> (SnapshotState, pb::SnapshotUpdate) {
    let state = SnapshotState::build(header(version), routings(), proxies).unwrap();
    let full = pb::snapshot_update::Update::Full(state.to_message());
    (state, pb::SnapshotUpdate::new(full))
}

/// The update that carries `delta`.
fn delta_update(delta: &model::Delta) -> pb::SnapshotUpdate {
    let msg = pb::snapshot_update::Update::Delta(pb::SnapshotDelta::from(delta));
    pb::SnapshotUpdate::new(msg)
}

#[tokio::test]
async fn agent_applies_snapshots_and_deltas_acks_reports_and_resyncs() {
    let mut h = Harness::start().await;
    let (endpoint, mut seen) = fake_controller(Default::default()).await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Socks5).await;
    let stop = spawn_agent(&mut h, endpoint);

    // Full snapshot v1 with proxy A.
    let (watch, updates) = next(&mut seen.streams).await;
    assert_eq!((watch.worker_id.as_str(), watch.last_version), ("gw-0", 0));
    let (mut state, update) = full(1, vec![wire_proxy(&a)]);
    updates.send(Ok(update)).await.unwrap();
    let ack = next(&mut seen.acks).await;
    assert!(ack.accepted, "{}", ack.reason);
    assert_eq!(
        (ack.version, ack.checksum.as_slice()),
        (1, &state.checksum().0[..])
    );
    let r = h.get("/v1").await;
    assert_eq!(
        r.remote_ip(),
        h.egress(&a),
        "served from the control-plane snapshot"
    );

    // Delta v2 adds proxy B.
    let delta = state
        .advance(header(2), None, &[wire_proxy(&a), wire_proxy(&b)])
        .unwrap();
    updates.send(Ok(delta_update(&delta))).await.unwrap();
    let ack = next(&mut seen.acks).await;
    assert!(ack.accepted && ack.version == 2, "{ack:?}");
    let live = h.handle.load();
    assert_eq!(live.as_ref().unwrap().proxies.len(), 2);
    drop(live);

    // A tunnel held open shows up in a runtime report bound to v2.
    let tunnel = h.tunnel().await;
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
    updates.send(Ok(delta_update(&bad))).await.unwrap();
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

/// An agent on the harness's handle against a fake controller with `knobs`.
struct Plane {
    seen: Seen,
    updates: Updates,
    state: Option<SnapshotState>,
    /// What the fake controller does, changeable while it runs.
    knobs: Arc<Mutex<Knobs>>,
    stop: CancellationToken,
}

impl Drop for Plane {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Runs an agent on the harness's handle (taking its outcomes) against the controller
/// at `endpoint`, until the token returned is cancelled.
fn spawn_agent(h: &mut Harness, endpoint: String) -> CancellationToken {
    let outcomes = std::mem::replace(&mut h.outcomes, proxy_pool_gateway::outcome::queue(1).1);
    let agent = Agent::new(agent_config(endpoint), h.handle.clone(), outcomes);
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    stop
}

async fn plane(h: &mut Harness, knobs: Knobs) -> Plane {
    let knobs = Arc::new(Mutex::new(knobs));
    let (endpoint, mut seen) = fake_controller_with(Default::default(), knobs.clone()).await;
    let stop = spawn_agent(h, endpoint);
    let (_, updates) = next(&mut seen.streams).await;
    Plane {
        seen,
        updates,
        state: None,
        knobs,
        stop,
    }
}

/// A harness with `N` simulated HTTP proxies and an agent on it against a fake
/// controller with `knobs`, its watch stream open.
async fn setup<const N: usize>(knobs: Knobs) -> (Harness, [SimProxy; N], Plane) {
    let mut h = Harness::start().await;
    let mut proxies = Vec::with_capacity(N);
    for _ in 0..N {
        proxies.push(h.proxy(Protocol::Http).await);
    }
    let proxies = proxies.try_into().unwrap_or_else(|_| panic!("{N} proxies"));
    let cp = plane(&mut h, knobs).await;
    (h, proxies, cp)
}

impl Plane {
    /// Sends version `version` with `proxies` (full the first time, then a delta) and
    /// waits for its positive ACK.
    async fn send(&mut self, version: u64, proxies: Vec<model::SnapshotProxy>) {
        assert!(
            self.push(version, proxies).await,
            "the watch stream is open"
        );
        let ack = next(&mut self.seen.acks).await;
        assert!(ack.accepted && ack.version == version, "{ack:?}");
    }

    /// Sends version `version` with `proxies` (full the first time, then a delta);
    /// whether the watch stream took it.
    async fn push(&mut self, version: u64, proxies: Vec<model::SnapshotProxy>) -> bool {
        let update = match &mut self.state {
            None => {
                let (st, update) = full(version, proxies);
                self.state = Some(st);
                update
            }
            Some(st) => delta_update(&st.advance(header(version), None, &proxies).unwrap()),
        };
        self.updates.send(Ok(update)).await.is_ok()
    }

    /// The first runtime report (within 20 s) for which `want` holds.
    async fn report_where(
        &mut self,
        want: impl Fn(&pb::ReportRuntimeRequest) -> bool,
    ) -> pb::ReportRuntimeRequest {
        let wait = async {
            loop {
                let (report, _) = next(&mut self.seen.reports).await;
                if want(&report) {
                    return report;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .expect("such a report in time")
    }
}

fn count_of<'a>(r: &'a pb::ReportRuntimeRequest, p: &SimProxy) -> Option<&'a pb::RuntimeCount> {
    r.counts.iter().find(|c| c.proxy_id == p.id)
}

#[tokio::test]
async fn removed_proxy_reports_draining_until_its_tunnel_closes() {
    let (h, [a, b], mut cp) = setup(Knobs::default()).await;
    cp.send(1, vec![wire_proxy(&a)]).await;
    let tunnel = h.tunnel().await;

    // v2 no longer lists A; its open tunnel keeps it in the reports, draining.
    cp.send(2, vec![wire_proxy(&b)]).await;
    let report = cp
        .report_where(|r| r.snapshot_version == 2 && count_of(r, &a).is_some())
        .await;
    let count = count_of(&report, &a).unwrap();
    assert!(
        count.draining && count.active == 1 && count.reserved == 0,
        "{count:?}"
    );
    // The tunnel still carries traffic through A.
    let r = h.echo_over(tunnel, "/still-open").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));

    // Closed (echo_over asked for `Connection: close`): A leaves the reports.
    let report = cp
        .report_where(|r| r.snapshot_version == 2 && count_of(r, &a).is_none())
        .await;
    assert!(report.counts.iter().all(|c| c.proxy_id != a.id));
    let gone = h.handle.runtime_report();
    assert!(gone.iter().all(|c| c.id.as_str() != a.id), "{gone:?}");
}

#[tokio::test]
async fn draining_proxy_takes_no_new_traffic_but_its_tunnel_continues() {
    let (h, [a], mut cp) = setup(Knobs::default()).await;
    cp.send(1, vec![wire_proxy(&a)]).await;
    let tunnel = h.tunnel().await;

    let mut draining = wire_proxy(&a);
    draining.draining = true;
    cp.send(2, vec![draining]).await;
    // A has room for 3 more, but it is draining: no new request goes to it.
    let r = h.get("/new").await;
    r.assert_refused(503, "no-capacity");
    let refused = socks5(h.socks, USER, PASS, h.echo(), 1).await.err();
    assert_eq!(refused, Some(("reply".to_owned(), 1)));
    // Reported as draining with its tunnel, which still works.
    let report = cp
        .report_where(|r| r.snapshot_version == 2 && count_of(r, &a).is_some())
        .await;
    let count = count_of(&report, &a).unwrap();
    assert!(count.draining && count.active == 1, "{count:?}");
    let r = h.echo_over(tunnel, "/old").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));
}

#[tokio::test]
async fn revoked_proxy_is_not_selected_before_the_next_snapshot() {
    let (h, [a], mut cp) = setup(Knobs::default()).await;
    let knobs = cp.knobs.clone();
    cp.send(1, vec![wire_proxy(&a)]).await;
    let r = h.get("/before").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));

    // The next report's answer revokes A. The agent sends report n+1 only after it
    // handled the answer to report n, so once n+1 arrives the revocation is in force.
    knobs.lock().revoke_next = vec![a.id.clone()];
    cp.report_where(|r| {
        knobs
            .lock()
            .revoked_in_report
            .is_some_and(|n| r.report_sequence > n)
    })
    .await;
    let r = h.get("/after").await;
    r.assert_refused(503, "no-capacity");
    assert_eq!(
        h.handle.load().as_ref().unwrap().version,
        1,
        "no new snapshot"
    );

    // The next snapshot is authoritative again: it lists A, so A serves.
    cp.send(2, vec![wire_proxy(&a)]).await;
    let r = h.get("/again").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));
}

#[tokio::test]
async fn silent_controller_past_max_stale_age_refuses_new_work_and_drains_tunnels() {
    const MAX_STALE: Duration = Duration::from_millis(3_000);
    let (h, [a], mut cp) = setup(Knobs {
        max_stale_age_ms: MAX_STALE.as_millis() as u64,
        ..Knobs::default()
    })
    .await;
    cp.send(1, vec![wire_proxy(&a)]).await;
    let installed = Instant::now();
    let tunnel = h.tunnel().await;

    // Accepted runtime reports confirm the snapshot: past twice the max stale age
    // since it was installed it still serves.
    while installed.elapsed() < MAX_STALE * 2 {
        next(&mut cp.seen.reports).await;
    }
    let r = h.get("/confirmed").await;
    assert_eq!(r.status, 200, "still fresh: {}", r.head);
    assert_eq!(r.remote_ip(), h.egress(&a));

    // The controller goes silent: within the max stale age of the last confirmation
    // (the registration's 3 s, not the handle's 600 s) new requests are refused.
    cp.knobs.lock().silent = true;
    let refused = async {
        loop {
            let r = h.get("/probe").await;
            if r.status != 200 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let r = tokio::time::timeout(MAX_STALE * 5, refused)
        .await
        .expect("refused once stale");
    r.assert_refused(503, "snapshot-stale");
    let (resp, _) = h.connect_echo().await;
    assert_eq!(resp.status, 503);
    let refused = socks5(h.socks, USER, PASS, h.echo(), 1).await.err();
    assert_eq!(refused, Some(("reply".to_owned(), 1)), "general failure");
    // The tunnel opened while fresh continues.
    let r = h.echo_over(tunnel, "/draining").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));
}

/// Exclusivity: the worker's lease on a proxy bounds its use. At the lease end (less
/// the safety margin) no new request goes to it and an open tunnel is closed; a later
/// snapshot that extends the lease keeps tunnels open and traffic flowing.
#[tokio::test]
async fn lease_end_stops_new_traffic_and_closes_open_tunnels() {
    let (h, [a], mut cp) = setup(Knobs::default()).await;
    let leased = |until_ms: i64| {
        let mut p = wire_proxy(&a);
        p.lease_expires_at_ms = until_ms;
        p
    };
    // Lease 3 s out: used until 2 s from now (1 s safety margin).
    cp.send(1, vec![leased(now_ms() + 3_000)]).await;
    let mut tunnel = h.tunnel().await;
    let started = Instant::now();
    // The gateway closes the tunnel at the cut: the client reads EOF (or a reset).
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        use tokio::io::AsyncReadExt;
        tunnel.read(&mut buf).await
    })
    .await
    .expect("the tunnel is closed at the lease end");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1_500) && took < Duration::from_secs(4),
        "closed after {took:?}"
    );
    let r = h.get("/after-lease").await;
    assert_eq!(r.status, 503, "{}", r.head);
    // Operators see the cut: one tunnel closed at its proxy's lease end.
    let metrics = h.gateway.render_metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l == "proxy_pool_gateway_tunnels_lease_cut_total 1"),
        "{metrics}"
    );

    // A renewed lease (a later snapshot) makes the proxy usable again, and a tunnel
    // opened under it outlives the old lease end.
    cp.send(2, vec![leased(now_ms() + 3_000)]).await;
    let tunnel = h.tunnel().await;
    cp.send(3, vec![leased(now_ms() + 600_000)]).await;
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    let r = h.echo_over(tunnel, "/renewed").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));
}

/// Per-Routing TARGET health: a proxy excluded for a routing serves none of its
/// requests; the other proxies do, and an exclusion for another routing changes nothing.
#[tokio::test]
async fn a_proxy_excluded_for_a_routing_serves_none_of_its_requests() {
    let (h, [a, b], mut cp) = setup(Knobs::default()).await;
    let mut excluded = wire_proxy(&a);
    excluded.excluded_routings = vec!["all".into()];
    cp.send(1, vec![excluded.clone(), wire_proxy(&b)]).await;
    for i in 0..8 {
        let r = h.get(&format!("/x{i}")).await;
        assert_eq!(
            (r.status, r.remote_ip()),
            (200, h.egress(&b)),
            "request {i}"
        );
    }
    cp.send(2, vec![excluded]).await;
    let r = h.get("/only-excluded").await;
    assert_eq!(r.status, 503, "{}", r.head);
    let mut other = wire_proxy(&a);
    other.excluded_routings = vec!["other".into()];
    cp.send(3, vec![other]).await;
    let r = h.get("/other").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));
}

/// A draining proxy that becomes idle is reported at once (not at the next report
/// interval), so the controller can finish the drain for extraction within a pass.
#[tokio::test]
async fn a_drained_proxy_going_idle_is_reported_at_once() {
    let (h, [a], mut cp) = setup(Knobs {
        report_interval_ms: 60_000,
        ..Knobs::default()
    })
    .await;
    cp.send(1, vec![wire_proxy(&a)]).await;
    let tunnel = h.tunnel().await;
    let mut draining = wire_proxy(&a);
    draining.draining = true;
    cp.send(2, vec![draining]).await;
    // Right after the ACK: a report bound to v2 with A busy.
    let report = cp
        .report_where(|r| r.snapshot_version == 2 && count_of(r, &a).is_some())
        .await;
    assert!(count_of(&report, &a).unwrap().draining);
    let closed = Instant::now();
    drop(tunnel);
    let report = cp
        .report_where(|r| r.snapshot_version == 2 && count_of(r, &a).is_none())
        .await;
    assert!(report.counts.is_empty(), "{report:?}");
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "reported {:?} after the tunnel closed, not a report interval (60 s) later",
        closed.elapsed()
    );
}

/// A restarted controller numbers snapshots afresh: after the worker registers again,
/// its first snapshot is installed even though its (epoch, version) is lower than the
/// one in service; a lower one within the same session is still refused.
#[tokio::test]
async fn a_new_session_accepts_a_restarted_controllers_numbering() {
    let (h, [a, b], mut cp) = setup(Knobs::default()).await;
    cp.send(40, vec![wire_proxy(&a)]).await;
    // The controller goes away: the stream ends, the agent registers again.
    let (_, updates) = {
        drop(std::mem::replace(&mut cp.updates, mpsc::channel(1).0));
        next(&mut cp.seen.streams).await
    };
    // Same epoch, version 1 < 40.
    updates
        .send(Ok(full(1, vec![wire_proxy(&b)]).1))
        .await
        .unwrap();
    let ack = loop {
        let ack = next(&mut cp.seen.acks).await;
        if ack.version == 1 {
            break ack;
        }
    };
    assert!(ack.accepted, "{}", ack.reason);
    let r = h.get("/after-restart").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&b)));
}

/// A controller that stops answering — a hung process, or a black-holed path that sends
/// no FIN or RST while the HTTP/2 connection looks alive — is given up after the call
/// deadline: the unanswered runtime report ends the session and the agent registers
/// again, instead of waiting on the report for ever.
#[tokio::test]
async fn an_unanswered_report_ends_the_session_within_the_call_deadline() {
    let deadline = proxy_pool_api::controlplane::client::ClientOptions::default().call_timeout;
    let (h, [a], mut cp) = setup(Knobs::default()).await;
    cp.send(1, vec![wire_proxy(&a)]).await;
    cp.knobs.lock().silent = true;
    let silent = Instant::now();
    let again = tokio::time::timeout(deadline * 2, cp.seen.streams.recv())
        .await
        .expect("the agent registers again within the call deadline of an unanswered report");
    assert!(again.is_some());
    let took = silent.elapsed();
    // The report in flight when it went silent, or the next one (every 100 ms), waited
    // the whole deadline; then one backoff (200–400 ms).
    assert!(
        took >= deadline.saturating_sub(Duration::from_millis(200))
            && took <= deadline + Duration::from_secs(1),
        "registered again after {took:?}, deadline {deadline:?}"
    );
    // The snapshot it had is still served meanwhile (max stale age 60 s).
    let r = h.get("/still-served").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&a)));
}

/// The controller refuses a runtime report whose bound is not the session's last
/// positive ACK (`bound_mismatch`, which ends the session), and it may see a report and
/// an ACK in either order. With a controller slow to answer reports and snapshots
/// arriving faster than that, a report bound to one version must never be overtaken by
/// the next version's ACK: every report is accepted and the session never ends.
#[tokio::test]
async fn a_report_in_flight_is_never_overtaken_by_the_next_acknowledgement() {
    let (_h, [a, b], mut cp) = setup(Knobs {
        report_delay: Duration::from_millis(300),
        check_bound: true,
        ..Knobs::default()
    })
    .await;
    cp.send(1, vec![wire_proxy(&a)]).await;
    // Each one while the report the previous ACK triggered is still unanswered.
    for version in 2..=8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let proxies = if version % 2 == 0 {
            vec![wire_proxy(&a), wire_proxy(&b)]
        } else {
            vec![wire_proxy(&a)]
        };
        if !cp.push(version, proxies).await {
            break;
        }
    }
    // Every report until one bound to the last version is accepted (within 10 s).
    let mut answers = Vec::new();
    let until_last = async {
        while let Some((r, code)) = cp.seen.reports.recv().await {
            answers.push((r.snapshot_version, code));
            if r.snapshot_version == 8 && code == tonic::Code::Ok {
                return;
            }
        }
    };
    let reported = tokio::time::timeout(Duration::from_secs(10), until_last).await;
    assert!(
        answers.iter().all(|(_, code)| *code == tonic::Code::Ok),
        "reports refused (version, answer): {answers:?}"
    );
    assert!(reported.is_ok(), "version 8 never reported: {answers:?}");
    assert!(
        cp.seen.streams.try_recv().is_err(),
        "the session ended and the agent registered again"
    );
}
