//! The gRPC control plane (`WorkerControlPlane` + `CheckerControlPlane`), the
//! ownership manager and the snapshot publisher.
//!
//! Owns: worker sessions as the controller sees them, per-worker snapshots and their
//! deltas, which worker holds which proxy (through the pool's ownership port), and the
//! gRPC edge (mTLS identity checks, limits, status mapping). It never touches the pool
//! except through its ports, never blocks a worker on the health reducer, and never
//! logs a proxy password.
//!
//! Composition: build a [`ControlPlane`], spawn [`ControlPlane::run`] (the ownership
//! loop) and [`serve`] (the gRPC listener) with the same shutdown signal.

pub mod checker;
pub mod config;
pub mod error;
pub mod identity;
pub mod incoming;
pub mod metering;
pub mod metrics;
pub mod outcomes;
pub mod ownership;
pub mod publisher;
pub mod quota;
pub mod registry;
mod rpc;
mod server;
pub mod worker;

use std::sync::Arc;

use activity_pool::Clock;
use activity_pool::ports::{ActivityPool, ReportWriter};
use tokio::sync::{Semaphore, watch};

/// How often the ownership loop asks the pool's change feed whether a pass is due.
const FEED_POLL: std::time::Duration = std::time::Duration::from_millis(100);
/// The shortest wait between two passes woken by the change feed.
const MIN_PASS_GAP: std::time::Duration = std::time::Duration::from_millis(200);

pub use checker::{CheckerBackend, MemoryCheckerBackend, TaskGate};
pub use config::{ClientSpec, ControlPlaneConfig, Limits, OwnershipConfig, RoutingSpec};
pub use error::ControlPlaneError;
pub use identity::Authenticator;
pub use metrics::{ClientKind, ControlPlaneMetrics, register_certificates};
pub use outcomes::{OutcomeQueue, UsageCounts, UsageSink, WorkerOutcome};
pub use ownership::{DrainRequest, OwnershipManager, OwnershipPorts, PassReport, TargetExclusions};
pub use publisher::Publisher;
pub use quota::{DailyMeter, MemoryMeter, RedisMeter};
pub use server::{NOT_LEADER, ServeError, ServerTls, Transport, serve};

/// The pool ports the control plane uses: the ownership manager's, which the RPC
/// handlers share (sessions), and the runtime report writes of the handlers alone.
#[derive(Clone)]
pub struct ControlPlanePorts {
    /// Leases, records, sessions, runtime reads and the controller's clock (snapshot
    /// times, task deadlines).
    pub manager: OwnershipPorts,
    /// Runtime report writes.
    pub reports: Arc<dyn ReportWriter>,
}

impl std::fmt::Debug for ControlPlanePorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlPlanePorts")
    }
}

impl ControlPlanePorts {
    /// Every port from one pool.
    pub fn from_pool(pool: Arc<dyn ActivityPool>, clock: Arc<dyn Clock>) -> Self {
        Self {
            manager: OwnershipPorts {
                ownership: pool.clone(),
                catalog: pool.clone(),
                sessions: pool.clone(),
                runtime: pool.clone(),
                clock,
            },
            reports: pool,
        }
    }
}

/// State shared by the services, the publisher and the ownership loop.
#[derive(Debug)]
pub struct Shared {
    config: ControlPlaneConfig,
    ports: ControlPlanePorts,
    registry: Arc<registry::Registry>,
    publisher: Arc<Publisher>,
    ownership: Arc<OwnershipManager>,
    outcomes: OutcomeQueue,
    usage: UsageSink,
    traffic: metering::TrafficMetrics,
    quotas: quota::Quotas,
    /// The daily byte meter ([`ControlPlane::set_meter`]); in process until one is set.
    meter: std::sync::OnceLock<Arc<dyn DailyMeter>>,
    memory_meter: MemoryMeter,
    checker: Arc<dyn CheckerBackend>,
    streams: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
    metrics: ControlPlaneMetrics,
}

/// The control plane: shared state plus its background loop.
#[derive(Debug)]
pub struct ControlPlane {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    /// Only the leader answers RPCs; other replicas refuse them `UNAVAILABLE
    /// not_leader` (the publisher state and the ownership loop live in the leader).
    leadership: crate::leadership::Leadership,
}

impl Shared {
    /// The daily byte meter in use.
    fn meter(&self) -> &dyn DailyMeter {
        match self.meter.get() {
            Some(m) => m.as_ref(),
            None => &self.memory_meter,
        }
    }
}

