//! The composed controller (`Controller::build` + `run`) on `127.0.0.1:0` with the
//! vendor simulator as its vendor and a real checker task loop (the checker crate's
//! gRPC binding, runner and network prober) on the control plane: proxies are fetched,
//! checked, become extractable through the HTTP API, work through the simulator, and
//! everything stops on the shutdown signal.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::net::SocketAddr;
use std::time::Duration;

use controlplane_support::{post, sha256_hex, spawn_checker};
use proxy_pool_controller::{Controller, Listeners};
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

/// A composed controller started by [`start`].
struct Running {
    api: SocketAddr,
    admin: SocketAddr,
    cp: SocketAddr,
    metrics: std::sync::Arc<proxy_pool_controller::metrics::Metrics>,
    stop_tx: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<proxy_pool_controller::Exit>,
    /// Holds the vendor key file; removed at stop.
    dir: std::path::PathBuf,
}

/// The composed controller on loopback, fetching from `sim` (its vendor key in a
/// temporary directory `<name>-<pid>`) with the upstream's `quarantine` and `health`
/// settings (YAML flow mapping; `{}`: the defaults).
async fn start(sim: &Simulator, name: &str, quarantine: &str, health: &str) -> Running {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key_file = dir.join("vendor-key");
    std::fs::write(&key_file, &sim.credentials().api_key).expect("key file");
    let yaml = format!(
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
    source:
      vendorApi:
        url: {vendor}/v1/proxies?count=4&protocol=http
        format: json
        apiKeyFile: {key}
routings:
  - {{name: all, upstreams: [sim]}}
clients:
  - name: c
    permissions: [distribution:extract]
    apiKeys: [{{sha256: {hash}}}]
shutdown: {{gracePeriod: 3s}}
# The simulator's proxies are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
"#,
        vendor = sim.vendor_url(),
        key = key_file.display(),
        hash = sha256_hex(API_KEY),
    );
    let config = proxy_pool_api::config::load_yaml(&yaml).expect("config");
    let listeners = Listeners::bind(&config).await.expect("bind");
    let api = listeners.distribution.local_addr().expect("addr");
    let admin = listeners.admin.local_addr().expect("addr");
    let cp = listeners
        .control_plane
        .as_ref()
        .expect("control-plane listener")
        .local_addr()
        .expect("addr");
    let controller = Controller::build(config).await.expect("build");
    assert!(
        controller
            .composed()
            .and_then(|c| c.control_plane())
            .is_some()
    );
    let metrics = controller.metrics();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(controller.run(listeners, async {
        let _ = stop_rx.await;
    }));

    Running {
        api,
        admin,
        cp,
        metrics,
        stop_tx,
        running,
        dir,
    }
}

impl Running {
    /// Everything stops on the signal; the key file goes.
    async fn stop(self) {
        let _ = self.stop_tx.send(());
        tokio::time::timeout(Duration::from_secs(10), self.running)
            .await
            .expect("controller stopped in time")
            .expect("controller task");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let extracted = loop {
        let (status, body) = post(api, API_KEY, "/api/v1/proxies/extract", r#"{"count":2}"#).await;
        if status == 200 && body["returned"] == 2 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no proxies became extractable: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let failing = loop {
        let inv = get_json(admin, "/api/v1/inventory").await;
        if !inv["upstreams"][0]["fetchError"].is_null() {
            break inv;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never failing: {inv}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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
    let deadline = started + QUARANTINE;
    let held = loop {
        let inv = get_json(c.admin, "/api/v1/inventory").await;
        if inv["upstreams"][0]["managed"].as_u64() > Some(0) {
            break inv;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never fetched: {inv}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) =
            post(c.api, API_KEY, "/api/v1/proxies/extract", r#"{"count":1}"#).await;
        if status == 200 && body["returned"] == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never extractable after the hold: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let inv = get_json(c.admin, "/api/v1/inventory").await;
        if inv["upstreams"][0]["available"].as_u64() >= Some(8) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no stock of checked proxies: {inv}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

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
