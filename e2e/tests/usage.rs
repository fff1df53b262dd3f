//! Gateway usage end to end: the real binaries (vendor simulator, controller, checker,
//! gateway) with the controller on a private Redis and PostgreSQL (analytics on,
//! `migrate` first). Two client identities send requests through the gateway's HTTP
//! proxy to the simulator's echo server via simulator proxies; once the gateway's
//! runtime reports are committed, `GET /api/v1/stats/routings/{name}` shows exactly the
//! requests the gateway counted — every one of ours plus the readiness probes, all by
//! the first identity — and 2 unique identities.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use activity_pool::testkit::RedisServer;
use common::{basic, block, connect, exchange};
use proxy_pool_analytics::testkit::Postgres;
use proxy_pool_e2e::http::get;
use proxy_pool_e2e::procs::succeeded;
use proxy_pool_e2e::stack::{Listeners, SingleStack};

const ROUTING: &str = "e2e-usage";
const PER_CLIENT: u64 = 10;
const COMMITTED_WITHIN: Duration = Duration::from_secs(60);

/// A GET through the gateway's HTTP proxy as `user`; the status (0: no answer).
fn via_gateway(gw: SocketAddr, user: &str, password: &str, echo: SocketAddr) -> u16 {
    let request = format!(
        "GET http://{echo}/usage HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
        basic(user, password)
    );
    block(async { exchange(connect(gw).await?, &request).await }).map_or(0, |(status, _)| status)
}

/// A counter of the gateway's `/metrics` (no labels).
fn gateway_counter(admin: SocketAddr, name: &str) -> u64 {
    let (status, text) = get(admin, "/metrics");
    assert_eq!(status, 200, "gateway /metrics");
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in gateway /metrics:\n{text}"))
}

#[test]
fn gateway_requests_of_two_clients_reach_the_routing_stats() {
    let redis = RedisServer::start();
    let pg = Postgres::start();
    let mut stack = SingleStack::new("usage");
    let dsn = stack.dir.join("dsn");
    std::fs::write(&dsn, format!("{}\n", pg.dsn())).expect("dsn");
    let (alice, bob) = (("alice", "alice-e2e-pw"), ("bob", "bob-e2e-pw"));
    stack.write_clients(&[alice, bob]);
    stack.write_config(
        &format!(
            r#"{{backend: redis, redis: {{address: "{}"}}}}"#,
            redis.url()
        ),
        "",
        &format!(
            r#"routings:
  - {{name: {ROUTING}, priority: 1, upstreams: [sim-http]}}
analytics:
  enabled: true
  dsnFile: {dsn}
  keyPrefix: e2e
  flushInterval: 1s
  shutdownFlushTimeout: 2s
shutdown: {{gracePeriod: 5s}}"#,
            dsn = dsn.display(),
        ),
    );
    succeeded(
        stack
            .controller_command("migrate")
            .output()
            .expect("migrate"),
        "migrate",
    );
    stack.start();
    // Readiness probes, by alice only: a probe that got a proxy is counted by the
    // gateway (and below through its own counter), one that did not is not.
    stack.wait_proxied(alice);
    let Listeners {
        echo,
        admin,
        gw_http,
        gw_admin,
        ..
    } = stack.at;
    let probes = gateway_counter(gw_admin, "proxy_pool_gateway_usage_requests_total");
    assert!(probes >= 1);

    for _ in 0..PER_CLIENT {
        for (user, password) in [alice, bob] {
            assert_eq!(
                via_gateway(gw_http, user, password, echo),
                200,
                "{user}\n{}",
                stack.procs.logs()
            );
        }
    }
    let counted = gateway_counter(gw_admin, "proxy_pool_gateway_usage_requests_total");
    assert_eq!(
        counted,
        probes + 2 * PER_CLIENT,
        "the gateway counts each admitted request once"
    );

    // Runtime reports carry the usage to the controller; a flush commits it.
    let path = format!("/api/v1/stats/routings/{ROUTING}?days=7");
    let mut last = String::new();
    stack
        .procs
        .wait_until("committed routing stats", COMMITTED_WITHIN, || {
            let (status, body) = get(admin, &path);
            last = body;
            status == 200
                && serde_json::from_str::<serde_json::Value>(&last)
                    .is_ok_and(|v| v["total"]["requests"].as_u64() == Some(counted))
        });
    let stats: serde_json::Value = serde_json::from_str(&last).expect("stats JSON");
    println!(
        "routing {ROUTING}: {counted} requests ({probes} readiness probes + {} of ours), stats {}",
        2 * PER_CLIENT,
        stats["total"]
    );
    assert_eq!(stats["kind"], "routings", "{stats}");
    assert_eq!(stats["name"], ROUTING);
    assert_eq!(stats["total"]["requests"], counted, "{stats}");
    assert_eq!(stats["total"]["uniqueIdentities"], 2, "{stats}");
    assert_eq!(stats["today"]["requests"], counted, "{stats}");
    assert_eq!(stats["today"]["uniqueIdentities"], 2, "{stats}");
    assert_eq!(stats["range"]["requests"], counted, "{stats}");
    assert_eq!(stats["range"]["uniqueIdentities"], 2, "{stats}");
    // Nothing more arrives: a later report carries no new requests.
    assert_eq!(
        gateway_counter(gw_admin, "proxy_pool_gateway_usage_requests_total"),
        counted
    );

    stack.tear_down();
}
