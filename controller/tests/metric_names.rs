//! The controller's metric names: the composed controller (`Controller::build` +
//! `run`, as `main` runs it) serves on `/metrics` exactly the metrics the Controller
//! table of `docs/operations.md` lists (name and type), none with a reserved label.
//!
//! Two runs cover every metric but the TokenReview cache's and analytics' (compared
//! from their collectors below, as the controller registers them):
//! - memory store, plaintext loopback control plane, a gateway (registered, watching,
//!   one snapshot accepted) and a real checker task loop connected: everything but the
//!   Redis and mTLS metrics;
//! - Redis store, mTLS control plane (certificates made here), no worker: everything
//!   but the per-worker series.
//!
//! And the binary itself with `--log-format json`: JSON log lines, documented metrics
//! only.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::testkit::RedisServer;
use controlplane_support::{Worker, post, spawn_checker, start_composed};
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport, connect};
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_e2e::sim::{SimConfig, Simulator};
use proxy_pool_runtime::telemetry::metrics::{
    documented, exported, reference_doc, reserved_labels_used,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const API_KEY: &str = "metric-names-key";

/// Only with the Redis store.
const REDIS_ONLY: [&str; 1] = ["proxy_pool_controller_redis_script_duration_seconds"];
/// Only when the control plane serves mTLS.
const MTLS_ONLY: [&str; 1] = ["proxy_pool_controller_certificate_expiry_timestamp_seconds"];
/// Only while a gateway is registered.
const PER_WORKER: [&str; 3] = [
    "proxy_pool_controller_controlplane_snapshot_version",
    "proxy_pool_controller_controlplane_acked_snapshot_version",
    "proxy_pool_controller_controlplane_snapshot_age_seconds",
];
/// Exported from their first event on (a label set not known in advance).
const AFTER_FIRST_EVENT: [&str; 3] = [
    "proxy_pool_controller_provider_dropped_proxies_total",
    "proxy_pool_controller_gateway_requests_total",
    "proxy_pool_controller_gateway_bytes_total",
];
/// Prefixes of the metrics that only the TokenReview cache and analytics export.
const COLLECTOR_PREFIXES: [&str; 2] = [
    "proxy_pool_controller_cache_",
    "proxy_pool_controller_analytics_",
];

fn doc() -> String {
    reference_doc().expect("docs/operations.md")
}

/// The documented controller metrics, without those `absent` names and the
/// collector-only ones.
fn expected(absent: &[&str]) -> BTreeMap<String, String> {
    let mut d = documented(&doc(), "controller");
    assert!(
        d.len() > 20,
        "the Controller table of docs/operations.md is missing: {d:?}"
    );
    d.retain(|name, _| {
        !absent.contains(&name.as_str()) && !COLLECTOR_PREFIXES.iter().any(|p| name.starts_with(p))
    });
    d
}

/// `GET` a body.
async fn get_text(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n")
        .map(|x| x.1.to_owned())
        .unwrap_or_default()
}

/// `/metrics` of `admin` once `done` holds for it (within 20 s).
async fn metrics_when(admin: SocketAddr, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = get_text(admin, "/metrics").await;
        if done(&text) {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts what `text` exports is `want`, naming the differences.
fn assert_names(text: &str, want: &BTreeMap<String, String>) {
    let got = exported(text);
    let missing: Vec<_> = want
        .iter()
        .filter(|(n, _)| !got.contains_key(*n) && !AFTER_FIRST_EVENT.contains(&n.as_str()))
        .collect();
    let undocumented: Vec<_> = got.iter().filter(|(n, _)| !want.contains_key(*n)).collect();
    let mistyped: Vec<_> = got
        .iter()
        .filter(|(n, t)| want.get(*n).is_some_and(|w| w != *t))
        .collect();
    assert!(
        missing.is_empty() && undocumented.is_empty() && mistyped.is_empty(),
        "exported metrics differ from docs/operations.md\nmissing: {missing:?}\n\
         undocumented: {undocumented:?}\nmistyped (exported): {mistyped:?}\n\n{text}"
    );
    assert_eq!(reserved_labels_used(text), Vec::<String>::new(), "{text}");
}

/// The config of both runs: `store` and `tls` (the `controlPlane` transport lines).
fn yaml(source: &str, store: &str, transport: &str) -> String {
    format!(
        r#"
store: {store}
distribution:
  listen: 127.0.0.1:0
  minRemainingTtl: 5s
  auth: {{mode: any, methods: [{{type: apiKey}}]}}
admin: {{listen: 127.0.0.1:0}}
controlPlane:
  enabled: true
  listen: 127.0.0.1:0
{transport}
upstreams:
  - name: sim
    protocol: http
    ttl: 10m
    quarantine: 0s
    safetyMargin: 10s
    maxSize: 10
    fetchInterval: 2s
    source: {source}
  - name: st
    ttl: 10m
    quarantine: 0s
    maxSize: 10
    fetchInterval: 1s
    source: {{static: {{proxies: ["st1.metrics.test:8080"]}}}}
routings:
  - {{name: all, upstreams: [sim, st]}}
"#
    )
}

fn long_lived() -> SimConfig {
    SimConfig {
        ttl_min_seconds: 300,
        ttl_max_seconds: 600,
        ..SimConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_with_a_gateway_and_a_checker_exports_the_documented_metrics() {
    let sim = Simulator::start(long_lived()).await.expect("simulator");
    let c = start_composed(&sim, "metric-names-mem", 4, API_KEY, |source| {
        yaml(source, "{backend: memory}", "  loopbackPlaintext: true")
    })
    .await;
    let (checker_stop, checker) = spawn_checker(c.cp, "names-checker", sim.echo_http_addr());
    // A gateway: registered, watching, its first snapshot accepted.
    let channel = connect(
        &format!("http://{}", c.cp),
        &ClientTransport::LoopbackPlaintext,
        &ClientOptions::default(),
    )
    .await
    .expect("connect");
    let mut w = Worker::register_on(WorkerControlPlaneClient::new(channel), "gw-names").await;
    w.watch().await;
    w.apply_next().await;
    w.ack(true).await.expect("ack");
    let _ = post(c.api, API_KEY, "/api/v1/proxies/extract", r#"{"count":1}"#).await;

    let text = metrics_when(c.admin, "gateway and checker connected", |t| {
        t.contains("proxy_pool_controller_controlplane_connected_workers{kind=\"gateway\"} 1")
            && t.contains(
                "proxy_pool_controller_controlplane_connected_workers{kind=\"checker\"} 1",
            )
            && t.contains("proxy_pool_controller_static_upstream_upserts_total")
    })
    .await;
    assert_names(
        &text,
        &expected(&[&REDIS_ONLY[..], &MTLS_ONLY[..]].concat()),
    );
    for line in [
        "proxy_pool_controller_leader 1",
        "proxy_pool_controller_controlplane_snapshot_ack_duration_seconds_count 1",
        "proxy_pool_controller_controlplane_snapshot_nacks_total 0",
        "proxy_pool_controller_provider_fetches_total{upstream=\"sim\",result=\"ok\"}",
        "proxy_pool_controller_controlplane_acked_snapshot_version{worker=\"gw-names\"}",
        "proxy_pool_controller_pool_inventory{upstream=\"sim\",kind=\"available\"}",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }

    checker_stop.cancel();
    let _ = checker.await;
    drop(w);
    c.stop().await;
}

/// A self-signed CA and a server certificate for `localhost` it signed, as PEM: (CA,
/// server certificate, server key).
fn pki() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_after = rcgen::date_time_ymd(2040, 1, 1);
    let ca_key = KeyPair::generate().expect("key");
    let ca = params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(params, ca_key);
    let mut server = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.not_after = rcgen::date_time_ymd(2039, 1, 1);
    let key = KeyPair::generate().expect("key");
    let cert = server.signed_by(&key, &issuer).expect("server cert");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_with_mtls_exports_the_documented_metrics() {
    let redis = Arc::new(RedisServer::start());
    let sim = Simulator::start(long_lived()).await.expect("simulator");
    let dir = std::env::temp_dir().join(format!("metric-names-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (ca, cert, key) = pki();
    let file = |name: &str, pem: &str| {
        let p = dir.join(name);
        std::fs::write(&p, pem).expect("write pem");
        p.display().to_string()
    };
    let transport = format!(
        "  tls: {{certFile: '{}', keyFile: '{}', clientCaFile: '{}', trustDomain: pp.test, environment: test}}",
        file("tls.crt", &cert),
        file("tls.key", &key),
        file("ca.crt", &ca),
    );
    let store = format!(
        "{{backend: redis, redis: {{address: \"{}\", commandTimeout: 300ms}}}}",
        redis.url()
    );
    let c = start_composed(&sim, "metric-names-redis", 4, API_KEY, |source| {
        yaml(source, &store, &transport)
    })
    .await;
    let _ = post(c.api, API_KEY, "/api/v1/proxies/extract", r#"{"count":1}"#).await;

    let text = metrics_when(c.admin, "leading, static upstream written", |t| {
        t.contains("proxy_pool_controller_leader 1")
            && t.contains("proxy_pool_controller_static_upstream_upserts_total")
    })
    .await;
    assert_names(&text, &expected(&PER_WORKER));
    for line in [
        // 2040-01-01 and 2039-01-01, 00:00:00 UTC.
        "proxy_pool_controller_certificate_expiry_timestamp_seconds{certificate=\"ca\"} 2208988800",
        "proxy_pool_controller_certificate_expiry_timestamp_seconds{certificate=\"controller\"} 2177452800",
        "proxy_pool_controller_redis_script_duration_seconds_count{operation=\"extract\"}",
        "proxy_pool_controller_controlplane_connected_workers{kind=\"gateway\"} 0",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    c.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The TokenReview cache's and analytics' metrics as the controller registers them
/// (its `proxy_pool_controller` registry) match their rows of the table.
#[test]
fn cache_and_analytics_collectors_export_the_documented_metrics() {
    let mut registry = proxy_pool_runtime::telemetry::metrics::registry("controller");
    let cache = proxy_pool_cache::CacheMetricsCollector::default();
    cache.add("token_review", Arc::default());
    registry.register_collector(Box::new(cache));
    let (collector, _rx) =
        proxy_pool_analytics::Collector::bounded(4, Arc::new(proxy_pool_analytics::SystemClock));
    registry.register_collector(Box::new(proxy_pool_analytics::AnalyticsMetrics {
        collector,
        worker: Arc::default(),
    }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let mut want = documented(&doc(), "controller");
    want.retain(|name, _| {
        name == "proxy_pool_controller_build_info"
            || COLLECTOR_PREFIXES.iter().any(|p| name.starts_with(p))
    });
    assert_eq!(want.len(), 22, "{want:?}");
    assert_names(&text, &want);
}

/// The binary itself (`proxy-pool-controller --log-format json run`, the shipped
/// example: memory store, a static upstream, no control plane): every log line on
/// standard output is a JSON object, and `/metrics` serves only documented metrics
/// (those of the example's configuration), none with a reserved label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_logs_json_and_serves_only_documented_metrics() {
    use proxy_pool_e2e::ports::free_ports;
    use proxy_pool_e2e::procs::terminate;
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let (api, admin) = (free_ports(1), free_ports(1));
    let dir = std::env::temp_dir().join(format!("metric-names-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/controller.yaml"
    ))
    .unwrap();
    let path = dir.join("controller.yaml");
    std::fs::write(
        &path,
        example
            .replace("127.0.0.1:8081", &format!("127.0.0.1:{api}"))
            .replace("127.0.0.1:9090", &format!("127.0.0.1:{admin}"))
            .replace("gracePeriod: 20s", "gracePeriod: 3s"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy-pool-controller"))
        .args(["--log-format", "json", "run", "--config"])
        .arg(&path)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let admin_addr: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(admin_addr).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "admin listener");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = metrics_when(admin_addr, "leading, static upstream written", |t| {
        t.contains("proxy_pool_controller_leader 1")
            && t.contains("proxy_pool_controller_static_upstream_upserts_total")
    })
    .await;
    let documented = documented(&doc(), "controller");
    let undocumented: Vec<_> = exported(&text)
        .into_iter()
        .filter(|(n, t)| documented.get(n) != Some(t))
        .collect();
    assert!(undocumented.is_empty(), "{undocumented:?}\n{text}");
    assert_eq!(reserved_labels_used(&text), Vec::<String>::new());
    let status = terminate(&mut child, Duration::from_secs(8)).expect("exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    let lines = lines.join().unwrap();
    assert!(!lines.is_empty(), "no log line");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
        assert!(!line.contains('\u{1b}'), "ANSI in {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
