//! Building (not running) the control plane, the health service and its checker
//! bridge, and the provider reconcilers: everything that can fail does here.

use std::sync::Arc;

use activity_pool::Clock;
use activity_pool::model::Secret;
use proxy_pool_api::config::{Config, ControlPlaneTransport, SourceConfig};
use proxy_pool_api::controlplane::model::Secret as WireSecret;

use super::run::LeaderLoops;
use super::{
    CHECK_QUEUE, ComposeError, OBSERVATION_QUEUE, OUTCOME_QUEUE, Usage, control_plane_config,
};
use crate::controlplane::{
    CheckerBackend, ControlPlane, ControlPlanePorts, MemoryCheckerBackend, OutcomeQueue, ServerTls,
    Transport, register_certificates,
};
use crate::health::{
    BridgeOptions, CheckerBridge, HealthMetrics, HealthService, PlannerConfig, ReducerConfig,
};
use crate::leadership::Leadership;
use crate::metrics::Metrics;
use crate::provider::{ProviderMetrics, ProviderReconciler, ResolvedSecrets, plan_upstream};
use crate::store::{self, Ports};

/// Everything built and checked, not yet running.
#[derive(Debug)]
pub struct Prepared {
    pub(super) control_plane: Option<(Arc<ControlPlane>, Transport)>,
    pub(super) usage: Usage,
    /// The loops only the leader runs.
    pub(super) leader: LeaderLoops,
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
        self.leader.health.clone()
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
/// `leadership` leads (the caller gives it the store's Redis for the daily byte quotas,
/// [`ControlPlane::set_meter`]).
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
    let clock: Arc<dyn Clock> = pool.manager.clock.clone();
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
            pool.manager.catalog.clone(),
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
                ControlPlaneTransport::Mtls(t) => {
                    let tls = ServerTls {
                        cert_pem: read_file(&t.cert_file)?,
                        key_pem: WireSecret::new(read_file(&t.key_file)?),
                        client_ca_pem: read_file(&t.client_ca_file)?,
                        trust_domain: t.trust_domain.clone(),
                        environment: t.environment.clone(),
                    };
                    registry.register_with(|r| {
                        register_certificates(r, &tls.cert_pem, &tls.client_ca_pem);
                    });
                    Some(Transport::Mtls(tls))
                }
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
                    let cp_config = control_plane_config(config);
                    let plane = ControlPlane::new(cp_config, pool, checker, queue)
                        .with_analytics(usage.collector())
                        .with_leadership(leadership.clone());
                    plane.ownership().set_target_exclusions(health.clone());
                    registry.register_with(|r| plane.register_metrics(r));
                    (Some((Arc::new(plane), transport)), Some(rx))
                }
            }
        }
    };
    Ok(Prepared {
        control_plane,
        usage,
        leader: LeaderLoops {
            outcomes,
            bridge,
            observations,
            reconcilers,
            health,
        },
    })
}
