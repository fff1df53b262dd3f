//! One pool, two consumers, as users run them: the real binaries — the vendor
//! simulator (its exclusivity auditor records every proxy use), the controller on a
//! private `redis-server`, a checker and two gateways — with steady traffic through
//! both gateways while an extraction client takes proxies in a loop. The gateways want
//! far more capacity than the pool has (`targetSlotsPerWorker` at its default), so
//! they own the whole pool and every extraction is served by draining gateway-owned
//! proxies on demand.
//!
//! Checked: extractions are served (each extracted proxy works for its client); the
//! gateways' traffic sees no failure while proxies are drained away from under them;
//! and the auditor finds no proxy used by a gateway once it was handed to the client.
//! Then the same with the controller SIGKILLed mid-run and started again. Each run
//! prints its figures (extraction latency p50/p99, drains, gateway requests and
//! errors, auditor counts).
//!
//! The extraction client connects to the proxies it got from `127.0.0.2`; everything
//! else (the gateways) comes from other loopback addresses: that is how the auditor
//! tells them apart.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use activity_pool::testkit::RedisServer;
use base64::Engine as _;
use proxy_pool_e2e::procs::{Procs, bin, build_binaries};
use proxy_pool_e2e::sim::audit::Verdict;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Load phase of one run.
const RUN: Duration = Duration::from_secs(40);
/// When the controller is killed (into the load phase), and how long it stays down.
const KILL_AT: Duration = Duration::from_secs(12);
const DOWN_FOR: Duration = Duration::from_secs(3);
/// Readiness bound of each process.
const READY_WITHIN: Duration = Duration::from_secs(120);
/// Concurrent gateway clients.
const GATEWAY_CLIENTS: usize = 4;
/// Pause between an extraction client's requests.
const EXTRACT_EVERY: Duration = Duration::from_millis(400);
/// Bound on one HTTP exchange of the test's clients.
const EXCHANGE: Duration = Duration::from_secs(15);
/// Source address of the extraction client.
const CLIENT_SOURCE: &str = "127.0.0.2";

const GW_USER: &str = "load";
const GW_PASS: &str = "load-e2e-pw";
const API_KEY: &str = "mixed-load-api-key";
const VENDOR_KEY: &str = "mixed-load-vendor-key";

/// One stack at a time: two would only compete for the machine's cores.
static ONE_STACK: Mutex<()> = Mutex::new(());

/// Where the kernel picks outgoing connections' local ports (`ip_local_port_range`).
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// A free loopback port outside the ephemeral range: the processes bind theirs only
/// after starting, and an outgoing connection of anything on the machine (the test's
/// own traffic included) may take an ephemeral port meanwhile. Never the same twice.
fn free_addr() -> SocketAddr {
    static TAKEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let (lo, hi) = ephemeral_range();
    let (from, to) = if lo > 21_000 {
        (20_000, lo)
    } else {
        (hi.saturating_add(1), u16::MAX)
    };
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let seed = (std::process::id() as u64).wrapping_mul(2_654_435_761) ^ now_ms();
    let span = u64::from(to - from);
    for i in 0..span {
        let port = from + ((seed.wrapping_add(i * 7_919)) % span) as u16;
        if !taken.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            taken.push(port);
            return SocketAddr::from(([127, 0, 0, 1], port));
        }
    }
    panic!("no free port outside the ephemeral range");
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Stack {
    procs: Procs,
    dir: PathBuf,
    config: PathBuf,
    sim: SocketAddr,
    echo: SocketAddr,
    dist: SocketAddr,
    admin: SocketAddr,
    cp: SocketAddr,
    gateways: Vec<(SocketAddr, SocketAddr)>,
    _redis: RedisServer,
}

/// A response: status and body (`Connection: close` exchanges).
async fn exchange(mut s: TcpStream, request: &str) -> std::io::Result<(u16, String)> {
    s.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(EXCHANGE, s.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "exchange"))??;
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect"))?
}

async fn get(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    match connect(addr).await {
        Ok(s) => exchange(s, &req).await.unwrap_or((0, String::new())),
        Err(_) => (0, String::new()),
    }
}

