//! The load generator against real sockets: simulator proxies (HTTP and SOCKS5) in
//! front of the simulator's echo server or of a counting target written here (which
//! counts connections and requests independently of the load generator, and can stall).
//! No assertion depends on how fast this machine is: counts are exact, timings are
//! checked only in the direction a schedule guarantees, or with wide margins.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use proxy_pool_e2e::loadgen::{
    self, ConfigError, LoadConfig, Mode, Pacing, ProxyEndpoint, Report, Target,
};
use proxy_pool_e2e::sim::{FailureMode, Protocol, SimConfig, SimProxy, Simulator};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

const TTL: Duration = Duration::from_secs(600);

async fn sim() -> Simulator {
    Simulator::start(SimConfig::default())
        .await
        .expect("simulator starts")
}

async fn sim_proxy(sim: &Simulator, protocol: Protocol) -> SimProxy {
    sim.spawn_proxy(protocol, TTL, FailureMode::None)
        .await
        .expect("proxy spawns")
}

fn endpoint(p: &SimProxy) -> ProxyEndpoint {
    ProxyEndpoint {
        addr: p.addr(),
        credentials: Some((p.username.clone(), p.password.clone())),
    }
}

/// `p` with its user name and a wrong password.
fn wrong_password(p: &SimProxy) -> ProxyEndpoint {
    ProxyEndpoint {
        addr: p.addr(),
        credentials: Some((p.username.clone(), "wrong".into())),
    }
}

fn target_of(addr: SocketAddr, path: &str) -> Target {
    Target {
        host: addr.ip().to_string(),
        port: addr.port(),
        path: path.to_owned(),
    }
}

fn config(mode: Mode, proxy: ProxyEndpoint, target: Target) -> LoadConfig {
    LoadConfig {
        mode,
        proxies: vec![proxy],
        target,
        connections: 4,
        pacing: Pacing::Closed,
        max_ops: Some(100),
        duration: None,
        op_timeout: Duration::from_secs(20),
    }
}

/// HTTP mode through `proxy` to `GET /` on `target`.
fn http_config(proxy: &SimProxy, target: SocketAddr) -> LoadConfig {
    config(Mode::HttpProxy, endpoint(proxy), target_of(target, "/"))
}

/// A run of a valid configuration.
async fn run(config: LoadConfig) -> Report {
    loadgen::run(config).await.expect("valid config")
}

/// Asserts that `report` counts `n` operations, all successful.
#[track_caller]
fn assert_all_ok(report: &Report, n: u64, what: &str) {
    assert_eq!((report.ops, report.ok), (n, n), "{what} {}", report.text());
}

/// Asserts that `n` operations of `report` failed with the error `kind`.
#[track_caller]
fn assert_errors(report: &Report, kind: &str, n: u64) {
    assert_eq!(report.errors.get(kind), Some(&n), "{:?}", report.errors);
}

/// A target that counts what reaches it: accepted connections, requests, connections
/// still open. Request number `stall_at` (1-based) is answered after `stall`; with
/// `silent` it reads requests and never answers.
#[derive(Debug, Default)]
struct Counts {
    accepts: AtomicU64,
    requests: AtomicU64,
    open: AtomicI64,
}

