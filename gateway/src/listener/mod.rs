//! Serving: accept loops for the HTTP and SOCKS5 listeners (bound by the caller),
//! connection caps, periodic maintenance, and the shutdown protocol — stop accepting
//! → let in-flight requests and tunnels finish → after the grace period, force.
//!
//! Two ways to run: [`Gateway::run`] serves on the caller's runtime (tests, embedding);
//! [`Gateway::run_workers`] starts one thread per data-plane worker, each with its own
//! single-threaded runtime accepting on its own `SO_REUSEPORT` listeners (see
//! [`bind_reuseport`]), so a connection lives on one thread from accept to close and
//! no task is ever stolen or woken across threads. Routing, sessions, capacity
//! counters, snapshots, outcomes and usage are shared (atomics and locks); idle pooled
//! upstream connections are per worker, because a socket belongs to the runtime that
//! registered it.

mod forward;
mod http;
mod proxy_header;
mod reply;
mod socks5;
mod tunnel;

pub use proxy_header::TrustedSources;
pub use reply::proxy_credentials;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use proxy_pool_identity_client::{CertificateExpiry, WorkerTls};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use proxy_pool_api::throttle::{SourceSlot, SourceSlots};
use proxy_pool_runtime::net::accept_or_stop;

use crate::config::GatewayConfig;
use crate::metrics::{ListenerKind, Metrics, StateCollector};
use crate::outcome::{self, OutcomeReceiver, OutcomeSink};
use crate::route::Router;
use crate::snapshot::SnapshotHandle;
use crate::upstream::pool::IdlePool;

/// How often pools and session tables are swept.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(5);
/// Extra wait for tasks after they were forced to stop.
const FORCE_WAIT: Duration = Duration::from_secs(2);

/// The listeners to serve, bound by the caller (tests use `127.0.0.1:0`).
#[derive(Debug, Default)]
pub struct Listeners {
    /// HTTP proxy listener.
    pub http: Option<TcpListener>,
    /// SOCKS5 listener.
    pub socks5: Option<TcpListener>,
}

/// One data-plane worker's listeners: standard sockets, so that they can be bound on
/// one thread and registered with the worker's runtime on its own thread.
#[derive(Debug, Default)]
pub struct WorkerListeners {
    /// HTTP proxy listener.
    pub http: Option<std::net::TcpListener>,
    /// SOCKS5 listener.
    pub socks5: Option<std::net::TcpListener>,
}

/// Accept backlog of each listener.
const BACKLOG: u32 = 1024;

/// Binds `n` listeners to `addr` with `SO_REUSEPORT` (and `SO_REUSEADDR`), one per
/// data-plane worker: the kernel spreads new connections over them. `TCP_NODELAY` is
/// set on the listeners, so accepted connections have it from the start. With port 0 the
/// first listener picks the port and the others join it. Must be called inside a
/// Tokio runtime (the sockets are returned deregistered, as standard listeners).
///
/// `SO_REUSEPORT` lets another socket of the same user bind the same address with the
/// same option and receive a share of the connections; the gateway runs as its own
/// user in its own network namespace in a cluster.
pub fn bind_reuseport(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let mut out = Vec::with_capacity(n.max(1));
    let mut at = addr;
    for _ in 0..n.max(1) {
        let socket = if at.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        // Inherited by accepted sockets: no `setsockopt` per connection.
        socket.set_nodelay(true)?;
        socket.bind(at)?;
        let listener = socket.listen(BACKLOG)?;
        at = listener.local_addr()?;
        out.push(listener.into_std()?);
    }
    Ok(out)
}

/// How serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeReport {
    /// Every in-flight connection finished within the grace period.
    pub drained: bool,
}

/// State every connection task shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) snapshots: SnapshotHandle,
    pub(crate) router: Arc<Router>,
    pub(crate) config: GatewayConfig,
    pub(crate) pool: IdlePool,
    pub(crate) outcomes: OutcomeSink,
    pub(crate) metrics: Arc<Metrics>,
    /// Cancelled when shutdown starts: no new connections or requests.
    pub(crate) draining: CancellationToken,
    /// Cancelled when the grace period ends: in-flight work is cut.
    pub(crate) force: CancellationToken,
    /// Connections accepted by this worker (its share of the `SO_REUSEPORT` spread).
    accepted: Counter,
    /// Open connections, in total and per source address, across workers (fairly shared).
    per_source: Arc<SourceSlots>,
}

