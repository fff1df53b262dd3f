//! The daily byte meter's contract, on both stores (in process, and a real
//! redis-server shared by two meters as two controller replicas share it): bytes add up
//! per client and day across sessions, a report is counted once per (session,
//! sequence) — a replay or a lower sequence adds nothing —, days are separate, and
//! unasked or unknown clients read zero.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use activity_pool::RedisConnector;
use activity_pool::testkit::RedisServer;
use jiff::civil::{Date, date};
use proxy_pool_controller::controlplane::quota::{DailyMeter, ReportKey};
use proxy_pool_controller::controlplane::{MemoryMeter, RedisMeter};
use proxy_pool_controller::redis_link::RedisLink;

fn key(session: &str, sequence: u64) -> ReportKey<'_> {
    ReportKey { session, sequence }
}

/// The totals `m` answers when it records `bytes` of report (session, sequence) on
/// `day` and reads `read` (it must answer).
async fn record(
    m: &dyn DailyMeter,
    day: Date,
    (session, sequence): (&str, u64),
    bytes: &[(&str, u64)],
    read: &[&str],
) -> Vec<u64> {
    m.record(day, key(session, sequence), bytes, read)
        .await
        .unwrap()
}

/// `a` and `b` are two handles on one meter's state (two replicas of one deployment).
async fn contract(a: &dyn DailyMeter, b: &dyn DailyMeter) {
    let d1 = date(2026, 3, 1);
    let d2 = date(2026, 3, 2);
    let read = ["alice", "bob"];
    let got = record(a, d1, ("s1", 1), &[("alice", 100), ("bob", 7)], &read).await;
    assert_eq!(got, [100, 7]);
    // A replay of (s1, 1), and an older sequence, add nothing.
    let got = record(b, d1, ("s1", 1), &[("alice", 100)], &read).await;
    assert_eq!(got, [100, 7], "a replay is not counted again");
    let got = record(a, d1, ("s1", 0), &[("alice", 100)], &read).await;
    assert_eq!(got, [100, 7]);
    // Another session (another gateway) adds to the same fleet-wide total.
    let got = record(b, d1, ("s2", 1), &[("alice", 50)], &read).await;
    assert_eq!(got, [150, 7]);
    let got = record(a, d1, ("s1", 2), &[("alice", 1)], &["alice", "nobody"]).await;
    assert_eq!(got, [151, 0]);
    // Another day starts at zero; the sequence of a session is per day.
    let got = record(b, d2, ("s1", 3), &[("bob", 5)], &read).await;
    assert_eq!(got, [0, 5]);
    // Reading only.
    let got = record(a, d2, ("s3", 1), &[], &read).await;
    assert_eq!(got, [0, 5]);
}

#[tokio::test]
async fn memory_meter_keeps_the_contract() {
    let m = MemoryMeter::default();
    contract(&m, &m).await;
}

#[tokio::test]
async fn redis_meter_keeps_the_contract_across_replicas() {
    let server = RedisServer::start();
    let link = |_: ()| {
        Arc::new(RedisLink::new(
            RedisConnector::direct(&server.url()).unwrap(),
            Duration::from_secs(5),
        ))
    };
    let a = RedisMeter::new(link(()));
    let b = RedisMeter::new(link(()));
    contract(&a, &b).await;
}

#[tokio::test]
async fn an_unreachable_redis_is_an_error_not_a_zero() {
    let link = Arc::new(RedisLink::new(
        RedisConnector::direct("redis://127.0.0.1:1/0").unwrap(),
        Duration::from_millis(500),
    ));
    let m = RedisMeter::new(link);
    let r = m
        .record(date(2026, 3, 1), key("s1", 1), &[("alice", 1)], &["alice"])
        .await;
    assert!(r.is_err(), "{r:?}");
}
