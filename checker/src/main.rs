//! `proxy-pool-checker` entry point: parses arguments and composes the library.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use proxy_pool_checker::cli::parse_proxy_url;
use proxy_pool_checker::{Check, NetProber, ProbeTask, Prober, ProberOptions};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Proxy Pool checker: probes proxies for the controller"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
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
    /// Pull tasks from the controller and report observations.
    Run {
        /// Controller control-plane address.
        #[arg(long)]
        controller: String,
    },
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
        Command::Run { controller: _ } => bail!(
            "the CheckerControlPlane gRPC binding is not built yet; embed the checker \
             library with an in-process binding (see docs/providers-and-health.md)"
        ),
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
        task_id: 1,
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
