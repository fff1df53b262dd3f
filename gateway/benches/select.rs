//! Selection on a 100,000-proxy snapshot: one pick (choice + Reserved slot taken and
//! released) per iteration, for each strategy; plus full admission (snapshot freshness,
//! authentication, routing match, pick) and a sticky-session pick.
//!
//! `cargo bench -p proxy-pool-gateway --bench select`
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use proxy_pool_gateway::AuthMode;
use proxy_pool_gateway::capacity::CapacityRegistry;
use proxy_pool_gateway::parse::authority::Host;
use proxy_pool_gateway::route::{Credentials, Router};
use proxy_pool_gateway::select::pick;
use proxy_pool_gateway::snapshot::live::{LiveSnapshot, now_ms};
use proxy_pool_gateway::snapshot::{
    ClientCredential, ParamMatch, ProxyId, Routing, RoutingMatch, Snapshot, StickyPolicy, Strategy,
    UpstreamProtocol, UpstreamProxy,
};
use std::hint::black_box;
use std::time::{Duration, SystemTime};

const PROXIES: usize = 100_000;

fn snapshot(strategy: Strategy) -> LiveSnapshot {
    snapshot_of(PROXIES, strategy)
}

fn snapshot_of(size: usize, strategy: Strategy) -> LiveSnapshot {
    let far = SystemTime::now() + Duration::from_secs(3600);
    let proxies = (0..size)
        .map(|i| UpstreamProxy {
            id: ProxyId::from(format!("px-{i:06}")),
            protocol: if i.is_multiple_of(2) {
                UpstreamProtocol::Http
            } else {
                UpstreamProtocol::Socks5
            },
            host: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
            port: 8000,
            credentials: None,
            upstream: format!("vendor-{}", i % 4),
            region: ["shanghai", "beijing", "guangzhou", "shenzhen"][i % 4].into(),
            carrier: ["telecom", "unicom", "mobile"][i % 3].into(),
            max_concurrent: 1_000_000,
            expires_at: far,
            usable_until: far,
            observed_latency: Some(Duration::from_millis(20 + (i % 50) as u64)),
            draining: false,
            assignment_epoch: 0,
            lease_until: None,
            excluded_routings: Vec::new(),
        })
        .collect();
    let mut routing = Routing::catch_all("all");
    routing.strategy = strategy;
    let mut region = Routing::catch_all("shanghai");
    region.matcher = RoutingMatch {
        username_params: vec![ParamMatch::exact("region", "shanghai")],
        ..RoutingMatch::default()
    };
    region.regions = vec!["shanghai".into()];
    region.strategy = strategy;
    region.sticky = Some(StickyPolicy {
        ttl: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
    });
    let snap = Snapshot {
        version: 1,
        epoch: 1,
        generated_at: SystemTime::now(),
        valid_until: far,
        routings: vec![region, routing],
        proxies,
        clients: vec![ClientCredential::from_password("team", "alice", "secret")],
    };
    LiveSnapshot::build(snap, &CapacityRegistry::default(), far).expect("valid snapshot")
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
                black_box(pick.entry.usable_until_ms)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, picks, admission);
criterion_main!(benches);
