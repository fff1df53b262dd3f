//! Hostile clients against every listener of every binary, as deployed: the vendor
//! simulator, the controller (Distribution, admin and control-plane listeners), a
//! checker and its echo server, a gateway (HTTP proxy, SOCKS5 proxy, admin) and the
//! operator (ops listener, identity issuer over TLS) on a real etcd + kube-apiserver
//! (a standby replica: another holder keeps the leader Lease, as in a two-replica
//! install; the issuer serves on every replica).
//!
//! Against each listener, one after another: a half-open flood (20,000 connections
//! that never send a byte, 4,000 held at once, from 40 source addresses),
//! slowloris (request heads, TLS handshakes or SOCKS5 greetings one byte at a time),
//! huge headers (1 MiB of header lines, or the listener's protocol equivalent),
//! trickled bodies (a complete head, then the body a byte at a time) and malformed
//! protocol bytes (random bytes, a TLS ClientHello on plaintext, the HTTP/2 preface on
//! HTTP/1, HTTP/1 on HTTP/2 and TLS). For every attack the test asserts: the process
//! still runs; once every attack connection was closed by the server or is
//! [`CLOSE_BOUND`] old, the server holds no more descriptors (`/proc/<pid>/fd`) than
//! before the attack — connections the client still sees open then are ones the
//! kernel's listen queue dropped, which the process never had — and they come back to
//! that level once the attack's sockets are gone;
//! its resident memory (`/proc/<pid>/status`) grew by at most [`RSS_GROWTH_MIB`]; and
//! legitimate requests from another address were served during the attack (each one,
//! within [`LEGIT_TIMEOUT`]). The figures are printed as a Markdown table
//! (`docs/security.md` quotes them) and written to
//! `$CARGO_TARGET_DIR/hostile-figures.md`.
//!
//! Needs the Kubernetes binaries (`scripts/k8s-bins.sh`, `PROXY_POOL_K8S_BIN_DIR`) and
//! a descriptor limit of at least [`MIN_NOFILE`] (raised with `prlimit` up to the hard
//! limit when lower); fails, never skips, without them.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use proxy_pool_api::controlplane::client::{self, ClientOptions, ClientTransport};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::checker_control_plane_client::CheckerControlPlaneClient;
use proxy_pool_e2e::hostile::attack::{self, Dial, Held, LEGIT_SOURCE, Misbehaviour, Outcome};
use proxy_pool_e2e::hostile::procstat::{self, Sampler};
use proxy_pool_e2e::hostile::{Figure, table};
use proxy_pool_e2e::k8s::{K8sBins, KubeApiServer, Workloads};
use proxy_pool_e2e::ports::free_addr;
use proxy_pool_e2e::procs::{
    Procs, SimUpstream, bin, build_packages, checker_command, fresh_test_dir, gateway_command,
    sha256_hex, vendor_sim_in,
};
use proxy_pool_identity_client::{ClientConfig, IdentityClient};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Connections of a half-open flood, and how many are held at once.
const FLOOD: usize = 20_000;
const FLOOD_CONCURRENT: usize = 4_000;
/// Connections of each of the other attacks.
const CONNS: usize = 200;
/// Every attack connection must be closed by the server within this.
const CLOSE_BOUND: Duration = Duration::from_secs(20);
/// Descriptors must come back to at most the level before the attack plus this,
/// within [`SETTLE_WITHIN`] (the legitimate requests' own connections)...
const FD_SLACK: u64 = 16;
/// ...plus, for the gateway, its pool of idle upstream connections the legitimate
/// requests may leave (at most 8 per vendor proxy; `sim-http` has at most 8 proxies).
const GATEWAY_POOL_SLACK: u64 = 8 * 8;
const SETTLE_WITHIN: Duration = Duration::from_secs(30);
/// Most resident-memory growth over the level before the attack.
const RSS_GROWTH_MIB: u64 = 256;
/// At most this before an attack for the server's descriptors to hold still (the
/// level before it).
const STEADY_WITHIN: Duration = Duration::from_millis(500);
/// Deadline of one legitimate request, and the pause between two.
const LEGIT_TIMEOUT: Duration = Duration::from_secs(10);
const LEGIT_EVERY: Duration = Duration::from_millis(300);
/// Descriptors this test needs (the attack's client sockets plus the servers' ends in
/// the child processes, which inherit the limit).
const MIN_NOFILE: u64 = 16_384;
const READY_WITHIN: Duration = Duration::from_secs(180);

