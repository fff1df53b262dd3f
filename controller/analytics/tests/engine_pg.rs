//! The analytics worker on a real `redis-server` and a real PostgreSQL: exact PV, HLL UV,
//! sequenced snapshots, recovery, SQL outages, day rollover, pruning, final flush.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use jiff::civil::Date;
use proxy_pool_analytics::{
    AnalyticsError, CommitOutcome, DailyRow, DayCoverage, Kind, Snapshot, Subject, TotalRow, reason,
};
use support::Rig;

fn subj(kind: Kind, name: &str) -> Subject {
    Subject {
        kind,
        name: name.into(),
    }
}

fn d(s: &str) -> Date {
    s.parse().unwrap()
}

fn within(estimate: i64, truth: i64, pct: f64) -> bool {
    ((estimate - truth).abs() as f64) <= truth as f64 * pct / 100.0
}

#[tokio::test]
async fn pv_is_exact_and_uv_within_hll_error() {
    let mut rig = Rig::started("2026-05-10T12:00:00Z", "UTC").await;
    for i in 0..3000 {
        rig.collector.extraction(
            "client-a",
            &format!("caller-{}", i % 1500),
            &[("vendor-x", 2), ("vendor-y", 1)],
        );
    }
    for i in 0..2000 {
        rig.collector
            .gateway_requests("route-1", &format!("user-{i}"), 2);
    }
    rig.collector
        .extraction("client-b", "one", &[("vendor-x", 5)]);
    let r = rig.drain_and_flush().await;
    assert_eq!(r.outcome, CommitOutcome::Committed);
    let a = rig.total(Kind::Clients, "client-a").await;
    assert_eq!((a.requests, a.proxies), (3000, 9000));
    assert!(within(a.uv, 1500, 2.5), "uv {}", a.uv);
    let x = rig.total(Kind::Upstreams, "vendor-x").await;
    assert_eq!(
        (x.requests, x.proxies, x.uv),
        (3001, 6005, 2),
        "unique clients of an upstream"
    );
    let route = rig
        .days(Kind::Routings, "route-1", "2026-05-10", "2026-05-10")
        .await;
    assert_eq!(route.len(), 1);
    assert_eq!(route[0].requests, 4000);
    assert!(within(route[0].uv, 2000, 2.5), "uv {}", route[0].uv);
    assert!(!route[0].hll.is_empty());
    // The first day of a history is partial and says so.
    let cov = rig.coverage("2026-05-10").await;
    assert_eq!(cov[0].reasons, vec![reason::COLLECTION_STARTED.to_owned()]);
    // A second flush with nothing new changes nothing but the sequence.
    let r2 = rig.engine.flush().await.unwrap();
    assert!(r2.seq > r.seq);
    let a2 = rig.total(Kind::Clients, "client-a").await;
    assert_eq!(a2.requests, 3000);
}

fn snap(seq: i64, requests: i64) -> Snapshot {
    let s = subj(Kind::Clients, "c");
    Snapshot {
        seq,
        taken_at: "2026-05-10T00:00:00Z".parse().unwrap(),
        totals: vec![TotalRow {
            subject: s.clone(),
            requests,
            proxies: requests,
            bytes_up: 0,
            bytes_down: 0,
            uv: 1,
            hll: vec![1],
            first_day: d("2026-05-10"),
        }],
        days: vec![DailyRow {
            subject: s,
            day: d("2026-05-10"),
            requests,
            proxies: requests,
            bytes_up: 0,
            bytes_down: 0,
            uv: 1,
            hll: vec![1],
            degraded: false,
        }],
        coverage: vec![DayCoverage {
            day: d("2026-05-10"),
            degraded: false,
            reasons: vec![],
        }],
    }
}

