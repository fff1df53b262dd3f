//! `vendor-sim`: runs the vendor simulator (vendor API, short-lived loopback
//! proxies, HTTP/HTTPS echo server) until Ctrl-C or SIGTERM. Only composes.

use anyhow::Context as _;
use clap::Parser;
use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_e2e::sim::{SimConfig, SimListeners, Simulator};
use proxy_pool_runtime::telemetry::logging::{self, FORMAT_ENV, LogFormat, Stream};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use tokio::net::TcpListener;

/// Vendor simulator for Proxy Pool: sells real short-lived proxies on loopback.
#[derive(Debug, Parser)]
#[command(name = "vendor-sim", version)]
struct Args {
    /// Vendor API listen address (loopback unless --allow-non-loopback).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Address the proxies listen on and the vendor API reports (overrides
    /// `proxyListenIp`); non-loopback only with --allow-non-loopback.
    #[arg(long, env = "VENDOR_SIM_PROXY_LISTEN_IP")]
    proxy_listen_ip: Option<Ipv4Addr>,
    /// Lets the vendor API and the proxies listen on non-loopback addresses (a pod IP in
    /// a cluster), an explicit opt-in (`allowNonLoopbackListen`). The echo servers stay
    /// on loopback and the proxies still reach loopback targets only.
    #[arg(long)]
    allow_non_loopback: bool,
    /// Plain-HTTP echo server listen address.
    #[arg(long, default_value = "127.0.0.1:0")]
    echo_http: SocketAddr,
    /// HTTPS echo server listen address.
    #[arg(long, default_value = "127.0.0.1:0")]
    echo_https: SocketAddr,
    /// Configuration file (YAML or JSON, camelCase keys; see docs/vendor-simulator.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Overrides `credentials.apiKey`.
    #[arg(long, env = "VENDOR_SIM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Overrides `maxLiveProxies`.
    #[arg(long)]
    max_live: Option<usize>,
    /// Overrides `ttlMinSeconds`.
    #[arg(long)]
    ttl_min: Option<u64>,
    /// Overrides `ttlMaxSeconds`.
    #[arg(long)]
    ttl_max: Option<u64>,
    /// Writes the echo server's CA certificate (PEM) to this file.
    #[arg(long)]
    ca_out: Option<PathBuf>,
    /// Log lines as `text` or `json` (one object per line), on standard output.
    #[arg(long, env = FORMAT_ENV, default_value = "text")]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, Stream::Stdout).context("logging")?;
    let config = load_config(&args)?;
    anyhow::ensure!(
        args.listen.ip().is_loopback() || config.allow_non_loopback_listen,
        "{}: the vendor API binds loopback only unless --allow-non-loopback is given",
        args.listen
    );
    for addr in [args.echo_http, args.echo_https] {
        anyhow::ensure!(
            addr.ip().is_loopback(),
            "{addr}: the echo servers bind loopback only"
        );
    }
    let listeners = SimListeners {
        vendor_api: bind(args.listen).await?,
        echo_http: bind(args.echo_http).await?,
        echo_https: bind(args.echo_https).await?,
    };
    let sim = Simulator::start_with(config, listeners).await?;
    if let Some(path) = &args.ca_out {
        std::fs::write(path, sim.echo_ca_pem())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("vendor-api  {}", sim.vendor_url());
    println!("echo-http   {}", sim.echo_http_url());
    println!("echo-https  {}", sim.echo_https_url());
    println!("auth        X-API-Key header or Basic (see --config / docs)");
    tracing::info!("vendor simulator running; Ctrl-C or SIGTERM stops it");
    wait_for_signal().await?;
    tracing::info!("stopping");
    if !sim.shutdown().await {
        tracing::warn!("some tasks did not finish within the grace period");
    }
    Ok(())
}

fn load_config(args: &Args) -> anyhow::Result<SimConfig> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => SimConfig::default(),
    };
    if let Some(key) = &args.api_key {
        config.credentials.api_key = Secret::new(key.as_str());
    }
    if let Some(max) = args.max_live {
        config.max_live_proxies = max;
    }
    if let Some(min) = args.ttl_min {
        config.ttl_min_seconds = min;
    }
    if let Some(max) = args.ttl_max {
        config.ttl_max_seconds = max;
    }
    if let Some(ip) = args.proxy_listen_ip {
        config.proxy_listen_ip = ip;
    }
    if args.allow_non_loopback {
        config.allow_non_loopback_listen = true;
    }
    Ok(config)
}

async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        res = tokio::signal::ctrl_c() => res.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
