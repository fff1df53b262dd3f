//! The rest of the composition root: the gRPC control plane (listener, ownership
//! manager, snapshot publisher), the provider reconcilers of vendor-API upstreams and
//! the health reducer / planner bridged to the checker service.
//!
//! [`prepare`] does everything that can fail (reading key files, planning upstreams)
//! when the controller is built; [`start`] spawns the loops when it runs, and
//! [`Running::stop`] ends them within the shutdown deadline. Nothing here logs a
//! vendor key, a proxy password or TLS key material.

use std::sync::Arc;

use activity_pool::SystemClock;
use activity_pool::model::Secret;
use activity_pool::{Clock, PoolError};
use proxy_pool_api::config::{Config, ControlPlaneTransport, SourceConfig};
use proxy_pool_api::controlplane::model::Secret as WireSecret;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::controlplane::checker::CheckerObservation;
use crate::controlplane::{
    CheckerBackend, ControlPlane, ControlPlanePorts, MemoryCheckerBackend, OutcomeQueue, ServerTls,
    Transport, WorkerOutcome,
};
use crate::health::{
    BridgeOptions, CheckerBridge, HealthMetrics, HealthService, PlannerConfig, ReducerConfig,
};
use crate::leadership::{
    Elector, ElectorOptions, KubeLease, Leadership, LeaseStore, PodLabel, RedisLease,
};
use crate::metrics::Metrics;
use crate::provider::{
    ProviderError, ProviderMetrics, ProviderReconciler, ResolvedSecrets, plan_upstream,
};
use crate::shutdown::{Phase, Shutdown};
use crate::store::{self, BuildError, Ports, Store};

mod token_review;
mod usage;

pub use token_review::{Bearer, prepare as prepare_bearer};
pub use usage::{Usage, UsageWorker, analytics_options, analytics_settings};
pub use usage::{check as check_usage, migrate, prepare as prepare_usage};

/// Checks queued for checkers at most.
const CHECK_QUEUE: usize = 1_024;
/// Checker observations waiting for the reducer at most.
const OBSERVATION_QUEUE: usize = 4_096;
/// Gateway outcomes waiting at most.
const OUTCOME_QUEUE: usize = 4_096;

/// Why the controller could not be composed.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    /// Store, secrets or static upstreams.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A vendor-API upstream cannot be planned.
    #[error("upstream {upstream}: {source}")]
    Provider {
        /// Upstream name.
        upstream: String,
        /// Why.
        source: ProviderError,
    },
    /// A TLS file of the control plane could not be read (content never shown).
    #[error("controlPlane.tls: cannot read {path}: {reason}")]
    TlsFile {
        /// The file.
        path: String,
        /// The I/O error kind.
        reason: String,
    },
    /// The leader election cannot be set up (Kubernetes backend).
    #[error("leadership: {0}")]
    Leadership(String),
    /// Inconsistent health thresholds.
    #[error("health: {0}")]
    Health(String),
    /// The pool.
    #[error("activity pool: {0}")]
    Pool(#[from] PoolError),
    /// Usage analytics cannot be set up (files, settings; never the DSN's content).
    #[error("analytics: {0}")]
    Analytics(String),
    /// ServiceAccount clients cannot be set up (Kubernetes API access; never a token).
    #[error("distribution.auth tokenReview: {0}")]
    TokenReview(String),
    /// The analytics database is not ready for this version: run `migrate`.
    #[error(
        "analytics: {0} (run `proxy-pool-controller migrate --config <file>` against this database first)"
    )]
    AnalyticsSchema(String),
}

/// A built store with every port of the same pool (the control plane needs more than
/// [`Ports`] carries) and how this replica is elected.
#[derive(Debug)]
pub struct BuiltStore {
    /// The controller's ports.
    pub store: Store,
    /// The control plane's ports.
    pub control_plane: ControlPlanePorts,
    /// Redis: the election (its leader-only writes are fenced by the elector's
    /// token). Memory: `None`, the one replica leads.
    pub elector: Option<Elector>,
    /// This replica's role.
    pub leadership: Leadership,
    /// Redis: the (fenced) pool that relays extraction demand to the leader.
    pub relay: Option<activity_pool::RedisPool>,
    /// The Kubernetes backend with `labelPod`: this replica's pod label.
    pub pod_label: Option<PodLabel>,
}

