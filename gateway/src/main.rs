//! `proxy-pool-gateway` entry point: parse flags, bind listeners, load snapshots,
//! serve until SIGTERM/SIGINT, then drain. Only composes library pieces.

use anyhow::{Context, Result, bail};
use clap::Parser;
use clap::builder::RangedU64ValueParser;
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport, Endpoints};
use proxy_pool_api::egress::EgressPolicy;
use proxy_pool_gateway::admin::serve_admin;
use proxy_pool_gateway::controlplane::{Agent, AgentConfig};
use proxy_pool_gateway::parse::http_head::HeadLimits;
use proxy_pool_gateway::snapshot::file::SnapshotFile;
use proxy_pool_gateway::{
    AuthMode, Gateway, GatewayConfig, SnapshotHandle, WorkerListeners, bind_reuseport,
};
use proxy_pool_identity_client::{IdentityArgs, IdentityClient, WorkerTls, start_issued};
use proxy_pool_runtime::shutdown_signal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// The Proxy Pool gateway: HTTP and SOCKS5 forward proxy over the pool's proxies.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// HTTP proxy listener.
    #[arg(long, default_value = "0.0.0.0:8080")]
    http_listen: SocketAddr,
    /// SOCKS5 listener.
    #[arg(long, default_value = "0.0.0.0:1080")]
    socks5_listen: SocketAddr,
    /// Ops listener (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:9090")]
    admin_listen: SocketAddr,
    /// Static snapshot file (JSON), re-read every --reload-seconds; for local runs.
    #[arg(long)]
    snapshot_file: Option<PathBuf>,
    /// Reload interval of --snapshot-file.
    #[arg(long, default_value_t = 10)]
    reload_seconds: u64,
    /// Refuse new traffic this long after the last valid snapshot.
    #[arg(long, default_value_t = 120)]
    max_stale_age_seconds: u64,
    /// Grace period for in-flight work on shutdown.
    #[arg(long, default_value_t = 30)]
    drain_grace_seconds: u64,
    /// Longest time a client may take to send one request body (plain HTTP forwarding).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    request_body_timeout_seconds: u64,
    /// Longest time one write to a client or a vendor proxy may make no progress.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    write_timeout_seconds: u64,
    /// Open client connections per listener (shared fairly between sources).
    #[arg(long, default_value_t = 10_000, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_connections: usize,
    /// Open client connections from one source address.
    #[arg(long, default_value_t = 2_500, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_connections_per_source: usize,
    /// Time a client has to send its first request head / SOCKS5 handshake.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    handshake_timeout_seconds: u64,
    /// Time a kept-alive client connection may sit idle between requests.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    client_idle_timeout_seconds: u64,
    /// Time a tunnel or body transfer may see no byte in either direction.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    io_idle_timeout_seconds: u64,
    /// Largest request head (request line + headers), bytes: 1 KiB to 1 MiB.
    #[arg(long, default_value_t = 16 * 1024, value_parser = RangedU64ValueParser::<usize>::new().range(1024..=1024 * 1024))]
    max_request_head_bytes: usize,
    /// Most header fields in a request head (1 to 256).
    #[arg(long, default_value_t = 64, value_parser = RangedU64ValueParser::<usize>::new().range(1..=256))]
    max_request_headers: usize,
    /// On SIGTERM, answer `/readyz` with 503 this long while still serving, before the
    /// listeners close and the drain starts: time for the cluster to take the pod out
    /// of its Service (a second signal skips the wait). At most 300.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=300))]
    shutdown_delay_seconds: u64,
    /// Accept any client credentials (local runs only).
    #[arg(long)]
    open_auth: bool,
    /// More address ranges (CIDR or IP) the gateway never dials nor lets a client
    /// reach through a vendor proxy — the cluster's pod and service ranges; on top of
    /// the built-in loopback, link-local/metadata, unspecified and multicast ranges.
    #[arg(long, env = "PROXY_POOL_EGRESS_DENY_CIDRS", value_delimiter = ',')]
    egress_deny_cidr: Vec<String>,
    /// Ranges allowed although denied (explicit opt-in, e.g. `127.0.0.0/8` for local
    /// runs with the vendor simulator).
    #[arg(long, env = "PROXY_POOL_EGRESS_ALLOW_CIDRS", value_delimiter = ',')]
    egress_allow_cidr: Vec<String>,
    /// Control-plane endpoint (`https://…` with mTLS, or `http://127.0.0.1:…`);
    /// several controller replicas separated by commas, tried in turn until the
    /// leader answers.
    #[arg(long, value_parser = Endpoints::parse_arg)]
    controller: Option<String>,
    /// Worker ID (the pod name; must match the SPIFFE ID of the certificate).
    #[arg(long, env = "POD_NAME", default_value = "gateway-local")]
    worker_id: String,
    /// Gateway group (Routing) this worker serves.
    #[arg(long, default_value = "")]
    gateway_group: String,
    /// Zone, for the controller.
    #[arg(long, default_value = "")]
    zone: String,
    /// Client credentials: JSON `[{"client", "username" | "usernameFile",
    /// "password" | "passwordFile"}]`; the files (mounted Secret keys) are read at start.
    #[arg(long)]
    clients_file: Option<PathBuf>,
    /// File-based mTLS: trust bundle (PEM) the controller's certificate is verified
    /// against. The three files are re-read for every new control-plane connection.
    #[arg(
        long,
        alias = "ca-file",
        requires_all = ["tls_cert", "tls_key"],
        conflicts_with = "identity_endpoint"
    )]
    tls_ca: Option<PathBuf>,
    /// File-based mTLS: workload certificate chain (PEM) with the SPIFFE URI.
    #[arg(long, alias = "cert-file", requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// File-based mTLS: workload private key (PEM).
    #[arg(long, alias = "key-file", requires = "tls_ca")]
    tls_key: Option<PathBuf>,
    /// Worker-identity bootstrap (`--identity-endpoint` and its files).
    #[command(flatten)]
    identity: IdentityArgs,
    /// TLS name of the controller (default: the host of --controller).
    #[arg(long)]
    server_name: Option<String>,
    /// Data-plane worker threads, each with its own single-threaded runtime and its
    /// own `SO_REUSEPORT` listeners (default: the available parallelism — the CPUs this
    /// process may run on, cgroup quota included). The control plane (controller
    /// client, admin listener, snapshot reloads) runs on one more thread.
    #[arg(long, env = "PROXY_POOL_GATEWAY_WORKER_THREADS", value_parser = parse_worker_threads)]
    worker_threads: Option<usize>,
}

