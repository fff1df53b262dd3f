//! `HealthService` against the pool (memory and Redis) on a controlled clock: what it
//! hands out, what it writes, and what it forgets.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{
    Candidate, ClientId, Credentials, ExtractRequest, FetchedBatch, Filters, Fulfillment,
    OperationId, Protocol, ProxyId, ProxyState, RequestDigest, RequestId, Secret, UpstreamId,
};
use activity_pool::ports::ActivityPool;
use activity_pool::testkit::RedisServer;
use activity_pool::{
    ManualClock, MemoryPool, PoolOptions, RedisConnector, RedisOptions, RedisPool,
};
use proxy_pool_controller::health::{
    Check, CheckerId, FailureCode, HealthMetrics, HealthService, Observation, ObservationSink,
    PlannerConfig, ReducerConfig, TaskSource, Tier,
};

const ALL: [Tier; 3] = [Tier::Basic, Tier::Egress, Tier::Target];

struct Fixture {
    pool: Arc<dyn ActivityPool>,
    clock: ManualClock,
    svc: HealthService,
    metrics: HealthMetrics,
    _server: Option<RedisServer>,
}

async fn fixture(redis: bool) -> Fixture {
    let clock = ManualClock::starting_now();
    let (pool, server): (Arc<dyn ActivityPool>, _) = if redis {
        let server = RedisServer::start();
        let connector = RedisConnector::direct(&server.url()).unwrap();
        let options = RedisOptions {
            clock_override: Some(Arc::new(clock.clone())),
            ..RedisOptions::default()
        };
        (
            Arc::new(RedisPool::new(connector, options).await.unwrap()),
            Some(server),
        )
    } else {
        (
            Arc::new(MemoryPool::with_clock(
                PoolOptions::default(),
                Arc::new(clock.clone()),
            )),
            None,
        )
    };
    let metrics = HealthMetrics::default();
    let svc = HealthService::new(
        PlannerConfig {
            recheck_interval: Duration::from_secs(10),
            suspect_recheck_interval: Duration::from_secs(2),
            task_deadline: Duration::from_secs(5),
            lease_grace: Duration::from_secs(1),
            egress_every: 0,
            ..PlannerConfig::default()
        },
        ReducerConfig {
            suspect_after: NonZeroU32::new(1).unwrap(),
            unhealthy_after: NonZeroU32::new(2).unwrap(),
            ..ReducerConfig::default()
        },
        pool.clone(),
        pool.clone(),
        Arc::new(clock.clone()),
        metrics.clone(),
    )
    .unwrap();
    Fixture {
        pool,
        clock,
        svc,
        metrics,
        _server: server,
    }
}

fn up() -> UpstreamId {
    UpstreamId::new("u").unwrap()
}