#[tokio::test]
async fn replayed_and_out_of_order_snapshots_never_double_count_or_roll_back() {
    let rig = Rig::new("2026-05-10T12:00:00Z", "UTC").await;
    let s = &rig.store;
    assert_eq!(
        s.commit(&snap(5, 10), "UTC").await.unwrap(),
        CommitOutcome::Committed
    );
    assert_eq!(
        s.commit(&snap(5, 10), "UTC").await.unwrap(),
        CommitOutcome::Stale { committed: 5 }
    );
    assert_eq!(
        s.commit(&snap(5, 99), "UTC").await.unwrap(),
        CommitOutcome::Stale { committed: 5 }
    );
    assert_eq!(
        s.commit(&snap(3, 1), "UTC").await.unwrap(),
        CommitOutcome::Stale { committed: 5 }
    );
    let t = s.total(&subj(Kind::Clients, "c")).await.unwrap().unwrap();
    assert_eq!(t.requests, 10);
    assert_eq!(
        s.commit(&snap(7, 12), "UTC").await.unwrap(),
        CommitOutcome::Committed
    );
    let rows = rig
        .days(Kind::Clients, "c", "2026-05-10", "2026-05-10")
        .await;
    assert_eq!(rows[0].requests, 12, "absolute values, not sums");
    assert_eq!(s.meta().await.unwrap().unwrap().last_seq, 7);
}

