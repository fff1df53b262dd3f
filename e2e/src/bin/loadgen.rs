//! `loadgen`: drives a forward proxy over loopback and reports req/s, latency
//! percentiles (HDR histograms) and errors by kind. See docs/benchmarks.md.
//!
//! ```text
//! loadgen run  --mode http|connect|socks5 --proxy http://user:pass@127.0.0.1:8080 \
//!              --target http://127.0.0.1:8901/ [--connections 32] [--rate 5000] \
//!              [--requests N] [--duration 10s] [--format text|json]
//! loadgen hold --mode connect --proxy … --target … --tunnels 1000 [--seconds 60]
//! ```

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use proxy_pool_e2e::loadgen::{self, LoadConfig, Mode, Pacing, ProxyEndpoint, Target};
use std::io::Write as _;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    version,
    about = "Load generator for forward proxies (loopback only)"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
    /// Runtime worker threads (1: a single-threaded runtime).
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs load and prints a report.
    Run(RunArgs),
    /// Opens N idle tunnels, prints `ready N`, keeps them open until SIGTERM,
    /// Ctrl-C or --seconds.
    Hold(HoldArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeArg {
    Http,
    Connect,
    Socks5,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
struct Common {
    /// What one operation is.
    #[arg(long, value_enum, default_value = "http")]
    mode: ModeArg,
    /// Proxy `[scheme://][user:pass@]ip:port`; repeat to spread connections.
    #[arg(long = "proxy", required = true)]
    proxies: Vec<String>,
    /// Target URL `http://127.0.0.1:PORT/path`.
    #[arg(long)]
    target: String,
    /// Concurrent connections (hold: concurrent handshakes).
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Per-operation timeout, e.g. `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Open loop at this many operations per second (default: closed loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Stop after this many operations.
    #[arg(long)]
    requests: Option<u64>,
    /// Stop issuing after this long, e.g. `10s`.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(Debug, clap::Args)]
struct HoldArgs {
    #[command(flatten)]
    common: Common,
    /// Tunnels to open and hold.
    #[arg(long)]
    tunnels: usize,
    /// Longest hold.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("bad duration {s:?}"))
}

fn config(
    c: &Common,
    pacing: Pacing,
    max_ops: Option<u64>,
    duration: Option<Duration>,
) -> anyhow::Result<LoadConfig> {
    let proxies = c
        .proxies
        .iter()
        .map(|p| ProxyEndpoint::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LoadConfig {
        mode: match c.mode {
            ModeArg::Http => Mode::HttpProxy,
            ModeArg::Connect => Mode::Connect,
            ModeArg::Socks5 => Mode::Socks5,
        },
        proxies,
        target: Target::parse(&c.target)?,
        connections: c.connections,
        pacing,
        max_ops,
        duration,
        op_timeout: c.timeout,
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!((1..=64).contains(&args.threads), "--threads: 1 to 64");
    let runtime = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .context("starting the runtime")?;
    runtime.block_on(async move {
        match args.command {
            Command::Run(a) => run(a).await,
            Command::Hold(a) => hold(a).await,
        }
    })
}

async fn run(a: RunArgs) -> anyhow::Result<()> {
    let pacing = match a.rate {
        Some(rate) => Pacing::Open { rate },
        None => Pacing::Closed,
    };
    let cfg = config(&a.common, pacing, a.requests, a.duration)?;
    let report = loadgen::run(cfg).await?;
    let mut out = std::io::stdout().lock();
    match a.format {
        Format::Text => out.write_all(report.text().as_bytes())?,
        Format::Json => writeln!(out, "{}", serde_json::to_string(&report)?)?,
    }
    Ok(())
}

async fn hold(a: HoldArgs) -> anyhow::Result<()> {
    let cfg = config(&a.common, Pacing::Closed, Some(1), None)?;
    let held = loadgen::hold_tunnels(&cfg, a.tunnels).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {}", held.len())?;
        for (kind, n) in &held.errors {
            writeln!(out, "error {kind}: {n}")?;
        }
        out.flush()?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(a.seconds)) => {}
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    drop(held);
    Ok(())
}