impl Shared {
    /// The state of another data-plane worker: everything shared except the idle
    /// upstream pool, which is per runtime.
    fn for_worker(&self) -> Self {
        let up = &self.config.upstream;
        Self {
            snapshots: self.snapshots.clone(),
            router: self.router.clone(),
            config: self.config.clone(),
            pool: IdlePool::new(
                up.pool_max_idle_per_key,
                up.pool_max_idle_total,
                up.pool_idle_timeout,
            ),
            outcomes: self.outcomes.clone(),
            metrics: self.metrics.clone(),
            // Children: a worker's connections wait on tokens of its own (no lock
            // shared with the other workers per connection); cancelling the gateway's
            // cancels them.
            draining: self.draining.child_token(),
            force: self.force.child_token(),
            accepted: Counter::default(),
            per_source: self.per_source.clone(),
        }
    }
}

/// A configured gateway, ready to serve.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
    /// The states of the workers started by [`Gateway::run_workers`].
    workers: Arc<Mutex<Vec<Arc<Shared>>>>,
    telemetry: Arc<Telemetry>,
}

/// The metrics registry and what is added to it after the start.
#[derive(Debug)]
struct Telemetry {
    /// Every `proxy_pool_gateway_…` metric.
    registry: Registry,
    /// The worker certificate's expiry, once there is an issued identity.
    certificate: CertificateExpiry,
    /// Accept counters of the data-plane workers, by worker index.
    worker_accepts: Arc<Mutex<Vec<Counter>>>,
}

impl Gateway {
    /// Builds a gateway reading `snapshots`. Outcome observations go to the returned
    /// receiver (bounded; drops when nobody drains it).
    pub fn new(snapshots: SnapshotHandle, config: GatewayConfig) -> (Self, OutcomeReceiver) {
        let (sink, receiver) = outcome::queue(config.outcome_queue);
        let per_source = Arc::new(SourceSlots::new(
            config.max_connections,
            config.max_connections_per_source,
        ));
        let up = &config.upstream;
        let router = Arc::new(Router::with(
            config.auth,
            crate::session::SessionTable::new(config.max_sessions)
                .with_client_quota(config.max_sessions_per_client),
            config.egress.clone(),
            config.auth_throttle,
        ));
        let mut registry = proxy_pool_runtime::telemetry::metrics::registry("gateway");
        let metrics = Arc::new(Metrics::register(&mut registry));
        snapshots.breakdown().register(&mut registry);
        let certificate = CertificateExpiry::register(&mut registry);
        let mut telemetry = Telemetry {
            registry,
            certificate,
            worker_accepts: Arc::default(),
        };
        let collector = StateCollector {
            snapshots: snapshots.clone(),
            max_connections: config.max_connections,
            outcomes: sink.clone(),
            usage: router.usage().clone(),
            workers: telemetry.worker_accepts.clone(),
        };
        telemetry.registry.register_collector(Box::new(collector));
        let shared = Shared {
            router,
            pool: IdlePool::new(
                up.pool_max_idle_per_key,
                up.pool_max_idle_total,
                up.pool_idle_timeout,
            ),
            snapshots,
            config,
            outcomes: sink,
            metrics,
            draining: CancellationToken::new(),
            force: CancellationToken::new(),
            accepted: Counter::default(),
            per_source,
        };
        (
            Self {
                shared: Arc::new(shared),
                workers: Arc::default(),
                telemetry: Arc::new(telemetry),
            },
            receiver,
        )
    }

    /// Counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The metrics in the OpenMetrics text format (`/metrics`).
    pub fn render_metrics(&self) -> String {
        let mut text = String::with_capacity(16 * 1024);
        if let Err(err) =
            prometheus_client::encoding::text::encode(&mut text, &self.telemetry.registry)
        {
            warn!(error = %err, "metrics not encoded");
        }
        text
    }

    /// Exports the expiry of the worker certificate `tls` presents (renewals included)
    /// as `certificate_expiry_timestamp_seconds{certificate="worker"}`.
    pub fn follow_worker_tls(&self, tls: &WorkerTls) {
        self.telemetry.certificate.follow(tls);
    }

    /// Per-Routing usage recorded on admission (give it to the control-plane agent).
    pub fn usage(&self) -> &Arc<crate::usage::UsageRecorder> {
        self.shared.router.usage()
    }

    /// The outcome sink (its drop/record counters).
    pub fn outcomes(&self) -> &OutcomeSink {
        &self.shared.outcomes
    }

    /// Idle pooled upstream connections now.
    pub fn pooled_connections(&self) -> usize {
        let workers: usize = self.workers.lock().iter().map(|w| w.pool.len()).sum();
        self.shared.pool.len() + workers
    }