async fn insert(f: &Fixture, from: u16, n: u16, ttl: u64) -> Vec<ProxyId> {
    let candidates: Vec<Candidate> = (from..from + n)
        .map(|i| Candidate {
            id: ProxyId::new(format!("p{i}")).unwrap(),
            protocol: Protocol::Socks5,
            host: format!("127.0.0.{}", 2 + i),
            port: 1000 + i,
            credentials: Some(Credentials {
                username: "user".into(),
                password: Secret::new("pw"),
            }),
            region: None,
            carrier: None,
            ttl: Duration::from_secs(ttl),
            max_concurrency: 4,
        })
        .collect();
    let ids: Vec<ProxyId> = candidates.iter().map(|c| c.id.clone()).collect();
    f.pool
        .upsert(FetchedBatch {
            quarantine: std::time::Duration::ZERO,
            upstream: up(),
            operation_id: OperationId::new(format!("op-{}", rand_suffix())).unwrap(),
            safety_margin: Duration::from_secs(5),
            max_size: NonZeroU32::new(100).unwrap(),
            candidates,
        })
        .await
        .unwrap();
    f.svc.track(&ids);
    ids
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn obs(task: u64, id: &ProxyId, success: bool) -> Observation {
    Observation {
        task_id: task,
        proxy_id: id.clone(),
        tier: Tier::Basic,
        routing: None,
        success,
        latency: Some(Duration::from_millis(12)),
        failure: (!success).then_some(FailureCode::ConnectRefused),
        egress: None,
    }
}

async fn state(f: &Fixture, id: &ProxyId) -> Option<ProxyState> {
    f.pool
        .records(std::slice::from_ref(id))
        .await
        .unwrap()
        .remove(0)
        .map(|r| r.state)
}

async fn tasks_carry_the_record_and_verdicts_reach_the_pool(redis: bool) {
    let f = fixture(redis).await;
    let ids = insert(&f, 0, 2, 60).await;
    let me = CheckerId("c".into());
    let tasks = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(tasks.len(), 2);
    let t = &tasks[0];
    assert_eq!(
        (t.proxy_id.clone(), t.protocol, t.port),
        (ids[0].clone(), Protocol::Socks5, 1000)
    );
    assert_eq!(t.credentials.as_ref().unwrap().password.expose(), "pw");
    assert_eq!(t.upstream, up());
    assert_eq!(t.checks, vec![Check::Basic]);
    assert!(
        f.svc.next_tasks(&me, 10, &ALL).await.unwrap().is_empty(),
        "leased"
    );
    assert_eq!(
        state(&f, &ids[0]).await,
        Some(ProxyState::Checking),
        "FETCHED → CHECKING"
    );

    let r = f
        .svc
        .submit(
            &me,
            vec![
                obs(tasks[0].task_id, &ids[0], true),
                obs(tasks[1].task_id, &ids[1], false),
            ],
        )
        .await
        .unwrap();
    assert_eq!((r.accepted_tasks, r.ignored_tasks, r.verdicts), (2, 0, 2));
    assert_eq!(state(&f, &ids[0]).await, Some(ProxyState::Available));
    assert_eq!(state(&f, &ids[1]).await, Some(ProxyState::Suspect));
    let rec = f.pool.records(&ids[..1]).await.unwrap().remove(0).unwrap();
    assert_eq!(rec.health.latency_ms, Some(12));
    assert_eq!(f.metrics.verdicts("AVAILABLE"), 1);

    // A duplicate report is ignored.
    let r = f
        .svc
        .submit(&me, vec![obs(tasks[0].task_id, &ids[0], false)])
        .await
        .unwrap();
    assert_eq!((r.accepted_tasks, r.ignored_tasks), (0, 1));
    assert_eq!(state(&f, &ids[0]).await, Some(ProxyState::Available));

    // SUSPECT is re-checked sooner (2 s) than AVAILABLE (10 s).
    f.clock.advance(Duration::from_secs(3));
    let again = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(
        again.iter().map(|t| t.proxy_id.clone()).collect::<Vec<_>>(),
        vec![ids[1].clone()]
    );
    f.svc
        .submit(&me, vec![obs(again[0].task_id, &ids[1], false)])
        .await
        .unwrap();
    assert_eq!(state(&f, &ids[1]).await, Some(ProxyState::Unhealthy));
    assert!(f.pool.assignable(&up(), 10).await.unwrap() == vec![ids[0].clone()]);
}

#[tokio::test]
async fn tasks_carry_the_record_and_verdicts_reach_the_pool_memory() {
    tasks_carry_the_record_and_verdicts_reach_the_pool(false).await;
}

#[tokio::test]
async fn tasks_carry_the_record_and_verdicts_reach_the_pool_redis() {
    tasks_carry_the_record_and_verdicts_reach_the_pool(true).await;
}

async fn late_reports_are_ignored_and_gone_proxies_forgotten(redis: bool) {
    let f = fixture(redis).await;
    let mut ids = insert(&f, 0, 2, 60).await;
    ids.extend(insert(&f, 2, 1, 20).await);
    let me = CheckerId("c".into());
    let tasks = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(tasks.len(), 3);

    // Past deadline + grace: the report is late, and the task is handed out again.
    f.clock.advance(Duration::from_secs(7));
    let r = f
        .svc
        .submit(&me, vec![obs(tasks[0].task_id, &ids[0], true)])
        .await
        .unwrap();
    assert_eq!((r.accepted_tasks, r.ignored_tasks), (0, 1));
    assert_eq!(state(&f, &ids[0]).await, Some(ProxyState::Checking));

    // p1 is extracted meanwhile (after an AVAILABLE verdict), p2 expires.
    let again = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(again.len(), 3);
    let t1 = again.iter().find(|t| t.proxy_id == ids[1]).unwrap().task_id;
    f.svc
        .submit(&me, vec![obs(t1, &ids[1], true)])
        .await
        .unwrap();
    let req = ExtractRequest {
        client_id: ClientId::new("client").unwrap(),
        request_id: RequestId::new("r1").unwrap(),
        idempotency_key: None,
        request_digest: RequestDigest::of(b"x"),
        count: NonZeroU32::new(1).unwrap(),
        fulfillment: Fulfillment::Partial,
        filters: Filters::default(),
        min_remaining_ttl: Duration::ZERO,
        max_health_check_age: None,
        reserve_for_gateway: 0,
        idempotency_ttl: Duration::from_secs(10),
    };
    f.pool.extract(&req).await.unwrap();
    assert_eq!(state(&f, &ids[1]).await, Some(ProxyState::Extracted));
    let t0 = again.iter().find(|t| t.proxy_id == ids[0]).unwrap().task_id;
    f.svc
        .submit(&me, vec![obs(t0, &ids[0], true)])
        .await
        .unwrap();
    assert_eq!(f.svc.tracked(), 3);

    // Past p1's recheck and p2's usable_until: building tasks forgets both.
    f.clock.advance(Duration::from_secs(12));
    let tasks = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(
        tasks.iter().map(|t| t.proxy_id.clone()).collect::<Vec<_>>(),
        vec![ids[0].clone()]
    );
    assert_eq!(
        f.svc.tracked(),
        1,
        "extracted and unusable proxies are forgotten"
    );
}

#[tokio::test]
async fn late_reports_are_ignored_and_gone_proxies_forgotten_memory() {
    late_reports_are_ignored_and_gone_proxies_forgotten(false).await;
}

#[tokio::test]
async fn late_reports_are_ignored_and_gone_proxies_forgotten_redis() {
    late_reports_are_ignored_and_gone_proxies_forgotten(true).await;
}
