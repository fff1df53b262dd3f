//! End to end, in process: vendor simulator → provider reconciler → pool → health
//! planner → checker (real probes through the simulator's proxies) → reducer → pool
//! state. On the memory pool and on a real `redis-server`.
//!
//! The checker talks to the health service through an in-process bridge of its
//! `TaskSource` / `ObservationSink` ports, the same seam the gRPC binding will use.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{ProxyId, ProxyState, UpstreamId};
use activity_pool::{Clock, SystemClock};
use async_trait::async_trait;
use proxy_pool_checker as checker;
use proxy_pool_controller::health::{
    CheckTask, CheckerId, HealthMetrics, HealthService, Observation, ObservationSink,
    PlannerConfig, ReducerConfig, TaskSource,
};
use proxy_pool_e2e::sim::{FailureMode, SimConfig, Simulator};
use tokio_util::sync::CancellationToken;

mod sim_support;
use sim_support::{pool, pool_id, sim_provider, states, wait_for};

/// The checker's ports bound in process to the controller's health service.
struct Bridge {
    svc: Arc<HealthService>,
    id: CheckerId,
}

fn to_probe(t: CheckTask) -> checker::ProbeTask {
    let left = t.deadline.since(SystemClock.now());
    checker::ProbeTask {
        task_id: t.task_id.to_string(),
        proxy_id: t.proxy_id.to_string(),
        dial: t.dial,
        checks: t.checks,
        deadline: tokio::time::Instant::now() + left,
    }
}

fn from_obs(o: checker::Observation) -> Option<Observation> {
    Some(Observation {
        task_id: o.task_id.parse().ok()?,
        proxy_id: ProxyId::new(o.proxy_id).ok()?,
        tier: o.tier,
        routing: o.routing,
        success: o.success,
        latency: o.latency,
        failure: o.failure,
        egress: o.egress,
    })
}

#[async_trait]
impl checker::TaskSource for Bridge {
    async fn next_tasks(
        &self,
        max: usize,
        tiers: &[checker::Tier],
    ) -> Result<Vec<checker::ProbeTask>, checker::BindingError> {
        let tasks = self
            .svc
            .next_tasks(&self.id, max, tiers)
            .await
            .map_err(|e| checker::BindingError::Unavailable(e.to_string()))?;
        Ok(tasks.into_iter().map(to_probe).collect())
    }
}

#[async_trait]
impl checker::ObservationSink for Bridge {
    async fn submit(
        &self,
        observations: Vec<checker::Observation>,
    ) -> Result<(), checker::BindingError> {
        let obs = observations.into_iter().filter_map(from_obs).collect();
        self.svc
            .submit(&self.id, obs)
            .await
            .map(drop)
            .map_err(|e| checker::BindingError::Unavailable(e.to_string()))
    }
}