    /// Serves until `shutdown` resolves, then drains.
    pub async fn run(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()>,
    ) -> ServeReport {
        let shared = self.shared;
        let tracker = TaskTracker::new();
        let mut loops = serve_loops(
            [
                (listeners.http, ListenerKind::Http),
                (listeners.socks5, ListenerKind::Socks5),
            ],
            &shared,
            &tracker,
        );
        shutdown.await;
        info!("shutdown: no new connections, draining in-flight work");
        shared.draining.cancel();
        while loops.join_next().await.is_some() {}
        drain(&shared, &tracker).await
    }
}

impl Gateway {
    /// Serves on one thread per entry of `workers`, each with a single-threaded
    /// runtime accepting on that entry's listeners, until `shutdown` resolves; then
    /// drains like [`Gateway::run`]. The caller's runtime only waits (and runs the
    /// control plane). Fails only when a worker thread or runtime cannot be started.
    pub async fn run_workers(
        self,
        workers: Vec<WorkerListeners>,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<ServeReport> {
        let shared = self.shared.clone();
        let tracker = TaskTracker::new();
        // One token per worker, dropped when its accept loops have stopped: once all
        // are gone, no connection task can be added to `tracker`.
        let accepting = TaskTracker::new();
        let done = CancellationToken::new();
        let mut threads = Vec::with_capacity(workers.len());
        for (i, listeners) in workers.into_iter().enumerate() {
            let worker = Arc::new(shared.for_worker());
            self.workers.lock().push(worker.clone());
            self.telemetry
                .worker_accepts
                .lock()
                .push(worker.accepted.clone());
            let started = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|runtime| {
                    let (tracker, done) = (tracker.clone(), done.clone());
                    let token = accepting.token();
                    std::thread::Builder::new()
                        .name(format!("gateway-worker-{i}"))
                        .spawn(move || {
                            runtime.block_on(worker_main(worker, listeners, tracker, token, done));
                        })
                });
            match started {
                Ok(thread) => threads.push(thread),
                Err(err) => {
                    shared.draining.cancel();
                    shared.force.cancel();
                    done.cancel();
                    join_workers(threads).await;
                    return Err(err);
                }
            }
        }
        shutdown.await;
        info!("shutdown: no new connections, draining in-flight work");
        shared.draining.cancel();
        accepting.close();
        accepting.wait().await;
        let report = drain(&shared, &tracker).await;
        done.cancel();
        join_workers(threads).await;
        Ok(report)
    }
}

/// One data-plane worker: its accept loops and maintenance on the current
/// (single-threaded) runtime; connection tasks are spawned onto it. Returns once
/// `done` fires after the drain; tasks still running then are dropped with the runtime.
async fn worker_main(
    shared: Arc<Shared>,
    listeners: WorkerListeners,
    tracker: TaskTracker,
    accepting: tokio_util::task::task_tracker::TaskTrackerToken,
    done: CancellationToken,
) {
    let register = |listener: Option<std::net::TcpListener>, kind: ListenerKind| {
        let listener = listener?;
        match listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(listener))
        {
            Ok(listener) => Some(listener),
            Err(err) => {
                error!(error = %err, ?kind, "listener not served by this worker");
                None
            }
        }
    };
    let mut loops = serve_loops(
        [
            (
                register(listeners.http, ListenerKind::Http),
                ListenerKind::Http,
            ),
            (
                register(listeners.socks5, ListenerKind::Socks5),
                ListenerKind::Socks5,
            ),
        ],
        &shared,
        &tracker,
    );
    while loops.join_next().await.is_some() {}
    drop(accepting);
    done.cancelled().await;
    // Pooled sockets belong to this runtime: close them before it goes.
    shared.pool.sweep(|_| false);
}

/// The accept loops of `listeners` and the maintenance task, on the current runtime.
fn serve_loops(
    listeners: [(Option<TcpListener>, ListenerKind); 2],
    shared: &Arc<Shared>,
    tracker: &TaskTracker,
) -> JoinSet<()> {
    let mut loops = JoinSet::new();
    for (listener, kind) in listeners {
        if let Some(listener) = listener {
            loops.spawn(accept_loop(listener, kind, shared.clone(), tracker.clone()));
        }
    }
    loops.spawn(maintenance(shared.clone()));
    loops
}

async fn join_workers(threads: Vec<std::thread::JoinHandle<()>>) {
    let joined = tokio::task::spawn_blocking(move || {
        threads.into_iter().filter_map(|t| t.join().err()).count()
    })
    .await;
    match joined {
        Ok(0) => {}
        Ok(n) => error!(threads = n, "data-plane worker threads panicked"),
        Err(err) => error!(error = %err, "joining the data-plane workers failed"),
    }
}