/// Upper bound of `--worker-threads`: far above any useful value, low enough that a
/// typo cannot spawn thousands of threads.
const MAX_WORKER_THREADS: usize = 1024;

fn parse_worker_threads(value: &str) -> std::result::Result<usize, String> {
    let n: usize = value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a whole number of threads"))?;
    if n == 0 {
        return Err("must be at least 1".to_owned());
    }
    if n > MAX_WORKER_THREADS {
        return Err(format!("must be at most {MAX_WORKER_THREADS}"));
    }
    Ok(n)
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let workers = args.worker_threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    // The control plane's runtime; the data-plane workers get their own threads and
    // runtimes in `Gateway::run_workers`.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("gateway-control")
        .build()
        .context("starting the control-plane runtime")?;
    runtime.block_on(serve(args, workers))
}

async fn serve(args: Args, workers: usize) -> Result<()> {
    let egress =
        EgressPolicy::parse(&args.egress_deny_cidr, &args.egress_allow_cidr).map_err(|p| {
            anyhow::anyhow!("--egress-deny-cidr / --egress-allow-cidr: {}", p.join("; "))
        })?;
    let config = GatewayConfig {
        auth: if args.open_auth {
            AuthMode::Open
        } else {
            AuthMode::Required
        },
        drain_grace: Duration::from_secs(args.drain_grace_seconds),
        request_body_timeout: Duration::from_secs(args.request_body_timeout_seconds),
        write_timeout: Duration::from_secs(args.write_timeout_seconds),
        max_connections: args.max_connections,
        max_connections_per_source: args.max_connections_per_source,
        handshake_timeout: Duration::from_secs(args.handshake_timeout_seconds),
        client_idle_timeout: Duration::from_secs(args.client_idle_timeout_seconds),
        io_idle_timeout: Duration::from_secs(args.io_idle_timeout_seconds),
        head: HeadLimits {
            max_head_bytes: args.max_request_head_bytes,
            max_headers: args.max_request_headers,
        },
        egress,
        ..GatewayConfig::default()
    };
    config.validate()?;
    let max_stale = Duration::from_secs(args.max_stale_age_seconds);
    let snapshots = SnapshotHandle::new(max_stale);
    let admin = bind(args.admin_listen).await?;
    let (gateway, mut outcomes) = Gateway::new(snapshots.clone(), config);
    let stop = CancellationToken::new();
    // Shutdown: the signal makes the worker unready (`terminating`), then, after
    // --shutdown-delay-seconds, stops accepting and drains (`signalled`).
    let terminating = CancellationToken::new();
    let signalled = CancellationToken::new();
    let (on_terminate, on_signal) = (terminating.clone(), signalled.clone());
    let delay = Duration::from_secs(args.shutdown_delay_seconds);
    tokio::spawn(async move {
        shutdown_signal().await;
        on_terminate.cancel();
        if !delay.is_zero() {
            info!(
                delay_seconds = delay.as_secs(),
                "shutdown: not ready; still serving until the delay ends"
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown_signal() => info!("second signal: shutting down now"),
            }
        }
        on_signal.cancel();
    });
    tokio::spawn(serve_admin(
        admin,
        gateway.clone(),
        snapshots.clone(),
        terminating,
        stop.clone().cancelled_owned(),
    ));
    // The identity comes first: no traffic listener is bound until the worker has a
    // certificate (or a clear refusal has stopped it).
    let tls = if args.controller.is_some() {
        match worker_tls(&args, &signalled, &stop).await? {
            Tls::Stopped => {
                stop.cancel();
                return Ok(());
            }
            Tls::Ready(tls) => tls,
        }
    } else {
        None
    };
    let http = bind_reuseport(args.http_listen, workers)
        .with_context(|| format!("binding {}", args.http_listen))?;
    let socks5 = bind_reuseport(args.socks5_listen, workers)
        .with_context(|| format!("binding {}", args.socks5_listen))?;
    let listeners: Vec<WorkerListeners> = http
        .into_iter()
        .zip(socks5)
        .map(|(http, socks5)| WorkerListeners {
            http: Some(http),
            socks5: Some(socks5),
        })
        .collect();
    if let Some(endpoint) = args.controller.clone() {
        let server_name = args
            .server_name
            .clone()
            .or_else(|| endpoint_host(Endpoints::parse_lenient(&endpoint).current()))
            .unwrap_or_else(|| "proxy-pool-controller".to_owned());
        let mut agent = Agent::new(agent_config(&args, endpoint)?, snapshots.clone(), outcomes)
            .with_usage(gateway.usage().clone());
        if let Some(tls) = tls {
            agent = agent.with_tls(tls, server_name);
        }
        tokio::spawn(agent.run(stop.clone()));
    } else {
        // Without a controller, observations are drained and dropped here.
        tokio::spawn(async move { while outcomes.rx.recv().await.is_some() {} });
    }
    if let Some(path) = args.snapshot_file.clone() {
        let every = Duration::from_secs(args.reload_seconds.max(1));
        tokio::spawn(reload_file(
            path,
            snapshots.clone(),
            every,
            max_stale,
            stop.clone(),
        ));
    } else if args.controller.is_none() {
        warn!("no snapshot source configured: every request is refused");
    }
    info!(http = %args.http_listen, socks5 = %args.socks5_listen, workers, "gateway serving");
    let report = gateway
        .run_workers(listeners, signalled.cancelled_owned())
        .await
        .context("starting the data-plane workers");
    let report = match report {
        Ok(report) => report,
        Err(err) => {
            stop.cancel();
            return Err(err);
        }
    };
    stop.cancel();
    info!(drained = report.drained, "gateway stopped");
    Ok(())
}

