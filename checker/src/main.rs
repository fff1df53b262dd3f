//! `proxy-pool-checker` entry point: parses arguments and composes the library.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport};
use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_checker::cli::parse_proxy_url;
use proxy_pool_checker::{
    Check, GrpcBinding, GrpcOptions, NetProber, ProbeTask, Prober, ProberOptions, RunnerOptions,
    Tier,
};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Proxy Pool checker: probes proxies for the controller"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Control plane, `https://controller:port` (`http://127.0.0.1:port` with
    /// `--loopback-plaintext`).
    #[arg(long)]
    controller: String,
    /// This checker's ID (the name in its certificate).
    #[arg(long)]
    checker_id: String,
    /// Echo server (plain HTTP) for EGRESS checks, `host:port`.
    #[arg(long)]
    echo: SocketAddr,
    /// Probes at once.
    #[arg(long, default_value_t = 32)]
    concurrency: u32,
    /// Seconds in-flight probes get after SIGTERM / Ctrl-C.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// Plaintext to a loopback controller (local runs and tests only).
    #[arg(long)]
    loopback_plaintext: bool,
    /// Trust bundle (PEM) for the controller's certificate.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Workload certificate chain (PEM).
    #[arg(long)]
    cert: Option<PathBuf>,
    /// Workload private key (PEM).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Name the controller's certificate carries.
    #[arg(long, default_value = "proxy-pool-controller")]
    server_name: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Probe one proxy now and print the observations (one JSON object per line).
    Probe {
        /// `http://user:pass@host:port` or `socks5://…` (never printed).
        #[arg(long)]
        proxy: String,
        /// Echo server (plain HTTP) reporting the source address, `host:port`.
        #[arg(long)]
        echo: SocketAddr,
        /// Extra TARGET checks, `host:port`.
        #[arg(long)]
        target: Vec<String>,
        /// Deadline of the whole probe, seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
    },
    /// Pull tasks from the controller's CheckerControlPlane and report observations.
    Run(RunArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    match args.command {
        Command::Probe {
            proxy,
            echo,
            target,
            timeout,
        } => rt.block_on(probe(&proxy, echo, &target, timeout)),
        Command::Run(run_args) => rt.block_on(run(run_args)),
    }
}

async fn probe(
    proxy: &str,
    echo: SocketAddr,
    targets: &[String],
    timeout: u64,
) -> anyhow::Result<()> {
    let url = parse_proxy_url(proxy).map_err(|e| anyhow::anyhow!("--proxy: {e}"))?;
    let mut checks = vec![Check::Basic, Check::Egress];
    for t in targets {
        let (host, port) = t.rsplit_once(':').context("--target must be host:port")?;
        let port = port.parse().context("--target port")?;
        checks.push(Check::Target {
            routing: "cli".into(),
            host: host.into(),
            port,
        });
    }
    let task = ProbeTask {
        task_id: "cli".into(),
        proxy_id: "cli".into(),
        protocol: url.protocol,
        host: url.host,
        port: url.port,
        credentials: url.credentials,
        checks,
        deadline: tokio::time::Instant::now() + Duration::from_secs(timeout),
    };
    let prober: Arc<dyn Prober> = Arc::new(NetProber::new(ProberOptions::new(echo)));
    let mut failed = false;
    for o in prober.probe(&task).await {
        failed |= !o.success;
        println!(
            "{}",
            serde_json::json!({
                "tier": o.tier.as_str(),
                "routing": o.routing,
                "success": o.success,
                "latencyMs": o.latency.map(|d| d.as_millis() as u64),
                "failure": o.failure.map(|f| f.as_str()),
                "egress": o.egress.map(|ip| ip.to_string()),
            })
        );
    }
    if failed {
        bail!("probe failed");
    }
    Ok(())
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let transport = if args.loopback_plaintext {
        ClientTransport::LoopbackPlaintext
    } else {
        let read = |p: &Option<PathBuf>, what: &str| -> anyhow::Result<String> {
            let p = p
                .as_ref()
                .with_context(|| format!("--{what} is required for mTLS"))?;
            std::fs::read_to_string(p).with_context(|| format!("reading --{what}"))
        };
        ClientTransport::Mtls {
            ca_pem: read(&args.ca, "ca")?,
            cert_pem: read(&args.cert, "cert")?,
            key_pem: Secret::new(read(&args.key, "key")?),
            server_name: args.server_name.clone(),
        }
    };
    let tiers = vec![Tier::Basic, Tier::Egress, Tier::Target];
    let concurrency =
        NonZeroUsize::new(args.concurrency as usize).context("--concurrency must be >= 1")?;
    let shutdown = CancellationToken::new();
    let binding = GrpcBinding::start(
        GrpcOptions {
            endpoint: args.controller.clone(),
            transport,
            client: ClientOptions::default(),
            checker_id: args.checker_id.clone(),
            instance_id: format!("{}-{}", args.checker_id, std::process::id()),
            max_concurrency: args.concurrency,
            tiers: tiers.clone(),
            idle_wait: Duration::from_millis(500),
        },
        shutdown.clone(),
    );
    let options = RunnerOptions {
        concurrency,
        tiers,
        grace: Duration::from_secs(args.grace),
        ..RunnerOptions::default()
    };
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: finishing in-flight probes");
        signal.cancel();
    });
    tracing::info!(checker = %args.checker_id, "checker running");
    let stats = proxy_pool_checker::run(
        Arc::new(binding.clone()),
        Arc::new(binding),
        Arc::new(NetProber::new(ProberOptions::new(args.echo))),
        options,
        shutdown,
    )
    .await;
    tracing::info!(?stats, "checker stopped");
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