/// Builds the store the config names and, with Redis, the leader election: every
/// Redis port's leader-only writes carry the elector's fencing token. `pod` is this
/// replica's pod name in a cluster (the holder name's prefix; the Kubernetes backend's
/// pod label needs it).
pub async fn build_store(config: &Config, pod: Option<&str>) -> Result<BuiltStore, ComposeError> {
    use activity_pool::{Fence, MemoryPool};
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match &config.store {
        proxy_pool_api::config::StoreConfig::Memory => {
            let pool = Arc::new(MemoryPool::new(store::pool_options(&config.pool)));
            Ok(BuiltStore {
                store: Store {
                    ports: Ports::from_shared(pool.clone()),
                    redis: None,
                },
                control_plane: ControlPlanePorts::from_pool(pool, clock),
                elector: None,
                leadership: Leadership::sole(),
                relay: None,
                pod_label: None,
            })
        }
        proxy_pool_api::config::StoreConfig::Redis(_) => {
            let fence = Fence::new();
            // The store's one pool: the ports hold it fenced, the lease and the
            // control plane use the same one.
            let Some((built, redis)) = store::build_redis_store(config, &fence).await? else {
                return Err(ComposeError::Health("not a Redis store".into()));
            };
            let (lease, pod_label) = lease_store(config, &redis, pod).await?;
            let (elector, leadership) = Elector::new(
                lease,
                crate::leadership::holder_name(pod),
                fence.clone(),
                ElectorOptions::from(&config.leadership),
            );
            let fenced = redis.fenced(fence);
            // The same Redis keyspace behind both port sets.
            Ok(BuiltStore {
                store: built,
                control_plane: ControlPlanePorts::from_pool(Arc::new(fenced.clone()), clock),
                elector: Some(elector),
                leadership,
                relay: Some(fenced),
                pod_label,
            })
        }
    }
}

/// The leader lease the config names: the Redis key, or a Kubernetes Lease in the
/// namespace of the client's context (in a pod: its own) with tokens from Redis.
async fn lease_store(
    config: &Config,
    redis: &activity_pool::RedisPool,
    pod: Option<&str>,
) -> Result<(Arc<dyn LeaseStore>, Option<PodLabel>), ComposeError> {
    use proxy_pool_api::config::LeadershipBackend;
    let LeadershipBackend::Kubernetes(k) = &config.leadership.backend else {
        return Ok((Arc::new(RedisLease::new(redis.clone())), None));
    };
    let client = kube_client(None).await.map_err(ComposeError::Leadership)?;
    let lease = KubeLease::new(
        kube::Api::default_namespaced(client.clone()),
        &k.lease_name,
        redis.clone(),
    );
    let label = if k.label_pod {
        let pod = pod.ok_or_else(|| {
            ComposeError::Leadership(
                "labelPod needs the pod's name (PROXY_POOL_POD_NAME, from the downward API)".into(),
            )
        })?;
        Some(PodLabel::new(kube::Api::default_namespaced(client), pod))
    } else {
        None
    };
    Ok((Arc::new(lease), label))
}

/// A Kubernetes API client on `config` (a kubeconfig's), else on the one inferred from
/// the environment (`KUBECONFIG`, `~/.kube/config`, then the pod's mounted
/// ServiceAccount). The error says what failed and why (never a token).
async fn kube_client(config: Option<kube::Config>) -> Result<kube::Client, String> {
    let config = match config {
        Some(c) => c,
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("Kubernetes API access (KUBECONFIG or in-cluster): {e}"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))
}

/// Everything built and checked, not yet running.
#[derive(Debug)]
pub struct Prepared {
    control_plane: Option<(Arc<ControlPlane>, Transport)>,
    outcomes: Option<mpsc::Receiver<WorkerOutcome>>,
    bridge: CheckerBridge,
    observations: mpsc::Receiver<CheckerObservation>,
    reconcilers: Vec<ProviderReconciler>,
    health: Arc<HealthService>,
    usage: Usage,
}

impl Prepared {
    /// The usage collector (disabled when analytics is off).
    pub fn collector(&self) -> proxy_pool_analytics::Collector {
        self.usage.collector()
    }

    /// The stats API and dashboard, merged into the admin listener (analytics on).
    pub fn stats_router(&self) -> Option<axum::Router> {
        self.usage.router()
    }

    /// The control plane, when the config serves it (tests drive its ownership loop).
    pub fn control_plane(&self) -> Option<Arc<ControlPlane>> {
        self.control_plane.as_ref().map(|(cp, _)| cp.clone())
    }

    /// The health service (tests read how many proxies it tracks).
    pub fn health(&self) -> Arc<HealthService> {
        self.health.clone()
    }
}

fn read_file(path: &std::path::Path) -> Result<String, ComposeError> {
    std::fs::read_to_string(path).map_err(|e| ComposeError::TlsFile {
        path: path.display().to_string(),
        reason: e.kind().to_string(),
    })
}

