//! `HealthService` against the pool (memory and Redis) on a controlled clock: what it
//! hands out, what it writes, and what it forgets.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod sim_support;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use activity_pool::model::{
    Candidate, CheckEnd, CheckMark, CheckStart, Credentials, Dial, FetchedBatch, HealthResult,
    HealthUpdate, Labels, OperationId, Protocol, ProxyId, ProxyState, Secret, UpstreamId,
};
use activity_pool::ports::{ActivityPool, HealthStore};
use activity_pool::testkit::{RedisServer, extract_request};
use activity_pool::{
    ManualClock, MemoryPool, PoolError, PoolOptions, PoolResult, RedisConnector, RedisOptions,
    RedisPool,
};
use async_trait::async_trait;
use proxy_pool_api::controlplane::model as wire;
use proxy_pool_controller::controlplane::CheckerBackend;
use proxy_pool_controller::controlplane::MemoryCheckerBackend;
use proxy_pool_controller::controlplane::checker::CheckerRegistration;
use proxy_pool_controller::health::{
    BridgeOptions, Check, CheckerBridge, CheckerId, FailureCode, HealthMetrics, HealthService,
    Observation, ObservationSink, PlannerConfig, ReducerConfig, SubmitReport, TaskSource,
    TaskStart, Tier,
};
use sim_support::on_both_pools;
use tokio_util::sync::CancellationToken;

const ALL: [Tier; 3] = [Tier::Basic, Tier::Egress, Tier::Target];

struct Fixture {
    pool: Arc<dyn ActivityPool>,
    clock: ManualClock,
    svc: Arc<HealthService>,
    metrics: HealthMetrics,
    /// While set, the service's `begin_checks` fails (a pool error).
    marks_fail: Arc<AtomicBool>,
    _server: Option<RedisServer>,
}

impl Fixture {
    /// `me` reports one BASIC observation of `id` for `task`.
    async fn report(&self, me: &CheckerId, task: u64, id: &ProxyId, success: bool) -> SubmitReport {
        self.svc
            .submit(me, vec![obs(task, id, success)])
            .await
            .unwrap()
    }
}

/// The pool as the service's `HealthStore`, with `begin_checks` failing on demand.
struct MarkFaults {
    pool: Arc<dyn ActivityPool>,
    fail: Arc<AtomicBool>,
}

#[async_trait]
impl HealthStore for MarkFaults {
    async fn apply_health(&self, updates: &[HealthUpdate]) -> PoolResult<Vec<HealthResult>> {
        self.pool.apply_health(updates).await
    }

    async fn begin_checks(&self, starts: &[CheckStart]) -> PoolResult<Vec<CheckMark>> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(PoolError::Unavailable("injected".into()));
        }
        self.pool.begin_checks(starts).await
    }

    async fn end_checks(&self, ends: &[CheckEnd]) -> PoolResult<Vec<bool>> {
        self.pool.end_checks(ends).await
    }
}

async fn fixture(redis: bool) -> Fixture {
    fixture_with(redis, 0).await
}