const NS: &str = "proxy-pool-hostile";
const GATEWAY_SA: &str = "proxy-pool-gateway";
const OPERATOR_SERVICE: &str = "proxy-pool-operator";
const API_KEY: &str = "hostile-legit-key";
const TRICKLE_KEY: &str = "hostile-trickle-key";
const GW_USER: &str = "alice";
const GW_PASS: &str = "alice-hostile-pw";

/// The soft descriptor limit of this process, raised to `MIN_NOFILE` (at most the hard
/// limit) with `prlimit`; the children started later inherit it.
fn raise_nofile() -> u64 {
    let read = || {
        let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("open files limit")
            .to_owned();
        let v: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        (v[0], v[1])
    };
    let (soft, hard) = read();
    if soft < MIN_NOFILE {
        let want = hard.min(65_536);
        let status = Command::new("prlimit")
            .arg(format!("--pid={}", std::process::id()))
            .arg(format!("--nofile={want}:{hard}"))
            .status()
            .expect("prlimit (util-linux)");
        assert!(status.success(), "prlimit failed");
    }
    let (soft, _) = read();
    assert!(
        soft >= MIN_NOFILE,
        "the hostile suite needs {MIN_NOFILE} open files; the hard limit is {hard}"
    );
    soft
}

/// What a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// HTTP/1 over TCP.
    Http,
    /// HTTP/2 over TCP (the control plane's loopback transport).
    H2c,
    /// HTTP/1 inside TLS.
    Tls,
    /// SOCKS5.
    Socks5,
}

