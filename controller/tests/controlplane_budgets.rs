//! Per-client metering and budgets through real gRPC: the traffic metrics count a
//! report's bytes and requests per configured client and Routing once (a replay adds
//! nothing; other identities go to `(other)`); every answer carries the client budgets —
//! the live gateways of the reporting worker's group, and the clients whose fleet-wide
//! bytes of the UTC day reached their `dailyBytes` (summed over every gateway's reports,
//! once per (session, sequence)), cleared when a new UTC day begins.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::time::Duration;

use controlplane_support::*;
use proxy_pool_api::controlplane::pb;
use proxy_pool_controller::controlplane::metering::OTHER;
use proxy_pool_controller::controlplane::outcomes::{Traffic, wire_traffic};
use proxy_pool_controller::controlplane::{ClientSpec, ControlPlaneConfig};

fn t(requests: u64, bytes_up: u64, bytes_down: u64) -> Traffic {
    Traffic {
        requests,
        bytes_up,
        bytes_down,
    }
}

fn metered_config() -> ControlPlaneConfig {
    ControlPlaneConfig {
        clients: vec![
            ClientSpec {
                name: "alice".into(),
                daily_bytes: Some(1_000),
            },
            ClientSpec {
                name: "bob".into(),
                daily_bytes: Some(1_000_000),
            },
            ClientSpec {
                name: "carol".into(),
                daily_bytes: None,
            },
        ],
        ..config()
    }
}

/// The control plane of [`metered_config`] on the memory store (with `analytics`, when
/// given) with one proxy, and one registered gateway `gw-0` that acknowledged its
/// snapshot.
async fn one_gateway(analytics: Option<proxy_pool_analytics::Collector>) -> (Harness, Worker) {
    let h = Harness::serving_with(Kind::Memory, metered_config(), 1024, None, analytics).await;
    h.available("p", 1, 600).await;
    let w = Worker::acked(&h, "gw-0").await;
    (h, w)
}

/// A report of `w`'s next sequence carrying `usage`.
fn report_with(w: &mut Worker, usage: Vec<pb::RoutingUsage>) -> pb::ReportRuntimeRequest {
    w.report_seq += 1;
    let mut r = w.runtime_req(w.report_seq, &[]);
    r.usage = usage;
    r
}

/// Usage of Routing `default` made of `clients`' traffic only (its total is their sum).
fn on_default(clients: &[(&str, Traffic)]) -> Vec<pb::RoutingUsage> {
    let total = clients.iter().fold(t(0, 0, 0), |s, (_, c)| {
        t(
            s.requests + c.requests,
            s.bytes_up + c.bytes_up,
            s.bytes_down + c.bytes_down,
        )
    });
    vec![wire_traffic("default", total, clients)]
}

/// `w` reports `clients`' traffic on `default` ([`on_default`]) in its next sequence;
/// the budgets of the answer.
async fn report_default(w: &mut Worker, clients: &[(&str, Traffic)]) -> (u32, Vec<String>) {
    let req = report_with(w, on_default(clients));
    budgets(&w.send_report(req).await.expect("report"))
}

fn budgets(r: &pb::ReportRuntimeResponse) -> (u32, Vec<String>) {
    let b = r
        .client_budgets
        .clone()
        .expect("client budgets in every answer");
    (b.group_gateways, b.quota_exhausted_clients)
}