/// A fixture whose tasks carry EGRESS every `egress_every`-th check (0: never).
async fn fixture_with(redis: bool, egress_every: u32) -> Fixture {
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
    let marks_fail = Arc::new(AtomicBool::new(false));
    let store = Arc::new(MarkFaults {
        pool: pool.clone(),
        fail: marks_fail.clone(),
    });
    let svc = Arc::new(
        HealthService::new(
            PlannerConfig {
                recheck_interval: Duration::from_secs(10),
                suspect_recheck_interval: Duration::from_secs(2),
                task_deadline: Duration::from_secs(5),
                lease_grace: Duration::from_secs(1),
                egress_every,
                ..PlannerConfig::default()
            },
            ReducerConfig {
                suspect_after: NonZeroU32::new(1).unwrap(),
                unhealthy_after: NonZeroU32::new(2).unwrap(),
                ..ReducerConfig::default()
            },
            pool.clone(),
            store,
            Arc::new(clock.clone()),
            metrics.clone(),
        )
        .unwrap(),
    );
    Fixture {
        pool,
        clock,
        svc,
        metrics,
        marks_fail,
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
            dial: Dial {
                protocol: Protocol::Socks5,
                host: format!("127.0.0.{}", 2 + i),
                port: 1000 + i,
                credentials: Some(Credentials {
                    username: "user".into(),
                    password: Secret::new("pw"),
                }),
            },
            labels: Labels::default(),
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
        (t.proxy_id.clone(), t.dial.protocol, t.dial.port),
        (ids[0].clone(), Protocol::Socks5, 1000)
    );
    assert_eq!(t.dial.credentials.as_ref().unwrap().password.expose(), "pw");
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
    let r = f.report(&me, tasks[0].task_id, &ids[0], false).await;
    assert_eq!((r.accepted_tasks, r.ignored_tasks), (0, 1));
    assert_eq!(state(&f, &ids[0]).await, Some(ProxyState::Available));

    // SUSPECT is re-checked sooner (2 s) than AVAILABLE (10 s).
    f.clock.advance(Duration::from_secs(3));
    let again = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(
        again.iter().map(|t| t.proxy_id.clone()).collect::<Vec<_>>(),
        vec![ids[1].clone()]
    );
    f.report(&me, again[0].task_id, &ids[1], false).await;
    assert_eq!(state(&f, &ids[1]).await, Some(ProxyState::Unhealthy));
    assert!(f.pool.assignable(&up(), 10).await.unwrap() == vec![ids[0].clone()]);
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
    let r = f.report(&me, tasks[0].task_id, &ids[0], true).await;
    assert_eq!((r.accepted_tasks, r.ignored_tasks), (0, 1));
    assert_eq!(state(&f, &ids[0]).await, Some(ProxyState::Checking));

    // p1 is extracted meanwhile (after an AVAILABLE verdict), p2 expires.
    let again = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(again.len(), 3);
    let t1 = again.iter().find(|t| t.proxy_id == ids[1]).unwrap().task_id;
    f.report(&me, t1, &ids[1], true).await;
    f.pool.extract(&extract_request("client", 1)).await.unwrap();
    assert_eq!(state(&f, &ids[1]).await, Some(ProxyState::Extracted));
    let t0 = again.iter().find(|t| t.proxy_id == ids[0]).unwrap().task_id;
    f.report(&me, t0, &ids[0], true).await;
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

/// The IDs an extraction of `count` hands out now.
async fn extract(f: &Fixture, count: u32) -> Vec<ProxyId> {
    match f
        .pool
        .extract(&extract_request("client", count))
        .await
        .unwrap()
    {
        activity_pool::model::ExtractOutcome::Extracted(x) => {
            x.proxies.into_iter().map(|p| p.id).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// Inserts `n` proxies and passes their first check: AVAILABLE, no mark left.
async fn available(f: &Fixture, n: u16) -> Vec<ProxyId> {
    let ids = insert(f, 0, n, 60).await;
    let me = CheckerId("c".into());
    let tasks = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    let obs: Vec<Observation> = tasks
        .iter()
        .map(|t| obs(t.task_id, &t.proxy_id, true))
        .collect();
    f.svc.submit(&me, obs).await.unwrap();
    for id in &ids {
        assert_eq!(state(f, id).await, Some(ProxyState::Available));
    }
    ids
}

/// A task handed to a checker marks its proxy in the pool: no extraction takes it
/// until the task's result is in (or its deadline plus grace has passed).
async fn a_task_out_keeps_its_proxy_from_extraction(redis: bool) {
    let f = fixture(redis).await;
    let ids = available(&f, 1).await;
    let me = CheckerId("c".into());
    f.clock.advance(Duration::from_secs(11));
    let tasks = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(tasks.len(), 1);
    assert!(extract(&f, 1).await.is_empty(), "extracted under check");
    f.report(&me, tasks[0].task_id, &ids[0], true).await;
    assert_eq!(extract(&f, 1).await, ids, "the result ends the mark");

    // Unreported: the mark ends at the deadline (5 s) plus the grace (1 s).
    let more = insert(&f, 5, 1, 60).await;
    let tasks = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    f.report(&me, tasks[0].task_id, &more[0], true).await;
    f.clock.advance(Duration::from_secs(11));
    assert_eq!(f.svc.next_tasks(&me, 10, &ALL).await.unwrap().len(), 1);
    f.clock.advance(Duration::from_millis(5_999));
    assert!(extract(&f, 1).await.is_empty());
    f.clock.advance(Duration::from_millis(1));
    assert_eq!(extract(&f, 1).await, more);
}

/// A task leased for a queue is not marked; if its proxy is extracted before a checker
/// takes it, admitting it fails: it is not run, the planner forgets the proxy and the
/// drop is counted.
async fn a_task_whose_proxy_was_extracted_first_is_dropped(redis: bool) {
    let f = fixture(redis).await;
    let ids = available(&f, 2).await;
    f.clock.advance(Duration::from_secs(11));
    let tasks = f.svc.lease_tasks(10, &ALL).await.unwrap();
    assert_eq!(tasks.len(), 2);
    let taken = extract(&f, 1).await;
    assert_eq!(taken.len(), 1, "queued tasks do not mark");
    let starts: Vec<TaskStart> = tasks.iter().map(TaskStart::from).collect();
    let admitted = f.svc.admit(&starts).await.unwrap();
    let expect: Vec<bool> = tasks.iter().map(|t| t.proxy_id != taken[0]).collect();
    assert_eq!(admitted, expect);
    assert_eq!(f.metrics.checks_dropped("extracted"), 1);
    assert_eq!(f.svc.tracked(), 1);
    assert_eq!(ids.len(), 2);
    assert!(
        extract(&f, 1).await.is_empty(),
        "the admitted one is marked"
    );
}

/// Through the bridge's queue: queued tasks leave their proxies extractable; a task
/// goes to a checker only once its proxy is marked, and one whose proxy was extracted
/// while it waited is withdrawn (never reaches the checker, frees its slot). The
/// checker's report ends the mark.
async fn the_bridge_marks_a_task_when_a_checker_takes_it(redis: bool) {
    let f = fixture(redis).await;
    let ids = available(&f, 2).await;
    f.clock.advance(Duration::from_secs(11));
    let (backend, observations) = MemoryCheckerBackend::new(64, 64, Arc::new(f.clock.clone()));
    let backend = Arc::new(backend);
    let bridge = CheckerBridge::new(
        f.svc.clone(),
        backend.clone(),
        BridgeOptions {
            feed_interval: Duration::from_millis(20),
            flush_interval: Duration::from_millis(20),
            ..BridgeOptions::default()
        },
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn(bridge.run(observations, stop.clone()));
    let waited = tokio::time::Instant::now();
    while backend.queued() < 2 {
        assert!(waited.elapsed() < Duration::from_secs(10), "never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let taken = extract(&f, 1).await;
    assert_eq!(taken.len(), 1, "queued tasks do not mark");
    let other = ids.iter().find(|i| **i != taken[0]).unwrap().clone();

    let session = backend
        .register(CheckerRegistration {
            checker_id: "checker-1".into(),
            instance_id: "checker-1-a".into(),
            max_concurrency: 2,
            tiers: vec![Tier::Basic],
        })
        .await
        .unwrap();
    let got = backend
        .next_tasks(&session, 10, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|t| t.proxy.id.as_str()).collect::<Vec<_>>(),
        vec![other.as_str()]
    );
    assert_eq!(f.metrics.checks_dropped("extracted"), 1);
    assert!(
        extract(&f, 1).await.is_empty(),
        "taken by a checker: marked"
    );

    let report = backend
        .report(
            &session,
            vec![wire::Observation {
                task_id: got[0].task_id.clone(),
                proxy_id: got[0].proxy.id.clone(),
                tier: wire::CheckTier::Basic,
                success: true,
                latency: Some(Duration::from_millis(3)),
                failure: None,
                egress: None,
                routing: None,
                observed_at_ms: 0,
            }],
        )
        .await
        .unwrap();
    assert_eq!(report.accepted, 1);
    let waited = tokio::time::Instant::now();
    loop {
        let x = extract(&f, 1).await;
        if !x.is_empty() {
            assert_eq!(x, vec![other]);
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the report never ended the mark"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_marks_a_task_when_a_checker_takes_it_memory() {
    the_bridge_marks_a_task_when_a_checker_takes_it(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_marks_a_task_when_a_checker_takes_it_redis() {
    the_bridge_marks_a_task_when_a_checker_takes_it(true).await;
}

/// A task that ended early (its BASIC failed) while another of its checks may still be
/// under way keeps its mark until the mark runs out, even when a later task of the
/// proxy succeeds before that.
async fn a_task_ended_early_keeps_its_mark_until_it_runs_out(redis: bool) {
    let f = fixture_with(redis, 1).await;
    let ids = insert(&f, 0, 1, 60).await;
    let me = CheckerId("c".into());
    let all_ok = |task: u64| {
        vec![
            obs(task, &ids[0], true),
            Observation {
                tier: Tier::Egress,
                ..obs(task, &ids[0], true)
            },
        ]
    };
    let t = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    assert_eq!(t[0].checks, vec![Check::Basic, Check::Egress]);
    f.svc.submit(&me, all_ok(t[0].task_id)).await.unwrap();
    f.clock.advance(Duration::from_secs(11));

    // Marked until now + 6 s; its BASIC fails before its EGRESS is in.
    let t = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    f.report(&me, t[0].task_id, &ids[0], false).await;
    assert_eq!(state(&f, &ids[0]).await, Some(ProxyState::Suspect));
    f.clock.advance(Duration::from_secs(2));
    let t = f.svc.next_tasks(&me, 10, &ALL).await.unwrap();
    f.svc.submit(&me, all_ok(t[0].task_id)).await.unwrap();
    assert_eq!(state(&f, &ids[0]).await, Some(ProxyState::Available));
    assert!(
        extract(&f, 1).await.is_empty(),
        "the early end kept its mark"
    );
    f.clock.advance(Duration::from_secs(4));
    assert_eq!(extract(&f, 1).await, ids);
}

/// A pool error while marking starts none of the tasks and gives them all back to the
/// planner, due again at once (not only after their deadline plus grace): through
/// `admit` (the bridge's gate) and `next_tasks` alike.
async fn a_failed_mark_gives_the_tasks_back(redis: bool) {
    let f = fixture(redis).await;
    available(&f, 2).await;
    f.clock.advance(Duration::from_secs(11));
    let me = CheckerId("c".into());
    let tasks = f.svc.lease_tasks(10, &ALL).await.unwrap();
    assert_eq!(tasks.len(), 2);
    f.marks_fail.store(true, Ordering::SeqCst);
    let starts: Vec<TaskStart> = tasks.iter().map(TaskStart::from).collect();
    assert!(f.svc.admit(&starts).await.is_err());
    assert!(
        f.svc.next_tasks(&me, 10, &ALL).await.is_err(),
        "given back, leased again"
    );
    f.marks_fail.store(false, Ordering::SeqCst);
    assert_eq!(f.svc.next_tasks(&me, 10, &ALL).await.unwrap().len(), 2);
    assert!(extract(&f, 2).await.is_empty(), "marked now");
}

on_both_pools!(
    tasks_carry_the_record_and_verdicts_reach_the_pool,
    late_reports_are_ignored_and_gone_proxies_forgotten,
    a_task_out_keeps_its_proxy_from_extraction,
    a_task_whose_proxy_was_extracted_first_is_dropped,
    a_task_ended_early_keeps_its_mark_until_it_runs_out,
    a_failed_mark_gives_the_tasks_back,
);
