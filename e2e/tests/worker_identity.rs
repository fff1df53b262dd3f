//! Worker identities end to end, on a real etcd + kube-apiserver (binaries from
//! `scripts/k8s-bins.sh`, named by `PROXY_POOL_K8S_BIN_DIR`):
//!
//! - the operator's CA and issuance endpoint run as the operator composes them;
//! - the real controller binary serves the control plane on mTLS, its server
//!   certificate signed by the same CA, trusting the published bundle;
//! - the real gateway binary, given `--identity-endpoint` and a ServiceAccount token
//!   bound to a pod of a managed gateway Deployment, obtains its certificate, registers,
//!   receives a snapshot (`/readyz`) and proxies a request through a simulator proxy;
//! - the real checker binary, given `--identity-endpoint` and a token bound to a pod of
//!   the checker Deployment the issuer is configured with (`--checker-deployment`),
//!   obtains a `checker/<pod>` certificate from the same issuer, registers and checks
//!   the simulator's proxies over the same mTLS control plane; its `/metrics` report
//!   that certificate's expiry;
//! - a gateway with a token bound to a pod outside any managed Deployment is refused
//!   by the issuer, says so in one clear log line, exits non-zero and never opens its
//!   traffic listener; a checker with such a token is refused and exits likewise.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use proxy_pool_e2e::k8s::K8sBins;
use proxy_pool_e2e::ports::free_addr;
use proxy_pool_e2e::procs::{Procs, bin, build_binaries, vendor_sim_command};
use proxy_pool_operator::identity::wire::DEFAULT_AUDIENCE;

mod identity_support;
use identity_support::*;

