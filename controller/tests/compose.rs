//! The composed controller (`Controller::build` + `run`) on `127.0.0.1:0` with the
//! vendor simulator as its vendor and a real checker task loop (the checker crate's
//! gRPC binding, runner and network prober) on the control plane: proxies are fetched,
//! checked, become extractable through the HTTP API, work through the simulator, and
//! everything stops on the shutdown signal.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::net::SocketAddr;
use std::time::Duration;

use controlplane_support::{Composed, post, spawn_checker, start_composed};
use proxy_pool_e2e::sim::audit::{Handout, now_ms};
use proxy_pool_e2e::sim::{FailureMode, FailureShare, SimConfig, Simulator, VendorFault};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const API_KEY: &str = "compose-test-key";

/// `GET` a body (the admin listener).
async fn get_text(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    text.split_once("\r\n\r\n")
        .map(|x| x.1.to_owned())
        .unwrap_or_default()
}

/// `GET` a JSON document (the admin listener).
async fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    serde_json::from_str(&get_text(addr, path).await).unwrap_or(serde_json::Value::Null)
}

/// The admin inventory once `done` holds for it; panics with `what` and the last
/// inventory when it does not within `within`.
async fn inventory_when(
    admin: SocketAddr,
    within: Duration,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let inv = get_json(admin, "/api/v1/inventory").await;
        if done(&inv) {
            return inv;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {inv}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The first extraction (within a minute) that returns `count` proxies; panics with
/// `what` and the last answer when none does.
async fn extract_when(api: SocketAddr, count: u32, what: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let body = format!(r#"{{"count":{count}}}"#);
    loop {
        let (status, answer) = post(api, API_KEY, "/api/v1/proxies/extract", &body).await;
        if status == 200 && answer["returned"] == count {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {status} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// GET through an HTTP proxy (absolute URI), returning the echo answer.
async fn via_http_proxy(proxy: &serde_json::Value, target: SocketAddr) -> serde_json::Value {
    use base64::Engine;
    let addr = format!(
        "{}:{}",
        proxy["host"].as_str().expect("host"),
        proxy["port"]
    );
    let mut s = TcpStream::connect(&addr).await.expect("connect proxy");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        proxy["username"].as_str().expect("user"),
        proxy["password"].as_str().expect("pass")
    ));
    let req = format!(
        "GET http://{target}/compose HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    serde_json::from_str(body).expect("echo JSON")
}

/// A simulator whose proxies live 5 to 10 minutes (longer than any test here).
fn long_lived() -> SimConfig {
    SimConfig {
        ttl_min_seconds: 300,
        ttl_max_seconds: 600,
        ..SimConfig::default()
    }
}

/// The composed controller on loopback, fetching 4 proxies at a time from `sim` (its
/// vendor key in a temporary directory `<name>-<pid>`) with the upstream's `quarantine`
/// and `health` settings (YAML flow mapping; `{}`: the defaults).
async fn start(sim: &Simulator, name: &str, quarantine: &str, health: &str) -> Composed {
    start_composed(sim, name, 4, API_KEY, |source| {
        format!(
            r#"
distribution:
  listen: 127.0.0.1:0
  minRemainingTtl: 5s
  auth: {{mode: any, methods: [{{type: apiKey}}]}}
admin: {{listen: 127.0.0.1:0}}
controlPlane:
  enabled: true
  listen: 127.0.0.1:0
  loopbackPlaintext: true
upstreams:
  - name: sim
    protocol: http
    ttl: 10m
    quarantine: {quarantine}
    health: {health}
    safetyMargin: 10s
    maxSize: 10
    fetchInterval: 2s
    source: {source}
routings:
  - {{name: all, upstreams: [sim]}}
"#
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn composed_controller_fetches_checks_and_serves_vendor_proxies() {
    let sim = Simulator::start(long_lived()).await.expect("simulator");

    let c = start(&sim, "compose-test", "0s", "{}").await;
    let (api, admin, cp, metrics) = (c.api, c.admin, c.cp, c.metrics.clone());

    // Nothing is extractable before a checker has passed the proxies.
    let (status, body) = post(api, API_KEY, "/api/v1/proxies/extract", r#"{"count":1}"#).await;
    assert!(
        status != 200 || body["returned"] == 0,
        "extracted before any check: {body}"
    );

    // A real checker task loop on the control plane.
    let (checker_stop, checker) = spawn_checker(cp, "compose-checker", sim.echo_http_addr());

    let extracted = extract_when(api, 2, "no proxies became extractable").await;
    assert!(!sim.live_proxies().is_empty());
    for p in extracted["proxies"].as_array().expect("proxies") {
        assert_eq!(p["upstream"], "sim");
        let echo = via_http_proxy(p, sim.echo_http_addr()).await;
        let remote = echo["remote"].as_str().expect("remote");
        assert!(remote.starts_with("127.0.") && !remote.starts_with("127.0.0.1:"));
    }

    let text = metrics.encode();
    for name in ["provider_upserted_proxies", "health_verdicts"] {
        assert!(text.contains(name), "{name} not exported");
    }

    // The admin inventory tells the truth about the vendor: fetched, then failing
    // with its reason once the vendor answers 401 (the Upstream status shows both).
    let inv = get_json(admin, "/api/v1/inventory").await;
    let up = &inv["upstreams"][0];
    assert_eq!(up["name"], "sim", "{inv}");
    assert!(
        up["lastFetchTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{inv}"
    );
    assert!(up["fetchError"].is_null(), "{inv}");
    assert!(up["managed"].as_u64().is_some_and(|n| n > 0), "{inv}");
    sim.set_vendor_fault(VendorFault::Status { status: 401 })
        .expect("fault");
    let failing = inventory_when(admin, Duration::from_secs(20), "never failing", |inv| {
        !inv["upstreams"][0]["fetchError"].is_null()
    })
    .await;
    let up = &failing["upstreams"][0];
    assert_eq!(up["fetchError"]["reason"], "unauthorized", "{failing}");
    assert!(up["fetchError"]["consecutiveFailures"].as_u64() >= Some(1));
    assert!(
        up["lastFetchTime"].is_string(),
        "the last success stays: {failing}"
    );

    c.stop().await;
    checker_stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), checker)
        .await
        .expect("checker stopped in time")
        .expect("checker task");
    assert!(
        TcpStream::connect(cp).await.is_err(),
        "control-plane listener still open"
    );
}

/// A new pool generation in the composed controller (the memory store begins one at
/// every start): with a quarantine the upstream is held back — the admin inventory
/// says until when, the metric counts it, nothing is health-checked or extracted —
/// and once the hold ends the proxies are checked and handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_generation_holds_the_upstream_back_until_its_quarantine_ends() {
    const QUARANTINE: Duration = Duration::from_secs(6);
    let sim = Simulator::start(long_lived()).await.expect("simulator");
    let c = start(&sim, "compose-held", "6s", "{}").await;
    let started = tokio::time::Instant::now();
    let (checker_stop, checker) = spawn_checker(c.cp, "held-checker", sim.echo_http_addr());

    // Fetched, and held back.
    let within = QUARANTINE.saturating_sub(started.elapsed());
    let held = inventory_when(c.admin, within, "never fetched", |inv| {
        inv["upstreams"][0]["managed"].as_u64() > Some(0)
    })
    .await;
    let up = &held["upstreams"][0];
    assert!(
        up["quarantinedUntil"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{held}"
    );
    assert_eq!(up["available"], 0, "{held}");
    let text = get_text(c.admin, "/metrics").await;
    assert!(
        text.lines()
            .any(|l| l.contains("kind=\"quarantined\"") && !l.ends_with(" 0")),
        "the quarantined inventory is exported:\n{text}"
    );
    // Nothing is checked or extracted during the hold (a second before its end, so a
    // slow machine cannot reach it).
    while started.elapsed() < QUARANTINE - Duration::from_secs(1) {
        let (status, body) =
            post(c.api, API_KEY, "/api/v1/proxies/extract", r#"{"count":1}"#).await;
        assert!(
            status != 200 || body["returned"] == 0,
            "extracted during the hold: {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let checked: Vec<String> = c
        .metrics
        .encode()
        .lines()
        .filter(|l| l.contains("health_verdicts") && !l.starts_with('#') && !l.ends_with(" 0"))
        .map(str::to_owned)
        .collect();
    assert!(
        checked.is_empty(),
        "held-back proxies were checked: {checked:?}"
    );

    // After the hold: checked, extractable, and the inventory says nothing of a hold.
    extract_when(c.api, 1, "never extractable after the hold").await;
    let inv = get_json(c.admin, "/api/v1/inventory").await;
    assert!(inv["upstreams"][0]["quarantinedUntil"].is_null(), "{inv}");

    c.stop().await;
    checker_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), checker).await;
}

/// No health check goes through a proxy after it was handed to a client. Every proxy
/// is slow (it waits 500 ms after a connection is accepted before it reads the request,
/// where the simulator's auditor records the use) and, once AVAILABLE, checked again
/// every second, so a standing stock of proxies is under check a good part of the
/// time; a client extracts from that stock (in random order: the vendor's TTLs vary)
/// and reports each hand-out to the auditor, which flags any use of a proxy that starts
/// (or is still going) after its hand-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_check_goes_through_a_proxy_after_it_was_handed_out() {
    let sim = Simulator::start(SimConfig {
        failure_mix: vec![FailureShare {
            probability: 1.0,
            failure: FailureMode::Slow { delay_ms: 500 },
        }],
        ..long_lived()
    })
    .await
    .expect("simulator");
    let c = start(&sim, "compose-marks", "0s", "{interval: 1s, timeout: 1s}").await;
    let (checker_stop, checker) = spawn_checker(c.cp, "marks-checker", sim.echo_http_addr());

    // A stock of checked proxies first.
    inventory_when(
        c.admin,
        Duration::from_secs(60),
        "no stock of checked proxies",
        |inv| inv["upstreams"][0]["available"].as_u64() >= Some(8),
    )
    .await;

    let began = tokio::time::Instant::now();
    let (mut served, mut empty) = (0u32, 0u32);
    while began.elapsed() < Duration::from_secs(25) {
        let (status, body) =
            post(c.api, API_KEY, "/api/v1/proxies/extract", r#"{"count":1}"#).await;
        let at_ms = now_ms();
        match body["proxies"].as_array() {
            Some(proxies) if status == 200 && !proxies.is_empty() => {
                let handouts: Vec<Handout> = proxies
                    .iter()
                    .map(|p| Handout {
                        port: p["port"].as_u64().expect("port") as u16,
                        at_ms,
                    })
                    .collect();
                sim.audit().handouts(&handouts);
                served += 1;
            }
            _ => empty += 1,
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    checker_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), checker).await;
    // Nobody uses a proxy as the client here: every use is a check.
    let nobody: std::net::IpAddr = "192.0.2.1".parse().expect("ip");
    let verdict = sim.audit().verdict(&[nobody]);
    let text = c.metrics.encode();
    let dropped: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("health_checks_dropped") && !l.starts_with('#'))
        .collect();
    println!(
        "extractions served {served}, empty {empty}; auditor: uses {}, handed out {}, \
         violations {}; {dropped:?}",
        verdict.uses, verdict.handed_out, verdict.violations
    );
    assert!(served >= 10, "too few extractions served: {served}");
    assert!(verdict.uses > 100, "too few checks: {verdict:?}");
    assert_eq!(
        verdict.violations, 0,
        "a check went through a proxy after it was handed out: {:#?}",
        verdict.listed
    );
    assert!(text.contains("health_checks_dropped"), "not exported");
    c.stop().await;
}