#[tokio::test]
async fn redis_flushed_mid_day_is_rebuilt_from_sql_and_the_day_flagged() {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    for i in 0..500 {
        rig.collector
            .gateway_requests("route-1", &format!("u{i}"), 1);
    }
    rig.drain_and_flush().await;
    rig.clock.advance_secs(3600 * 4);
    // Next day-part: yesterday's flags are committed; clear the first-day flag noise.
    rig.redis(&["FLUSHALL"]).await;
    for i in 0..10 {
        rig.collector
            .gateway_requests("route-1", &format!("late{i}"), 1);
    }
    let r = rig.drain_and_flush().await;
    assert!(r.recovered);
    let t = rig.total(Kind::Routings, "route-1").await;
    assert!(t.requests >= 500, "totals never go back: {}", t.requests);
    // HLL bytes came back: new identities add to the restored estimate.
    for i in 0..100 {
        rig.collector
            .gateway_requests("route-1", &format!("new{i}"), 1);
    }
    rig.drain_and_flush().await;
    let t = rig.total(Kind::Routings, "route-1").await;
    assert_eq!(t.requests, 600);
    assert!(within(t.uv, 600, 2.5), "uv {}", t.uv);
    let cov = rig.coverage("2026-05-10").await;
    assert!(
        cov[0].degraded && cov[0].reasons.contains(&reason::REDIS_RECOVERED.to_owned()),
        "{cov:?}"
    );
    assert_eq!(
        rig.engine
            .metrics()
            .recoveries
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// A started rig that has committed one extraction of one proxy by `client-a`
/// from `vendor-x` (x).
async fn one_extraction_committed() -> Rig {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    rig.collector
        .extraction("client-a", "x", &[("vendor-x", 1)]);
    rig.drain_and_flush().await;
    rig
}

#[tokio::test]
async fn wrong_typed_or_older_redis_state_is_rebuilt() {
    let mut rig = one_extraction_committed().await;
    rig.engine.flush().await.unwrap();
    // Older: the sequence went back (a Redis restored from an old AOF).
    rig.redis(&["SET", "test:analytics:v1:seq", "1"]).await;
    rig.redis(&["HSET", "test:analytics:v1:t:clients|client-a", "req", "0"])
        .await;
    assert!(rig.engine.flush().await.unwrap().recovered);
    assert_eq!(rig.total(Kind::Clients, "client-a").await.requests, 1);
    // Wrong type: a counter hash replaced by a string.
    rig.redis(&["DEL", "test:analytics:v1:t:clients|client-a"])
        .await;
    rig.redis(&["SET", "test:analytics:v1:t:clients|client-a", "junk"])
        .await;
    rig.collector
        .extraction("client-a", "x", &[("vendor-x", 1)]);
    rig.drain().await;
    assert!(rig.engine.flush().await.unwrap().recovered);
    rig.collector
        .extraction("client-a", "y", &[("vendor-x", 1)]);
    rig.drain_and_flush().await;
    let t = rig.total(Kind::Clients, "client-a").await;
    assert_eq!(
        t.requests, 2,
        "restored 1 + 1 after recovery (the event during the fault is lost and flagged)"
    );
}

#[tokio::test]
async fn sql_down_keeps_data_in_redis_and_retries_the_full_snapshot() {
    let mut rig = one_extraction_committed().await;
    rig.pg.stop();
    for _ in 0..7 {
        rig.collector
            .extraction("client-a", "x", &[("vendor-x", 3)]);
    }
    rig.drain().await;
    assert!(rig.engine.flush().await.is_err());
    rig.collector
        .extraction("client-a", "x", &[("vendor-x", 3)]);
    rig.drain().await;
    assert!(rig.engine.flush().await.is_err());
    rig.pg.restart();
    let r = rig.engine.flush().await.unwrap();
    assert_eq!(r.outcome, CommitOutcome::Committed);
    assert!(!r.recovered);
    let t = rig.total(Kind::Clients, "client-a").await;
    assert_eq!((t.requests, t.proxies), (9, 25));
    let cov = rig.coverage("2026-05-10").await;
    assert!(cov[0].reasons.contains(&reason::SQL_RETRY.to_owned()));
}

#[tokio::test]
async fn day_rollover_splits_counts_at_the_zone_midnight() {
    let mut rig = Rig::started("2026-05-10T15:59:30Z", "Asia/Shanghai").await;
    rig.collector.gateway_requests("route-1", "a", 3);
    rig.clock.advance_secs(60); // 00:00:30 in Shanghai
    rig.collector.gateway_requests("route-1", "a", 4);
    rig.drain_and_flush().await;
    let rows = rig
        .days(Kind::Routings, "route-1", "2026-05-10", "2026-05-11")
        .await;
    let got: Vec<(String, i64)> = rows
        .iter()
        .map(|r| (r.day.to_string(), r.requests))
        .collect();
    assert_eq!(
        got,
        vec![("2026-05-10".into(), 3), ("2026-05-11".into(), 4)]
    );
    let t = rig.total(Kind::Routings, "route-1").await;
    assert_eq!((t.requests, t.uv), (7, 1));
}

#[tokio::test]
async fn ninety_natural_days_are_kept_with_batched_deletes_and_totals_stay() {
    let mut rig = Rig::new("2026-05-10T08:00:00Z", "UTC").await;
    let today = d("2026-05-10");
    let mut days = Vec::new();
    for back in 0..120 {
        let day = proxy_pool_analytics::minus_days(today, back);
        for n in 0..10 {
            days.push(DailyRow {
                subject: subj(Kind::Clients, &format!("c{n}")),
                day,
                requests: 1,
                proxies: 1,
                bytes_up: 0,
                bytes_down: 0,
                uv: 1,
                hll: vec![],
                degraded: false,
            });
        }
    }
    let s = Snapshot {
        seq: 1,
        taken_at: "2026-05-10T00:00:00Z".parse().unwrap(),
        totals: vec![TotalRow {
            subject: subj(Kind::Clients, "c0"),
            requests: 120,
            proxies: 120,
            bytes_up: 0,
            bytes_down: 0,
            uv: 1,
            hll: vec![],
            first_day: d("2026-01-10"),
        }],
        days,
        coverage: vec![],
    };
    rig.store.commit(&s, "UTC").await.unwrap();
    rig.engine.start().await.unwrap();
    rig.engine.flush().await.unwrap();
    let kept = rig.store.days_since(d("2000-01-01")).await.unwrap();
    assert_eq!(kept.len(), 900, "D-89..D for 10 subjects");
    assert_eq!(kept.iter().map(|r| r.day).min().unwrap(), d("2026-02-10"));
    assert!(
        rig.engine
            .metrics()
            .pruned
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 300
    );
    assert_eq!(rig.total(Kind::Clients, "c0").await.requests, 120);
}

#[tokio::test]
async fn start_refuses_an_unmigrated_schema_and_migrate_is_idempotent() {
    let rig = Rig::new("2026-05-10T08:00:00Z", "UTC").await;
    rig.store.migrate().await.unwrap();
    let fresh = support::Postgres::start();
    let store = Arc::new(proxy_pool_analytics::PgStore::new(fresh.config()));
    assert!(matches!(
        store.check_schema().await,
        Err(AnalyticsError::SchemaMissing)
    ));
    proxy_pool_analytics::migrate(fresh.config()).await.unwrap();
    store.check_schema().await.unwrap();
}

#[tokio::test]
async fn shutdown_makes_a_bounded_final_flush() {
    let rig = Rig::new("2026-05-10T08:00:00Z", "UTC").await;
    let Rig {
        engine,
        rx,
        collector,
        store,
        pg: _pg,
        redis: _redis,
        ..
    } = rig;
    let worker = support::Worker::spawn(engine, rx, proxy_pool_analytics::always_writer());
    for i in 0..250 {
        collector.extraction("client-a", &format!("{i}"), &[("vendor-x", 1)]);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    worker.stop().await;
    let t = store
        .total(&subj(Kind::Clients, "client-a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.requests, 250);
}

#[tokio::test]
async fn redis_outage_loses_events_without_blocking_and_flags_the_day() {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    rig.collector.gateway_requests("route-1", "a", 1);
    rig.drain_and_flush().await;
    rig.redis.stop();
    rig.collector.gateway_requests("route-1", "a", 5);
    let started = std::time::Instant::now();
    rig.drain().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        rig.engine
            .metrics()
            .lost
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(rig.engine.flush().await.is_err(), "no flush without Redis");
    let pending = rig.engine.pending_degraded();
    assert!(
        pending
            .iter()
            .any(|(_, r)| r.contains(&reason::REDIS_UNAVAILABLE)),
        "{pending:?}"
    );
}

#[tokio::test]
async fn evicted_counters_recreated_by_new_events_are_caught_and_rebuilt() {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    for _ in 0..10 {
        rig.collector.gateway_requests("route-1", "a", 1);
    }
    rig.drain_and_flush().await;
    // Eviction of this subject's keys only (the sequence survives).
    for k in [
        "t:routings|route-1",
        "th:routings|route-1",
        "d:routings|route-1|2026-05-10",
        "dh:routings|route-1|2026-05-10",
    ] {
        rig.redis(&["DEL", &format!("test:analytics:v1:{k}")]).await;
    }
    rig.collector.gateway_requests("route-1", "a", 1);
    let r = rig.drain_and_flush().await;
    assert!(r.recovered, "a counter behind SQL means lost keys");
    let day = rig
        .days(Kind::Routings, "route-1", "2026-05-10", "2026-05-10")
        .await;
    assert_eq!(
        day[0].requests, 10,
        "the committed day is not overwritten with a smaller value"
    );
    rig.collector.gateway_requests("route-1", "a", 1);
    rig.drain_and_flush().await;
    let t = rig.total(Kind::Routings, "route-1").await;
    assert_eq!(t.requests, 11);
}

/// Several replicas apply to one working set while the leader flushes: an increment
/// another replica applies between the leader's read and its clear keeps its dirty
/// marker, and the next flush commits it.
#[tokio::test]
async fn a_marker_touched_after_the_read_survives_the_leaders_clear() {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    let ws = rig.working_set();
    let other = rig.working_set();
    let at = "2026-05-10T08:00:00Z".parse().unwrap();
    let ev = |n: u32| proxy_pool_analytics::Event::GatewayRequests {
        routing: "route-1".into(),
        identity: "a".into(),
        requests: n,
        at,
    };
    ws.apply(&[ev(1)], &rig.settings.days).await.unwrap();
    let read = ws.dirty().await.unwrap();
    assert_eq!(read.len(), 1);
    // Another replica applies to the same (subject, day) before the leader clears.
    other.apply(&[ev(2)], &rig.settings.days).await.unwrap();
    let cleared = ws
        .committed(&read, &rig.settings.days, rig.settings.hot_days, at)
        .await
        .unwrap();
    assert_eq!(cleared, 0, "a marker touched since the read is kept");
    assert_eq!(ws.dirty().await.unwrap().len(), 1);
    // The next flush commits both increments and clears the marker.
    rig.engine.flush().await.unwrap();
    let t = rig.total(Kind::Routings, "route-1").await;
    assert_eq!(t.requests, 3);
    assert!(ws.dirty().await.unwrap().is_empty());
}

/// A replica that does not write applies its events to Redis and hands its degraded
/// flags (here: events dropped by its full queue) over; the leader commits both.
#[tokio::test]
async fn a_follower_records_into_redis_and_the_leader_commits_its_usage_and_flags() {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    let clock: Arc<dyn proxy_pool_analytics::Clock> = Arc::new(rig.clock.clone());
    let (collector, rx) = proxy_pool_analytics::Collector::bounded(2, clock.clone());
    let follower = proxy_pool_analytics::Engine::new(
        rig.working_set(),
        rig.store.clone(),
        rig.settings.clone(),
        clock,
        collector.stats(),
    );
    let worker = support::Worker::spawn(follower, rx, Arc::new(|_| false));
    // Three events into a queue of two: one is dropped (the worker may not have
    // taken any yet; at most the queue's worth is accepted at once).
    for i in 0..3 {
        collector.extraction("client-f", &format!("{i}"), &[("vendor-x", 1)]);
    }
    worker.stop().await;
    let counts = collector.stats().counts();
    assert!(counts.dropped >= 1, "{counts:?}");
    assert!(
        rig.store.totals().await.unwrap().is_empty(),
        "a replica that does not write commits nothing"
    );
    rig.engine.flush().await.unwrap();
    let t = rig.total(Kind::Clients, "client-f").await;
    assert_eq!(t.requests, i64::try_from(counts.accepted).unwrap());
    let cov = rig.coverage("2026-05-10").await;
    assert!(
        cov[0].reasons.contains(&reason::EVENTS_DROPPED.to_owned()),
        "{cov:?}"
    );
}

/// Gateway bytes per Routing and per client: exact daily and cumulative sums, split at
/// the day's end, kept through a Redis rebuilt from SQL, and absent (zero) for subjects
/// that carry none.
#[tokio::test]
async fn gateway_bytes_are_exact_daily_totals_per_routing_and_client() {
    let mut rig = Rig::started("2026-05-10T23:59:00Z", "UTC").await;
    rig.collector.gateway_requests("route-1", "alice", 2);
    rig.collector.routing_bytes("route-1", 1_000, 30_000);
    rig.collector.client_bytes("alice", 600, 20_000);
    rig.collector.client_bytes("alice", 400, 10_000);
    rig.collector.routing_bytes("route-1", 0, 0);
    rig.collector
        .extraction("bob", "caller", &[("vendor-x", 1)]);
    rig.drain_and_flush().await;
    rig.clock.advance_secs(120);
    rig.collector.routing_bytes("route-1", 5, 7);
    rig.drain_and_flush().await;

    let days = rig
        .days(Kind::Routings, "route-1", "2026-05-10", "2026-05-11")
        .await;
    let got: Vec<(String, i64, i64, i64)> = days
        .iter()
        .map(|r| (r.day.to_string(), r.requests, r.bytes_up, r.bytes_down))
        .collect();
    assert_eq!(
        got,
        vec![
            ("2026-05-10".into(), 2, 1_000, 30_000),
            ("2026-05-11".into(), 0, 5, 7)
        ]
    );
    let alice = rig.total(Kind::Clients, "alice").await;
    assert_eq!(
        (alice.requests, alice.bytes_up, alice.bytes_down, alice.uv),
        (0, 1_000, 30_000, 0),
        "a client with gateway bytes only: no extraction, no identity"
    );
    let bob = rig.total(Kind::Clients, "bob").await;
    assert_eq!((bob.requests, bob.bytes_up, bob.bytes_down), (1, 0, 0));

    // Redis lost: rebuilt from SQL, the bytes continue from the committed values.
    rig.redis(&["FLUSHALL"]).await;
    rig.collector.routing_bytes("route-1", 1, 1);
    let r = rig.drain_and_flush().await;
    assert!(r.recovered);
    rig.collector.routing_bytes("route-1", 1, 1);
    rig.drain_and_flush().await;
    let t = rig.total(Kind::Routings, "route-1").await;
    assert!(
        (t.bytes_up, t.bytes_down) >= (1_006, 30_008),
        "totals never go back: {t:?}"
    );
    let today = rig
        .days(Kind::Routings, "route-1", "2026-05-11", "2026-05-11")
        .await;
    assert!(today[0].bytes_up >= 6, "{today:?}");
}
