//! `proxy-pool-checker` entry point: parses arguments and composes the library.

use proxy_pool_api::egress::EgressPolicy;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport, Endpoints};
use proxy_pool_checker::cli::parse_proxy_url;
use proxy_pool_checker::{
    Check, GrpcBinding, GrpcOptions, NetProber, ProbeTask, Prober, ProberOptions, RunnerOptions,
    Tier,
};
use proxy_pool_identity_client::{IdentityArgs, IdentityClient, WorkerTls, start_issued};
use proxy_pool_runtime::shutdown_signal;
use proxy_pool_runtime::telemetry::logging::{self, FORMAT_ENV, LogFormat, Stream};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Proxy Pool checker: probes proxies for the controller"
)]
struct Args {
    /// Log lines as `text` or `json` (one object per line), on standard error.
    #[arg(long, global = true, env = FORMAT_ENV, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Control plane, `https://controller:port` (`http://127.0.0.1:port` with
    /// `--loopback-plaintext`); several controller replicas separated by commas, tried
    /// in turn until the leader answers.
    #[arg(long, value_parser = Endpoints::parse_arg)]
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
    #[arg(long, conflicts_with = "identity_endpoint")]
    loopback_plaintext: bool,
    /// File-based mTLS: trust bundle (PEM) for the controller's certificate. The three
    /// files are re-read for every new control-plane connection.
    #[arg(long, alias = "tls-ca", conflicts_with = "identity_endpoint")]
    ca: Option<PathBuf>,
    /// File-based mTLS: workload certificate chain (PEM).
    #[arg(long, alias = "tls-cert")]
    cert: Option<PathBuf>,
    /// File-based mTLS: workload private key (PEM).
    #[arg(long, alias = "tls-key")]
    key: Option<PathBuf>,
    /// Worker-identity bootstrap (`--identity-endpoint` and its files).
    #[command(flatten)]
    identity: IdentityArgs,
    /// Name the controller's certificate carries.
    #[arg(long, default_value = "proxy-pool-controller")]
    server_name: String,
    /// Ops listener (`/healthz`, `/readyz`: registered with the controller, `/metrics`);
    /// off unless given.
    #[arg(long)]
    ops_listen: Option<SocketAddr>,
    #[command(flatten)]
    egress: EgressArgs,
}

/// The egress policy: proxies on refused addresses are never dialled.
#[derive(clap::Args, Debug)]
struct EgressArgs {
    /// More ranges (CIDR or IP) never dialled — the cluster's pod and service ranges;
    /// on top of the built-in loopback, link-local/metadata, unspecified, multicast.
    #[arg(long, env = "PROXY_POOL_EGRESS_DENY_CIDRS", value_delimiter = ',')]
    egress_deny_cidr: Vec<String>,
    /// Ranges dialled although denied (explicit opt-in, e.g. `127.0.0.0/8` for local
    /// runs with the vendor simulator).
    #[arg(long, env = "PROXY_POOL_EGRESS_ALLOW_CIDRS", value_delimiter = ',')]
    egress_allow_cidr: Vec<String>,
}

impl EgressArgs {
    fn policy(&self) -> anyhow::Result<EgressPolicy> {
        EgressPolicy::parse(&self.egress_deny_cidr, &self.egress_allow_cidr).map_err(|p| {
            anyhow::anyhow!("--egress-deny-cidr / --egress-allow-cidr: {}", p.join("; "))
        })
    }
}

