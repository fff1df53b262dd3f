//! The `proxy-pool-gateway` binary: serves from a snapshot file, answers the ops
//! endpoints, and on SIGTERM stops accepting, drains and exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_e2e::ports::free_addr;
use proxy_pool_e2e::procs::send_signal;
use proxy_pool_e2e::sim::{Protocol, SimProxy};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn wait_for(addr: SocketAddr) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{addr} never came up");
}

async fn admin_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// A gateway binary serving a snapshot file of its own.
struct Binary {
    child: Child,
    http: SocketAddr,
    admin: SocketAddr,
    file: PathBuf,
    dir: PathBuf,
}

impl Binary {
    /// Writes `snapshot` to a fresh file under `name` and starts the binary on it (egress
    /// to loopback opted in: the simulator's proxies and targets are there), with `extra`
    /// flags; returns once its HTTP and admin listeners accept.
    async fn start(name: &str, snapshot: &str, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("snapshot.json");
        std::fs::write(&file, snapshot).unwrap();
        let (http, socks, admin) = (free_addr(), free_addr(), free_addr());
        let child = Command::new(env!("CARGO_BIN_EXE_proxy-pool-gateway"))
            .args(["--http-listen", &http.to_string()])
            .args(["--socks5-listen", &socks.to_string()])
            .args(["--admin-listen", &admin.to_string()])
            .arg("--snapshot-file")
            .arg(&file)
            .args(["--egress-allow-cidr", "127.0.0.0/8"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("binary starts");
        wait_for(http).await;
        wait_for(admin).await;
        Self {
            child,
            http,
            admin,
            file,
            dir,
        }
    }

    /// `GET path` on the admin listener until the answer satisfies `done` (at most
    /// `tries` times, `pause` apart); the last answer.
    async fn admin_until(
        &self,
        path: &str,
        tries: usize,
        pause: Duration,
        done: impl Fn(&str) -> bool,
    ) -> String {
        let mut answer = String::new();
        for _ in 0..tries {
            answer = admin_get(self.admin, path).await;
            if done(&answer) {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        answer
    }

    /// Sends SIGTERM.
    fn terminate(&self) {
        send_signal(self.child.id(), "TERM");
    }

    /// `GET /readyz` until it answers 200 (5 s at most); fails the test otherwise.
    async fn until_ready(&self) {
        let answer = self
            .admin_until("/readyz", 100, Duration::from_millis(50), ready)
            .await;
        assert!(ready(&answer), "{answer}");
    }

    /// `GET /readyz` until it answers 503 for `reason` (at most `tries` times, `pause`
    /// apart); fails the test otherwise.
    async fn until_unready(&self, reason: &str, tries: usize, pause: Duration) {
        let unready = |a: &str| a.starts_with("HTTP/1.1 503") && a.contains(reason);
        let answer = self.admin_until("/readyz", tries, pause, unready).await;
        assert!(unready(&answer), "{answer}");
    }

    /// The exit status within `tries` × 50 ms; otherwise kills it and panics with `why`.
    async fn exit_status(&mut self, tries: usize, why: &str) -> ExitStatus {
        match exited(&mut self.child, tries).await {
            Some(code) => code,
            None => {
                let _ = self.child.kill();
                panic!("{why}")
            }
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ready(answer: &str) -> bool {
    answer.starts_with("HTTP/1.1 200")
}

/// `child`'s exit status once it exits, polled `tries` times 50 ms apart.
async fn exited(child: &mut Child, tries: usize) -> Option<ExitStatus> {
    for _ in 0..tries {
        if let Some(code) = child.try_wait().unwrap() {
            return Some(code);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A snapshot file's text: `routing`, `proxies` and the client `team-a`.
fn snapshot(routing: serde_json::Value, proxies: &[serde_json::Value]) -> String {
    serde_json::json!({
        "routings": [routing],
        "proxies": proxies,
        "clients": [{"client": "team-a", "username": USER, "password": PASS}]
    })
    .to_string()
}

/// Simulator proxy `p` as a snapshot file lists it.
fn socks5_entry(p: &SimProxy) -> serde_json::Value {
    serde_json::json!({"id": p.id, "protocol": "socks5", "host": p.host.to_string(), "port": p.port,
                       "username": p.username, "password": p.password, "maxConcurrent": 4})
}

/// A simulator with one SOCKS5 proxy, and the binary (`name`, with `extra` flags)
/// serving it under `routing` from a snapshot file, ready.
async fn serving_socks5(
    name: &str,
    routing: serde_json::Value,
    extra: &[&str],
) -> (Harness, SimProxy, Binary) {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Socks5).await;
    let gw = Binary::start(name, &snapshot(routing, &[socks5_entry(&p)]), extra).await;
    gw.until_ready().await;
    (h, p, gw)
}

#[tokio::test]
async fn binary_serves_a_snapshot_file_and_drains_on_sigterm() {
    let (h, p, mut gw) = serving_socks5(
        "gw-bin",
        serde_json::json!({"name": "all", "connectPorts": ["1-65535"]}),
        // Two data-plane workers whatever the machine: both listeners of each kind.
        &["--drain-grace-seconds", "5", "--worker-threads", "2"],
    )
    .await;
    let http = gw.http;
    let r = get_once(http, USER, h.echo(), "/through-binary").await;
    assert_eq!(r.remote_ip(), h.egress(&p));
    let (resp, tunnel) = connect(http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 200);
    let metrics = admin_get(gw.admin, "/metrics").await;
    assert!(
        metrics.contains("proxy_pool_gateway_forwarded_total 1"),
        "{metrics}"
    );

    gw.terminate();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "no new connections after SIGTERM"
    );
    // The open tunnel still carries a request, then closes; the process exits 0.
    let reply = echo_over(tunnel, "x", "/in-flight").await;
    assert_eq!(reply.echo().path, "/in-flight");
    let code = gw
        .exit_status(100, "gateway did not exit after draining")
        .await;
    assert!(code.success(), "{code:?}");
}

#[tokio::test]
async fn binary_turns_unready_on_sigterm_and_serves_until_the_shutdown_delay_ends() {
    let (h, _, mut gw) = serving_socks5(
        "gw-bin-delay",
        serde_json::json!({"name": "all"}),
        &[
            "--drain-grace-seconds",
            "5",
            "--shutdown-delay-seconds",
            "3",
        ],
    )
    .await;
    let http = gw.http;

    let signalled = std::time::Instant::now();
    gw.terminate();
    // Readiness turns false first...
    gw.until_unready("shutting down", 40, Duration::from_millis(25))
        .await;
    // ...while the listeners still accept and serve new connections.
    let r = get_once(http, USER, h.echo(), "/while-unready").await;
    assert_eq!(r.echo().path, "/while-unready");
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "checked within the delay"
    );
    // Once the delay is over the listeners close and the process exits 0.
    let code = gw
        .exit_status(200, "gateway did not exit after the delay and the drain")
        .await;
    assert!(code.success(), "{code:?}");
    assert!(
        signalled.elapsed() >= Duration::from_secs(3),
        "listeners stayed open for the whole delay"
    );
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "no listener after exit"
    );
}

/// A worker that could only refuse stays out of its Service: `/readyz` answers 503
/// while the snapshot holds no usable proxy (found on the real cluster: gateway pods
/// of a roll turned Ready before the controller had assigned them a proxy and answered
/// `503 no-capacity` to the Service's traffic), and 200 once one arrives.
#[tokio::test]
async fn binary_is_unready_without_a_usable_proxy() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Socks5).await;
    let all = || serde_json::json!({"name": "all"});
    let gw = Binary::start(
        "gw-bin-empty",
        &snapshot(all(), &[]),
        &["--reload-seconds", "1"],
    )
    .await;
    // Wait for the (empty) snapshot to be installed: the answer changes from "no fresh
    // snapshot" to "no usable proxy", and stays 503.
    gw.until_unready("no usable proxy", 100, Duration::from_millis(50))
        .await;
    std::fs::write(&gw.file, snapshot(all(), &[socks5_entry(&p)])).unwrap();
    gw.until_ready().await;
}

/// A malformed `--controller` list is refused at start-up with its reason, not
/// retried as one odd endpoint.
#[tokio::test]
async fn binary_refuses_a_malformed_controller_list() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy-pool-gateway"))
        .args(["--controller", "https://a:9443,,https://b:9443"])
        .args(["--http-listen", &free_addr().to_string()])
        .args(["--socks5-listen", &free_addr().to_string()])
        .args(["--admin-listen", &free_addr().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let Some(code) = exited(&mut child, 100).await else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the gateway kept running with a malformed --controller");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(code.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--controller") && stderr.contains("invalid control-plane endpoint"),
        "{stderr}"
    );
}

/// The binary's `/metrics` (a snapshot file with a Routing and a proxy of a named
/// upstream, two data-plane workers, one request and one tunnel served) exports exactly
/// the metrics of the Gateway table in `docs/operations.md`, name and type, with no
/// label a scrape reserves.
#[tokio::test]
async fn binary_exports_the_documented_metrics() {
    use proxy_pool_runtime::telemetry::metrics::{
        documented, exported, reference_doc, reserved_labels_used,
    };
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Socks5).await;
    let mut entry = socks5_entry(&p);
    entry["upstream"] = serde_json::json!("vendor-a");
    let routing = serde_json::json!({"name": "all", "connectPorts": ["1-65535"]});
    let gw = Binary::start(
        "gw-bin-metrics",
        &snapshot(routing, &[entry]),
        &["--worker-threads", "2", "--log-format", "json"],
    )
    .await;
    gw.until_ready().await;
    let r = get_once(gw.http, USER, h.echo(), "/counted").await;
    assert_eq!(r.echo().path, "/counted");
    let (resp, tunnel) = connect(gw.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 200);
    assert_eq!(
        echo_over(tunnel, "x", "/tunnelled").await.echo().path,
        "/tunnelled"
    );

    // Counted as the response / tunnel ends: wait for the gateway to get there.
    let counted = |a: &str| {
        a.contains("proxy_pool_gateway_routing_requests_total{routing=\"all\"} 1\n")
            && a.contains("proxy_pool_gateway_tunnel_duration_seconds_count 1\n")
    };
    let answer = gw
        .admin_until("/metrics", 100, Duration::from_millis(20), counted)
        .await;
    let (head, text) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    let doc = reference_doc().expect("docs/operations.md");
    let documented = documented(&doc, "gateway");
    assert!(
        documented.len() > 30,
        "the Gateway table is filled: {documented:?}"
    );
    let exported = exported(text);
    let missing: Vec<_> = documented
        .iter()
        .filter(|d| !exported.contains_key(d.0))
        .collect();
    let undocumented: Vec<_> = exported
        .iter()
        .filter(|e| !documented.contains_key(e.0))
        .collect();
    assert_eq!(
        exported, documented,
        "documented but not exported: {missing:?}; exported but not documented: {undocumented:?}"
    );
    assert_eq!(reserved_labels_used(text), Vec::<String>::new());
    // The breakdowns carry the configured names.
    for line in [
        "proxy_pool_gateway_routing_requests_total{routing=\"all\"} 1",
        "proxy_pool_gateway_routing_tunnels_total{routing=\"all\"} 1",
        "proxy_pool_gateway_upstream_requests_total{upstream=\"vendor-a\"} 1",
        "proxy_pool_gateway_upstream_tunnels_total{upstream=\"vendor-a\"} 1",
        "proxy_pool_gateway_snapshot_stale 0",
        "proxy_pool_gateway_max_connections 10000",
        "proxy_pool_gateway_request_duration_seconds_count 1",
        "proxy_pool_gateway_tunnels_total{listener=\"http\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("proxy_pool_gateway_snapshot_version "))
        .expect("snapshot_version");
    assert_ne!(version, "0", "a snapshot file was loaded");
}

/// The limit flags a GatewayGroup sets (`limits`) are bounded like the config: a value
/// outside the range is a usage error naming the flag, before anything binds.
#[tokio::test]
async fn binary_refuses_limits_out_of_range() {
    for (flag, value) in [
        ("--max-request-headers", "300"),
        ("--max-request-head-bytes", "512"),
        ("--max-connections", "0"),
        ("--handshake-timeout-seconds", "0"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_proxy-pool-gateway"))
            .args([flag, value])
            .args(["--http-listen", &free_addr().to_string()])
            .args(["--socks5-listen", &free_addr().to_string()])
            .args(["--admin-listen", &free_addr().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("binary starts");
        let Some(code) = exited(&mut child, 100).await else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway kept running with {flag} {value}");
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(code.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}
