//! Gateway usage in runtime reports reaches the analytics collector through real gRPC:
//! exact counts per Routing and client, the unlisted remainder, unknown routings
//! ignored and counted, a replayed report not counted twice, a refused report not
//! counted at all, and a malformed usage list refusing the whole report.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::sync::Arc;

use controlplane_support::*;
use proxy_pool_analytics::{Collector, Event, SystemClock};
use proxy_pool_controller::controlplane::UsageCounts;
use proxy_pool_controller::controlplane::outcomes::{UNLISTED_IDENTITY, wire_usage as usage};
use tokio::sync::mpsc;
use tonic::Code;

/// Every gateway event queued so far, as (routing, identity, requests).
fn drain(rx: &mut mpsc::Receiver<Event>) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let Event::GatewayRequests {
            routing,
            identity,
            requests,
            ..
        } = event
        {
            out.push((routing, identity, requests));
        }
    }
    out.sort();
    out
}

fn refused_for_usage<T: std::fmt::Debug>(r: Result<T, tonic::Status>) {
    match r {
        Err(s) => {
            assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
            assert!(s.message().contains("usage"), "{s:?}");
        }
        Ok(v) => panic!("expected INVALID_ARGUMENT for usage, got {v:?}"),
    }
}

fn ev(routing: &str, identity: &str, n: u32) -> (String, String, u32) {
    (routing.into(), identity.into(), n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_report_usage_reaches_the_collector_once() {
    let (collector, mut rx) = Collector::bounded(1024, Arc::new(SystemClock));
    let h = Harness::serving_with(Kind::Memory, config(), 1024, None, Some(collector)).await;
    h.available("p", 1, 600).await;
    let mut w = Worker::acked(&h, "gw-0").await;

    let mut report = w.runtime_req(1, &[]);
    report.usage = vec![
        usage("default", 10, &[("alice", 6), ("bob", 3)]),
        usage("no-such-routing", 4, &[("carol", 4)]),
    ];
    let first = w.send_report(report.clone()).await.expect("report");
    assert!(!first.replayed);
    assert_eq!(
        drain(&mut rx),
        vec![
            ev("default", UNLISTED_IDENTITY, 1),
            ev("default", "alice", 6),
            ev("default", "bob", 3),
        ]
    );
    assert_eq!(
        h.cp.usage_counts(),
        UsageCounts {
            requests: 10,
            unknown_routings: 1,
            unknown_requests: 4,
            unlisted_requests: 1,
        }
    );

    // The same report again (a retry after a lost answer): acknowledged, not recounted.
    let replay = w.send_report(report).await.expect("replay");
    assert!(replay.replayed);
    assert!(drain(&mut rx).is_empty(), "a replay is not counted");
    assert_eq!(h.cp.usage_counts().requests, 10);

    // A report the controller refuses (sequence regression) counts nothing.
    let mut lower = w.runtime_req(0, &[]);
    lower.usage = vec![usage("default", 5, &[("alice", 5)])];
    assert!(w.client.report_runtime(lower).await.is_err());
    assert!(drain(&mut rx).is_empty());

    // Malformed usage refuses the whole report (and the sequence does not move).
    let mut bad = w.runtime_req(2, &[]);
    bad.usage = vec![usage("default", 1, &[("alice", 2)])];
    refused_for_usage(w.client.report_runtime(bad).await);
    let mut dup = w.runtime_req(2, &[]);
    dup.usage = vec![usage("default", 1, &[]), usage("default", 1, &[])];
    refused_for_usage(w.client.report_runtime(dup).await);

    // The next sequence counts again.
    let mut next = w.runtime_req(2, &[]);
    next.usage = vec![usage("default", 2, &[("alice", 2)])];
    w.client.report_runtime(next).await.expect("seq 2");
    assert_eq!(drain(&mut rx), vec![ev("default", "alice", 2)]);
    assert_eq!(h.cp.usage_counts().requests, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_collector_usage_is_only_counted() {
    let h = Harness::new(Kind::Memory).await;
    h.available("p", 1, 600).await;
    let mut w = Worker::acked(&h, "gw-0").await;
    let mut report = w.runtime_req(1, &[]);
    report.usage = vec![usage("default", 3, &[("alice", 3)])];
    w.client.report_runtime(report).await.expect("report");
    assert_eq!(h.cp.usage_counts().requests, 3);
}