enum Tls {
    /// Transport material to use (`None`: plaintext to a loopback fixture).
    Ready(Option<WorkerTls>),
    /// Shutdown was requested while waiting for the first certificate.
    Stopped,
}

/// The control-plane TLS source from the flags. With `--identity-endpoint`, obtains
/// the first certificate now (retrying transient failures until `signalled`), then
/// renews it in the background until `stop`; a refusal (400/403) is an error.
async fn worker_tls(
    args: &Args,
    signalled: &CancellationToken,
    stop: &CancellationToken,
) -> Result<Tls> {
    if let Some(cfg) = args.identity.client_config()? {
        let endpoint = args.identity.endpoint().unwrap_or_default();
        let bundle = cfg.ca_bundle_path.clone();
        info!(endpoint, worker = %args.worker_id, "requesting the workload certificate");
        let started = start_issued(
            IdentityClient::new(cfg),
            bundle.clone(),
            signalled.cancelled(),
            stop.clone().cancelled_owned(),
        )
        .await;
        return match started {
            Ok(Some(tls)) => Ok(Tls::Ready(Some(tls))),
            Ok(None) => Ok(Tls::Stopped),
            Err(err) => {
                error!(
                    error = %err,
                    endpoint,
                    worker = %args.worker_id,
                    "the identity issuer refused this worker: not serving traffic"
                );
                bail!("no workload certificate: {err}");
            }
        };
    }
    match (&args.tls_ca, &args.tls_cert, &args.tls_key) {
        (Some(ca), Some(cert), Some(key)) => {
            let tls = WorkerTls::Files {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            };
            // Fail fast on unreadable files; later reads happen per connection.
            tls.material().context("control-plane TLS files")?;
            Ok(Tls::Ready(Some(tls)))
        }
        _ => Ok(Tls::Ready(None)),
    }
}