impl ControlPlane {
    /// Builds the control plane. `outcomes` feeds the health reducer; `checker` holds
    /// the check task queue and the observation sink.
    pub fn new(
        config: ControlPlaneConfig,
        ports: ControlPlanePorts,
        checker: Arc<dyn CheckerBackend>,
        outcomes: OutcomeQueue,
    ) -> Self {
        let registry = Arc::new(registry::Registry::default());
        let publisher = Arc::new(Publisher::new(config.history));
        let ownership = Arc::new(OwnershipManager::new(
            ports.manager.clone(),
            config.clone(),
            registry.clone(),
            publisher.clone(),
        ));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let streams = Arc::new(Semaphore::new(config.limits.max_open_streams));
        let traffic = metering::TrafficMetrics::new(
            config.clients.iter().map(|c| c.name.as_str()),
            config.routings.iter().map(|r| r.routing.name.as_str()),
        );
        let quotas = quota::Quotas::new(
            config
                .clients
                .iter()
                .map(|c| (c.name.as_str(), c.daily_bytes)),
        );
        Self {
            shared: Arc::new(Shared {
                config,
                ports,
                registry,
                publisher,
                ownership,
                outcomes,
                usage: UsageSink::default(),
                traffic,
                quotas,
                meter: std::sync::OnceLock::new(),
                memory_meter: MemoryMeter::default(),
                checker,
                streams,
                shutdown: shutdown_rx,
                metrics: ControlPlaneMetrics::default(),
            }),
            shutdown,
            leadership: crate::leadership::Leadership::sole(),
        }
    }

    /// Serves RPCs only while `leadership` leads (default: always).
    #[must_use]
    pub fn with_leadership(mut self, leadership: crate::leadership::Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// This replica's role as the control plane sees it.
    pub fn leadership(&self) -> &crate::leadership::Leadership {
        &self.leadership
    }

    /// Feeds gateway usage from accepted runtime reports into `collector` (usage
    /// analytics). Without it the control plane counts usage but records nothing
    /// (as with `Collector::disabled()`). Set once, before serving; a second call is
    /// ignored with a warning.
    #[must_use]
    pub fn with_analytics(self, collector: proxy_pool_analytics::Collector) -> Self {
        if !self.shared.usage.set_collector(collector) {
            tracing::warn!("analytics collector already set; the new one is ignored");
        }
        self
    }

    /// Keeps the daily byte quotas in `meter` (the store's Redis, shared by every
    /// replica) instead of in process. Set once, before serving; a second call is
    /// ignored with a warning.
    pub fn set_meter(&self, meter: Arc<dyn DailyMeter>) {
        if self.shared.meter.set(meter).is_err() {
            tracing::warn!("daily byte meter already set; the new one is ignored");
        }
    }

    /// Registers the control plane's metrics (connected workers, per-worker snapshot
    /// version and age, push → ACK latency, negative ACKs, gateway traffic per client
    /// and Routing, quota meter errors) in `registry`.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.shared.metrics.register(registry);
        self.shared.traffic.register(registry);
        self.shared.quotas.register(registry);
        registry.register_collector(Box::new(metrics::WorkerSnapshots(self.shared.clone())));
    }

    /// The control plane's metrics (tests read them).
    pub fn metrics(&self) -> &ControlPlaneMetrics {
        &self.shared.metrics
    }

    /// Gateway traffic per client and Routing as the metrics count it.
    pub fn traffic(&self) -> &metering::TrafficMetrics {
        &self.shared.traffic
    }

    /// Gateway usage counters (requests fed, unknown routings ignored, ...).
    pub fn usage_counts(&self) -> UsageCounts {
        self.shared.usage.counts()
    }

    /// The ownership manager (drain requests for extraction; manual passes in tests).
    pub fn ownership(&self) -> &OwnershipManager {
        &self.shared.ownership
    }

    /// The ownership manager as a shared handle (the Distribution API's drain demand).
    pub fn ownership_handle(&self) -> Arc<OwnershipManager> {
        self.shared.ownership.clone()
    }

    /// The snapshot publisher.
    pub fn publisher(&self) -> &Publisher {
        &self.shared.publisher
    }

    /// Runs the ownership loop until `shutdown` completes: a pass every
    /// `ownership.interval`, promptly after a worker registers, and once the pool's
    /// change feed shows a record change (polled every `FEED_POLL`, a pass no sooner
    /// than `MIN_PASS_GAP` after the previous one ended), so a change reaches the
    /// gateways without waiting out the interval.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let interval = self.shared.config.ownership.interval;
        loop {
            if let Err(e) = self.shared.ownership.pass().await {
                tracing::warn!(error = %e, retryable = e.is_retryable(), "ownership pass failed");
            }
            let ownership = &self.shared.ownership;
            let changed = async {
                tokio::time::sleep(MIN_PASS_GAP.min(interval)).await;
                while !ownership.pool_changed().await {
                    tokio::time::sleep(FEED_POLL).await;
                }
            };
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = ownership.woken() => {}
                () = changed => {}
                () = &mut shutdown => break,
            }
        }
    }

    /// Ends every open stream (the first step of shutdown).
    pub fn close_streams(&self) {
        self.shutdown.send_replace(true);
    }

    fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }
}
