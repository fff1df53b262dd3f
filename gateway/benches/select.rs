//! Selection on a 100,000-proxy snapshot: one pick (choice + Reserved slot taken and
//! released) per iteration, for each strategy; plus full admission (snapshot freshness,
//! authentication, routing match, pick) and a sticky-session pick; and a pick narrowed
//! by username parameters (`country-…-city-…`) through the routing's selection.
//!
//! `cargo bench -p proxy-pool-gateway --bench select`
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use proxy_pool_api::controlplane::model::{
    Checksum, Header, Labels, Protocol, Routing, RoutingMatch, Snapshot, SnapshotProxy, Sticky,
    Strategy, UsernameParam,
};
use proxy_pool_gateway::AuthMode;
use proxy_pool_gateway::capacity::CapacityRegistry;
use proxy_pool_gateway::clock::{now_ms, to_model_ms};
use proxy_pool_gateway::parse::authority::Host;
use proxy_pool_gateway::route::{Credentials, Router};
use proxy_pool_gateway::select::{pick, pick_in};
use proxy_pool_gateway::snapshot::live::LiveSnapshot;
use proxy_pool_gateway::snapshot::{
    ClientCredential, Narrowing, ProxyId, SnapshotInput, standalone_proxy,
};
use std::hint::black_box;
use std::time::{Duration, SystemTime};

const PROXIES: usize = 100_000;

fn snapshot(strategy: Strategy) -> LiveSnapshot {
    snapshot_of(PROXIES, strategy)
}

fn snapshot_of(size: usize, strategy: Strategy) -> LiveSnapshot {
    let far_ms = to_model_ms(now_ms()) + 3_600_000;
    let proxies: Vec<SnapshotProxy> = (0..size)
        .map(|i| {
            let protocol = if i.is_multiple_of(2) {
                Protocol::Http
            } else {
                Protocol::Socks5
            };
            let host = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
            SnapshotProxy {
                upstream: format!("vendor-{}", i % 4),
                labels: Labels {
                    region: Some(["shanghai", "beijing", "guangzhou", "shenzhen"][i % 4].into()),
                    carrier: Some(["telecom", "unicom", "mobile"][i % 3].into()),
                    // 25 cities per region: 1,000 proxies per (region, city).
                    city: Some(format!("c{:02}", (i / 4) % 25)),
                },
                ..standalone_proxy(
                    format!("px-{i:06}"),
                    protocol,
                    host,
                    8000,
                    1_000_000,
                    far_ms,
                )
            }
        })
        .collect();
    // Counters with the latencies health checks would have observed, created in one
    // pass (as a build creates new ones) before the snapshot is built on them.
    // The IDs are made first so that the counters, not the IDs, lie next to each other.
    let registry = CapacityRegistry::default();
    let ids: Vec<ProxyId> = proxies
        .iter()
        .map(|p| ProxyId::from(p.id.as_str()))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let latency_us = 1_000 * (20 + (i % 50) as u32);
        registry.state_for(id, 1_000_000, Some(latency_us));
    }
    let routing = Routing {
        name: "all".into(),
        strategy,
        ..Routing::default()
    };
    let region = Routing {
        name: "shanghai".into(),
        matcher: RoutingMatch {
            username_params: vec![UsernameParam {
                key: "region".into(),
                values: vec!["shanghai".into()],
            }],
            ..RoutingMatch::default()
        },
        regions: vec!["shanghai".into()],
        strategy,
        sticky: Some(Sticky {
            param: "session".into(),
            session_ttl: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(600),
            ..Sticky::default()
        }),
        ..Routing::default()
    };
    let snap = Snapshot {
        header: Header {
            version: 1,
            ownership_epoch: 1,
            generated_at_ms: to_model_ms(now_ms()),
            valid_until_ms: far_ms,
        },
        routings: vec![region, routing],
        proxies,
        checksum: Checksum::default(),
    };
    let clients = vec![ClientCredential::from_password("team", "alice", "secret")];
    let far = SystemTime::now() + Duration::from_secs(3600);
    LiveSnapshot::build(
        SnapshotInput::new(snap, clients),
        &registry,
        &proxy_pool_gateway::metrics::Breakdown::default(),
        far,
    )
    .expect("valid snapshot")
}

