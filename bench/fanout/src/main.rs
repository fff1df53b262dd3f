//! Control-plane fan-out benchmark (issue #21 item 3; `bench/fanout/run.sh` starts the
//! controller and Redis, then this).
//!
//! 1. Fills the controller's Redis pool with `--proxies` AVAILABLE proxies through the
//!    pool's own provider/health ports (`pool.rs`).
//! 2. Registers `--sessions` simulated gateways (`session.rs`) and waits until they
//!    hold the pool between them (the controller assigns it).
//! 3. Changes `--change-rate` of the pool every second (refresh with a new expiry,
//!    removal, addition), warms up, then measures for `--duration-secs`: the time from
//!    each change batch's start to the answered ACK of the gateway session each change
//!    concerns (per change, and per batch: all of its gateways), snapshot bytes (full vs
//!    delta), the controller's CPU (utime + stime over the window ÷ wall time) and RSS.
//!
//! Prints a summary and one JSON line (`--json` also writes it to a file).

mod pool;
mod session;
mod track;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use activity_pool::{RedisConnector, RedisOptions, RedisPool};
use anyhow::{Context, Result};
use clap::Parser;
use tokio::sync::watch;

use pool::{PoolDriver, PoolSpec};
use session::{Counters, Shared};
use track::{Tracker, quantile_ms};

/// Control-plane fan-out load harness.
#[derive(Debug, Parser)]
struct Args {
    /// The controller's control-plane endpoint (loopback plaintext).
    #[arg(long, default_value = "http://127.0.0.1:9443")]
    endpoint: String,
    /// The controller's Redis store (`redis://127.0.0.1:PORT/`).
    #[arg(long)]
    redis: String,
    /// Upstreams the proxies belong to (configured in the controller), comma-separated.
    #[arg(
        long,
        default_value = "fanout-a,fanout-b,fanout-c,fanout-d",
        value_delimiter = ','
    )]
    upstreams: Vec<String>,
    /// Proxies in the pool.
    #[arg(long, default_value_t = 100_000)]
    proxies: usize,
    /// Simulated gateway sessions.
    #[arg(long, default_value_t = 500)]
    sessions: usize,
    /// Gateway group of every session.
    #[arg(long, default_value = "fanout")]
    group: String,
    /// Share of the pool changed per second.
    #[arg(long, default_value_t = 0.01)]
    change_rate: f64,
    /// Of the changes: refreshed with a new expiry.
    #[arg(long, default_value_t = 0.7)]
    refresh_share: f64,
    /// Of the changes: removed (and as many new proxies added).
    #[arg(long, default_value_t = 0.15)]
    remove_share: f64,
    /// TTL of every upsert, seconds.
    #[arg(long, default_value_t = 900)]
    ttl_secs: u64,
    /// Registration spacing between sessions, milliseconds.
    #[arg(long, default_value_t = 5)]
    stagger_ms: u64,
    /// Longest wait for the sessions to hold the pool, seconds.
    #[arg(long, default_value_t = 240)]
    ready_timeout_secs: u64,
    /// Churn before the measured window, seconds.
    #[arg(long, default_value_t = 15)]
    warmup_secs: u64,
    /// Measured window, seconds.
    #[arg(long, default_value_t = 60)]
    duration_secs: u64,
    /// After the window, how long the last batches' ACKs are waited for, seconds.
    #[arg(long, default_value_t = 10)]
    settle_secs: u64,
    /// The controller's PID (CPU, RSS).
    #[arg(long)]
    controller_pid: Option<u32>,
    /// Redis's PID (CPU).
    #[arg(long)]
    redis_pid: Option<u32>,
    /// Clock ticks per second of /proc/<pid>/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Also write the JSON result here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Print each session's first failure.
    #[arg(long)]
    verbose: bool,
}

/// utime + stime of `pid` (`"self"` for this process), seconds.
fn cpu_secs(pid: &str, clk_tck: u64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces): state is field 3.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    #[allow(clippy::cast_precision_loss)]
    Some((utime + stime) as f64 / clk_tck.max(1) as f64)
}

