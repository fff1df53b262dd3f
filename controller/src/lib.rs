//! The Proxy Pool controller as a library: the composition of its parts (store,
//! Distribution API, admin listener, static upstreams, maintenance) behind
//! [`Controller`], so `main.rs` only parses arguments and tests drive the real thing on
//! `127.0.0.1:0`.
//!
//! Nothing here binds a socket or reads the environment; listeners come in bound.

pub mod admin;
pub mod compose;
pub mod controlplane;
pub mod demand;
pub mod distribution;
pub mod generation;
pub mod health;
pub mod leadership;
pub mod maintenance;
pub mod metrics;
pub mod provider;
pub mod redis_link;
pub mod server;
pub mod shutdown;
pub mod static_upstreams;
pub mod store;

use std::future::Future;
use std::sync::Arc;

use activity_pool::SystemClock;
use activity_pool::model::UpstreamId;
use proxy_pool_api::config::{Config, SourceConfig, StoreConfig};
use tokio::net::TcpListener;

use crate::admin::AdminState;
use crate::distribution::{
    Authenticator, DistributionState, LocalLimiter, RateLimiter, RedisLimiter,
};
use crate::metrics::Metrics;
use crate::redis_link::RedisLink;
use crate::server::ServeOptions;
use crate::shutdown::{Phase, Shutdown};
use crate::static_upstreams::StaticUpstream;
use crate::store::{BuildError, Ports, Store};

/// The bound listeners the controller serves.
#[derive(Debug)]
pub struct Listeners {
    /// Distribution API.
    pub distribution: TcpListener,
    /// Admin / ops.
    pub admin: TcpListener,
    /// gRPC control plane (when the config serves it).
    pub control_plane: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses from the config.
    pub async fn bind(config: &Config) -> std::io::Result<Self> {
        Ok(Self {
            distribution: TcpListener::bind(config.distribution.listen).await?,
            admin: TcpListener::bind(config.admin.listen).await?,
            control_plane: match &config.control_plane {
                Some(cp) => Some(TcpListener::bind(cp.listen).await?),
                None => None,
            },
        })
    }
}

/// A built controller, ready to run.
#[derive(Debug)]
pub struct Controller {
    config: Arc<Config>,
    ports: Ports,
    redis: Option<Arc<RedisLink>>,
    limiter: Arc<dyn RateLimiter>,
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
    statics: Vec<StaticUpstream>,
    composed: Option<compose::Prepared>,
    fetch_status: provider::FetchStatus,
    elector: Option<leadership::Elector>,
    leadership: leadership::Leadership,
    /// The Kubernetes leadership backend: this replica's pod label.
    pod_label: Option<leadership::PodLabel>,
    /// Redis: relays a follower's extraction demand to the leader.
    relay: Option<activity_pool::RedisPool>,
    /// Stops the relay's task.
    relay_stop: tokio_util::sync::CancellationToken,
    /// Where the Distribution API sends unmet demand (built once with the control
    /// plane: on several replicas it owns the relay's task).
    drains: Option<Arc<dyn demand::DrainDemand>>,
}

/// How [`Controller::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The shutdown signal came.
    Signal,
    /// This replica led and lost the leadership: it shut down so that its supervisor
    /// restarts it as a follower (`docs/reliability.md`).
    Deposed,
}

impl Controller {
    /// Builds the store the config names (connecting to Redis) and every part.
    pub async fn build(config: Config) -> Result<Self, compose::ComposeError> {
        Self::build_in_pod(config, None).await
    }

    /// [`Controller::build`] for a replica running in pod `pod` (its name: the leader
    /// holder's prefix, and the pod the Kubernetes leadership backend labels).
    pub async fn build_in_pod(
        config: Config,
        pod: Option<String>,
    ) -> Result<Self, compose::ComposeError> {
        let built = compose::build_store(&config, pod.as_deref()).await?;
        let pool = built.control_plane;
        let mut controller = Self::from_store(config, built.store)?;
        controller.elector = built.elector;
        controller.leadership = built.leadership;
        controller.relay = built.relay;
        controller.pod_label = built.pod_label;
        if let Some(pool) = &controller.relay {
            let latency = metrics::ScriptLatency(pool.script_timings());
            controller
                .metrics
                .register_with(|r| r.register_collector(Box::new(latency)));
        }
        if let Some(b) = compose::prepare_bearer(&controller.config, &controller.metrics).await? {
            controller = controller.with_bearer_verifier(b.verifier);
        }
        let usage = compose::prepare_usage(&controller.config, &controller.metrics).await?;
        controller.composed = Some(compose::prepare(
            &controller.config,
            pool,
            &controller.ports,
            &controller.metrics,
            usage,
            controller.fetch_status.clone(),
            &controller.leadership,
        )?);
        // With Redis the daily byte quotas are shared by every replica (a new leader
        // continues the day's totals); in process otherwise.
        if let (Some(link), Some(cp)) = (
            &controller.redis,
            controller
                .composed
                .as_ref()
                .and_then(compose::Prepared::control_plane),
        ) {
            cp.set_meter(Arc::new(controlplane::RedisMeter::new(link.clone())));
        }
        controller.drains = controller.drain_demand();
        Ok(controller)
    }