/// The host of an `https://host:port` endpoint (brackets of IPv6 removed).
fn endpoint_host(endpoint: &str) -> Option<String> {
    let uri: http::Uri = endpoint.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| host.to_owned())
}

fn agent_config(args: &Args, endpoint: String) -> Result<AgentConfig> {
    let clients = match &args.clients_file {
        Some(path) => {
            let clients = proxy_pool_gateway::clients::load(path)?;
            info!(path = %path.display(), clients = clients.len(), "client credentials loaded");
            clients
        }
        None => Vec::new(),
    };
    Ok(AgentConfig {
        endpoint,
        // Replaced by the agent's TLS source when one is configured.
        transport: ClientTransport::LoopbackPlaintext,
        options: ClientOptions::default(),
        worker_id: args.worker_id.clone(),
        instance_id: format!("{}-{}", args.worker_id, std::process::id()),
        zone: args.zone.clone(),
        gateway_group: args.gateway_group.clone(),
        clients,
    })
}

async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))
}

async fn reload_file(
    path: PathBuf,
    snapshots: SnapshotHandle,
    every: Duration,
    validity: Duration,
    stop: CancellationToken,
) {
    let mut version = 0;
    loop {
        version += 1;
        let loaded = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                serde_json::from_slice::<SnapshotFile>(&bytes).map_err(|e| e.to_string())
            })
            .and_then(|file| {
                file.into_snapshot(version, validity)
                    .map_err(|e| e.to_string())
            })
            .and_then(|snap| {
                snapshots
                    .install(snap)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
        if let Err(err) = loaded {
            warn!(path = %path.display(), error = %err, "snapshot file not loaded");
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_threads_accepts_positive_counts() {
        assert_eq!(parse_worker_threads("1"), Ok(1));
        assert_eq!(parse_worker_threads(" 2 "), Ok(2));
        assert_eq!(
            parse_worker_threads(&MAX_WORKER_THREADS.to_string()),
            Ok(MAX_WORKER_THREADS)
        );
    }

    #[test]
    fn worker_threads_rejects_zero_junk_and_huge_values() {
        assert_eq!(
            parse_worker_threads("0"),
            Err("must be at least 1".to_owned())
        );
        assert!(parse_worker_threads("-1").is_err_and(|e| e.contains("whole number")));
        assert!(parse_worker_threads("two").is_err_and(|e| e.contains("whole number")));
        assert!(parse_worker_threads("1025").is_err_and(|e| e.contains("at most 1024")));
    }

    #[test]
    fn worker_threads_flag_and_default() {
        let parsed =
            Args::try_parse_from(["gw", "--worker-threads", "2"]).map(|a| a.worker_threads);
        assert_eq!(parsed.ok().flatten(), Some(2));
        let refused = Args::try_parse_from(["gw", "--worker-threads", "0"]);
        assert!(refused.is_err_and(|e| e.to_string().contains("must be at least 1")));
    }
}
