//! The mixed-load stack as real processes, shared by `mixed_load.rs` and `drills/`
//! (`usage.rs` uses its HTTP client only):
//! the vendor simulator (its exclusivity auditor records every proxy use), one or more
//! controllers on a private `redis-server`, a checker and two gateways, and the
//! clients that load them (gateway traffic, an extraction client that reports its
//! hand-outs to the auditor and uses what it got from `127.0.0.2`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use activity_pool::testkit::RedisServer;
use base64::Engine as _;
pub use proxy_pool_e2e::ports::free_addr;
use proxy_pool_e2e::procs::{
    Procs, SimUpstream, bin, build_binaries, checker_command, fresh_test_dir, gateway_command,
    vendor_sim_command,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Load phase of one run.
pub const RUN: Duration = Duration::from_secs(40);
/// When the controller is killed (into the load phase), and how long it stays down.
pub const KILL_AT: Duration = Duration::from_secs(12);
pub const DOWN_FOR: Duration = Duration::from_secs(3);
/// Readiness bound of each process.
pub const READY_WITHIN: Duration = Duration::from_secs(120);
/// Concurrent gateway clients.
pub const GATEWAY_CLIENTS: usize = 4;
/// Pause between an extraction client's requests.
pub const EXTRACT_EVERY: Duration = Duration::from_millis(400);
/// Bound on one HTTP exchange of the test's clients.
pub const EXCHANGE: Duration = Duration::from_secs(15);
/// Source address of the extraction client.
pub const CLIENT_SOURCE: &str = "127.0.0.2";

pub const GW_USER: &str = "load";
pub const GW_PASS: &str = "load-e2e-pw";
pub const API_KEY: &str = "mixed-load-api-key";
pub const VENDOR_KEY: &str = "mixed-load-vendor-key";

/// One stack at a time: two would only compete for the machine's cores.
static ONE_STACK: Mutex<()> = Mutex::new(());

/// Waits until no other stack runs; the stack is this test's while the guard lives
/// (a test that failed holding it does not poison it for the others).
pub fn one_stack() -> MutexGuard<'static, ()> {
    ONE_STACK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One controller replica: its config file and listeners.
#[derive(Clone, Debug)]
pub struct Replica {
    pub config: PathBuf,
    pub dist: SocketAddr,
    pub admin: SocketAddr,
    pub cp: SocketAddr,
}

pub struct Stack {
    pub procs: Procs,
    pub dir: PathBuf,
    pub sim: SocketAddr,
    pub echo: SocketAddr,
    pub replicas: Vec<Replica>,
    pub gateways: Vec<(SocketAddr, SocketAddr)>,
    pub redis: RedisServer,
}

impl Stack {
    /// The control-plane endpoints of every replica, as gateways and checkers take them.
    pub fn cp_endpoints(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("http://{}", r.cp))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Stops every process and removes the stack's directory (a test that fails before
    /// this keeps it, logs included).
    pub fn tear_down(mut self) {
        self.procs.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A response read to its end.
#[derive(Debug)]
pub struct Answer {
    /// The status (0 when there is none).
    pub status: u16,
    /// The status line and header lines.
    pub head: String,
    pub body: String,
}

impl Answer {
    /// The value of header `name` (case-insensitive), trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Sends `request` and reads the response to its end (`Connection: close` exchanges),
/// within [`EXCHANGE`].
pub async fn exchange_answer(mut s: TcpStream, request: &str) -> std::io::Result<Answer> {
    s.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(EXCHANGE, s.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "exchange"))??;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok(Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

/// A response: status and body (`Connection: close` exchanges).
pub async fn exchange(s: TcpStream, request: &str) -> std::io::Result<(u16, String)> {
    exchange_answer(s, request)
        .await
        .map(|a| (a.status, a.body))
}

pub async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect"))?
}

pub async fn get(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    match connect(addr).await {
        Ok(s) => exchange(s, &req).await.unwrap_or((0, String::new())),
        Err(_) => (0, String::new()),
    }
}

pub fn basic(user: &str, pass: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

pub fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// The stack's one upstream (`sim-http`): where on the simulator it fetches, and its
/// lifetimes. The default fetches the simulator's vendor API, which issues a new proxy
/// for every fetch and never offers one again: no quarantine is needed.
#[derive(Clone, Debug)]
pub struct UpstreamSpec {
    /// Path and query of the vendor URL on the simulator.
    pub path: String,
    /// `ttl` of the upstream.
    pub ttl: String,
    /// `quarantine` of the upstream.
    pub quarantine: String,
}

impl Default for UpstreamSpec {
    fn default() -> Self {
        Self {
            path: "/v1/proxies?count=10&protocol=http".into(),
            ttl: "3m".into(),
            quarantine: "0s".into(),
        }
    }
}

/// The config of replica `r`; `store_redis` is its `store.redis` section (an address or
/// Sentinel), `extra` is appended (e.g. a `leadership:` section).
pub fn write_config(
    dir: &Path,
    store_redis: &str,
    sim_echo: (SocketAddr, SocketAddr),
    r: &Replica,
    extra: &str,
) {
    write_config_with(
        dir,
        store_redis,
        sim_echo,
        r,
        extra,
        &UpstreamSpec::default(),
    );
}

/// [`write_config`] with the upstream described by `up`.
pub fn write_config_with(
    dir: &Path,
    store_redis: &str,
    (sim, echo): (SocketAddr, SocketAddr),
    r: &Replica,
    extra: &str,
    up: &UpstreamSpec,
) {
    let config = &r.config;
    std::fs::write(
        config,
        format!(
            r#"store:
  backend: redis
  redis: {store_redis}
distribution:
  listen: {dist}
  minRemainingTtl: 10s
  auth: {{mode: any, methods: [{{type: apiKey}}]}}
admin: {{listen: {admin}}}
controlPlane:
  enabled: true
  listen: {cp}
  loopbackPlaintext: true
  drainWait: 8s
  reportInterval: 1s
  # Snapshots outlive leases: only the lease bound keeps a gateway off a proxy whose
  # lease ended (the exclusivity window the auditor watches for).
  lease: 20s
  renewBefore: 10s
  snapshotValidity: 60s
  maxStaleAge: 120s
upstreams:
{upstream}routings:
  # CONNECT to the simulator's echo port (not in the default 80/443 allow-list).
  - {{name: mixed, priority: 1, upstreams: [sim-http], connectPorts: ['{echo_port}']}}
clients:
  - name: extractor
    permissions: [distribution:extract]
    apiKeys: [{{file: {api_key}}}]
shutdown: {{gracePeriod: 5s}}
# The simulator's proxies are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
{extra}
"#,
            echo_port = echo.port(),
            upstream = SimUpstream {
                path: up.path.clone(),
                ttl: up.ttl.clone(),
                quarantine: up.quarantine.clone(),
                safety_margin: "5s",
                max_concurrency_per_proxy: 4,
                max_size: 40,
                fetch_interval: "2s",
                ..SimUpstream::default()
            }
            .yaml(sim, dir),
            dist = r.dist,
            admin = r.admin,
            cp = r.cp,
            api_key = dir.join("api-key").display(),
        ),
    )
    .expect("config");
}

/// Starts the stack with `replicas` controllers sharing a private Redis (`extra`
/// appended to each one's config), a checker and two gateways given every controller
/// endpoint; returns once both gateways carry traffic.
pub fn start(tag: &str, replicas: usize, extra: &str) -> Stack {
    start_with(tag, replicas, extra, &Tuning::default())
}

/// The `--controller` value of gateway `i` given the replicas (`None`: every replica's).
pub type GatewayController<'a> = &'a dyn Fn(usize, &[Replica]) -> Option<String>;

/// What a drill changes in the stack [`start`] builds.
#[derive(Default)]
pub struct Tuning<'a> {
    /// Rewrites each replica's config text (after `extra` is appended).
    pub config: Option<&'a dyn Fn(String) -> String>,
    /// The `--controller` value of gateway `i` (instead of every replica's endpoint),
    /// given the replicas.
    pub gateway_controller: Option<GatewayController<'a>>,
    /// The simulator's cap on live proxies (`--max-live`; its default is 256).
    pub vendor_max_live: Option<u32>,
    /// The controllers' upstream (the default: a vendor API selling new proxies).
    pub upstream: UpstreamSpec,
    /// Runs once the simulator answers (given its address), before any controller
    /// starts.
    pub before_controllers: Option<&'a dyn Fn(SocketAddr)>,
}

/// [`start`], with a drill's [`Tuning`].
pub fn start_with(tag: &str, replicas: usize, extra: &str, tuning: &Tuning<'_>) -> Stack {
    let redis = RedisServer::start();
    let store_redis = format!("{{address: \"{}\"}}", redis.url());
    start_on_with(tag, replicas, extra, redis, &store_redis, tuning)
}

/// [`start`] on a Redis the caller set up: the stack keeps `redis` (the server, or a
/// Sentinel deployment's first master) and the controllers get `store_redis` as their
/// `store.redis` section.
pub fn start_on(
    tag: &str,
    replicas: usize,
    extra: &str,
    redis: RedisServer,
    store_redis: &str,
) -> Stack {
    start_on_with(tag, replicas, extra, redis, store_redis, &Tuning::default())
}

/// [`start_on`], with a drill's [`Tuning`].
pub fn start_on_with(
    tag: &str,
    replicas: usize,
    extra: &str,
    redis: RedisServer,
    store_redis: &str,
    tuning: &Tuning<'_>,
) -> Stack {
    build_binaries();
    let dir = fresh_test_dir(&format!("mixed-{tag}"));
    std::fs::write(dir.join("vendor-api-key"), VENDOR_KEY).expect("key");
    std::fs::write(dir.join("api-key"), API_KEY).expect("key");
    std::fs::write(
        dir.join("gateway-clients.json"),
        format!(r#"[{{"client":"{GW_USER}","username":"{GW_USER}","password":"{GW_PASS}"}}]"#),
    )
    .expect("clients");
    let mut stack = Stack {
        procs: Procs::new(&dir),
        dir: dir.clone(),
        sim: free_addr(),
        echo: free_addr(),
        replicas: (0..replicas)
            .map(|i| Replica {
                config: dir.join(format!("controller-{i}.yaml")),
                dist: free_addr(),
                admin: free_addr(),
                cp: free_addr(),
            })
            .collect(),
        gateways: (0..2).map(|_| (free_addr(), free_addr())).collect(),
        redis,
    };
    for r in &stack.replicas {
        write_config_with(
            &dir,
            store_redis,
            (stack.sim, stack.echo),
            r,
            extra,
            &tuning.upstream,
        );
        if let Some(tune) = tuning.config {
            let text = std::fs::read_to_string(&r.config).expect("config");
            std::fs::write(&r.config, tune(text)).expect("config");
        }
    }
    let echo_tls = free_addr();
    stack.procs.start(
        "vendor-sim",
        vendor_sim_command(
            bin("vendor-sim"),
            stack.sim,
            stack.echo,
            echo_tls,
            VENDOR_KEY,
            (90, 150),
        )
        .args(
            tuning
                .vendor_max_live
                .map(|n| vec!["--max-live".to_owned(), n.to_string()])
                .unwrap_or_default(),
        ),
    );
    let sim = stack.sim;
    stack
        .procs
        .wait_until("vendor simulator", READY_WITHIN, || {
            block(get(sim, "/healthz", "")).0 == 200
        });
    if let Some(hook) = tuning.before_controllers {
        hook(sim);
    }
    for i in 0..replicas {
        start_controller(&mut stack, i, &format!("controller-{i}"));
    }
    let cps = stack.cp_endpoints();
    stack.procs.start(
        "checker",
        &mut checker_command(&cps, "mixed-checker", stack.echo),
    );
    for i in 0..stack.gateways.len() {
        let cps = tuning
            .gateway_controller
            .and_then(|f| f(i, &stack.replicas))
            .unwrap_or_else(|| cps.clone());
        start_gateway(&mut stack, i, &format!("gateway-{i}"), &cps);
    }
    let echo = stack.echo;
    for (i, (http, admin)) in stack.gateways.clone().into_iter().enumerate() {
        stack
            .procs
            .wait_until(&format!("gateway {i} snapshot"), READY_WITHIN, || {
                block(get(admin, "/readyz", "")).0 == 200
            });
        stack
            .procs
            .wait_until(&format!("gateway {i} traffic"), READY_WITHIN, || {
                block(via_gateway(http, echo, "/warm-up")).is_ok()
            });
    }
    stack
}

/// Starts replica `i` as process `name` and waits for its admin listener.
pub fn start_controller(stack: &mut Stack, i: usize, name: &str) {
    let r = stack.replicas[i].clone();
    stack.procs.start(
        name,
        Command::new(bin("proxy-pool-controller"))
            .args(["run", "--config"])
            .arg(&r.config),
    );
    stack.procs.wait_until(name, READY_WITHIN, || {
        block(get(r.admin, "/healthz", "")).0 == 200
    });
}

/// Starts gateway `i` (its listeners, worker ID `mixed-gw-<i>`) as process `name`, with
/// `controller` as its `--controller`.
pub fn start_gateway(stack: &mut Stack, i: usize, name: &str, controller: &str) {
    let (http, admin) = stack.gateways[i];
    stack.procs.start(
        name,
        &mut gateway_command(
            [http, free_addr(), admin],
            controller,
            &format!("mixed-gw-{i}"),
            &stack.dir.join("gateway-clients.json"),
        ),
    );
}

/// The value of the unlabelled metric `name` on the `/metrics` of `admin`; `None` when
/// it does not answer or has no such metric.
pub async fn metric(admin: SocketAddr, name: &str) -> Option<String> {
    let (status, body) = get(admin, "/metrics", "").await;
    if status != 200 {
        return None;
    }
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.trim().to_owned())
}

/// Whether replica `admin` says it leads (`proxy_pool_controller_leader 1`); `None`
/// when it does not answer.
pub async fn leads(admin: SocketAddr) -> Option<bool> {
    metric(admin, "proxy_pool_controller_leader")
        .await
        .map(|v| v == "1")
}

/// The admin inventory of the one upstream: (unextracted, available unowned).
pub async fn inventory(admin: SocketAddr) -> Option<(u64, u64)> {
    let (status, body) = get(admin, "/api/v1/inventory", "").await;
    let j: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    let u = &j["upstreams"][0];
    Some((u["unextracted"].as_u64()?, u["available"].as_u64()?))
}

/// A forwarded `GET` of `path` on the echo server, as the gateway client [`GW_USER`].
pub fn forward_request(echo: SocketAddr, path: &str) -> String {
    let auth = basic(GW_USER, GW_PASS);
    format!(
        "GET http://{echo}{path} HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    )
}

/// One forwarded GET through a gateway ([`forward_request`]). `Err` carries what went
/// wrong.
pub async fn via_gateway(gw: SocketAddr, echo: SocketAddr, path: &str) -> Result<(), String> {
    let s = connect(gw).await.map_err(|e| format!("connect: {e}"))?;
    served(exchange(s, &forward_request(echo, path)).await)
}

/// `Ok` for a 200 answer; otherwise what came back (status and body, or the I/O error).
fn served(answer: std::io::Result<(u16, String)>) -> Result<(), String> {
    match answer {
        Ok((200, _)) => Ok(()),
        Ok((status, body)) => Err(format!("{status} {}", body.trim())),
        Err(e) => Err(format!("io: {e}")),
    }
}

pub async fn tunnel_via_gateway(
    gw: SocketAddr,
    echo: SocketAddr,
    path: &str,
) -> Result<(), String> {
    let auth = basic(GW_USER, GW_PASS);
    let mut s = connect(gw).await.map_err(|e| format!("connect: {e}"))?;
    let head = format!(
        "CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
    );
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| format!("io: {e}"))?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    let read_head = async {
        while !buf.ends_with(b"\r\n\r\n") && buf.len() < 8192 {
            if s.read(&mut byte).await? == 0 {
                break;
            }
            buf.push(byte[0]);
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::time::timeout(EXCHANGE, read_head)
        .await
        .map_err(|_| "CONNECT timed out".to_owned())?
        .map_err(|e| format!("io: {e}"))?;
    let head = String::from_utf8_lossy(&buf).to_string();
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("CONNECT: {}", head.lines().next().unwrap_or("")));
    }
    let req = format!("GET {path} HTTP/1.1\r\nHost: {echo}\r\nConnection: close\r\n\r\n");
    match exchange(s, &req).await {
        Ok((200, _)) => Ok(()),
        Ok((status, _)) => Err(format!("inside the tunnel: {status}")),
        Err(e) => Err(format!("tunnel io: {e}")),
    }
}

/// The extraction client's own use of a proxy it got: from [`CLIENT_SOURCE`].
pub async fn use_extracted(proxy: &serde_json::Value, echo: SocketAddr) -> Result<(), String> {
    let host: IpAddr = proxy["host"]
        .as_str()
        .and_then(|h| h.parse().ok())
        .ok_or("host")?;
    let port = proxy["port"].as_u64().ok_or("port")? as u16;
    let auth = basic(
        proxy["username"].as_str().ok_or("username")?,
        proxy["password"].as_str().ok_or("password")?,
    );
    let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
    socket
        .bind(SocketAddr::new(CLIENT_SOURCE.parse().unwrap(), 0))
        .map_err(|e| format!("bind {CLIENT_SOURCE}: {e}"))?;
    let s = tokio::time::timeout(
        Duration::from_secs(5),
        socket.connect(SocketAddr::new(host, port)),
    )
    .await
    .map_err(|_| "connect timed out".to_owned())?
    .map_err(|e| format!("connect: {e}"))?;
    let req = format!(
        "GET http://{echo}/extracted HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    );
    served(exchange(s, &req).await)
}

pub async fn post(
    addr: SocketAddr,
    path: &str,
    headers: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let s = connect(addr).await?;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(s, &req).await
}

/// The runtime the load's clients run on (two worker threads beside the processes).
pub fn load_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// [`GATEWAY_CLIENTS`] clients sending requests one after another through the stack's
/// gateways in turn (every fourth one a CONNECT tunnel), to `/<prefix>/<client>/<n>`
/// on the echo server, until `stop`; each outcome lands in `stats`.
pub fn gateway_clients(
    rt: &tokio::runtime::Runtime,
    stack: &Stack,
    prefix: &'static str,
    stop: &Arc<AtomicBool>,
    stats: &Arc<Gateways>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let echo = stack.echo;
    let gws: Vec<SocketAddr> = stack.gateways.iter().map(|(h, _)| *h).collect();
    (0..GATEWAY_CLIENTS)
        .map(|i| {
            let (stop, stats, gws) = (stop.clone(), stats.clone(), gws.clone());
            rt.spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let gw = gws[(n as usize + i) % gws.len()];
                    let path = format!("/{prefix}/{i}/{n}");
                    let r = if n % 4 == 3 {
                        tunnel_via_gateway(gw, echo, &path).await
                    } else {
                        via_gateway(gw, echo, &path).await
                    };
                    match r {
                        Ok(()) => {
                            stats.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => stats
                            .errors
                            .lock()
                            .unwrap()
                            .push(format!("{gw} {path}: {e}")),
                    }
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            })
        })
        .collect()
}

/// Reports the hand-out of extracted proxy `p` (at `at_ms`) to the simulator's
/// auditor, then uses it as the extraction client ([`use_extracted`]).
pub async fn report_and_use(
    sim: SocketAddr,
    echo: SocketAddr,
    p: &serde_json::Value,
    at_ms: u64,
) -> Result<(), String> {
    let port = p["port"].as_u64().expect("port");
    let handout = format!(r#"[{{"port":{port},"atMs":{at_ms}}}]"#);
    let (status, _) = post(
        sim,
        "/v1/sim/audit/handouts",
        &format!("X-API-Key: {VENDOR_KEY}\r\n"),
        &handout,
    )
    .await
    .expect("report the handout");
    assert_eq!(status, 204, "handout report");
    use_extracted(p, echo).await
}

#[derive(Debug, Default)]
pub struct Gateways {
    pub ok: AtomicU64,
    pub errors: Mutex<Vec<String>>,
}

#[derive(Debug, Default)]
pub struct Extraction {
    pub latencies_ms: Mutex<Vec<u64>>,
    pub served: AtomicU64,
    pub insufficient: AtomicU64,
    pub controller_down: AtomicU64,
    pub other: Mutex<Vec<String>>,
    pub used_ok: AtomicU64,
    pub use_failures: Mutex<Vec<String>>,
}

pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Without ANSI colour sequences (`ESC [ … m`).
pub fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Sum of `drains=N` of the controllers' "drains begun for extraction demand" lines.
pub fn drains_logged(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("log dir").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("controller") || !name.ends_with(".log") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text
            .lines()
            .map(plain)
            .filter(|l| l.contains("drains begun for extraction demand"))
        {
            total += line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("drains="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}
