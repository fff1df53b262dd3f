//! The load generator: drives a forward proxy (the gateway, squid, or a simulator proxy
//! directly) over real loopback sockets and measures it.
//!
//! Modes ([`Mode`]): absolute-URI `GET` over kept-alive client connections (HTTP proxy),
//! a new `CONNECT` tunnel per operation with one request inside, or the same over SOCKS5.
//! Pacing ([`Pacing`]): a closed loop (each connection sends its next request as soon as
//! the previous one finished) or an open loop at a fixed rate, where operation `i` is due
//! at `start + i / rate` and its latency is measured **from that intended time**, so a
//! stalled server shows up in the latencies of every request it held back (coordinated
//! omission corrected, as in wrk2). Latencies go into HDR histograms (µs); errors are
//! counted by kind ([`OpError`]).
//!
//! Everything is bounded: connections, rate, duration, operations, response sizes (a
//! fixed 16 KiB read buffer per connection), and each operation has a timeout.

mod config;
mod ops;
mod report;
mod response;

pub use config::*;
pub use report::{Percentiles, Report};
pub use response::{MAX_BODY, READ_BUFFER};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Histogram shards (workers record into `index % SHARDS`).
const SHARDS: usize = 16;

/// Why one operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpError {
    /// TCP connect to the proxy failed.
    Connect,
    /// The operation did not finish within the timeout.
    Timeout,
    /// The peer closed before the response was complete.
    Closed,
    /// Another I/O error.
    Io,
    /// Not HTTP, a bad framing, or a bad SOCKS5 message.
    BadResponse,
    /// A head or body beyond the load generator's limits.
    TooLarge,
    /// A non-2xx final response (from the proxy or the target).
    Status(u16),
    /// The proxy refused the CONNECT with this status.
    ProxyStatus(u16),
    /// The SOCKS5 proxy accepted none of the offered methods.
    SocksMethod,
    /// The SOCKS5 proxy refused the username/password.
    SocksAuth,
    /// The SOCKS5 proxy answered CONNECT with this reply code.
    SocksReply(u8),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect => f.write_str("connect"),
            Self::Timeout => f.write_str("timeout"),
            Self::Closed => f.write_str("closed"),
            Self::Io => f.write_str("io"),
            Self::BadResponse => f.write_str("bad-response"),
            Self::TooLarge => f.write_str("too-large"),
            Self::Status(c) => write!(f, "status-{c}"),
            Self::ProxyStatus(c) => write!(f, "proxy-status-{c}"),
            Self::SocksMethod => f.write_str("socks-method"),
            Self::SocksAuth => f.write_str("socks-auth"),
            Self::SocksReply(c) => write!(f, "socks-reply-{c}"),
        }
    }
}

fn new_histogram() -> Result<Histogram<u64>, ConfigError> {
    // 3 significant digits from 1 µs to an hour.
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
        .map_err(|e| ConfigError::Limit(format!("histogram: {e:?}")))
}

#[derive(Debug)]
struct Shard {
    latency: Histogram<u64>,
    service: Histogram<u64>,
    errors: BTreeMap<OpError, u64>,
    ok: u64,
}

#[derive(Debug)]
struct Shared {
    config: LoadConfig,
    requests: Vec<ops::Requests>,
    shards: Vec<Mutex<Shard>>,
    issued: AtomicU64,
    start: Instant,
    deadline: Option<Instant>,
    open_ops: u64,
    pacer: PacerState,
}

/// How early the pacer may release an operation (it sleeps in between; a sleep is only
/// precise to some tens of µs, and tokio's timer only to a millisecond, which is why a
/// thread paces open loops rather than the runtime's timer).
const PACER_SLACK: Duration = Duration::from_micros(50);

#[derive(Debug)]
struct PacerState {
    /// Open-loop operations `0..released` may be sent.
    released: AtomicU64,
    /// One per worker: operation `i` wakes worker `i % connections`.
    wake: Vec<Notify>,
    /// Set when the run ends (or is dropped): the pacer thread stops.
    stop: AtomicBool,
}

/// The open-loop pacer thread; stopping it on drop.
#[derive(Debug)]
struct Pacer {
    shared: Arc<Shared>,
}