fn picks(c: &mut Criterion) {
    for (group_name, size) in [("select_100k", PROXIES), ("select_1k", 1_000)] {
        let mut group = c.benchmark_group(group_name);
        group.throughput(Throughput::Elements(1));
        for (name, strategy) in [
            ("round_robin", Strategy::RoundRobin),
            ("least_active", Strategy::LeastActive),
            ("power_of_two", Strategy::PowerOfTwoChoices),
        ] {
            let snap = snapshot_of(size, strategy);
            let routing = &snap.routings[1];
            let now = now_ms();
            group.bench_function(name, |b| {
                b.iter(|| black_box(pick(&snap, routing, now, &[])).map(|c| c.idx))
            });
        }
        group.finish();
    }
}

/// One pick narrowed by username parameters (the routing's default selectors): the
/// selection's lookup (one hash over the decoded values) plus the pick in its set.
fn picks_by_parameters(c: &mut Criterion) {
    let mut group = c.benchmark_group("select_100k_by_params");
    group.throughput(Throughput::Elements(1));
    for (name, strategy) in [
        ("round_robin", Strategy::RoundRobin),
        ("least_active", Strategy::LeastActive),
        ("power_of_two", Strategy::PowerOfTwoChoices),
    ] {
        let snap = snapshot_of(PROXIES, strategy);
        let routing = &snap.routings[1];
        let now = now_ms();
        for (what, params) in [
            ("country", &[("country", "shanghai")][..]),
            (
                "country_city",
                &[("country", "shanghai"), ("city", "c07")][..],
            ),
        ] {
            group.bench_function(format!("{name}/{what}"), |b| {
                b.iter(|| {
                    let Narrowing::Set(set, _) = routing.selection.narrow(black_box(params)) else {
                        panic!("the selection exists");
                    };
                    black_box(pick_in(set, strategy, now, &[])).map(|c| c.idx)
                })
            });
        }
    }
    group.finish();
}

/// The selection's lookup alone (no pick): the request's parameters to its candidate
/// set, for plain, upper-case and percent-escaped values.
fn narrowing(c: &mut Criterion) {
    let mut group = c.benchmark_group("select_100k_narrow");
    group.throughput(Throughput::Elements(1));
    let snap = snapshot_of(PROXIES, Strategy::RoundRobin);
    let routing = &snap.routings[1];
    for (what, params) in [
        ("country", &[("country", "shanghai")][..]),
        (
            "country_city",
            &[("country", "shanghai"), ("city", "c07")][..],
        ),
        (
            "country_city_upper",
            &[("COUNTRY", "ShangHai"), ("City", "C07")][..],
        ),
        (
            "country_city_escaped",
            &[("country", "shang%68ai"), ("city", "c%307")][..],
        ),
        (
            "country_city_session",
            &[
                ("country", "shanghai"),
                ("city", "c07"),
                ("session", "abc123"),
                ("sesstime", "10"),
            ][..],
        ),
    ] {
        group.bench_function(what, |b| {
            b.iter(|| match routing.selection.narrow(black_box(params)) {
                Narrowing::Set(set, _) => set.len(),
                _ => panic!("the selection exists"),
            })
        });
    }
    group.finish();
}

fn admission(c: &mut Criterion) {
    let mut group = c.benchmark_group("admit_100k");
    group.throughput(Throughput::Elements(1));
    let snap = snapshot(Strategy::PowerOfTwoChoices);
    let target = Host::Domain("www.example.com");
    for (name, username, auth) in [
        ("open_auth", "alice", AuthMode::Open),
        ("required_auth_sha256", "alice", AuthMode::Required),
        (
            "sticky_session",
            "alice-region-shanghai-session-s1",
            AuthMode::Open,
        ),
    ] {
        let router = Router::new(auth, 100_000);
        let creds = Credentials {
            username: username.as_bytes(),
            password: b"secret",
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let (_ticket, pick) = router
                    .admit(Some(&snap), Some(creds), &target, now_ms())
                    .expect("admitted");
                black_box(pick.entry().usable_until_ms)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, picks, picks_by_parameters, narrowing, admission);
criterion_main!(benches);