    /// The control plane's drain demand: the local ownership manager, routed through
    /// the relay on a follower when several replicas share Redis. Spawns the relay's
    /// task, so it is called once, by [`Controller::build`].
    fn drain_demand(&self) -> Option<Arc<dyn demand::DrainDemand>> {
        let cp = self.composed.as_ref()?.control_plane()?;
        let local = cp.ownership_handle() as Arc<dyn demand::DrainDemand>;
        Some(match &self.relay {
            // Several replicas: a follower relays its demand to the leader.
            Some(pool) => Arc::new(demand::relay::RoutedDemand::new(
                self.leadership.clone(),
                local,
                pool.clone(),
                self.relay_stop.clone(),
            )),
            None => local,
        })
    }

    /// The control plane, health service and provider reconcilers [`Controller::run`]
    /// starts (`None` when built with [`Controller::from_store`]).
    pub fn composed(&self) -> Option<&compose::Prepared> {
        self.composed.as_ref()
    }

    /// Builds the parts around an existing store (tests inject wrapped ports).
    pub fn from_store(config: Config, store: Store) -> Result<Self, BuildError> {
        let mut statics = Vec::new();
        for u in &config.upstreams {
            if let SourceConfig::Static(s) = &u.source {
                let password = s
                    .credentials
                    .as_ref()
                    .map(|c| store::resolve_password(&c.password))
                    .transpose()?;
                statics.push(StaticUpstream::new(u, s, password)?);
            }
        }
        let global = config.distribution.global_rate;
        let limiter: Arc<dyn RateLimiter> = match (&config.store, &store.redis) {
            (StoreConfig::Redis(_), Some(link)) => {
                Arc::new(RedisLimiter::new(link.clone(), global))
            }
            _ => Arc::new(LocalLimiter::new(global)),
        };
        let auth = Arc::new(Authenticator::new(
            &config.distribution.auth,
            &config.clients,
        ));
        Ok(Self {
            config: Arc::new(config),
            ports: store.ports,
            redis: store.redis,
            limiter,
            auth,
            metrics: Metrics::new(),
            shutdown: Shutdown::new(),
            statics,
            composed: None,
            fetch_status: provider::FetchStatus::default(),
            elector: None,
            leadership: leadership::Leadership::sole(),
            pod_label: None,
            relay: None,
            relay_stop: tokio_util::sync::CancellationToken::new(),
            drains: None,
        })
    }

    /// This replica's role (a store built by [`Controller::from_store`] leads alone).
    pub fn leadership(&self) -> leadership::Leadership {
        self.leadership.clone()
    }

    /// Replaces the bearer-token verifier (the static hash check by default; a
    /// Kubernetes `TokenReview` verifier plugs in here).
    pub fn with_bearer_verifier(mut self, verifier: Arc<dyn distribution::BearerVerifier>) -> Self {
        self.auth = Arc::new(Authenticator::with_bearer(
            &self.config.distribution.auth,
            &self.config.clients,
            verifier,
        ));
        self
    }

    /// The shutdown handle (other components watch it).
    pub fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// The pool ports (tests inspect the pool through them). With Redis, their
    /// leader-only writes carry this replica's fencing token: they fail (`Fenced`)
    /// unless it leads.
    pub fn ports(&self) -> Ports {
        self.ports.clone()
    }

    /// The metrics registry.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The Distribution API state.
    pub fn distribution_state(&self) -> DistributionState {
        DistributionState::new(
            Arc::new(self.config.distribution.clone()),
            self.auth.clone(),
            self.limiter.clone(),
            self.ports.extraction.clone(),
            self.metrics.clone(),
            self.shutdown.clone(),
            Arc::new(SystemClock),
        )
        .with_collector(self.composed.as_ref().map(compose::Prepared::collector))
        .with_drains(
            self.drains.clone(),
            self.config
                .control_plane
                .as_ref()
                .map_or(std::time::Duration::ZERO, |c| c.drain_wait),
        )
    }

    /// The admin state.
    pub fn admin_state(&self) -> AdminState {
        let upstreams = self
            .config
            .upstreams
            .iter()
            .filter_map(|u| UpstreamId::new(&u.name).ok())
            .collect();
        AdminState {
            shutdown: self.shutdown.clone(),
            metrics: self.metrics.clone(),
            inventory: self.ports.inventory.clone(),
            upstreams: Arc::new(upstreams),
            redis: self.redis.clone(),
            fetch: self.fetch_status.clone(),
            stats: self
                .composed
                .as_ref()
                .and_then(compose::Prepared::stats_router),
            auth: self.auth.clone(),
        }
    }