/// A legitimate request, as the listener's real clients make it.
#[derive(Clone, Debug)]
enum Legit {
    /// `GET path` answered 200.
    Get(&'static str),
    /// An extraction with an API key answered 200.
    Extract,
    /// `RegisterChecker` over the loopback control-plane transport.
    ControlPlane,
    /// `GET http://echo/` through the HTTP proxy with credentials, answered 200.
    ProxyHttp(SocketAddr),
    /// SOCKS5 with credentials, CONNECT to the echo server, `GET /` answered 200.
    ProxySocks(SocketAddr),
    /// A certificate issued to the gateway pod through the identity client.
    Identity(Arc<IdentityFiles>),
}

#[derive(Debug)]
struct IdentityFiles {
    token: PathBuf,
    bundle: PathBuf,
}

struct Target {
    name: &'static str,
    process: &'static str,
    addr: SocketAddr,
    kind: Kind,
    /// TLS settings of the listener (for [`Kind::Tls`]).
    tls: Option<Dial>,
    legit: Legit,
    /// A request head whose body the server reads, up to the blank line (without it):
    /// for the trickled-body attack.
    post_head: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_clients_against_every_listener() {
    let nofile = raise_nofile();
    tokio::task::block_in_place(|| {
        build_packages(&[
            "proxy-pool-e2e",
            "proxy-pool-controller",
            "proxy-pool-checker",
            "proxy-pool-gateway",
            "proxy-pool-operator",
        ]);
    });
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = KubeApiServer::start_for_test(&bins, false).await;
    let kube = cluster.client();

    let dir = fresh_test_dir("hostile");
    let mut procs = Procs::new(&dir);

    let (sim, echo, echo_tls) = (free_addr(), free_addr(), free_addr());
    let (dist, admin, cp) = (free_addr(), free_addr(), free_addr());
    let checker_echo = free_addr();
    let (gw_http, gw_socks, gw_admin) = (free_addr(), free_addr(), free_addr());
    let (op_ops, op_identity) = (free_addr(), free_addr());

    // The vendor simulator (its proxies and echo servers are the outside world here).
    procs.start(
        "vendor-sim",
        &mut vendor_sim_in(
            &dir,
            env!("CARGO_BIN_EXE_vendor-sim"),
            [sim, echo, echo_tls],
            "hostile-vendor-key",
            (600, 1200),
        ),
    );
    wait_until(&mut procs, "vendor simulator", || async move {
        http_get(sim, "/healthz").await == Some(200)
    })
    .await;

    // The controller: memory store, an API-key client for extraction (and one for the
    // trickled bodies, with a rate limit that lets them all in), the control plane on
    // loopback, the simulator's proxies for the gateway and a few static ones kept for
    // extraction; loopback opted in (the simulator lives there).
    let statics: Vec<String> = (1..=20).map(|i| format!("\"192.0.2.{i}:8080\"")).collect();
    let config = dir.join("controller.yaml");
    std::fs::write(
        &config,
        format!(
            r#"store: {{backend: memory}}
distribution:
  listen: {dist}
  limits: {{requestTimeout: 3s}}
  rateLimit:
    global: {{requestsPerSecond: 100000, burst: 100000}}
  auth:
    mode: any
    methods: [{{type: apiKey}}]
admin: {{listen: {admin}}}
controlPlane: {{enabled: true, listen: {cp}, loopbackPlaintext: true, drainWait: 1s}}
upstreams:
{sim_upstream}  - name: kept
    protocol: http
    ttl: 20m
    quarantine: 0s
    safetyMargin: 10s
    maxSize: 100
    fetchInterval: 10m
    source: {{static: {{proxies: [{statics}]}}}}
routings:
  - name: hostile
    priority: 1
    upstreams: [sim-http]
    connectPorts: ['{echo_port}']
clients:
  - name: legit
    permissions: [distribution:extract]
    allowedUpstreams: [kept]
    apiKeys: [{{sha256: {legit}}}]
  - name: trickler
    permissions: [distribution:extract]
    allowedUpstreams: [kept]
    rateLimit: {{requestsPerSecond: 100000, burst: 100000}}
    apiKeys: [{{sha256: {trickle}}}]
shutdown: {{gracePeriod: 5s}}
# The simulator's proxies and echo servers are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
"#,
            sim_upstream = SimUpstream {
                ttl: "20m".into(),
                max_concurrency_per_proxy: 64,
                ..SimUpstream::default()
            }
            .yaml(sim, &dir),
            statics = statics.join(", "),
            echo_port = echo.port(),
            legit = sha256_hex(API_KEY),
            trickle = sha256_hex(TRICKLE_KEY),
        ),
    )
    .expect("config");
    procs.start(
        "controller",
        Command::new(bin("proxy-pool-controller"))
            .args(["run", "--config"])
            .arg(&config),
    );
    wait_until(&mut procs, "controller", || async move {
        http_get(admin, "/healthz").await == Some(200)
    })
    .await;

    // The checker's echo server, and a checker probing through it.
    procs.start(
        "checker-echo",
        Command::new(bin("proxy-pool-checker")).args([
            "echo",
            "--listen",
            &checker_echo.to_string(),
        ]),
    );
    wait_until(&mut procs, "checker echo", || async move {
        http_get(checker_echo, "/").await == Some(200)
    })
    .await;
    procs.start(
        "checker",
        &mut checker_command(&format!("http://{cp}"), "hostile-checker", checker_echo),
    );

    // The gateway.
    std::fs::write(
        dir.join("gateway-clients.json"),
        format!(r#"[{{"client":"{GW_USER}","username":"{GW_USER}","password":"{GW_PASS}"}}]"#),
    )
    .expect("clients");
    procs.start(
        "gateway",
        gateway_command(
            [gw_http, gw_socks, gw_admin],
            &format!("http://{cp}"),
            "hostile-gateway",
            &dir.join("gateway-clients.json"),
        )
        .args(["--request-body-timeout-seconds", "5"]),
    );
    wait_until(&mut procs, "a request through the gateway", || async move {
        legit_once(&Legit::ProxyHttp(echo), gw_http).await
    })
    .await;

    // The operator, a standby replica on a real API server.
    let identity = operator_up(&cluster, &kube, &dir, &mut procs, op_ops, op_identity).await;

    let sink = slow_sink().await;
    let tls = Dial::Tls {
        config: Arc::new(tls_client(&identity.bundle)),
        name: ServerName::try_from(format!("{OPERATOR_SERVICE}.{NS}.svc")).expect("name"),
    };
    let targets = [
        Target {
            name: "controller/distribution",
            process: "controller",
            addr: dist,
            kind: Kind::Http,
            tls: None,
            legit: Legit::Extract,
            post_head: format!(
                "POST /api/v1/proxies/extract HTTP/1.1\r\nHost: x\r\nX-API-Key: {TRICKLE_KEY}\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n"
            ),
        },
        Target {
            name: "controller/admin",
            process: "controller",
            addr: admin,
            kind: Kind::Http,
            tls: None,
            legit: Legit::Get("/healthz"),
            post_head: "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n".into(),
        },
        Target {
            name: "controller/control-plane",
            process: "controller",
            addr: cp,
            kind: Kind::H2c,
            tls: None,
            legit: Legit::ControlPlane,
            post_head: String::new(),
        },
        Target {
            name: "gateway/http",
            process: "gateway",
            addr: gw_http,
            kind: Kind::Http,
            tls: None,
            legit: Legit::ProxyHttp(echo),
            // To a target that reads bodies and never answers: the gateway's request
            // body deadline is what ends the upload.
            post_head: format!(
                "POST http://{sink}/upload HTTP/1.1\r\nHost: {sink}\r\nProxy-Authorization: Basic {}\r\nContent-Length: 4096\r\n",
                basic(GW_USER, GW_PASS)
            ),
        },
        Target {
            name: "gateway/socks5",
            process: "gateway",
            addr: gw_socks,
            kind: Kind::Socks5,
            tls: None,
            legit: Legit::ProxySocks(echo),
            post_head: String::new(),
        },
        Target {
            name: "gateway/admin",
            process: "gateway",
            addr: gw_admin,
            kind: Kind::Http,
            tls: None,
            legit: Legit::Get("/readyz"),
            post_head: "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n".into(),
        },
        Target {
            name: "checker/echo",
            process: "checker-echo",
            addr: checker_echo,
            kind: Kind::Http,
            tls: None,
            legit: Legit::Get("/"),
            post_head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n".into(),
        },
        Target {
            name: "operator/ops",
            process: "operator",
            addr: op_ops,
            kind: Kind::Http,
            tls: None,
            legit: Legit::Get("/healthz"),
            post_head: "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n".into(),
        },
        Target {
            name: "operator/identity",
            process: "operator",
            addr: op_identity,
            kind: Kind::Tls,
            tls: Some(tls),
            legit: Legit::Identity(identity.clone()),
            post_head: format!(
                "POST {} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hostile.token.x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n",
                proxy_pool_identity_client::wire::ISSUE_PATH
            ),
        },
    ];

    println!("open files limit: {nofile}");
    let mut figures = Vec::new();
    for target in &targets {
        figures.extend(attack_listener(target, &mut procs).await);
    }
    // After everything, every listener still serves its real clients.
    for target in &targets {
        assert!(
            legit_once(&target.legit, target.addr).await,
            "{}: a legitimate request after all attacks failed\n{}",
            target.name,
            procs.logs()
        );
    }
    procs.all_alive();

    let text = table(&figures);
    println!("{text}");
    let out = proxy_pool_e2e::procs::target_dir().join("hostile-figures.md");
    let _ = std::fs::write(&out, &text);
    procs.stop();
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The attacks one listener gets, by what it speaks.
#[derive(Clone, Debug)]
enum Attack {
    HalfOpen,
    /// Sent at once, then a byte at a time.
    Trickle {
        label: &'static str,
        prefix: Vec<u8>,
        drip: Vec<u8>,
        tls: bool,
    },
    /// A prefix, then filler up to 1 MiB.
    Flood {
        label: &'static str,
        prefix: Vec<u8>,
        filler: Vec<u8>,
        tls: bool,
    },
    /// One payload.
    Malformed {
        label: &'static str,
        payload: Vec<u8>,
        tls: bool,
    },
}

impl Attack {
    fn label(&self) -> &'static str {
        match self {
            Self::HalfOpen => "half-open flood",
            Self::Trickle { label, .. }
            | Self::Flood { label, .. }
            | Self::Malformed { label, .. } => label,
        }
    }

    /// Whether over TLS, how many connections and what each sends (`None`: the
    /// half-open flood, which sends nothing).
    fn sends(&self) -> Option<(bool, usize, Misbehaviour)> {
        match self {
            Self::HalfOpen => None,
            Self::Trickle {
                prefix, drip, tls, ..
            } => {
                let how = Misbehaviour::Trickle {
                    prefix: prefix.clone(),
                    drip: drip.clone(),
                    every: Duration::from_millis(500),
                };
                Some((*tls, CONNS, how))
            }
            Self::Flood {
                prefix,
                filler,
                tls,
                ..
            } => {
                let how = Misbehaviour::Flood {
                    prefix: prefix.clone(),
                    filler: filler.clone(),
                    bytes: 1024 * 1024,
                };
                Some((*tls, CONNS / 4, how))
            }
            Self::Malformed { payload, tls, .. } => {
                let payload = payload.clone();
                Some((*tls, CONNS, Misbehaviour::Once { payload }))
            }
        }
    }
}

const SLOW_HEAD: &[u8] =
    b"GET / HTTP/1.1\r\nHost: slow\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn attacks_for(t: &Target) -> Vec<Attack> {
    let trickled_body = |tls| Attack::Trickle {
        label: "trickled body",
        prefix: format!("{}\r\n", t.post_head).into_bytes(),
        drip: b"{".to_vec(),
        tls,
    };
    let huge_headers = |tls| Attack::Flood {
        label: "huge headers (1 MiB)",
        prefix: b"GET / HTTP/1.1\r\nHost: huge\r\n".to_vec(),
        filler: format!("X-Huge: {}\r\n", "a".repeat(1000)).into_bytes(),
        tls,
    };
    let garbage = |tls| Attack::Malformed {
        label: "random bytes",
        payload: attack::garbage(7, 4096),
        tls,
    };
    let mut list = vec![Attack::HalfOpen];
    match t.kind {
        Kind::Http => list.extend([
            Attack::Trickle {
                label: "slowloris",
                prefix: Vec::new(),
                drip: SLOW_HEAD.to_vec(),
                tls: false,
            },
            huge_headers(false),
            trickled_body(false),
            garbage(false),
            Attack::Malformed {
                label: "TLS ClientHello",
                payload: attack::TLS_HELLO.to_vec(),
                tls: false,
            },
            Attack::Malformed {
                label: "HTTP/2 preface",
                payload: attack::H2_PREFACE.to_vec(),
                tls: false,
            },
        ]),
        Kind::H2c => list.extend([
            Attack::Trickle {
                label: "slowloris (HTTP/2 preface)",
                prefix: Vec::new(),
                drip: attack::H2_PREFACE.to_vec(),
                tls: false,
            },
            Attack::Flood {
                label: "huge HEADERS frame (16 MiB declared)",
                // The preface, an empty SETTINGS frame, then a HEADERS frame header
                // declaring 16 MiB on stream 1 and its payload.
                prefix: [
                    attack::H2_PREFACE,
                    &[0, 0, 0, 4, 0, 0, 0, 0, 0],
                    &[0xff, 0xff, 0xff, 1, 4, 0, 0, 0, 1],
                ]
                .concat(),
                filler: vec![b'a'; 16 * 1024],
                tls: false,
            },
            garbage(false),
            Attack::Malformed {
                label: "HTTP/1.1 request",
                payload: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                tls: false,
            },
            Attack::Malformed {
                label: "TLS ClientHello",
                payload: attack::TLS_HELLO.to_vec(),
                tls: false,
            },
        ]),
        Kind::Tls => list.extend([
            Attack::Trickle {
                label: "slowloris (TLS handshake)",
                prefix: Vec::new(),
                drip: attack::TLS_HELLO.to_vec(),
                tls: false,
            },
            Attack::Trickle {
                label: "slowloris (in TLS)",
                prefix: Vec::new(),
                drip: SLOW_HEAD.to_vec(),
                tls: true,
            },
            huge_headers(true),
            trickled_body(true),
            garbage(false),
            Attack::Malformed {
                label: "HTTP/1.1 on TLS",
                payload: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                tls: false,
            },
            Attack::Malformed {
                label: "random bytes (in TLS)",
                payload: attack::garbage(11, 4096),
                tls: true,
            },
        ]),
        Kind::Socks5 => list.extend([
            Attack::Trickle {
                label: "slowloris (greeting)",
                prefix: Vec::new(),
                drip: b"\x05\x01\x02".to_vec(),
                tls: false,
            },
            Attack::Trickle {
                label: "slowloris (credentials)",
                prefix: b"\x05\x01\x02".to_vec(),
                drip: [&[1u8, 255][..], &[b'u'; 255]].concat(),
                tls: false,
            },
            Attack::Flood {
                label: "bytes after a full greeting (1 MiB)",
                prefix: b"\x05\xff".to_vec(),
                filler: vec![2u8; 16 * 1024],
                tls: false,
            },
            garbage(false),
            Attack::Malformed {
                label: "SOCKS4 CONNECT",
                payload: b"\x04\x01\x00\x50\x7f\x00\x00\x01user\x00".to_vec(),
                tls: false,
            },
            Attack::Malformed {
                label: "HTTP/1.1 request",
                payload: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                tls: false,
            },
        ]),
    }
    list
}

/// Runs every attack for `t`, checking after each; returns the figures.
async fn attack_listener(t: &Target, procs: &mut Procs) -> Vec<Figure> {
    let pid = procs.pid(t.process);
    let mut figures = Vec::new();
    for a in attacks_for(t) {
        // The level before: once the previous attack settled and the descriptors hold
        // still.
        let before = procstat::steady(pid, STEADY_WITHIN)
            .await
            .expect("process gone");
        let sampler = Sampler::start(pid);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let legit = tokio::spawn(legit_loop(t.legit.clone(), t.addr, stopped));
        let dial = |tls: bool| {
            if tls {
                t.tls.clone().expect("TLS settings")
            } else {
                Dial::Plain
            }
        };
        let started = Instant::now();
        let (outcome, held): (Outcome, Held) = match a.sends() {
            None => attack::half_open(t.addr, FLOOD, FLOOD_CONCURRENT, CLOSE_BOUND).await,
            Some((tls, conns, how)) => {
                attack::misbehave(&dial(tls), t.addr, conns, how, CLOSE_BOUND).await
            }
        };
        let took = started.elapsed();
        // What the server holds while the connections it did not close (as the client
        // sees them) are still open: nothing of the attack, if it closed or never had
        // them.
        let at_bound = procstat::sample(pid).expect("process gone");
        let _ = stop.send(true);
        let (ok, tried) = legit.await.expect("legit loop");
        let peaks = sampler.peaks();
        drop(sampler);
        let unanswered = held.len();
        drop(held);
        procs.all_alive();
        let slack = FD_SLACK
            + if t.process == "gateway" {
                GATEWAY_POOL_SLACK
            } else {
                0
            };
        let settled = procstat::fds_settle(pid, before.fds + slack, SETTLE_WITHIN).await;
        let after = procstat::sample(pid).expect("process gone");
        let figure = Figure {
            listener: t.name.to_owned(),
            attack: a.label(),
            attempted: outcome.attempted,
            closed: outcome.closed,
            unanswered: unanswered as u64,
            longest_ms: outcome.longest_ms,
            fds: (before.fds, peaks.fds.max(at_bound.fds), at_bound.fds),
            rss_mib: (
                before.rss_kib / 1024,
                peaks.rss_kib.max(at_bound.rss_kib).max(after.rss_kib) / 1024,
            ),
            legit: (ok, tried),
        };
        println!(
            "{} / {}: attempted/connected/closed/unanswered {:?} in {:.1}s; fds {:?}, RSS {:?} MiB, legit {ok}/{tried}, answers {:?}",
            t.name,
            a.label(),
            (
                outcome.attempted,
                outcome.connected,
                outcome.closed,
                unanswered
            ),
            took.as_secs_f64(),
            figure.fds,
            figure.rss_mib,
            outcome.statuses
        );
        assert!(
            procstat::alive(pid),
            "{} died under {}\n{}",
            t.process,
            a.label(),
            procs.logs()
        );
        assert!(
            at_bound.fds <= before.fds + slack,
            "{} / {}: the server holds {} descriptors ({} before) when every attack connection was closed or is {CLOSE_BOUND:?} old",
            t.name,
            a.label(),
            at_bound.fds,
            before.fds
        );
        assert!(
            settled.is_some(),
            "{} / {}: descriptors did not come back to {} + {slack} (now {})",
            t.name,
            a.label(),
            before.fds,
            after.fds
        );
        let growth = figure.rss_mib.1.saturating_sub(figure.rss_mib.0);
        assert!(
            growth <= RSS_GROWTH_MIB,
            "{} / {}: resident memory grew by {growth} MiB",
            t.name,
            a.label()
        );
        assert!(
            tried > 0 && ok == tried,
            "{} / {}: {ok} of {tried} legitimate requests served during the attack\n{}",
            t.name,
            a.label(),
            procs.logs()
        );
        figures.push(figure);
    }
    figures
}

/// Legitimate requests one after another until `stop` (the pause between two ends
/// with it); (served, tried).
async fn legit_loop(
    legit: Legit,
    addr: SocketAddr,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (u32, u32) {
    let (mut ok, mut tried) = (0, 0);
    // At least one request, even for an attack shorter than one.
    loop {
        tried += 1;
        if legit_once(&legit, addr).await {
            ok += 1;
        } else {
            eprintln!("legitimate request to {addr} ({legit:?}) failed");
        }
        let stopped = tokio::time::timeout(LEGIT_EVERY, stop.wait_for(|s| *s)).await;
        if stopped.is_ok() {
            break;
        }
    }
    (ok, tried)
}

/// One legitimate request, within [`LEGIT_TIMEOUT`]; whether it was served.
async fn legit_once(legit: &Legit, addr: SocketAddr) -> bool {
    tokio::time::timeout(LEGIT_TIMEOUT, async {
        match legit {
            Legit::Get(path) => http_get(addr, path).await == Some(200),
            Legit::Extract => {
                let body = r#"{"count":1,"fulfillment":"partial"}"#;
                let req = format!(
                    "POST /api/v1/proxies/extract HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {API_KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                exchange(addr, req.as_bytes()).await == Some(200)
            }
            Legit::ControlPlane => control_plane_call(addr).await,
            Legit::ProxyHttp(echo) => {
                let req = format!(
                    "GET http://{echo}/legit HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
                    basic(GW_USER, GW_PASS)
                );
                exchange(addr, req.as_bytes()).await == Some(200)
            }
            Legit::ProxySocks(echo) => socks_get(addr, *echo).await == Some(200),
            Legit::Identity(files) => issue_identity(addr, files).await,
        }
    })
    .await
    .unwrap_or(false)
}

/// A TCP connection from [`LEGIT_SOURCE`].
async fn legit_conn(addr: SocketAddr) -> Option<tokio::net::TcpStream> {
    let s = tokio::net::TcpSocket::new_v4().ok()?;
    s.bind(SocketAddr::from((LEGIT_SOURCE, 0))).ok()?;
    s.connect(addr).await.ok()
}

/// Sends `request` and reads the answer to the end; its status.
async fn exchange(addr: SocketAddr, request: &[u8]) -> Option<u16> {
    let mut s = legit_conn(addr).await?;
    read_status(&mut s, request).await
}

async fn read_status<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, request: &[u8]) -> Option<u16> {
    s.write_all(request).await.ok()?;
    let mut raw = Vec::new();
    // `Connection: close`: the answer ends with the connection.
    let _ = s.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw);
    text.split_whitespace().nth(1)?.parse().ok()
}

async fn http_get(addr: SocketAddr, path: &str) -> Option<u16> {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
}

/// SOCKS5 with user name and password, CONNECT to `echo`, `GET /legit`; the status.
async fn socks_get(addr: SocketAddr, echo: SocketAddr) -> Option<u16> {
    let mut s = legit_conn(addr).await?;
    s.write_all(b"\x05\x01\x02").await.ok()?;
    let mut two = [0u8; 2];
    s.read_exact(&mut two).await.ok()?;
    if two != [5, 2] {
        return None;
    }
    let mut auth = vec![1, GW_USER.len() as u8];
    auth.extend_from_slice(GW_USER.as_bytes());
    auth.push(GW_PASS.len() as u8);
    auth.extend_from_slice(GW_PASS.as_bytes());
    s.write_all(&auth).await.ok()?;
    s.read_exact(&mut two).await.ok()?;
    if two != [1, 0] {
        return None;
    }
    let SocketAddr::V4(v4) = echo else {
        return None;
    };
    let mut connect = vec![5, 1, 0, 1];
    connect.extend_from_slice(&v4.ip().octets());
    connect.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&connect).await.ok()?;
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.ok()?;
    if reply[1] != 0 {
        return None;
    }
    read_status(
        &mut s,
        format!("GET /legit HTTP/1.1\r\nHost: {echo}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
}

/// `RegisterChecker` on a new loopback-plaintext connection.
async fn control_plane_call(addr: SocketAddr) -> bool {
    static INSTANCE: AtomicU32 = AtomicU32::new(0);
    let Ok(channel) = client::connect(
        &format!("http://{addr}"),
        &ClientTransport::LoopbackPlaintext,
        &ClientOptions::default(),
    )
    .await
    else {
        return false;
    };
    let n = INSTANCE.fetch_add(1, Ordering::Relaxed);
    CheckerControlPlaneClient::new(channel)
        .register_checker(pb::RegisterCheckerRequest {
            checker_id: "hostile-legit".into(),
            instance_id: format!("legit-{n}"),
            max_concurrency: 1,
            tiers: vec![pb::CheckTier::Basic as i32],
            supported_protocol_versions: vec![proxy_pool_api::controlplane::PROTOCOL_VERSION],
        })
        .await
        .is_ok_and(|r| !r.into_inner().session_id.is_empty())
}

/// A gateway identity through the real client library.
async fn issue_identity(addr: SocketAddr, files: &IdentityFiles) -> bool {
    let mut config = ClientConfig::new(
        format!("https://{addr}").parse().expect("endpoint"),
        files.token.clone(),
        files.bundle.clone(),
    );
    config.server_name = Some(format!("{OPERATOR_SERVICE}.{NS}.svc"));
    config.timeout = LEGIT_TIMEOUT;
    match IdentityClient::new(config).issue().await {
        Ok(_) => true,
        Err(e) => {
            eprintln!("identity issuance failed: {e}");
            false
        }
    }
}

/// Starts the operator binary as a standby replica (another identity holds the
/// leader Lease) and returns a gateway pod's token and the published trust bundle.
async fn operator_up(
    cluster: &KubeApiServer,
    kube: &kube::Client,
    dir: &Path,
    procs: &mut Procs,
    ops: SocketAddr,
    identity: SocketAddr,
) -> Arc<IdentityFiles> {
    Workloads::create_namespace(kube, NS).await;
    let workloads = Workloads::new(kube.clone(), NS);
    workloads.create_service_account(GATEWAY_SA).await;
    let renew = {
        let out = Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"])
            .output()
            .expect("date");
        String::from_utf8(out.stdout)
            .expect("date")
            .trim()
            .to_owned()
    };
    let lease = format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: proxy-pool-operator, namespace: {NS}}}\nspec: {{holderIdentity: other-replica, leaseDurationSeconds: 86400, acquireTime: \"{renew}\", renewTime: \"{renew}\"}}\n"
    );
    cluster
        .kubectl_ok(&["apply", "-f", "-"], Some(&lease))
        .await
        .unwrap_or_else(|e| panic!("leader Lease: {e}"));
    let base = dir.join("base.yaml");
    std::fs::write(
        &base,
        "distribution: {auth: {mode: any}}\negress: {denyCidrs: [10.96.0.0/12]}\n",
    )
    .expect("base config");
    procs.start(
        "operator",
        Command::new(bin("proxy-pool-operator"))
            .env("KUBECONFIG", cluster.kubeconfig())
            .args(["--namespace", NS, "--pod-name", "operator-standby"])
            .arg("--base-config")
            .arg(&base)
            .args(["--controller-deployment", "proxy-pool-controller"])
            .args(["--config-map", "proxy-pool-controller-config"])
            .args(["--gateway-image", "proxy-pool-gateway:hostile"])
            .args(["--gateway-service-account", GATEWAY_SA])
            .args(["--controller-address", "127.0.0.1:1"])
            .args(["--identity-endpoint", &format!("https://{identity}")])
            .args(["--ops-listen", &ops.to_string()])
            .args(["--identity-listen", &identity.to_string()])
            .args(["--identity-service", OPERATOR_SERVICE]),
    );
    wait_until(procs, "operator", || async move {
        http_get(ops, "/healthz").await == Some(200)
    })
    .await;
    // The bundle the issuer published, and a token of a managed gateway pod.
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), NS);
    let mut bundle = None;
    for _ in 0..120 {
        if let Ok(cm) = cms.get("proxy-pool-trust-bundle").await {
            bundle = cm
                .data
                .and_then(|d| d.into_values().find(|v| v.contains("BEGIN CERTIFICATE")));
            if bundle.is_some() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let bundle_file = dir.join("bundle.pem");
    std::fs::write(&bundle_file, bundle.expect("trust bundle published")).expect("bundle");
    let pod = workloads.deployment_chain("gw", GATEWAY_SA, true).await;
    let token = workloads
        .token_for(&pod, proxy_pool_operator::identity::wire::DEFAULT_AUDIENCE)
        .await;
    let token_file = dir.join("gateway.token");
    std::fs::write(&token_file, token).expect("token");
    let files = Arc::new(IdentityFiles {
        token: token_file,
        bundle: bundle_file,
    });
    let probe = Legit::Identity(files.clone());
    wait_until(procs, "an identity issued", || {
        let probe = probe.clone();
        async move { legit_once(&probe, identity).await }
    })
    .await;
    files
}

/// An HTTP server that reads request bodies and never answers.
async fn slow_sink() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut b = [0u8; 4096];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn tls_client(bundle: &Path) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(bundle).expect("bundle");
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("bundle PEM")).expect("bundle cert");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

async fn wait_until<F, Fut>(procs: &mut Procs, what: &str, mut ok: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + READY_WITHIN;
    while !ok().await {
        procs.all_alive();
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            procs.logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}