async fn simulator_to_pool_state(redis: bool) {
    let (pool, _server) = pool(redis).await;
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let upstream = UpstreamId::new("sim").unwrap();

    let svc = Arc::new(
        HealthService::new(
            PlannerConfig {
                recheck_interval: Duration::from_millis(150),
                suspect_recheck_interval: Duration::from_millis(100),
                unhealthy_recheck_interval: Duration::from_millis(300),
                task_deadline: Duration::from_secs(3),
                egress_every: 1,
                ..PlannerConfig::default()
            },
            ReducerConfig {
                suspect_after: 2.try_into().unwrap(),
                unhealthy_after: 3.try_into().unwrap(),
                ..ReducerConfig::default()
            },
            pool.clone(),
            pool.clone(),
            Arc::new(SystemClock),
            HealthMetrics::default(),
        )
        .unwrap(),
    );

    // Provider: 4 proxies (JSON), announced to the planner.
    let provider = sim_provider(&sim, &upstream, "count=4&protocol=socks5", pool.clone())
        .with_announcer(svc.clone());
    assert_eq!(provider.reconcile_once().await.unwrap().report.inserted, 4);
    assert_eq!(svc.tracked(), 4);
    let live = sim.live_proxies();
    let ids: Vec<ProxyId> = live
        .iter()
        .map(|s| pool_id(&upstream, &s.proxy.id, &provider.options().defaults))
        .collect();
    assert_eq!(
        states(&pool, &ids).await,
        vec![Some(ProxyState::Fetched); 4]
    );

    // Checker, bound in process.
    let bridge = Arc::new(Bridge {
        svc: svc.clone(),
        id: CheckerId("checker-0".into()),
    });
    let mut probe_opts = checker::ProberOptions::new(sim.echo_http_addr());
    probe_opts.check_timeout = Duration::from_secs(1);
    probe_opts.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    let shutdown = CancellationToken::new();
    let runner = tokio::spawn(checker::run(
        bridge.clone(),
        bridge.clone(),
        Arc::new(checker::NetProber::new(probe_opts)),
        checker::RunnerOptions {
            idle_poll: Duration::from_millis(20),
            flush_interval: Duration::from_millis(10),
            ..checker::RunnerOptions::default()
        },
        shutdown.clone(),
    ));

    // First BASIC success → AVAILABLE, and assignable.
    let s = wait_for(&pool, &ids, Duration::from_secs(10), |s| {
        s.iter().all(|x| *x == Some(ProxyState::Available))
    })
    .await;
    assert_eq!(s, vec![Some(ProxyState::Available); 4]);
    assert_eq!(pool.assignable(&upstream, 10).await.unwrap().len(), 4);
    let rec = pool.records(&ids[..1]).await.unwrap().remove(0).unwrap();
    assert!(rec.health.last_success_at.is_some() && rec.health.latency_ms.is_some());

    // Proxy 0 starts refusing, proxy 1 rejects its credentials, proxy 2 expires at the vendor.
    let started = tokio::time::Instant::now();
    sim.set_failure(&live[0].proxy.id, FailureMode::Refuse)
        .unwrap();
    sim.set_failure(&live[1].proxy.id, FailureMode::BadAuth)
        .unwrap();
    sim.expire(&live[2].proxy.id).unwrap();
    let failing = &ids[..3];
    let s = wait_for(&pool, failing, Duration::from_secs(10), |s| {
        s.iter().all(|x| *x == Some(ProxyState::Unhealthy))
    })
    .await;
    assert_eq!(
        s,
        vec![Some(ProxyState::Unhealthy); 3],
        "left AVAILABLE within the thresholds"
    );
    // 3 failed checks at most ~150 ms + 2×100 ms apart, plus probing: well under 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let rec = pool.records(&ids[..1]).await.unwrap().remove(0).unwrap();
    assert_eq!(
        rec.health.failure.as_ref().map(|l| l.as_str()),
        Some("handshake_failed")
    );
    let rec = pool.records(&ids[1..2]).await.unwrap().remove(0).unwrap();
    assert_eq!(
        rec.health.failure.as_ref().map(|l| l.as_str()),
        Some("auth_rejected")
    );
    // The healthy one stays AVAILABLE; only it is assignable.
    assert_eq!(
        states(&pool, &ids[3..]).await,
        vec![Some(ProxyState::Available)]
    );
    assert_eq!(
        pool.assignable(&upstream, 10).await.unwrap(),
        vec![ids[3].clone()]
    );

    // Proxy 0 recovers: back to AVAILABLE after `recover_after` successes.
    sim.set_failure(&live[0].proxy.id, FailureMode::None)
        .unwrap();
    let s = wait_for(&pool, &ids[..1], Duration::from_secs(10), |s| {
        s[0] == Some(ProxyState::Available)
    })
    .await;
    assert_eq!(s, vec![Some(ProxyState::Available)]);

    shutdown.cancel();
    let stats = runner.await.unwrap();
    assert_eq!(stats.dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulator_to_pool_state_memory() {
    simulator_to_pool_state(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulator_to_pool_state_redis() {
    simulator_to_pool_state(true).await;
}