/// Waits for in-flight connections for the grace period, then cuts them.
async fn drain(shared: &Shared, tracker: &TaskTracker) -> ServeReport {
    tracker.close();
    let grace = shared.config.drain_grace;
    let drained = tokio::time::timeout(grace, tracker.wait()).await.is_ok();
    if !drained {
        warn!(
            remaining = tracker.len(),
            "grace period over, closing what is left"
        );
        shared.force.cancel();
        let _ = tokio::time::timeout(FORCE_WAIT, tracker.wait()).await;
    }
    ServeReport { drained }
}

/// Serves `listeners` with `snapshots` until `shutdown`, discarding outcome
/// observations (use [`Gateway`] to consume them).
pub async fn serve(
    listeners: Listeners,
    snapshots: SnapshotHandle,
    config: GatewayConfig,
    shutdown: impl Future<Output = ()>,
) -> ServeReport {
    let (gateway, mut outcomes) = Gateway::new(snapshots, config);
    let discard = tokio::spawn(async move { while outcomes.rx.recv().await.is_some() {} });
    let report = gateway.run(listeners, shutdown).await;
    discard.abort();
    report
}

async fn accept_loop(
    listener: TcpListener,
    kind: ListenerKind,
    shared: Arc<Shared>,
    tracker: TaskTracker,
) {
    // Whether accepted sockets inherit TCP_NODELAY from this listener (they do on
    // Linux when the listener has it): probed on the first connection, then the
    // per-connection `setsockopt` is skipped.
    let mut inherits_nodelay = None;
    let on_error = |err: &std::io::Error| debug!(error = %err, "accept failed");
    let pause = Duration::from_millis(20);
    // One wait on the drain token for the loop's life, not one per accept.
    let stop = shared.draining.cancelled();
    tokio::pin!(stop);
    loop {
        let Some((stream, peer)) = accept_or_stop(&listener, stop.as_mut(), pause, on_error).await
        else {
            return;
        };
        let Some(slot) = shared.per_source.acquire(peer.ip()) else {
            shared.metrics.connections_refused.inc();
            continue;
        };
        shared.metrics.accepted(kind);
        shared.accepted.inc();
        let has_nodelay =
            *inherits_nodelay.get_or_insert_with(|| stream.nodelay().unwrap_or(false));
        if !has_nodelay {
            let _ = stream.set_nodelay(true);
        }
        let shared = shared.clone();
        tracker.spawn(async move {
            let Some((client, slot)) = client_of(&shared, &stream, peer.ip(), slot).await else {
                return;
            };
            shared.metrics.open_connections.inc();
            // Biased: the connection first (no random draw per wake-up).
            tokio::select! {
                biased;
                () = serve_connection(&shared, kind, stream, client) => {}
                () = shared.force.cancelled() => debug!("connection cut at the end of the grace period"),
                () = slot.evicted() => debug!("connection displaced by a smaller source"),
            }
            drop(slot);
            shared.metrics.open_connections.dec();
        });
    }
}

/// The client a connection serves and its slot: from a trusted load balancer, the
/// address its PROXY protocol header names, holding that client's slot in place of the
/// balancer's (whose slot bounded the wait for the header); otherwise the peer itself.
/// `None` when the header is missing, malformed or late (the connection is closed), or
/// the client has no free slot.
async fn client_of(
    shared: &Shared,
    stream: &TcpStream,
    peer: std::net::IpAddr,
    slot: SourceSlot,
) -> Option<(std::net::IpAddr, SourceSlot)> {
    if !shared.config.proxy_protocol.trusts(peer) {
        return Some((peer, slot));
    }
    let client = match proxy_header::read_client_address(
        stream,
        peer,
        shared.config.handshake_timeout,
    )
    .await
    {
        Ok(client) => client,
        Err(err) => {
            debug!(error = %err, "PROXY protocol header refused");
            return None;
        }
    };
    drop(slot);
    let slot = shared.per_source.acquire(client);
    if slot.is_none() {
        shared.metrics.connections_refused.inc();
    }
    slot.map(|slot| (client, slot))
}

async fn serve_connection(
    shared: &Arc<Shared>,
    kind: ListenerKind,
    stream: TcpStream,
    peer: std::net::IpAddr,
) {
    match kind {
        ListenerKind::Http => http::serve(shared, stream, peer).await,
        ListenerKind::Socks5 => socks5::serve(shared, stream, peer).await,
    }
}

async fn maintenance(shared: Arc<Shared>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(MAINTENANCE_EVERY) => {}
            () = shared.draining.cancelled() => return,
        }
        let now = tokio::time::Instant::now();
        shared.router.sessions().sweep(now);
        let snap = shared.snapshots.load();
        shared
            .pool
            .sweep(|id| snap.as_ref().is_some_and(|s| s.index_of(id).is_some()));
    }
}