#[derive(clap::Args, Debug)]
struct SmokeArgs {
    /// The Distribution API's extract URL, `http://host:port/api/v1/proxies/extract`.
    #[arg(long)]
    extract_url: http::Uri,
    /// File holding the client's API key (a mounted Secret key).
    #[arg(long)]
    api_key_file: PathBuf,
    /// The gateway's HTTP proxy listener, `host:port`.
    #[arg(long)]
    gateway: String,
    /// File holding the client's proxy user name.
    #[arg(long)]
    username_file: PathBuf,
    /// File holding the client's proxy password.
    #[arg(long)]
    password_file: PathBuf,
    /// Appended to the user name: routing parameters, e.g. `-region-shanghai`.
    #[arg(long, default_value = "")]
    username_suffix: String,
    /// URL fetched through the gateway (plain HTTP).
    #[arg(long)]
    target: http::Uri,
    /// Seconds each step may take, retries included.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
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
        #[command(flatten)]
        egress: EgressArgs,
    },
    /// Pull tasks from the controller's CheckerControlPlane and report observations.
    Run(RunArgs),
    /// The chart's `helm test`: extract one proxy with a client's API key, then send
    /// one request through a gateway with the client's proxy credentials. Each step is
    /// retried until it succeeds or `--timeout` runs out.
    SmokeTest(SmokeArgs),
    /// Serve the echo endpoint EGRESS checks use (`--echo` of `run`): it must be
    /// reachable from the vendor proxies' egress, usually on a public address.
    Echo {
        /// Address to listen on, `ip:port`.
        #[arg(long)]
        listen: SocketAddr,
        /// Connections served at once.
        #[arg(long, default_value_t = 1024)]
        max_connections: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Standard error: `probe` and `smoke-test` print their results on standard output.
    logging::init(args.log_format, Stream::Stderr).context("logging")?;
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    match args.command {
        Command::Probe {
            proxy,
            echo,
            target,
            timeout,
            egress,
        } => rt.block_on(probe(&proxy, echo, &target, timeout, egress.policy()?)),
        Command::Run(run_args) => rt.block_on(run(run_args)),
        Command::SmokeTest(smoke_args) => rt.block_on(smoke_test(smoke_args)),
        Command::Echo {
            listen,
            max_connections,
        } => rt.block_on(echo(listen, max_connections)),
    }
}

async fn echo(listen: SocketAddr, max_connections: usize) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(proxy_pool_checker::echo::serve(
        listener,
        proxy_pool_checker::listen::Limits {
            max_connections,
            ..proxy_pool_checker::echo::DEFAULT_LIMITS
        },
        stop.clone(),
    ));
    tracing::info!(%listen, "echo endpoint serving");
    shutdown_signal().await;
    stop.cancel();
    server.await.context("echo server task")?;
    Ok(())
}

