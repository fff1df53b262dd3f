//! The composed controller (`Controller::build` + `run`) on `127.0.0.1:0` with the
//! vendor simulator as its vendor and a real checker task loop (the checker crate's
//! gRPC binding, runner and network prober) on the control plane: proxies are fetched,
//! checked, become extractable through the HTTP API, work through the simulator, and
//! everything stops on the shutdown signal.

mod controlplane_support;

use std::net::SocketAddr;
use std::time::Duration;

use controlplane_support::{post, sha256_hex, spawn_checker};
use proxy_pool_controller::{Controller, Listeners};
use proxy_pool_e2e::sim::{SimConfig, Simulator, VendorFault};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const API_KEY: &str = "compose-test-key";

/// `GET` a JSON document (the admin listener).
async fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn composed_controller_fetches_checks_and_serves_vendor_proxies() {
    let sim = Simulator::start(SimConfig {
        ttl_min_seconds: 300,
        ttl_max_seconds: 600,
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    let dir = std::env::temp_dir().join(format!("compose-test-{}", std::process::id()));
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
    quarantine: 0s
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

    // Everything stops on the signal.
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("controller stopped in time")
        .expect("controller task");
    checker_stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), checker)
        .await
        .expect("checker stopped in time")
        .expect("checker task");
    assert!(
        TcpStream::connect(cp).await.is_err(),
        "control-plane listener still open"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