/// Builds the control plane, the health service and bridge, and one provider
/// reconciler per vendor-API upstream (writing through `ports`); `usage` (from
/// [`prepare_usage`]) is started with them; the control plane answers only while
/// `leadership` leads.
pub fn prepare(
    config: &Config,
    pool: ControlPlanePorts,
    ports: &Ports,
    registry: &Metrics,
    usage: Usage,
    fetch_status: crate::provider::FetchStatus,
    leadership: &Leadership,
) -> Result<Prepared, ComposeError> {
    let (upserter, health_store) = (ports.upserter.clone(), ports.health.clone());
    let clock: Arc<dyn Clock> = pool.clock.clone();
    let health_metrics = HealthMetrics::default();
    let provider_metrics = ProviderMetrics::default();
    registry.register_with(|r| {
        health_metrics.register(r);
        provider_metrics.register(r);
    });
    let (backend, observations) =
        MemoryCheckerBackend::new(CHECK_QUEUE, OBSERVATION_QUEUE, clock.clone());
    let backend = Arc::new(backend);
    let health = Arc::new(
        HealthService::new(
            PlannerConfig::from_config(config),
            ReducerConfig::default(),
            pool.catalog.clone(),
            health_store.clone(),
            clock,
            health_metrics,
        )
        .map_err(ComposeError::Health)?,
    );
    let bridge = CheckerBridge::new(
        health.clone(),
        backend.clone(),
        BridgeOptions {
            queue_target: CHECK_QUEUE / 2,
            ..BridgeOptions::default()
        },
    );

    let mut reconcilers = Vec::new();
    let metrics = provider_metrics;
    for u in &config.upstreams {
        let SourceConfig::VendorApi(v) = &u.source else {
            continue;
        };
        let err = |source| ComposeError::Provider {
            upstream: u.name.clone(),
            source,
        };
        let vendor_api_key = v
            .api_key_file
            .as_ref()
            .map(|p| {
                store::resolve_password(&proxy_pool_api::config::PasswordSource::File(p.clone()))
            })
            .transpose()?
            .map(|k| Secret::new(k.trim().to_owned()));
        let proxy_password = v
            .credentials
            .as_ref()
            .map(|c| store::resolve_password(&c.password))
            .transpose()?
            .map(Secret::new);
        let plan = plan_upstream(
            u,
            &ResolvedSecrets {
                vendor_api_key,
                proxy_password,
            },
            &config.egress,
        )
        .map_err(err)?;
        let r =
            ProviderReconciler::new(plan.options, plan.source, upserter.clone(), metrics.clone())
                .map_err(err)?
                .with_health_store(health_store.clone())
                .with_announcer(health.clone())
                .with_status(fetch_status.clone());
        reconcilers.push(r);
    }

    let (control_plane, outcomes) = match &config.control_plane {
        None => (None, None),
        Some(cp) => {
            let transport = match &cp.transport {
                ControlPlaneTransport::Unconfigured => None,
                ControlPlaneTransport::LoopbackPlaintext => Some(Transport::LoopbackFixture),
                ControlPlaneTransport::Mtls(t) => Some(Transport::Mtls(ServerTls {
                    cert_pem: read_file(&t.cert_file)?,
                    key_pem: WireSecret::new(read_file(&t.key_file)?),
                    client_ca_pem: read_file(&t.client_ca_file)?,
                    trust_domain: t.trust_domain.clone(),
                    environment: t.environment.clone(),
                })),
            };
            match transport {
                None => {
                    tracing::error!(
                        "controlPlane is enabled without tls or loopbackPlaintext: not serving it"
                    );
                    (None, None)
                }
                Some(transport) => {
                    let (queue, rx) = OutcomeQueue::bounded(OUTCOME_QUEUE);
                    let checker: Arc<dyn CheckerBackend> = backend.clone();
                    let cp_config = crate::controlplane::compose::control_plane_config(config);
                    let plane = ControlPlane::new(cp_config, pool, checker, queue)
                        .with_analytics(usage.collector())
                        .with_leadership(leadership.clone());
                    plane.ownership().set_target_exclusions(health.clone());
                    (Some((Arc::new(plane), transport)), Some(rx))
                }
            }
        }
    };
    Ok(Prepared {
        control_plane,
        outcomes,
        bridge,
        observations,
        reconcilers,
        health,
        usage,
    })
}

/// The running loops.
#[derive(Debug)]
pub struct Running {
    stop: CancellationToken,
    tracker: TaskTracker,
    usage: Option<UsageWorker>,
}