/// Sets the harness clock to `secs_before` seconds before the next UTC midnight.
fn before_midnight(h: &Harness, secs_before: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let midnight = (now / 86_400 + 1) * 86_400;
    h.clock
        .set(std::time::UNIX_EPOCH + Duration::from_secs(midnight - secs_before));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_metrics_count_a_report_once_with_bounded_labels() {
    let (h, mut w) = one_gateway(None).await;
    let report = report_with(
        &mut w,
        vec![
            wire_traffic(
                "default",
                t(7, 7_000, 70_000),
                &[
                    ("alice", t(3, 3_000, 30_000)),
                    ("open-user", t(2, 2_000, 20_000)),
                ],
            ),
            wire_traffic("no-such-routing", t(1, 10, 20), &[("carol", t(1, 10, 20))]),
        ],
    );
    w.send_report(report.clone()).await.expect("report");
    let m = h.cp.traffic();
    assert_eq!(m.requests("alice", "default"), 3);
    assert_eq!(m.bytes("alice", "default"), (3_000, 30_000));
    // The open-auth identity and the unlisted remainder: (other) of the Routing.
    assert_eq!(m.requests(OTHER, "default"), 4);
    assert_eq!(m.bytes(OTHER, "default"), (4_000, 40_000));
    assert_eq!(m.bytes("carol", OTHER), (10, 20));

    let replay = w.send_report(report).await.expect("replay");
    assert!(replay.replayed);
    assert_eq!(
        m.bytes("alice", "default"),
        (3_000, 30_000),
        "a replay adds nothing"
    );
    assert_eq!(m.requests("alice", "default"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_carry_the_group_size_and_the_clients_over_quota_until_the_day_ends() {
    let h = Harness::with(Kind::Memory, metered_config(), 1024).await;
    before_midnight(&h, 15);
    h.available("p", 2, 600).await;
    let mut a = Worker::acked(&h, "gw-a").await;
    let mut b = Worker::acked(&h, "gw-b").await;
    // A gateway of another group shares nothing with these two.
    let mut edge = register_req("gw-edge", "i-1");
    edge.gateway_group = "edge".into();
    h.client().await.register_worker(edge).await.expect("edge");

    let first = report_with(
        &mut a,
        on_default(&[("alice", t(1, 200, 300)), ("carol", t(1, 100, 0))]),
    );
    let r = a.send_report(first.clone()).await.expect("report a1");
    assert_eq!(
        budgets(&r),
        (2, vec![]),
        "two live gateways in the group; alice at 500"
    );

    // A replay is not metered again: alice stays at 500 of 1,000.
    let r = a.send_report(first).await.expect("replay a1");
    assert!(r.replayed);
    assert_eq!(budgets(&r), (2, vec![]));

    // The other gateway's bytes join the same fleet-wide total: 500 + 500 >= 1,000.
    assert_eq!(
        report_default(&mut b, &[("alice", t(1, 250, 250))]).await,
        (2, vec!["alice".to_owned()])
    );
    // Every later answer lists alice, whoever reports (carol has no quota).
    assert_eq!(
        report_default(&mut a, &[("carol", t(1, 1, 1))]).await,
        (2, vec!["alice".to_owned()])
    );
    let req = report_with(&mut b, vec![]);
    let r = b.send_report(req).await.expect("report b2");
    assert_eq!(budgets(&r), (2, vec!["alice".to_owned()]));

    // A new UTC day (within the sessions' TTL): nothing used yet.
    h.advance(20);
    assert_eq!(
        report_default(&mut b, &[("alice", t(1, 10, 10))]).await,
        (2, vec![]),
        "the new day cleared the quota"
    );
}

/// Every gateway-bytes event queued so far, as (kind, name, up, down).
fn bytes_events(
    rx: &mut tokio::sync::mpsc::Receiver<proxy_pool_analytics::Event>,
) -> Vec<(String, String, u64, u64)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let proxy_pool_analytics::Event::GatewayBytes {
            kind,
            name,
            bytes_up,
            bytes_down,
            ..
        } = e
        {
            out.push((kind.as_str().to_owned(), name, bytes_up, bytes_down));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_bytes_reach_analytics_per_routing_and_configured_client_once() {
    let (collector, mut rx) = proxy_pool_analytics::Collector::bounded(
        1024,
        std::sync::Arc::new(proxy_pool_analytics::SystemClock),
    );
    let (_h, mut w) = one_gateway(Some(collector)).await;
    let report = report_with(
        &mut w,
        vec![
            wire_traffic(
                "default",
                t(3, 900, 9_000),
                &[("alice", t(1, 500, 5_000)), ("open-user", t(1, 300, 3_000))],
            ),
            wire_traffic("no-such-routing", t(1, 1, 1), &[("alice", t(1, 1, 1))]),
        ],
    );
    w.send_report(report.clone()).await.expect("report");
    assert_eq!(
        bytes_events(&mut rx),
        vec![
            ("clients".to_owned(), "alice".to_owned(), 500, 5_000),
            ("routings".to_owned(), "default".to_owned(), 900, 9_000),
        ],
        "the Routing's bytes, and the configured client's; unknown routings ignored"
    );
    assert!(w.send_report(report).await.expect("replay").replayed);
    assert!(bytes_events(&mut rx).is_empty(), "a replay is not counted");
}