fn basic(user: &str, pass: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

fn wait_until(procs: &mut Procs, what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        procs.all_alive();
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            procs.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn write_config(dir: &Path, redis: &str, s: &Stack) -> PathBuf {
    let config = dir.join("controller.yaml");
    std::fs::write(
        &config,
        format!(
            r#"store:
  backend: redis
  redis: {{address: "{redis}"}}
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
  - name: sim-http
    protocol: http
    ttl: 3m
    safetyMargin: 5s
    maxConcurrencyPerProxy: 4
    maxSize: 40
    fetchInterval: 2s
    source:
      vendorApi:
        url: http://{sim}/v1/proxies?count=10&protocol=http
        format: json
        apiKeyFile: {vendor_key}
        timeout: 5s
routings:
  # CONNECT to the simulator's echo port (not in the default 80/443 allow-list).
  - {{name: mixed, priority: 1, upstreams: [sim-http], connectPorts: ['{echo_port}']}}
clients:
  - name: extractor
    permissions: [distribution:extract]
    apiKeys: [{{file: {api_key}}}]
shutdown: {{gracePeriod: 5s}}
# The simulator's proxies are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
"#,
            echo_port = s.echo.port(),
            dist = s.dist,
            admin = s.admin,
            cp = s.cp,
            sim = s.sim,
            vendor_key = dir.join("vendor-api-key").display(),
            api_key = dir.join("api-key").display(),
        ),
    )
    .expect("config");
    config
}

fn start(tag: &str) -> Stack {
    build_binaries();
    let redis = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("pp-e2e-mixed-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
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
        config: PathBuf::new(),
        sim: free_addr(),
        echo: free_addr(),
        dist: free_addr(),
        admin: free_addr(),
        cp: free_addr(),
        gateways: (0..2).map(|_| (free_addr(), free_addr())).collect(),
        _redis: redis,
    };
    stack.config = write_config(&dir, &stack._redis.url(), &stack);
    let echo_tls = free_addr();
    stack.procs.start(
        "vendor-sim",
        Command::new(env!("CARGO_BIN_EXE_vendor-sim"))
            .args(["--listen", &stack.sim.to_string()])
            .args(["--echo-http", &stack.echo.to_string()])
            .args(["--echo-https", &echo_tls.to_string()])
            .args([
                "--api-key",
                VENDOR_KEY,
                "--ttl-min",
                "90",
                "--ttl-max",
                "150",
            ]),
    );
    let sim = stack.sim;
    wait_until(&mut stack.procs, "vendor simulator", READY_WITHIN, || {
        block(get(sim, "/healthz", "")).0 == 200
    });
    start_controller(&mut stack, "controller");
    let cp = stack.cp;
    stack.procs.start(
        "checker",
        Command::new(bin("proxy-pool-checker"))
            .args(["run", "--controller", &format!("http://{cp}")])
            .args([
                "--checker-id",
                "mixed-checker",
                "--echo",
                &stack.echo.to_string(),
            ])
            .arg("--loopback-plaintext")
            .args(["--egress-allow-cidr", "127.0.0.0/8"]),
    );
    for (i, (http, admin)) in stack.gateways.clone().into_iter().enumerate() {
        let socks = free_addr();
        stack.procs.start(
            &format!("gateway-{i}"),
            Command::new(bin("proxy-pool-gateway"))
                .args(["--http-listen", &http.to_string()])
                .args(["--socks5-listen", &socks.to_string()])
                .args(["--admin-listen", &admin.to_string()])
                .args(["--controller", &format!("http://{cp}")])
                .args(["--worker-id", &format!("mixed-gw-{i}")])
                .args(["--egress-allow-cidr", "127.0.0.0/8"])
                .arg("--clients-file")
                .arg(dir.join("gateway-clients.json")),
        );
    }
    let echo = stack.echo;
    for (i, (http, admin)) in stack.gateways.clone().into_iter().enumerate() {
        wait_until(
            &mut stack.procs,
            &format!("gateway {i} snapshot"),
            READY_WITHIN,
            || block(get(admin, "/readyz", "")).0 == 200,
        );
        wait_until(
            &mut stack.procs,
            &format!("gateway {i} traffic"),
            READY_WITHIN,
            || block(via_gateway(http, echo, "/warm-up")).is_ok(),
        );
    }
    stack
}

fn start_controller(stack: &mut Stack, name: &str) {
    stack.procs.start(
        name,
        Command::new(bin("proxy-pool-controller"))
            .args(["run", "--config"])
            .arg(&stack.config),
    );
    let admin = stack.admin;
    wait_until(&mut stack.procs, name, READY_WITHIN, || {
        block(get(admin, "/healthz", "")).0 == 200
    });
}

/// The admin inventory of the one upstream: (unextracted, available unowned).
async fn inventory(admin: SocketAddr) -> Option<(u64, u64)> {
    let (status, body) = get(admin, "/api/v1/inventory", "").await;
    let j: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    let u = &j["upstreams"][0];
    Some((u["unextracted"].as_u64()?, u["available"].as_u64()?))
}

/// One request through a gateway: a plain forwarded GET or (`tunnel`) a CONNECT with
/// a GET inside. `Err` carries what went wrong.
async fn via_gateway(gw: SocketAddr, echo: SocketAddr, path: &str) -> Result<(), String> {
    let auth = basic(GW_USER, GW_PASS);
    let s = connect(gw).await.map_err(|e| format!("connect: {e}"))?;
    let req = format!(
        "GET http://{echo}{path} HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    );
    match exchange(s, &req).await {
        Ok((200, _)) => Ok(()),
        Ok((status, body)) => Err(format!("{status} {}", body.trim())),
        Err(e) => Err(format!("io: {e}")),
    }
}

async fn tunnel_via_gateway(gw: SocketAddr, echo: SocketAddr, path: &str) -> Result<(), String> {
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
async fn use_extracted(proxy: &serde_json::Value, echo: SocketAddr) -> Result<(), String> {
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
    match exchange(s, &req).await {
        Ok((200, _)) => Ok(()),
        Ok((status, body)) => Err(format!("{status} {}", body.trim())),
        Err(e) => Err(format!("io: {e}")),
    }
}

async fn post(
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

#[derive(Debug, Default)]
struct Gateways {
    ok: AtomicU64,
    errors: Mutex<Vec<String>>,
}

#[derive(Debug, Default)]
struct Extraction {
    latencies_ms: Mutex<Vec<u64>>,
    served: AtomicU64,
    insufficient: AtomicU64,
    controller_down: AtomicU64,
    other: Mutex<Vec<String>>,
    used_ok: AtomicU64,
    use_failures: Mutex<Vec<String>>,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Without ANSI colour sequences (`ESC [ … m`).
fn plain(line: &str) -> String {
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
fn drains_logged(dir: &Path) -> u64 {
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

fn run(tag: &str, kill_controller: bool) {
    let _one = ONE_STACK.lock().unwrap_or_else(|e| e.into_inner());
    let mut stack = start(tag);
    let admin = stack.admin;
    // The gateways own the whole pool before the load starts.
    wait_until(
        &mut stack.procs,
        "gateways owning the whole pool",
        READY_WITHIN,
        || {
            block(inventory(admin))
                .is_some_and(|(unextracted, available)| unextracted >= 10 && available == 0)
        },
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let gateways = Arc::new(Gateways::default());
    let extraction = Arc::new(Extraction::default());
    let echo = stack.echo;
    let mut tasks = Vec::new();
    for i in 0..GATEWAY_CLIENTS {
        let (stop, stats) = (stop.clone(), gateways.clone());
        let gws: Vec<SocketAddr> = stack.gateways.iter().map(|(h, _)| *h).collect();
        tasks.push(rt.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let gw = gws[(n as usize + i) % gws.len()];
                let path = format!("/load/{i}/{n}");
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
        }));
    }
    let (dist, sim) = (stack.dist, stack.sim);
    {
        let (stop, stats) = (stop.clone(), extraction.clone());
        tasks.push(rt.spawn(async move {
            let api_key = format!("X-API-Key: {API_KEY}\r\n");
            let vendor_key = format!("X-API-Key: {VENDOR_KEY}\r\n");
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let r = post(
                    dist,
                    "/api/v1/proxies/extract",
                    &api_key,
                    r#"{"count":1,"fulfillment":"allOrNothing"}"#,
                )
                .await;
                let took = started.elapsed().as_millis() as u64;
                match r {
                    Ok((200, body)) => {
                        let at = now_ms();
                        stats.latencies_ms.lock().unwrap().push(took);
                        stats.served.fetch_add(1, Ordering::Relaxed);
                        let j: serde_json::Value = serde_json::from_str(&body).expect("JSON");
                        for p in j["proxies"].as_array().expect("proxies") {
                            let port = p["port"].as_u64().expect("port");
                            let handout = format!(r#"[{{"port":{port},"atMs":{at}}}]"#);
                            let (status, _) =
                                post(sim, "/v1/sim/audit/handouts", &vendor_key, &handout)
                                    .await
                                    .expect("report the handout");
                            assert_eq!(status, 204, "handout report");
                            match use_extracted(p, echo).await {
                                Ok(()) => {
                                    stats.used_ok.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => stats.use_failures.lock().unwrap().push(e),
                            }
                        }
                    }
                    Ok((409, _)) => {
                        stats.insufficient.fetch_add(1, Ordering::Relaxed);
                    }
                    // The controller is down (killed) or coming up.
                    Ok((0 | 503, _)) | Err(_) => {
                        stats.controller_down.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok((status, body)) => {
                        stats.other.lock().unwrap().push(format!("{status} {body}"))
                    }
                }
                tokio::time::sleep(EXTRACT_EVERY).await;
            }
        }));
    }

    let started = Instant::now();
    if kill_controller {
        std::thread::sleep(KILL_AT);
        stack.procs.kill("controller");
        println!("[{tag}] controller SIGKILLed at {:?}", started.elapsed());
        std::thread::sleep(DOWN_FOR);
        start_controller(&mut stack, "controller-2");
        println!("[{tag}] controller back at {:?}", started.elapsed());
    }
    while started.elapsed() < RUN {
        stack.procs.all_alive();
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
    });
    stack.procs.all_alive();

    let (status, body) = block(get(
        sim,
        &format!("/v1/sim/audit/verdict?clients={CLIENT_SOURCE}"),
        &format!("X-API-Key: {VENDOR_KEY}\r\n"),
    ));
    assert_eq!(status, 200, "{body}");
    let verdict: Verdict = serde_json::from_str(&body).expect("verdict");
    let mut lat = extraction.latencies_ms.lock().unwrap().clone();
    lat.sort_unstable();
    let drains = drains_logged(&stack.dir);
    let gw_errors = gateways.errors.lock().unwrap().clone();
    let served = extraction.served.load(Ordering::Relaxed);
    println!(
        "[{tag}] extraction: served {served}, 409 {}, controller down/503 {}, latency ms p50 {} p99 {} max {}; \
         drains begun {drains}; gateway requests ok {}, errors {}; auditor: uses {}, client uses {}, \
         handed out {}, violations {}, complete {}",
        extraction.insufficient.load(Ordering::Relaxed),
        extraction.controller_down.load(Ordering::Relaxed),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0),
        gateways.ok.load(Ordering::Relaxed),
        gw_errors.len(),
        verdict.uses,
        verdict.client_uses,
        verdict.handed_out,
        verdict.violations,
        verdict.complete,
    );
    let logs = || stack.procs.logs();
    assert!(
        verdict.violations == 0,
        "a gateway used a proxy after it was handed to the client: {:#?}\n{}",
        verdict.listed,
        logs()
    );
    assert!(verdict.complete, "the auditor dropped uses");
    assert!(
        served >= 10,
        "too few extractions served: {served}\n{}",
        logs()
    );
    assert!(
        drains >= served / 2,
        "extractions were not served by drains ({drains} drains)"
    );
    assert_eq!(
        extraction.used_ok.load(Ordering::Relaxed),
        served,
        "{:?}",
        extraction.use_failures.lock().unwrap()
    );
    assert!(
        extraction.other.lock().unwrap().is_empty(),
        "{:?}",
        extraction.other.lock().unwrap()
    );
    assert!(verdict.handed_out >= served && verdict.client_uses >= served);
    assert!(
        verdict.uses > verdict.client_uses + 100,
        "the gateways' traffic went through the simulator's proxies"
    );
    assert!(
        gw_errors.is_empty(),
        "gateway traffic failed: {gw_errors:#?}\n{}",
        logs()
    );
    stack.procs.stop();
    let _ = std::fs::remove_dir_all(&stack.dir);
}

#[test]
fn extraction_beside_gateways_owning_the_whole_pool() {
    run("steady", false);
}

#[test]
fn extraction_beside_gateways_with_the_controller_killed_and_restarted() {
    run("controller-kill", true);
}
