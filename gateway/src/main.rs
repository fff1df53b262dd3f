//! `proxy-pool-gateway` entry point: parse flags, bind listeners, load snapshots,
//! serve until SIGTERM/SIGINT, then drain. Only composes library pieces.

use anyhow::{Context, Result};
use clap::Parser;
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport};
use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_gateway::admin::serve_admin;
use proxy_pool_gateway::controlplane::{Agent, AgentConfig};
use proxy_pool_gateway::snapshot::ClientCredential;
use proxy_pool_gateway::snapshot::file::{RawClient, SnapshotFile};
use proxy_pool_gateway::{AuthMode, Gateway, GatewayConfig, Listeners, SnapshotHandle};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

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
    /// Accept any client credentials (local runs only).
    #[arg(long)]
    open_auth: bool,
    /// Control-plane endpoint (`https://…` with mTLS, or `http://127.0.0.1:…`).
    #[arg(long)]
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
    /// Client credentials, JSON `[{"client","username","password"}]` (mounted Secret).
    #[arg(long)]
    clients_file: Option<PathBuf>,
    /// mTLS: CA bundle, certificate and key (PEM); plaintext to loopback without them.
    #[arg(long, requires_all = ["cert_file", "key_file"])]
    ca_file: Option<PathBuf>,
    /// mTLS client certificate (PEM).
    #[arg(long)]
    cert_file: Option<PathBuf>,
    /// mTLS client key (PEM).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// TLS server name of the controller.
    #[arg(long, default_value = "proxy-pool-controller")]
    server_name: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let config = GatewayConfig {
        auth: if args.open_auth {
            AuthMode::Open
        } else {
            AuthMode::Required
        },
        drain_grace: Duration::from_secs(args.drain_grace_seconds),
        ..GatewayConfig::default()
    };
    config.validate()?;
    let max_stale = Duration::from_secs(args.max_stale_age_seconds);
    let snapshots = SnapshotHandle::new(max_stale);
    let listeners = Listeners {
        http: Some(bind(args.http_listen).await?),
        socks5: Some(bind(args.socks5_listen).await?),
    };
    let admin = bind(args.admin_listen).await?;
    let (gateway, mut outcomes) = Gateway::new(snapshots.clone(), config);
    let stop = CancellationToken::new();
    if let Some(endpoint) = args.controller.clone() {
        let agent = Agent::new(agent_config(&args, endpoint)?, snapshots.clone(), outcomes);
        tokio::spawn(agent.run(stop.clone()));
    } else {
        // Without a controller, observations are drained and dropped here.
        tokio::spawn(async move { while outcomes.rx.recv().await.is_some() {} });
    }
    tokio::spawn(serve_admin(
        admin,
        gateway.clone(),
        snapshots.clone(),
        stop.clone().cancelled_owned(),
    ));
    if let Some(path) = args.snapshot_file {
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
    info!(http = %args.http_listen, socks5 = %args.socks5_listen, "gateway serving");
    let report = gateway.run(listeners, shutdown_signal()).await;
    stop.cancel();
    info!(drained = report.drained, "gateway stopped");
    Ok(())
}

fn agent_config(args: &Args, endpoint: String) -> Result<AgentConfig> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let transport = match (&args.ca_file, &args.cert_file, &args.key_file) {
        (Some(ca), Some(cert), Some(key)) => ClientTransport::Mtls {
            ca_pem: read(ca)?,
            cert_pem: read(cert)?,
            key_pem: Secret::new(read(key)?),
            server_name: args.server_name.clone(),
        },
        _ => ClientTransport::LoopbackPlaintext,
    };
    let clients = match &args.clients_file {
        Some(path) => {
            let raw: Vec<RawClient> = serde_json::from_str(&read(path)?)
                .with_context(|| format!("parsing {}", path.display()))?;
            raw.iter()
                .map(|c| ClientCredential::from_password(&c.client, &c.username, &c.password))
                .collect()
        }
        None => Vec::new(),
    };
    Ok(AgentConfig {
        endpoint,
        transport,
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

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