impl Pacer {
    fn spawn(shared: Arc<Shared>, rate: f64) -> Self {
        let s = shared.clone();
        let start = shared.start.into_std();
        std::thread::spawn(move || {
            let n = s.config.connections as u64;
            for i in 0..s.open_ops {
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                loop {
                    if s.pacer.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let now = std::time::Instant::now();
                    if due <= now + PACER_SLACK {
                        break;
                    }
                    // Bounded sleeps, so a dropped run stops the thread soon.
                    std::thread::sleep((due - now - PACER_SLACK).min(Duration::from_millis(100)));
                }
                s.pacer.released.store(i + 1, Ordering::Release);
                // `i % n` < n = the number of wakers.
                s.pacer.wake[usize::try_from(i % n).unwrap_or(0)].notify_one();
            }
        });
        Self { shared }
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.shared.pacer.stop.store(true, Ordering::Relaxed);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_LATENCY_US)
}

/// Runs the load and returns what it measured. Errors only on a bad configuration;
/// failed operations are counted in the report.
pub async fn run(config: LoadConfig) -> Result<Report, ConfigError> {
    config.validate()?;
    let requests = config
        .proxies
        .iter()
        .map(|p| ops::Requests::new(p, &config.target))
        .collect();
    let shards = (0..SHARDS.min(config.connections))
        .map(|_| {
            Ok(Mutex::new(Shard {
                latency: new_histogram()?,
                service: new_histogram()?,
                errors: BTreeMap::new(),
                ok: 0,
            }))
        })
        .collect::<Result<_, ConfigError>>()?;
    // Workers start a moment after they are spawned, so the first open-loop sends
    // are not all late by the spawning time.
    let start = Instant::now() + Duration::from_millis(5);
    let open_ops = match config.pacing {
        Pacing::Open { rate } => config.open_loop_ops(rate),
        Pacing::Closed => 0,
    };
    let connections = config.connections;
    let shared = Arc::new(Shared {
        deadline: config.duration.map(|d| start + d),
        config,
        requests,
        shards,
        issued: AtomicU64::new(0),
        start,
        open_ops,
        pacer: PacerState {
            released: AtomicU64::new(0),
            wake: (0..connections).map(|_| Notify::new()).collect(),
            stop: AtomicBool::new(false),
        },
    });
    let mut workers = JoinSet::new();
    for index in 0..shared.config.connections {
        workers.spawn(worker(index, shared.clone()));
    }
    let _pacer = match shared.config.pacing {
        Pacing::Open { rate } => Some(Pacer::spawn(shared.clone(), rate)),
        Pacing::Closed => None,
    };
    let mut max_lag = Duration::ZERO;
    while let Some(done) = workers.join_next().await {
        // A worker panicking is a bug in the load generator; count it as lost work.
        if let Ok(lag) = done {
            max_lag = max_lag.max(lag);
        }
    }
    let elapsed = shared.start.elapsed();
    let mut latency = new_histogram()?;
    let mut service = new_histogram()?;
    let mut errors = BTreeMap::new();
    let mut ok = 0;
    for shard in &shared.shards {
        let s = shard.lock();
        // Same bounds everywhere: adding cannot fail.
        let _ = latency.add(&s.latency);
        let _ = service.add(&s.service);
        for (k, v) in &s.errors {
            *errors.entry(*k).or_insert(0) += v;
        }
        ok += s.ok;
    }
    Ok(Report::new(
        &shared.config,
        ok,
        errors,
        elapsed,
        latency,
        service,
        max_lag,
    ))
}

