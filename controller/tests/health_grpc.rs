//! The whole health loop over gRPC: vendor simulator → provider → pool → health
//! planner → `CheckerBridge` → control plane (`CheckerControlPlane`, loopback fixture
//! transport) → `proxy-pool-checker` runner with its gRPC binding → real probes through
//! the simulator's proxies → observations back over gRPC → reducer → pool state.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use activity_pool::SystemClock;
use activity_pool::model::{ProxyId, ProxyState, UpstreamId};
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport};
use proxy_pool_checker as checker;
use proxy_pool_controller::controlplane::{
    ControlPlane, ControlPlaneConfig, ControlPlanePorts, MemoryCheckerBackend, OutcomeQueue,
    Transport, serve,
};
use proxy_pool_controller::health::{
    BridgeOptions, CheckerBridge, HealthMetrics, HealthService, PlannerConfig, ReducerConfig,
};
use proxy_pool_e2e::sim::{FailureMode, SimConfig, Simulator};
use tokio_util::sync::CancellationToken;

mod sim_support;
use sim_support::{pool, pool_id, sim_provider, wait_for};

fn all_are(states: &[Option<ProxyState>], want: ProxyState) -> bool {
    states.iter().all(|x| *x == Some(want))
}

async fn health_over_grpc(redis: bool) {
    let (pool, _server) = pool(redis).await;
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let upstream = UpstreamId::new("sim").unwrap();
    let clock = Arc::new(SystemClock);

    // Controller side: health service, control plane, bridge.
    let svc = Arc::new(
        HealthService::new(
            PlannerConfig {
                recheck_interval: Duration::from_millis(200),
                suspect_recheck_interval: Duration::from_millis(100),
                task_deadline: Duration::from_secs(3),
                egress_every: 1,
                ..PlannerConfig::default()
            },
            ReducerConfig::default(),
            pool.clone(),
            pool.clone(),
            clock.clone(),
            HealthMetrics::default(),
        )
        .unwrap(),
    );
    let ports = ControlPlanePorts::from_pool(pool.clone(), clock.clone());
    let (backend, observations) = MemoryCheckerBackend::new(256, 1024, clock.clone());
    let backend = Arc::new(backend);
    let (outcomes, _outcomes_rx) = OutcomeQueue::bounded(16);
    let cp = Arc::new(ControlPlane::new(
        ControlPlaneConfig::default(),
        ports,
        backend.clone(),
        outcomes,
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve(
        listener,
        Transport::LoopbackFixture,
        cp.clone(),
        stop.clone().cancelled_owned(),
    ));
    let bridge = CheckerBridge::new(
        svc.clone(),
        backend.clone(),
        BridgeOptions {
            feed_interval: Duration::from_millis(20),
            flush_interval: Duration::from_millis(10),
            ..BridgeOptions::default()
        },
    );
    let bridge_task = tokio::spawn(bridge.run(observations, stop.clone()));

    // Provider: 3 HTTP proxies, announced to the planner.
    let provider = sim_provider(&sim, &upstream, "count=3&protocol=http", pool.clone())
        .with_announcer(svc.clone());
    assert_eq!(provider.reconcile_once().await.unwrap().report.inserted, 3);
    let live = sim.live_proxies();
    let ids: Vec<ProxyId> = live
        .iter()
        .map(|s| pool_id(&upstream, &s.proxy.id, &provider.options().defaults))
        .collect();

    // Checker side: the real binary's library with its gRPC binding.
    let checker_stop = CancellationToken::new();
    let binding = checker::GrpcBinding::start(
        checker::GrpcOptions {
            endpoint,
            transport: ClientTransport::LoopbackPlaintext,
            client: ClientOptions::default(),
            checker_id: "chk-0".into(),
            instance_id: "chk-0-1".into(),
            max_concurrency: 8,
            tiers: vec![checker::Tier::Basic, checker::Tier::Egress],
            idle_wait: Duration::from_millis(100),
        },
        checker_stop.clone(),
    );
    let mut probe = checker::ProberOptions::new(sim.echo_http_addr());
    probe.check_timeout = Duration::from_secs(1);
    probe.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    let runner = tokio::spawn(checker::run(
        Arc::new(binding.clone()),
        Arc::new(binding),
        Arc::new(checker::NetProber::new(probe)),
        checker::RunnerOptions {
            concurrency: std::num::NonZeroUsize::new(8).unwrap(),
            flush_interval: Duration::from_millis(10),
            ..checker::RunnerOptions::default()
        },
        checker_stop.clone(),
    ));

    let s = wait_for(&pool, &ids, Duration::from_secs(15), |s| {
        all_are(s, ProxyState::Available)
    })
    .await;
    assert_eq!(
        s,
        vec![Some(ProxyState::Available); 3],
        "first BASIC success over gRPC"
    );

    sim.set_failure(&live[0].proxy.id, FailureMode::WrongEgress)
        .unwrap();
    sim.set_failure(&live[1].proxy.id, FailureMode::BadAuth)
        .unwrap();
    let s = wait_for(&pool, &ids[..2], Duration::from_secs(15), |s| {
        all_are(s, ProxyState::Unhealthy)
    })
    .await;
    assert_eq!(
        s,
        vec![Some(ProxyState::Unhealthy); 2],
        "leak and bad auth leave AVAILABLE"
    );
    let rec = pool.records(&ids[..1]).await.unwrap().remove(0).unwrap();
    assert_eq!(
        rec.health.failure.as_ref().map(|l| l.as_str()),
        Some("client_leaked")
    );
    assert_eq!(
        pool.assignable(&upstream, 10).await.unwrap(),
        vec![ids[2].clone()]
    );

    checker_stop.cancel();
    let stats = runner.await.unwrap();
    assert!(stats.probed.load(std::sync::atomic::Ordering::Relaxed) >= 6);
    stop.cancel();
    cp.close_streams();
    bridge_task.await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_over_grpc_memory() {
    health_over_grpc(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_over_grpc_redis() {
    health_over_grpc(true).await;
}