/// Spawns every prepared loop; they stop when `shutdown` reaches
/// [`Phase::Stopping`] (or [`Running::stop`]). The control plane is served at once on
/// every replica; the leader-only loops (ownership and publishing, the outcome
/// reducer, the health bridge, the provider reconcilers) start once `leadership`
/// elects this replica and stop when it is deposed.
pub fn start(
    prepared: Prepared,
    listener: Option<TcpListener>,
    shutdown: Shutdown,
    leadership: Leadership,
    relay: Option<activity_pool::RedisPool>,
) -> Running {
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    {
        let stop = stop.clone();
        tracker.spawn(async move {
            tokio::select! {
                () = shutdown.reached(Phase::Stopping) => stop.cancel(),
                () = stop.cancelled() => {}
            }
        });
    }
    let Prepared {
        control_plane,
        outcomes,
        bridge,
        observations,
        reconcilers,
        health,
        mut usage,
    } = prepared;
    let usage = usage.start(&leadership);
    let mut plane_loop = None;
    match (control_plane, listener) {
        (Some((plane, transport)), Some(listener)) => {
            let addr = listener.local_addr().ok();
            plane_loop = Some(plane.clone());
            let s = stop.clone();
            tracker.spawn(async move {
                if let Err(e) = crate::controlplane::serve(
                    listener,
                    transport,
                    plane.clone(),
                    s.clone().cancelled_owned(),
                )
                .await
                {
                    tracing::error!(error = %e, "control plane stopped");
                }
                plane.close_streams();
            });
            tracing::info!(listen = ?addr, "control plane serving");
        }
        (Some(_), None) => {
            tracing::error!("control plane configured but no listener given: not serving it");
        }
        _ => {}
    }
    let leader = LeaderLoops {
        relay,
        plane: plane_loop,
        outcomes,
        bridge,
        observations,
        reconcilers,
        health,
    };
    let t = tracker.clone();
    let s = stop.clone();
    tracker.spawn(async move {
        let elected = tokio::select! {
            () = s.cancelled() => return,
            e = leadership.elected() => e,
        };
        if elected {
            // Deposed: the loops stop at once (a deposed leader's writes are fenced
            // anyway; the process then shuts down, see `Controller::run`).
            let lead = s.child_token();
            let l = lead.clone();
            t.spawn(async move {
                tokio::select! {
                    () = leadership.deposed() => l.cancel(),
                    () = l.cancelled() => {}
                }
            });
            leader.spawn(&lead, &t);
        }
    });
    Running {
        stop,
        tracker,
        usage,
    }
}

/// The loops only the leader runs.
struct LeaderLoops {
    relay: Option<activity_pool::RedisPool>,
    plane: Option<Arc<ControlPlane>>,
    outcomes: Option<mpsc::Receiver<WorkerOutcome>>,
    bridge: CheckerBridge,
    observations: mpsc::Receiver<CheckerObservation>,
    reconcilers: Vec<ProviderReconciler>,
    health: Arc<HealthService>,
}

impl LeaderLoops {
    fn spawn(self, stop: &CancellationToken, tracker: &TaskTracker) {
        tracing::info!("leader loops starting");
        if let Some(p) = self.plane {
            if let Some(pool) = self.relay {
                // Extraction demand the other replicas relay.
                let local = p.ownership_handle() as Arc<dyn crate::demand::DrainDemand>;
                tracker.spawn(crate::demand::relay::take(pool, local, stop.clone()));
            }
            let s = stop.clone();
            tracker.spawn(async move { p.run(s.cancelled_owned()).await });
        }
        if let Some(rx) = self.outcomes {
            tracker.spawn(reduce_outcomes(rx, self.health.clone(), stop.clone()));
        }
        tracker.spawn(self.bridge.run(self.observations, stop.clone()));
        crate::provider::spawn_all(self.reconcilers, stop, tracker);
    }
}

/// Most gateway outcomes reduced in one step.
const OUTCOME_BATCH: usize = 1_024;

/// Feeds gateway outcomes from the control plane's queue to the health reducer, in
/// batches, until `stop`. A failed write is logged and the batch dropped (outcomes are
/// observations; the next ones count again).
async fn reduce_outcomes(
    mut rx: mpsc::Receiver<WorkerOutcome>,
    health: Arc<HealthService>,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(OUTCOME_BATCH);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            n = rx.recv_many(&mut batch, OUTCOME_BATCH) => if n == 0 { return },
        }
        if let Err(e) = health.outcomes(&batch).await {
            tracing::warn!(error = %e, outcomes = batch.len(), "gateway outcomes not applied");
        }
        batch.clear();
    }
}

impl Running {
    /// The part of the grace period the final analytics flush needs at its end
    /// ([`crate::shutdown::reserve`]); zero when analytics is off.
    pub fn reserved(&self) -> std::time::Duration {
        self.usage
            .as_ref()
            .map_or(std::time::Duration::ZERO, UsageWorker::flush_timeout)
    }

    /// Stops every loop and waits for them until `deadline`, then stops analytics
    /// collection and makes its final flush (after the listeners drained, so every
    /// answered extraction is in it).
    pub async fn stop(self, deadline: Instant) {
        self.stop.cancel();
        self.tracker.close();
        let loops_deadline = crate::shutdown::reserve(deadline, self.reserved());
        if tokio::time::timeout_at(loops_deadline, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("grace period over before every background loop stopped");
        }
        if let Some(u) = self.usage {
            u.stop(deadline).await;
        }
    }
}