/// One connection's loop; returns how late (at most) it sent an operation.
async fn worker(index: usize, shared: Arc<Shared>) -> Duration {
    let cfg = &shared.config;
    let proxy = index % cfg.proxies.len();
    let addr = cfg.proxies[proxy].addr;
    let req = &shared.requests[proxy];
    let shard = &shared.shards[index % shared.shards.len()];
    let mut conn = None;
    let mut max_lag = Duration::ZERO;
    let mut k: u64 = 0;
    tokio::time::sleep_until(shared.start).await;
    loop {
        let intended = match cfg.pacing {
            Pacing::Closed => {
                if shared.deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if let Some(max) = cfg.max_ops
                    && shared.issued.fetch_add(1, Ordering::Relaxed) >= max
                {
                    break;
                }
                Instant::now()
            }
            Pacing::Open { rate } => {
                let i = (index as u64).saturating_add(k.saturating_mul(cfg.connections as u64));
                if i >= shared.open_ops {
                    break;
                }
                k += 1;
                // Released by the pacer thread at (or just before) its due time.
                while shared.pacer.released.load(Ordering::Acquire) <= i {
                    shared.pacer.wake[index].notified().await;
                }
                shared.start + Duration::from_secs_f64(i as f64 / rate)
            }
        };
        let sent = Instant::now();
        max_lag = max_lag.max(sent.saturating_duration_since(intended));
        // Released up to PACER_SLACK early: never count less than the service time.
        let intended = intended.min(sent);
        let outcome =
            tokio::time::timeout(cfg.op_timeout, ops::run_op(cfg.mode, addr, req, &mut conn))
                .await
                .unwrap_or_else(|_| {
                    conn = None;
                    Err(OpError::Timeout)
                });
        let done = Instant::now();
        let mut s = shard.lock();
        match outcome {
            Ok(()) => {
                s.ok += 1;
                s.latency.saturating_record(micros(done - intended));
                s.service.saturating_record(micros(done - sent));
            }
            Err(e) => *s.errors.entry(e).or_insert(0) += 1,
        }
    }
    max_lag
}

/// Idle tunnels opened by [`hold_tunnels`]; dropping this closes them.
#[derive(Debug)]
pub struct HeldTunnels {
    streams: Vec<TcpStream>,
    /// Tunnels that could not be opened, by kind.
    pub errors: BTreeMap<OpError, u64>,
}

impl HeldTunnels {
    /// Tunnels open.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

/// Opens `count` tunnels (CONNECT or SOCKS5 per `config.mode`; at most
/// `config.connections` handshakes at a time), makes one request inside each, and
/// keeps them open and idle — for measuring a proxy's memory per idle tunnel.
pub async fn hold_tunnels(config: &LoadConfig, count: usize) -> Result<HeldTunnels, ConfigError> {
    config.validate()?;
    if count == 0 || count > MAX_CONNECTIONS {
        return Err(ConfigError::Limit(format!(
            "tunnels: 1 to {MAX_CONNECTIONS}"
        )));
    }
    if config.mode == Mode::HttpProxy {
        return Err(ConfigError::Limit(
            "idle tunnels need the connect or socks5 mode".into(),
        ));
    }
    let requests: Arc<Vec<ops::Requests>> = Arc::new(
        config
            .proxies
            .iter()
            .map(|p| ops::Requests::new(p, &config.target))
            .collect(),
    );
    let mut set = JoinSet::new();
    let mut held = HeldTunnels {
        streams: Vec::with_capacity(count),
        errors: BTreeMap::new(),
    };
    let collect = |done: Result<Result<TcpStream, OpError>, tokio::task::JoinError>,
                   held: &mut HeldTunnels| match done {
        Ok(Ok(stream)) => held.streams.push(stream),
        Ok(Err(e)) => *held.errors.entry(e).or_insert(0) += 1,
        Err(_) => *held.errors.entry(OpError::Io).or_insert(0) += 1,
    };
    for i in 0..count {
        if set.len() >= config.connections
            && let Some(done) = set.join_next().await
        {
            collect(done, &mut held);
        }
        let proxy = i % config.proxies.len();
        let addr = config.proxies[proxy].addr;
        let (mode, timeout, requests) = (config.mode, config.op_timeout, requests.clone());
        set.spawn(async move {
            let req = &requests[proxy];
            match tokio::time::timeout(timeout, ops::open_idle_tunnel(mode, addr, req)).await {
                Ok(Ok(conn)) => Ok(conn.stream),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(OpError::Timeout),
            }
        });
    }
    while let Some(done) = set.join_next().await {
        collect(done, &mut held);
    }
    Ok(held)
}