/// A `kB` line of /proc/<pid>/status (`VmRSS`, `VmHWM`), in MiB.
fn status_mib(pid: &str, key: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    #[allow(clippy::cast_precision_loss)]
    Some(kb as f64 / 1024.0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

struct CpuMark {
    wall: Instant,
    controller: Option<f64>,
    redis: Option<f64>,
    harness: Option<f64>,
}

fn cpu_mark(args: &Args) -> CpuMark {
    let pid = |p: Option<u32>| p.map(|p| p.to_string());
    CpuMark {
        wall: Instant::now(),
        controller: pid(args.controller_pid).and_then(|p| cpu_secs(&p, args.clk_tck)),
        redis: pid(args.redis_pid).and_then(|p| cpu_secs(&p, args.clk_tck)),
        harness: cpu_secs("self", args.clk_tck),
    }
}

fn cores(a: Option<f64>, b: Option<f64>, wall: f64) -> Option<f64> {
    Some((b? - a?) / wall)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let redis = RedisPool::new(
        RedisConnector::direct(&args.redis).context("redis address")?,
        RedisOptions {
            command_timeout: Duration::from_secs(5),
            ..RedisOptions::default()
        },
    )
    .await
    .context("connect to redis")?;
    let mut driver = PoolDriver::new(
        redis,
        PoolSpec {
            upstreams: args.upstreams.clone(),
            proxies: args.proxies,
            ttl: Duration::from_secs(args.ttl_secs),
            change_rate: args.change_rate,
            refresh_share: args.refresh_share,
            remove_share: args.remove_share,
        },
    )?;
    let t = Instant::now();
    driver.fill().await?;
    eprintln!(
        "filled the pool with {} AVAILABLE proxies in {:.1} s",
        args.proxies,
        t.elapsed().as_secs_f64()
    );

    let tracker = Arc::new(Tracker::default());
    let shared = Arc::new(Shared {
        endpoint: args.endpoint.clone(),
        group: args.group.clone(),
        tracker: tracker.clone(),
        counters: Counters::default(),
        proxies: AtomicI64::new(0),
        ready: AtomicI64::new(0),
        verbose: AtomicBool::new(args.verbose),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::with_capacity(args.sessions);
    let t = Instant::now();
    for i in 0..args.sessions {
        tasks.push(tokio::spawn(session::run(
            i,
            shared.clone(),
            stop_rx.clone(),
        )));
        tokio::time::sleep(Duration::from_millis(args.stagger_ms)).await;
    }
    // Ready: every session applied a snapshot and the held total stopped growing.
    let deadline = Instant::now() + Duration::from_secs(args.ready_timeout_secs);
    let (mut last, mut stable_since) = (-1i64, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let held = shared.proxies.load(Ordering::Relaxed);
        let ready = shared.ready.load(Ordering::Relaxed);
        if held != last {
            last = held;
            stable_since = Instant::now();
        }
        let all = usize::try_from(ready).unwrap_or(0) >= args.sessions;
        if all && held > 0 && stable_since.elapsed() >= Duration::from_secs(5) {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("warning: not settled within the ready timeout");
            break;
        }
    }
    eprintln!(
        "{} sessions ready, holding {} proxies, after {:.1} s (failures so far: {})",
        shared.ready.load(Ordering::Relaxed),
        shared.proxies.load(Ordering::Relaxed),
        t.elapsed().as_secs_f64(),
        shared.counters.failures.load(Ordering::Relaxed),
    );

    // Churn: one batch a second until told to stop.
    let (churn_stop_tx, mut churn_stop) = watch::channel(false);
    let churn_tracker = tracker.clone();
    let churn = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut writes = Vec::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = churn_stop.wait_for(|s| *s) => break,
            }
            match driver.batch(&churn_tracker).await {
                Ok(write) => writes.push(write),
                Err(e) => {
                    eprintln!("change batch failed: {e:#}");
                    break;
                }
            }
        }
        writes
    });

    tokio::time::sleep(Duration::from_secs(args.warmup_secs)).await;
    let first_batch = tracker.batches();
    shared.counters.reset();
    let held_at_start = shared.proxies.load(Ordering::Relaxed);
    let start = cpu_mark(&args);
    eprintln!("measuring window started ({} s)", args.duration_secs);
    let load_start = load_average();
    let ctl_pid = args.controller_pid.map(|p| p.to_string());
    let mut max_rss = 0.0f64;
    let window = Duration::from_secs(args.duration_secs);
    while start.wall.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(rss) = ctl_pid.as_deref().and_then(|p| status_mib(p, "VmRSS")) {
            max_rss = max_rss.max(rss);
        }
    }
    let end = cpu_mark(&args);
    let last_batch = tracker.batches();
    let load_end = load_average();
    let c = &shared.counters;
    let read = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (full_msgs, full_bytes) = (read(&c.full_msgs), read(&c.full_bytes));
    let (delta_msgs, delta_bytes) = (read(&c.delta_msgs), read(&c.delta_bytes));
    let (empty_deltas, delta_entries) = (read(&c.empty_deltas), read(&c.delta_entries));
    let (acks, nacks, reports, failures) = (
        read(&c.acks),
        read(&c.nacks),
        read(&c.reports),
        read(&c.failures),
    );
    let _ = churn_stop_tx.send(true);
    let writes = churn.await.unwrap_or_default();
    let settle = Instant::now();
    while tracker.pending() > 0 && settle.elapsed() < Duration::from_secs(args.settle_secs) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }

    let wall = end.wall.duration_since(start.wall).as_secs_f64();
    let s = tracker.summary(first_batch, last_batch);
    let ctl_cores = cores(start.controller, end.controller, wall);
    let redis_cores = cores(start.redis, end.redis, wall);
    let harness_cores = cores(start.harness, end.harness, wall);
    let hwm = ctl_pid.as_deref().and_then(|p| status_mib(p, "VmHWM"));
    #[allow(clippy::cast_precision_loss)]
    let per_session_s = |b: u64| b as f64 / args.sessions.max(1) as f64 / wall;
    let mut write_ms: Vec<Duration> = writes;
    write_ms.sort_unstable();
    let result = serde_json::json!({
        "sessions": args.sessions,
        "proxies": args.proxies,
        "proxies_held_at_start": held_at_start,
        "change_rate": args.change_rate,
        "window_s": wall,
        "load_average_start": load_start,
        "load_average_end": load_end,
        "batches": s.batches,
        "changes": s.changes,
        "changes_unacked": s.unacked,
        "batches_incomplete": s.incomplete,
        "change_to_ack_ms": {
            "p50": quantile_ms(&s.per_change, 0.5),
            "p99": quantile_ms(&s.per_change, 0.99),
            "max": quantile_ms(&s.per_change, 1.0),
        },
        "batch_to_all_acks_ms": {
            "p50": quantile_ms(&s.per_batch, 0.5),
            "p99": quantile_ms(&s.per_batch, 0.99),
            "max": quantile_ms(&s.per_batch, 1.0),
        },
        "pool_write_ms_p50": quantile_ms(&write_ms, 0.5),
        "controller_cores": ctl_cores,
        "controller_rss_max_mib": (max_rss > 0.0).then_some(max_rss),
        "controller_rss_hwm_mib": hwm,
        "redis_cores": redis_cores,
        "harness_cores": harness_cores,
        "full": {"msgs": full_msgs, "bytes": full_bytes},
        "delta": {"msgs": delta_msgs, "bytes": delta_bytes, "empty": empty_deltas, "entries": delta_entries},
        "per_session_per_s": {
            "delta_bytes": per_session_s(delta_bytes),
            "full_bytes": per_session_s(full_bytes),
            "delta_msgs": per_session_s(delta_msgs),
        },
        "acks": acks,
        "nacks": nacks,
        "reports": reports,
        "session_failures": failures,
    });
    eprintln!(
        "{} sessions, {} proxies, {:.0} s: change→ACK p50 {:?} ms p99 {:?} ms; batch→all ACKs p50 {:?} ms p99 {:?} ms; controller {:?} cores, RSS max {:.0} MiB; delta {:.0} B/session/s, full {:.0} B/session/s; unacked {} of {}; failures {}",
        args.sessions,
        args.proxies,
        wall,
        quantile_ms(&s.per_change, 0.5),
        quantile_ms(&s.per_change, 0.99),
        quantile_ms(&s.per_batch, 0.5),
        quantile_ms(&s.per_batch, 0.99),
        ctl_cores,
        max_rss,
        per_session_s(delta_bytes),
        per_session_s(full_bytes),
        s.unacked,
        s.changes,
        failures,
    );
    let line = result.to_string();
    println!("{line}");
    if let Some(path) = &args.json {
        std::fs::write(path, format!("{line}\n")).context("write --json")?;
    }
    Ok(())
}