struct CountingTarget {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingTarget {
    /// Waits until no connection to the target is open.
    async fn all_closed(&self) {
        eventually("tunnels closed", || {
            self.counts.open.load(Ordering::SeqCst) == 0
        })
        .await;
    }
}

/// The tunnelling modes and the simulator proxies that serve them.
const TUNNEL_MODES: [(Mode, Protocol); 2] = [
    (Mode::Connect, Protocol::Http),
    (Mode::Socks5, Protocol::Socks5),
];

/// A simulator proxy of `protocol` and a counting target that answers at once.
async fn proxy_and_target(sim: &Simulator, protocol: Protocol) -> (SimProxy, CountingTarget) {
    (
        sim_proxy(sim, protocol).await,
        counting_target(0, Duration::ZERO, false).await,
    )
}

impl Drop for CountingTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn counting_target(stall_at: u64, stall: Duration, silent: bool) -> CountingTarget {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            c.accepts.fetch_add(1, Ordering::SeqCst);
            c.open.fetch_add(1, Ordering::SeqCst);
            let c = c.clone();
            conns.spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                'conn: loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let n = c.requests.fetch_add(1, Ordering::SeqCst) + 1;
                        if silent {
                            continue;
                        }
                        if n == stall_at {
                            tokio::time::sleep(stall).await;
                        }
                        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(resp).await.is_err() {
                            break 'conn;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                c.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    CountingTarget { addr, counts, task }
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..200 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn http_mode_closed_loop_counts_exactly_over_kept_alive_connections() {
    let sim = sim().await;
    let (proxy, target) = proxy_and_target(&sim, Protocol::Http).await;
    let mut cfg = config(
        Mode::HttpProxy,
        endpoint(&proxy),
        target_of(target.addr, "/x"),
    );
    cfg.max_ops = Some(500);
    let report = run(cfg).await;
    assert_eq!(report.ops, 500, "{}", report.text());
    assert_eq!(report.ok, 500, "{}", report.text());
    assert!(report.errors.is_empty());
    assert_eq!(report.latency.count, 500);
    assert_eq!(report.service.count, 500);
    assert!(report.latency.p50_us <= report.latency.p99_us);
    assert!(report.latency.p99_us <= report.latency.max_us);
    // The target saw every request, and the four client connections were kept alive
    // (the simulator proxy keeps one upstream connection per client connection).
    assert_eq!(target.counts.requests.load(Ordering::SeqCst), 500);
    assert_eq!(target.counts.accepts.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn http_mode_through_the_echo_server() {
    let sim = sim().await;
    let proxy = sim_proxy(&sim, Protocol::Http).await;
    let cfg = config(
        Mode::HttpProxy,
        endpoint(&proxy),
        target_of(sim.echo_http_addr(), "/hello"),
    );
    let report = run(cfg).await;
    assert_all_ok(&report, 100, "");
}

#[tokio::test]
async fn connect_and_socks5_modes_open_a_tunnel_per_operation() {
    let sim = sim().await;
    for (mode, protocol) in TUNNEL_MODES {
        let (proxy, target) = proxy_and_target(&sim, protocol).await;
        let mut cfg = config(mode, endpoint(&proxy), target_of(target.addr, "/t"));
        cfg.max_ops = Some(60);
        let report = run(cfg).await;
        assert_all_ok(&report, 60, &format!("{mode:?}"));
        assert_eq!(
            target.counts.requests.load(Ordering::SeqCst),
            60,
            "{mode:?}"
        );
        assert_eq!(target.counts.accepts.load(Ordering::SeqCst), 60, "{mode:?}");
        // Every tunnel is closed after its request.
        target.all_closed().await;

        // And through the simulator's echo server.
        let cfg = config(mode, endpoint(&proxy), target_of(sim.echo_http_addr(), "/"));
        let report = run(cfg).await;
        assert_all_ok(&report, 100, &format!("{mode:?}"));
    }
}

#[tokio::test]
async fn open_loop_does_exactly_the_scheduled_operations_and_never_runs_ahead() {
    let sim = sim().await;
    let proxy = sim_proxy(&sim, Protocol::Http).await;
    let target = counting_target(0, Duration::ZERO, false).await;
    let mut cfg = http_config(&proxy, target.addr);
    cfg.pacing = Pacing::Open { rate: 200.0 };
    cfg.max_ops = None;
    cfg.duration = Some(Duration::from_secs(2));
    let report = run(cfg).await;
    // Operations due in [0, 2 s) at 200/s: exactly 400, whatever the machine's speed.
    assert_all_ok(&report, 400, "");
    assert_eq!(target.counts.requests.load(Ordering::SeqCst), 400);
    // The last one is due at 399/200 s: no run can finish before that.
    assert!(report.elapsed_s >= 1.99, "{}", report.text());
    assert!(report.ok_per_s <= 201.0, "{}", report.text());
    // A generous upper bound: the schedule is kept, not stretched out.
    assert!(report.elapsed_s < 30.0, "{}", report.text());

    // With a cap below the schedule the cap wins.
    let mut cfg = http_config(&proxy, target.addr);
    cfg.pacing = Pacing::Open { rate: 1000.0 };
    cfg.max_ops = Some(37);
    cfg.duration = Some(Duration::from_secs(5));
    let report = run(cfg).await;
    assert_all_ok(&report, 37, "");
}

#[tokio::test]
async fn open_loop_latency_includes_the_time_a_stalled_server_held_requests_back() {
    let sim = sim().await;
    let proxy = sim_proxy(&sim, Protocol::Http).await;
    let stall = Duration::from_secs(1);

    // One connection at 100/s; the target holds request 50 for a second, so the ~100
    // requests due during the stall wait behind it.
    let target = counting_target(50, stall, false).await;
    let mut cfg = http_config(&proxy, target.addr);
    cfg.connections = 1;
    cfg.pacing = Pacing::Open { rate: 100.0 };
    cfg.max_ops = None;
    cfg.duration = Some(Duration::from_secs(3));
    let open = run(cfg).await;
    assert_all_ok(&open, 300, "");
    // Corrected: the stalled request and everything queued behind it. Requests due in
    // the first half of the stall waited at least half a second (~50 of them).
    assert!(open.latency.max_us >= 1_000_000, "{}", open.text());
    let held_back = open.count_at_least_us(500_000);
    assert!(
        held_back >= 30,
        "only {held_back} slow requests:\n{}",
        open.text()
    );
    // Their service times (from the actual send) were short: the omission is visible
    // only because latency is measured from the intended time.
    assert!(open.service.max_us >= 1_000_000);

    // The same stall in a closed loop: one slow request, the others simply not sent.
    let target = counting_target(50, stall, false).await;
    let mut cfg = http_config(&proxy, target.addr);
    cfg.connections = 1;
    cfg.max_ops = Some(300);
    let closed = run(cfg).await;
    assert_eq!(closed.ok, 300);
    assert!(closed.latency.max_us >= 1_000_000);
    assert!(
        closed.count_at_least_us(500_000) < held_back,
        "closed {} vs open {held_back}",
        closed.count_at_least_us(500_000)
    );
}

#[tokio::test]
async fn errors_are_counted_by_kind() {
    let sim = sim().await;
    let http = sim_proxy(&sim, Protocol::Http).await;
    let socks = sim_proxy(&sim, Protocol::Socks5).await;
    let echo = target_of(sim.echo_http_addr(), "/");

    // Nothing listens on this port.
    let closed_addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        l.local_addr().expect("addr")
    };
    let nowhere = ProxyEndpoint {
        addr: closed_addr,
        credentials: None,
    };
    let report = run(config(Mode::HttpProxy, nowhere, echo.clone())).await;
    assert_eq!(report.ok, 0);
    assert_errors(&report, "connect", 100);

    // Wrong password: 407 from the HTTP proxy (connection stays usable), auth failure
    // from the SOCKS5 proxy.
    let wrong = wrong_password(&http);
    let report = run(config(Mode::HttpProxy, wrong.clone(), echo.clone())).await;
    assert_errors(&report, "status-407", 100);
    let report = run(config(Mode::Connect, wrong, echo.clone())).await;
    assert_errors(&report, "proxy-status-407", 100);
    let report = run(config(Mode::Socks5, wrong_password(&socks), echo.clone())).await;
    assert_errors(&report, "socks-auth", 100);

    // A target that refuses connections: the proxies say so.
    let refused = target_of(closed_addr, "/");
    let report = run(config(Mode::Connect, endpoint(&http), refused.clone())).await;
    assert_eq!(report.ok, 0);
    assert_eq!(report.failed(), 100);
    assert!(
        report
            .errors
            .keys()
            .all(|k| k.starts_with("proxy-status-5")),
        "{:?}",
        report.errors
    );
    let report = run(config(Mode::Socks5, endpoint(&socks), refused)).await;
    assert_errors(&report, "socks-reply-5", 100);

    // A target that never answers: timeouts, one per operation.
    let silent = counting_target(0, Duration::ZERO, true).await;
    let mut cfg = http_config(&http, silent.addr);
    cfg.max_ops = Some(8);
    cfg.op_timeout = Duration::from_millis(300);
    let report = run(cfg).await;
    assert_errors(&report, "timeout", 8);
    assert_eq!(report.ops, 8);

    // Mixed: half the connections go to a proxy with wrong credentials; counts add up.
    let mut cfg = config(Mode::HttpProxy, endpoint(&http), echo);
    cfg.proxies.push(wrong_password(&http));
    cfg.connections = 2;
    cfg.pacing = Pacing::Open { rate: 400.0 };
    cfg.max_ops = Some(200);
    let report = run(cfg).await;
    // Open loop, two connections: operation i goes to connection i % 2.
    assert_eq!(report.ok, 100, "{}", report.text());
    assert_eq!(report.errors.get("status-407"), Some(&100));
}

#[tokio::test]
async fn idle_tunnels_stay_open_until_dropped() {
    let sim = sim().await;
    for (mode, protocol) in TUNNEL_MODES {
        let (proxy, target) = proxy_and_target(&sim, protocol).await;
        let cfg = config(mode, endpoint(&proxy), target_of(target.addr, "/"));
        let held = loadgen::hold_tunnels(&cfg, 20).await.expect("valid config");
        assert_eq!(held.len(), 20, "{:?}", held.errors);
        assert!(held.errors.is_empty());
        assert_eq!(target.counts.requests.load(Ordering::SeqCst), 20);
        assert_eq!(target.counts.open.load(Ordering::SeqCst), 20);
        drop(held);
        target.all_closed().await;
    }
}

#[tokio::test]
async fn bad_configurations_are_refused() {
    let proxy = ProxyEndpoint::parse("http://u:p@127.0.0.1:3128").expect("parses");
    assert_eq!(proxy.credentials, Some(("u".into(), "p".into())));
    let target = Target::parse("http://127.0.0.1:8080/a?b=1").expect("parses");
    assert_eq!((target.port, target.path.as_str()), (8080, "/a?b=1"));
    let good = config(Mode::HttpProxy, proxy, target);
    assert_eq!(good.validate(), Ok(()));

    let mut c = good.clone();
    c.proxies[0].addr = "10.1.2.3:3128".parse().expect("addr");
    assert!(matches!(c.validate(), Err(ConfigError::Proxy(_))));
    let mut c = good.clone();
    c.target.host = "example.com".into();
    assert!(matches!(c.validate(), Err(ConfigError::Target(_))));
    let mut c = good.clone();
    c.connections = 0;
    assert!(matches!(c.validate(), Err(ConfigError::Limit(_))));
    let mut c = good.clone();
    c.max_ops = None;
    assert!(matches!(c.validate(), Err(ConfigError::Limit(_))));
    let mut c = good.clone();
    c.pacing = Pacing::Open { rate: f64::NAN };
    assert!(matches!(c.validate(), Err(ConfigError::Limit(_))));
    let mut c = good.clone();
    c.target.path = "/a b".into();
    assert!(matches!(c.validate(), Err(ConfigError::Target(_))));
    assert!(ProxyEndpoint::parse("http://u@127.0.0.1:1").is_err());
    assert!(Target::parse("https://127.0.0.1/").is_err());
    assert!(
        loadgen::hold_tunnels(&good, 5).await.is_err(),
        "HTTP mode has no tunnels"
    );
}