const CONTROLLER_NAME: &str = "proxy-pool-controller";
const GW_USER: &str = "e2euser";
const GW_PASS: &str = "e2e-gateway-password";
/// Long enough for a cold start on a small machine: fetch, check, assign, publish.
const READY_WITHIN: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_checker_use_operator_issued_identities() {
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    build_binaries();
    let (cluster, workloads) = cluster_with_accounts(&bins).await;
    let client = cluster.client();
    let dir = TempDir::new("pp-worker-identity-e2e");
    let authority = start_authority(&client, "CA bootstrap").await;
    let (issuer, _) = start_issuer(&client).await;
    let bundle = dir.write("trust/ca.crt", &published_bundle(&client, GATEWAY_NS).await);

    // The controller's serving certificate, signed by the operator's CA (in a cluster
    // the operator issues it into a Secret).
    let cas = authority.cas();
    let now = SystemTime::now();
    let controller_key = rcgen::KeyPair::generate().expect("key");
    let controller_cert = cas
        .sign_serving(
            now,
            authority.params(),
            &controller_key,
            &[CONTROLLER_NAME.to_owned()],
        )
        .expect("controller certificate");

    let ports = Ports::new();
    let logs = dir.path.join("logs");
    std::fs::create_dir_all(&logs).expect("logs dir");
    let mut procs = Procs::new(&logs);

    procs.start(
        "vendor-sim",
        vendor_sim_command(
            bin("vendor-sim"),
            ports.sim,
            ports.echo,
            ports.echo_tls,
            "e2e-vendor-key",
            (300, 900),
        )
        .arg("--ca-out")
        .arg(dir.path.join("sim-ca.pem")),
    );
    wait_http(&mut procs, ports.sim, "/healthz", "vendor simulator").await;

    let config = controller_config(
        &ports,
        &dir.write("controller.crt", &controller_cert.pem),
        &dir.write("controller.key", &controller_key.serialize_pem()),
        &bundle,
        &dir.write("vendor-api-key", "e2e-vendor-key"),
    );
    let config = dir.write("controller.yaml", &config);
    procs.start(
        "controller",
        Command::new(bin("proxy-pool-controller"))
            .args(["run", "--config"])
            .arg(&config),
    );
    wait_http(&mut procs, ports.admin, "/healthz", "controller").await;

    // The checker of the checker Deployment's pod: certificate from the issuer.
    let checker_pod = workloads
        .deployment_chain(CHECKER_DEPLOYMENT, CHECKER_SA, false)
        .await;
    let checker_token = dir.write(
        "checker/token",
        &workloads.token_for(&checker_pod, DEFAULT_AUDIENCE).await,
    );
    let mut checker = worker_command(
        Role::Checker,
        &ports,
        &issuer,
        &checker_token,
        &bundle,
        &checker_pod.name,
    );
    checker.arg(format!("--ops-listen={}", ports.checker_ops));
    procs.start("checker", &mut checker);

    // The gateway of a managed Deployment's pod: certificate from the issuer.
    let pod = workloads.deployment_chain("gw", SA, true).await;
    let token = dir.write(
        "gw/token",
        &workloads.token_for(&pod, DEFAULT_AUDIENCE).await,
    );
    let clients = dir.write(
        "clients.json",
        &format!(r#"[{{"client":"e2e-client","username":"{GW_USER}","password":"{GW_PASS}"}}]"#),
    );
    let mut gateway = worker_command(
        Role::Gateway(&ports.gw),
        &ports,
        &issuer,
        &token,
        &bundle,
        &pod.name,
    );
    gateway.arg("--clients-file").arg(&clients);
    procs.start("gateway", &mut gateway);
    wait_http(
        &mut procs,
        ports.gw.admin,
        "/readyz",
        "gateway snapshot over mTLS",
    )
    .await;
    assert_issued_and_registered(
        &logs.join("gateway.log"),
        &format!("worker/{}", pod.name),
        "gateway log",
        "gateway log",
    );

    // A request through the gateway to the echo server, through a simulator proxy the
    // checker found working and the controller assigned to this gateway.
    let deadline = Instant::now() + READY_WITHIN;
    let answer = loop {
        procs.all_alive();
        match proxied_get(ports.gw.http, ports.echo) {
            Ok(a) if a.starts_with("HTTP/1.1 200") => break a,
            other if Instant::now() > deadline => {
                panic!("no proxied answer: {other:?}\n{}", procs.logs())
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_issued_and_registered(
        &logs.join("checker.log"),
        &format!("checker/{}", checker_pod.name),
        "the checker's certificate came from the issuer, named checker/<pod>",
        "the checker registered over mTLS with its issued certificate",
    );
    checker_metrics_report_its_certificate(ports.checker_ops);
    let metrics = http_get(ports.gw.admin, "/metrics").unwrap_or_default();
    assert_certificate_expiry(&metrics, "gateway");
    assert!(
        metrics.lines().any(
            |l| l.starts_with("proxy_pool_gateway_usage_requests_total ") && !l.ends_with(" 0")
        ),
        "usage recorded:\n{metrics}"
    );

    // A pod outside any managed gateway Deployment: refused, no traffic listener.
    let other = workloads.deployment_chain("rogue", SA, false).await;
    let token = dir.write(
        "rogue/token",
        &workloads.token_for(&other, DEFAULT_AUDIENCE).await,
    );
    let rogue_ports = GatewayPorts::new();
    let text = refused_output(
        worker_command(
            Role::Gateway(&rogue_ports),
            &ports,
            &issuer,
            &token,
            &bundle,
            &other.name,
        ),
        "gateway",
    );
    assert!(
        text.contains("the identity issuer refused this worker: not serving traffic")
            && text.contains("403"),
        "clear refusal line:\n{text}"
    );
    let raw = std::fs::read_to_string(&token).expect("token");
    assert!(!text.contains(raw.trim()), "the token is never logged");
    assert!(
        TcpStream::connect(rogue_ports.http).is_err(),
        "the refused gateway never listened for traffic"
    );

    // A checker with that pod's token: refused (the pod is not of the checker
    // Deployment), one clear line, non-zero exit.
    let text = refused_output(
        worker_command(Role::Checker, &ports, &issuer, &token, &bundle, &other.name),
        "checker",
    );
    assert!(
        text.contains("the identity issuer refused this checker: not starting")
            && text.contains("403"),
        "clear refusal line:\n{text}"
    );
    assert!(!text.contains(raw.trim()), "the token is never logged");

    procs.stop();
}

/// The value of `series` in the exposition `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `component`'s `/metrics` report its issued certificate's expiry: in the future,
/// within the leaf lifetime.
fn assert_certificate_expiry(text: &str, component: &str) {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let series = format!(
        r#"proxy_pool_{component}_certificate_expiry_timestamp_seconds{{certificate="worker"}}"#
    );
    let expiry = value(text, &series)
        .unwrap_or_else(|| panic!("the {component}'s certificate expiry:\n{text}"));
    assert!(
        expiry > now && expiry <= now + 2.0 * 86400.0,
        "the {component}'s certificate expires after now, within the leaf lifetime: {expiry}"
    );
}

/// The checker's `/metrics`: its issued certificate's expiry, a registered session and
/// checks that passed.
fn checker_metrics_report_its_certificate(ops: SocketAddr) {
    let text = http_get(ops, "/metrics").unwrap_or_default();
    let value = |series: &str| value(&text, series);
    assert_certificate_expiry(&text, "checker");
    assert_eq!(
        value("proxy_pool_checker_session_registered"),
        Some(1.0),
        "{text}"
    );
    assert!(
        value(r#"proxy_pool_checker_probe_duration_seconds_count{tier="basic",result="ok"}"#)
            .is_some_and(|n| n > 0.0),
        "checks passed:\n{text}"
    );
}

/// A worker's log file says its certificate for `spiffe://<domain>/<env>/<workload>`
/// was issued and that it registered with the control plane.
fn assert_issued_and_registered(log: &Path, workload: &str, issued: &str, registered: &str) {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        log.contains("workload certificate issued")
            && log.contains(&format!("spiffe://{TRUST_DOMAIN}/{ENVIRONMENT}/{workload}")),
        "{issued}:\n{log}"
    );
    assert!(
        log.contains("registered with the control plane"),
        "{registered}:\n{log}"
    );
}

// ---- processes --------------------------------------------------------------------

/// Runs a worker the issuer refuses: it must exit non-zero within a minute; returns
/// its stdout and stderr together.
fn refused_output(mut command: Command, what: &str) -> String {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn rogue {what}: {e}"));
    let out = wait_output(child, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "a refused {what} exits non-zero:\n{text}"
    );
    text
}

fn wait_output(mut child: Child, within: Duration) -> std::process::Output {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "the refused process kept running:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn wait_http(procs: &mut Procs, addr: SocketAddr, path: &str, what: &str) {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        procs.all_alive();
        if http_get(addr, path).is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            procs.logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    exchange(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .ok()
}

/// An absolute-URI GET through the gateway's HTTP proxy listener.
fn proxied_get(gateway: SocketAddr, echo: SocketAddr) -> std::io::Result<String> {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{GW_USER}:{GW_PASS}"));
    exchange(
        gateway,
        &format!(
            "GET http://{echo}/hello HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
        ),
    )
}

fn exchange(addr: SocketAddr, request: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request.as_bytes())?;
    let mut out = Vec::new();
    s.take(1 << 20).read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

struct GatewayPorts {
    http: SocketAddr,
    socks5: SocketAddr,
    admin: SocketAddr,
}

impl GatewayPorts {
    fn new() -> Self {
        Self {
            http: free_addr(),
            socks5: free_addr(),
            admin: free_addr(),
        }
    }
}

struct Ports {
    sim: SocketAddr,
    echo: SocketAddr,
    echo_tls: SocketAddr,
    dist: SocketAddr,
    admin: SocketAddr,
    cp: SocketAddr,
    checker_ops: SocketAddr,
    gw: GatewayPorts,
}

impl Ports {
    fn new() -> Self {
        Self {
            sim: free_addr(),
            echo: free_addr(),
            echo_tls: free_addr(),
            dist: free_addr(),
            admin: free_addr(),
            cp: free_addr(),
            checker_ops: free_addr(),
            gw: GatewayPorts::new(),
        }
    }
}

/// Which worker binary runs, and for a gateway its listeners.
enum Role<'a> {
    Gateway(&'a GatewayPorts),
    Checker,
}

/// What the operator renders for a gateway, and the chart for the checker, as flags
/// (the Deployments pass the identity settings as `PROXY_POOL_*` environment variables,
/// the flags are the same; the checker's pod name as `--checker-id=$(POD_NAME)`). Both
/// get the egress policy as the operator renders it (environment), with loopback —
/// where the simulator's proxies are — opted in.
fn worker_command(
    role: Role,
    ports: &Ports,
    issuer: &SocketAddr,
    token: &Path,
    bundle: &Path,
    pod: &str,
) -> Command {
    let binary = match role {
        Role::Gateway(_) => "proxy-pool-gateway",
        Role::Checker => "proxy-pool-checker",
    };
    let mut cmd = Command::new(bin(binary));
    cmd.env("RUST_LOG", "info")
        .env("POD_NAME", pod)
        .env("PROXY_POOL_EGRESS_ALLOW_CIDRS", "127.0.0.0/8");
    match role {
        Role::Gateway(gw) => cmd
            .arg("--http-listen")
            .arg(gw.http.to_string())
            .arg("--socks5-listen")
            .arg(gw.socks5.to_string())
            .arg("--admin-listen")
            .arg(gw.admin.to_string())
            .arg("--gateway-group=e2e"),
        Role::Checker => cmd
            .arg("run")
            .arg(format!("--checker-id={pod}"))
            .arg(format!("--echo={}", ports.echo)),
    };
    cmd.arg(format!("--controller=https://{}", ports.cp))
        .arg(format!("--server-name={CONTROLLER_NAME}"))
        .arg(format!("--identity-endpoint=https://{issuer}"))
        .arg(format!("--identity-server-name={ISSUER_NAME}"))
        .arg("--identity-token-file")
        .arg(token)
        .arg("--trust-bundle-file")
        .arg(bundle);
    cmd
}

fn controller_config(
    ports: &Ports,
    cert: &Path,
    key: &Path,
    bundle: &Path,
    vendor_key: &Path,
) -> String {
    let upstream = |name: &str, protocol: &str| {
        format!(
            "  - name: {name}
    protocol: {protocol}
    ttl: 10m
    quarantine: 0s
    safetyMargin: 10s
    maxConcurrencyPerProxy: 16
    maxSize: 20
    fetchInterval: 5s
    source:
      vendorApi:
        url: http://{sim}/v1/proxies?count=4&protocol={protocol}
        format: json
        apiKeyFile: {key}
        timeout: 5s
",
            sim = ports.sim,
            key = vendor_key.display()
        )
    };
    format!(
        "store:
  backend: memory
distribution:
  listen: {dist}
  auth:
    mode: any
    methods: [{{type: apiKey}}]
admin:
  listen: {admin}
controlPlane:
  enabled: true
  listen: {cp}
  tls:
    certFile: {cert}
    keyFile: {key}
    clientCaFile: {bundle}
    trustDomain: {TRUST_DOMAIN}
    environment: {ENVIRONMENT}
upstreams:
{http}{socks}routings:
  - {{name: e2e, priority: 1, upstreams: [sim-http, sim-socks5]}}
clients:
  - name: e2e-client
    permissions: [distribution:extract]
    apiKeys: [{{sha256: {sha}}}]
shutdown:
  gracePeriod: 5s
# The simulator's proxies are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
",
        dist = ports.dist,
        admin = ports.admin,
        cp = ports.cp,
        cert = cert.display(),
        key = key.display(),
        bundle = bundle.display(),
        http = upstream("sim-http", "http"),
        socks = upstream("sim-socks5", "socks5"),
        // SHA-256 of "unused-api-key" (the Distribution API is not exercised here).
        sha = "0f6d9ff3d8a2c9ec2a1b1b0c3cf6d1b9bde0d6e0a0f8c4c7a7c6d2b0e0f1a2b3",
    )
}
