//! Serving: accept loops for the HTTP and SOCKS5 listeners (bound by the caller),
//! connection caps, periodic maintenance, and the shutdown protocol — stop accepting
//! → let in-flight requests and tunnels finish → after the grace period, force.

mod forward;
mod http;
mod socks5;
mod tunnel;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::GatewayConfig;
use crate::metrics::{ListenerKind, Metrics};
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
    pub(crate) router: Router,
    pub(crate) config: GatewayConfig,
    pub(crate) pool: IdlePool,
    pub(crate) outcomes: OutcomeSink,
    pub(crate) metrics: Arc<Metrics>,
    /// Cancelled when shutdown starts: no new connections or requests.
    pub(crate) draining: CancellationToken,
    /// Cancelled when the grace period ends: in-flight work is cut.
    pub(crate) force: CancellationToken,
}

/// A configured gateway, ready to serve.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// Builds a gateway reading `snapshots`. Outcome observations go to the returned
    /// receiver (bounded; drops when nobody drains it).
    pub fn new(snapshots: SnapshotHandle, config: GatewayConfig) -> (Self, OutcomeReceiver) {
        let (sink, receiver) = outcome::queue(config.outcome_queue);
        let up = &config.upstream;
        let shared = Shared {
            router: Router::new(config.auth, config.max_sessions),
            pool: IdlePool::new(
                up.pool_max_idle_per_key,
                up.pool_max_idle_total,
                up.pool_idle_timeout,
            ),
            snapshots,
            config,
            outcomes: sink,
            metrics: Arc::default(),
            draining: CancellationToken::new(),
            force: CancellationToken::new(),
        };
        (
            Self {
                shared: Arc::new(shared),
            },
            receiver,
        )
    }

    /// Counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// Prometheus text of the counters.
    pub fn render_metrics(&self) -> String {
        let mut text = self.shared.metrics.render(self.shared.outcomes.dropped());
        text.push_str(&self.shared.router.usage().render());
        text
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
        self.shared.pool.len()
    }

    /// Serves until `shutdown` resolves, then drains.
    pub async fn run(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()>,
    ) -> ServeReport {
        let shared = self.shared;
        let tracker = TaskTracker::new();
        let mut loops = JoinSet::new();
        let limit = Arc::new(Semaphore::new(shared.config.max_connections));
        for (listener, kind) in [
            (listeners.http, ListenerKind::Http),
            (listeners.socks5, ListenerKind::Socks5),
        ] {
            if let Some(listener) = listener {
                loops.spawn(accept_loop(
                    listener,
                    kind,
                    shared.clone(),
                    tracker.clone(),
                    limit.clone(),
                ));
            }
        }
        loops.spawn(maintenance(shared.clone()));
        shutdown.await;
        info!("shutdown: no new connections, draining in-flight work");
        shared.draining.cancel();
        while loops.join_next().await.is_some() {}
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
    limit: Arc<Semaphore>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shared.draining.cancelled() => return,
        };
        let (stream, _peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                debug!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            shared
                .metrics
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            continue;
        };
        shared.metrics.accepted(kind);
        let shared = shared.clone();
        tracker.spawn(async move {
            let _permit = permit;
            shared
                .metrics
                .open_connections
                .fetch_add(1, Ordering::Relaxed);
            let force = shared.force.clone();
            tokio::select! {
                () = serve_connection(&shared, kind, stream) => {}
                () = force.cancelled() => debug!("connection cut at the end of the grace period"),
            }
            shared
                .metrics
                .open_connections
                .fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn serve_connection(shared: &Arc<Shared>, kind: ListenerKind, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    match kind {
        ListenerKind::Http => http::serve(shared, stream).await,
        ListenerKind::Socks5 => socks5::serve(shared, stream).await,
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