    /// Serves until `signal` resolves, or until this replica, having led, is deposed;
    /// then runs the shutdown protocol and returns when every listener has drained (or
    /// the grace period is over). Every replica serves the Distribution API, the admin
    /// listener and the control plane; the background loops run on the leader only.
    pub async fn run(
        mut self,
        listeners: Listeners,
        signal: impl Future<Output = ()> + Send,
    ) -> Exit {
        let limits = &self.config.distribution.limits;
        let dist_opts = ServeOptions {
            max_connections: limits.max_connections as usize,
            max_buf_size: 64 * 1024,
            header_read_timeout: limits.request_timeout,
            max_connections_per_source: limits.max_connections_per_source as usize,
        };
        let sd = self.shutdown.clone();
        let dist = tokio::spawn(server::serve(
            listeners.distribution,
            distribution::app(self.distribution_state()),
            dist_opts,
            sd.clone(),
        ));
        let admin = tokio::spawn(server::serve(
            listeners.admin,
            admin::app(self.admin_state()),
            ServeOptions::default(),
            sd.clone(),
        ));
        let mut background = Vec::new();
        // Stepping down (releasing the lease, taking the leader label off the pod) is
        // awaited at shutdown, not aborted with the other background tasks: a lease
        // left held delays the next leader by a whole lease.
        let mut stepping_down = Vec::new();
        if let Some(elector) = self.elector.take() {
            let s = sd.clone();
            stepping_down.push(tokio::spawn(
                elector.run(async move { s.reached(Phase::Stopping).await }),
            ));
        }
        if let Some(label) = self.pod_label.take() {
            stepping_down.push(tokio::spawn(label.follow(self.leadership.clone())));
        }
        background.push(tokio::spawn(self.leader_loops(sd.clone())));
        {
            let (leadership, metrics) = (self.leadership.clone(), self.metrics.clone());
            background.push(tokio::spawn(async move {
                if leadership.elected().await {
                    metrics.leader.set(1);
                    leadership.deposed().await;
                }
                metrics.leader.set(0);
            }));
        }
        let composed = self.composed.take().map(|p| {
            compose::start(
                p,
                listeners.control_plane,
                sd.clone(),
                self.leadership.clone(),
                self.relay.clone(),
            )
        });
        tracing::info!(
            distribution = %self.config.distribution.listen,
            admin = %self.config.admin.listen,
            store = match self.config.store { StoreConfig::Memory => "memory", StoreConfig::Redis(_) => "redis" },
            "controller running"
        );
        let deposed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let signal = {
            let leadership = self.leadership.clone();
            let deposed = deposed.clone();
            async move {
                tokio::select! {
                    () = signal => {}
                    () = leadership.deposed() => {
                        if !matches!(leadership.role(), leadership::Role::Deposed) {
                            return;
                        }
                        deposed.store(true, std::sync::atomic::Ordering::SeqCst);
                        tracing::warn!("deposed: shutting down to restart as a follower");
                    }
                }
            }
        };
        let deadline = shutdown::drive(
            sd.clone(),
            signal,
            self.config.shutdown.drain_delay,
            self.config.shutdown.grace_period,
        )
        .await;
        let servers = async {
            let _ = dist.await;
            let _ = admin.await;
        };
        let reserved = composed
            .as_ref()
            .map_or(std::time::Duration::ZERO, compose::Running::reserved);
        if tokio::time::timeout_at(shutdown::reserve(deadline, reserved), servers)
            .await
            .is_err()
        {
            tracing::warn!("grace period over before every listener drained");
        }
        let stepped_down = async {
            for t in &mut stepping_down {
                let _ = t.await;
            }
        };
        if tokio::time::timeout_at(shutdown::reserve(deadline, reserved), stepped_down)
            .await
            .is_err()
        {
            tracing::warn!("grace period over before the leader lease was released");
        }
        for b in background.into_iter().chain(stepping_down) {
            b.abort();
        }
        if let Some(c) = composed {
            c.stop(deadline).await;
        }
        self.relay_stop.cancel();
        debug_assert!(sd.phase() >= Phase::Stopping);
        tracing::info!("controller stopped");
        if deposed.load(std::sync::atomic::Ordering::SeqCst) {
            Exit::Deposed
        } else {
            Exit::Signal
        }
    }

    /// Static upstreams and maintenance: once elected, until deposed or stopping.
    fn leader_loops(&self, sd: Shutdown) -> impl Future<Output = ()> + Send + 'static {
        let leadership = self.leadership.clone();
        let statics = self.statics.clone();
        let ports = self.ports.clone();
        let metrics = self.metrics.clone();
        let fetch = self.fetch_status.clone();
        let pool = self.config.pool.clone();
        async move {
            tokio::select! {
                () = sd.reached(Phase::Stopping) => return,
                e = leadership.elected() => if !e { return },
            }
            let mut tasks = tokio::task::JoinSet::new();
            for s in statics {
                tasks.spawn(s.run(
                    ports.upserter.clone(),
                    ports.health.clone(),
                    metrics.clone(),
                    fetch.clone(),
                    sd.clone(),
                ));
            }
            tasks.spawn(maintenance::maintenance(
                ports.maintenance.clone(),
                pool.maintenance_interval,
                pool.maintenance_batch,
                sd.clone(),
            ));
            // Dropping the set aborts the loops: on deposition, or when the controller
            // aborts its background tasks after the listeners drained.
            tokio::select! {
                () = leadership.deposed() => {}
                _ = async { while tasks.join_next().await.is_some() {} } => {}
            }
        }
    }
}