async fn probe(
    proxy: &str,
    echo: SocketAddr,
    targets: &[String],
    timeout: u64,
    egress: EgressPolicy,
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
        dial: url,
        checks,
        deadline: tokio::time::Instant::now() + Duration::from_secs(timeout),
    };
    let prober: Arc<dyn Prober> = Arc::new(NetProber::new(ProberOptions {
        egress,
        ..ProberOptions::new(echo)
    }));
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
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: finishing in-flight probes");
        signal.cancel();
    });
    // The ops listener comes first, so the kubelet's probes answer while the checker
    // waits for its certificate; it is ready once a session is registered.
    let stats = Arc::new(proxy_pool_checker::RunStats::default());
    let session: Arc<std::sync::OnceLock<GrpcBinding>> = Arc::default();
    let registered = {
        let session = session.clone();
        Arc::new(move || session.get().is_some_and(GrpcBinding::registered))
    };
    let state = proxy_pool_checker::ops::OpsState::new(registered, stats.clone());
    let certificate = state.metrics.certificate().clone();
    let ops = match args.ops_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            tracing::info!(%addr, "ops listener serving /healthz, /readyz, /metrics");
            Some(tokio::spawn(proxy_pool_checker::ops::serve(
                listener,
                state,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let tls = if args.loopback_plaintext {
        None
    } else if let Some(cfg) = args.identity.client_config()? {
        let endpoint = args.identity.endpoint().unwrap_or_default();
        let bundle = cfg.ca_bundle_path.clone();
        let started = start_issued(
            IdentityClient::new(cfg),
            bundle.clone(),
            shutdown.clone().cancelled_owned(),
            shutdown.clone().cancelled_owned(),
        )
        .await;
        match started {
            Ok(Some(tls)) => Some(tls),
            Ok(None) => return Ok(()),
            Err(err) => {
                tracing::error!(error = %err, endpoint, checker = %args.checker_id, "the identity issuer refused this checker: not starting");
                bail!("no workload certificate: {err}");
            }
        }
    } else {
        let path = |p: &Option<PathBuf>, what: &str| -> anyhow::Result<PathBuf> {
            p.clone()
                .with_context(|| format!("--{what} is required for mTLS"))
        };
        let tls = WorkerTls::Files {
            ca: path(&args.ca, "ca")?,
            cert: path(&args.cert, "cert")?,
            key: path(&args.key, "key")?,
        };
        // Fail fast on unreadable files; later reads happen per connection.
        tls.material().context("control-plane TLS files")?;
        Some(tls)
    };
    if let Some(tls) = &tls {
        certificate.follow(tls);
    }
    let tiers = vec![Tier::Basic, Tier::Egress, Tier::Target];
    let concurrency =
        NonZeroUsize::new(args.concurrency as usize).context("--concurrency must be >= 1")?;
    let binding = GrpcBinding::start_with_tls(
        GrpcOptions {
            endpoint: args.controller.clone(),
            // Replaced by the TLS source when there is one.
            transport: ClientTransport::LoopbackPlaintext,
            client: ClientOptions::default(),
            checker_id: args.checker_id.clone(),
            instance_id: format!("{}-{}", args.checker_id, std::process::id()),
            max_concurrency: args.concurrency,
            tiers: tiers.clone(),
            idle_wait: Duration::from_millis(500),
        },
        tls.map(|t| (t, args.server_name.clone())),
        shutdown.clone(),
    );
    let options = RunnerOptions {
        concurrency,
        tiers,
        grace: Duration::from_secs(args.grace),
        ..RunnerOptions::default()
    };
    let _ = session.set(binding.clone());
    tracing::info!(checker = %args.checker_id, "checker running");
    proxy_pool_checker::run_counting(
        Arc::new(binding.clone()),
        Arc::new(binding),
        Arc::new(NetProber::new(ProberOptions {
            egress: args.egress.policy()?,
            ..ProberOptions::new(args.echo)
        })),
        options,
        stats.clone(),
        shutdown,
    )
    .await;
    if let Some(ops) = ops {
        let _ = ops.await;
    }
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        tasks_received = count(&stats.leased),
        tasks_completed = count(&stats.probed),
        tasks_failed = count(&stats.cancelled),
        observations_submitted = count(&stats.submitted),
        observations_dropped = count(&stats.dropped),
        "checker stopped"
    );
    Ok(())
}

async fn smoke_test(args: SmokeArgs) -> anyhow::Result<()> {
    use proxy_pool_checker::smoke;
    let read = |path: &PathBuf| -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_owned())
    };
    let api_key = read(&args.api_key_file)?;
    let username = format!("{}{}", read(&args.username_file)?, args.username_suffix);
    let password = read(&args.password_file)?;
    let budget = Duration::from_secs(args.timeout.max(1));
    let attempt = Duration::from_secs(10).min(budget);
    // Each step: retried with a pause until it succeeds or its budget is spent.
    async fn retrying<T, F, Fut>(budget: Duration, mut step: F) -> Result<T, smoke::SmokeError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, smoke::SmokeError>>,
    {
        let deadline = tokio::time::Instant::now() + budget;
        loop {
            match step().await {
                Ok(v) => return Ok(v),
                Err(e) if tokio::time::Instant::now() + Duration::from_secs(1) >= deadline => {
                    return Err(e);
                }
                Err(e) => {
                    tracing::info!(error = %e, "retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
    let n = retrying(budget, || {
        smoke::extract(&args.extract_url, &api_key, attempt)
    })
    .await?;
    println!("extract: {n} proxy returned");
    let status = retrying(budget, || {
        smoke::through_gateway(&args.gateway, &username, &password, &args.target, attempt)
    })
    .await?;
    println!("through the gateway: HTTP {}", status.as_u16());
    Ok(())
}
