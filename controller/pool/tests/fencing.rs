//! Leader fencing on a real `redis-server`: once another holder has taken the leader
//! lease (a greater fencing token), every leader-only write of the old holder is
//! refused inside its script with `Fenced` and changes nothing, even when the old
//! holder still believes it leads (a paused process resumed). Never skipped: a missing
//! binary fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::num::NonZeroU32;
use std::time::Duration;

use activity_pool::model::*;
use activity_pool::ports::*;
use activity_pool::testkit::{RedisServer, candidate, extract_request};
use activity_pool::{Fence, LeaderGrant, PoolError, RedisPool};

/// `testkit::candidate` without credentials or carrier, ten minutes to live.
fn cand(id: &str) -> Candidate {
    let mut c = candidate(id, Duration::from_secs(600));
    c.dial.credentials = None;
    c.labels.carrier = None;
    c
}

fn batch(op: &str, ids: &[&str]) -> FetchedBatch {
    FetchedBatch {
        quarantine: std::time::Duration::ZERO,
        upstream: UpstreamId::new("vendor-a").unwrap(),
        operation_id: OperationId::new(op).unwrap(),
        safety_margin: Duration::from_secs(5),
        max_size: NonZeroU32::new(1_000).unwrap(),
        candidates: ids.iter().map(|i| cand(i)).collect(),
    }
}

fn id(s: &str) -> ProxyId {
    ProxyId::new(s).unwrap()
}

/// A lease of proxy `p` to `worker` for `lease`.
fn lease_of(p: &str, worker: &WorkerId, lease: Duration) -> LeaseRequest {
    LeaseRequest {
        proxy_id: id(p),
        worker_id: worker.clone(),
        lease,
    }
}

fn health(p: &str, verdict: HealthVerdict) -> HealthUpdate {
    HealthUpdate {
        proxy_id: id(p),
        verdict,
        success: verdict == HealthVerdict::Available,
        latency: None,
        failure: None,
    }
}

async fn granted(pool: &RedisPool, holder: &str, ttl: Duration) -> u64 {
    match pool.leader_acquire(holder, ttl).await.unwrap() {
        LeaderGrant::Granted(t) => t,
        LeaderGrant::Held => panic!("{holder}: lease held by another"),
    }
}

/// A pool on a fresh server (returned to keep it running), and that pool fenced by a
/// new `Fence` that holds no token yet.
async fn fenced_pool() -> (RedisServer, RedisPool, Fence, RedisPool) {
    let server = RedisServer::start();
    let pool = server.pool().await;
    let fence = Fence::new();
    let fenced = pool.fenced(fence.clone());
    (server, pool, fence, fenced)
}

#[tokio::test]
async fn a_deposed_leader_writes_nothing() {
    let (_server, pool, fence_a, a) = fenced_pool().await;

    // No token yet: fail closed, before reaching Redis.
    assert_eq!(
        a.upsert(batch("op-0", &["p0"])).await.unwrap_err(),
        PoolError::Fenced
    );

    let t1 = granted(&pool, "a", Duration::from_millis(300)).await;
    fence_a.grant(t1);
    a.upsert(batch("op-1", &["p1", "p2", "p3"])).await.unwrap();
    let ups = ["p1", "p2", "p3"].map(|p| health(p, HealthVerdict::Available));
    a.apply_health(&ups).await.unwrap();
    let w1 = WorkerId::new("w1").unwrap();
    let lease = Duration::from_secs(30);
    let held = a.assign(&lease_of("p1", &w1, lease)).await.unwrap();

    // `a` stops renewing (paused); its lease runs out and `b` takes over.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t2 = granted(&pool, "b", Duration::from_secs(30)).await;
    assert!(t2 > t1, "{t2} > {t1}");
    assert!(!pool.leader_renew("a", t1, lease).await.unwrap());

    let ids = [id("p1"), id("p2"), id("p3"), id("p4")];
    let before = format!("{:?}", pool.records(&ids).await.unwrap());

    // `a` resumes still holding t1: every leader-only script refuses it. The token is
    // put back before each call so that the script (not the adapter's local check)
    // is what refuses.
    let u = UpstreamId::new("vendor-a").unwrap();
    let e = held.epoch;
    let claim = Claim {
        proxy_id: id("p1"),
        worker_id: w1.clone(),
        epoch: e,
    };
    let attempts: Vec<(&str, Result<(), PoolError>)> = vec![
        ("upsert", {
            fence_a.grant(t1);
            a.upsert(batch("op-2", &["p4"])).await.map(drop)
        }),
        ("remove", {
            fence_a.grant(t1);
            a.remove(&u, &[id("p3")]).await.map(drop)
        }),
        ("health", {
            fence_a.grant(t1);
            a.apply_health(&[health("p2", HealthVerdict::Unhealthy)])
                .await
                .map(drop)
        }),
        ("assign", {
            fence_a.grant(t1);
            a.assign(&lease_of("p2", &w1, lease)).await.map(drop)
        }),
        ("renew", {
            fence_a.grant(t1);
            a.renew(&claim, lease).await.map(drop)
        }),
        ("assign_many", {
            fence_a.grant(t1);
            a.assign_many(&[lease_of("p2", &w1, lease)]).await.map(drop)
        }),
        ("renew_many", {
            fence_a.grant(t1);
            a.renew_many(std::slice::from_ref(&claim), lease)
                .await
                .map(drop)
        }),
        ("drain", {
            fence_a.grant(t1);
            a.begin_drain(&claim).await.map(drop)
        }),
        ("ack_drain", {
            fence_a.grant(t1);
            let ack = DrainAck {
                claim: claim.clone(),
                active: 0,
                reserved: 0,
            };
            a.acknowledge_drain(&ack).await
        }),
        ("expire", {
            fence_a.grant(t1);
            a.expire(100).await.map(drop)
        }),
        ("purge", {
            fence_a.grant(t1);
            a.purge_expired(100).await.map(drop)
        }),
    ];
    for (what, r) in attempts {
        assert_eq!(r, Err(PoolError::Fenced), "{what}");
    }
    // A refusal revokes the local token: later writes fail without reaching Redis.
    assert_eq!(fence_a.token(), 0);
    assert_eq!(
        format!("{:?}", pool.records(&ids).await.unwrap()),
        before,
        "a fenced write changed the pool"
    );

    // The new leader writes; reads and extraction are not fenced.
    let fence_b = Fence::new();
    fence_b.grant(t2);
    let b = pool.fenced(fence_b);
    let w2 = WorkerId::new("w2").unwrap();
    b.assign(&lease_of("p2", &w2, lease)).await.unwrap();
    assert_eq!(a.get(&id("p2")).await.unwrap().unwrap().worker_id, w2);
}

#[tokio::test]
async fn fencing_tokens_never_go_backwards_after_data_loss() {
    let mut server = RedisServer::start();
    let pool = server.pool().await;
    let t1 = granted(&pool, "a", Duration::from_secs(30)).await;
    // A restart without persistence loses the lease and the newest token.
    server.restart();
    let fence_a = Fence::new();
    fence_a.grant(t1);
    let a = pool.fenced(fence_a.clone());
    let mut refused = None;
    for _ in 0..50 {
        match a.upsert(batch("op-1", &["p1"])).await {
            Err(PoolError::Unavailable(_)) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                fence_a.grant(t1);
            }
            other => {
                refused = Some(other);
                break;
            }
        }
    }
    assert_eq!(
        refused.map(|r| r.map(drop)),
        Some(Err(PoolError::Fenced)),
        "a token the store no longer knows is refused"
    );
    let t2 = granted(&pool, "b", Duration::from_secs(30)).await;
    assert!(t2 > t1, "derived from server time: {t2} > {t1}");
}

/// A leader elected elsewhere (a Kubernetes Lease) takes its token with
/// `leader_token`: greater than every earlier token, and from then on the previous
/// leader's writes are refused while the new token's pass.
#[tokio::test]
async fn a_token_taken_for_another_lease_store_fences_the_previous_leader() {
    let server = RedisServer::start();
    let pool = server.pool().await;
    let t1 = pool.leader_token().await.unwrap();
    let t2 = pool.leader_token().await.unwrap();
    assert!(t2 > t1, "{t2} > {t1}");
    // After a Redis lease grant too: tokens share one sequence.
    let t3 = granted(&pool, "a", Duration::from_secs(30)).await;
    let t4 = pool.leader_token().await.unwrap();
    assert!(t3 > t2 && t4 > t3, "{t2} < {t3} < {t4}");

    let (old, new) = (Fence::new(), Fence::new());
    old.grant(t3);
    new.grant(t4);
    assert_eq!(
        pool.fenced(old)
            .upsert(batch("op-old", &["p1"]))
            .await
            .unwrap_err(),
        PoolError::Fenced
    );
    pool.fenced(new)
        .upsert(batch("op-new", &["p2"]))
        .await
        .unwrap();
    let recs = pool.records(&[id("p1"), id("p2")]).await.unwrap();
    assert_eq!(recs.len(), 2);
    assert!(recs[0].is_none(), "the fenced write changed nothing");
    assert!(recs[1].is_some());
}

/// Check marks are leader-only writes too: a deposed leader can neither mark a proxy
/// (its check could then run unmarked) nor end a mark (a check of the new leader's could
/// then be overtaken by an extraction). Extraction shows both.
#[tokio::test]
async fn a_deposed_leader_neither_marks_nor_ends_a_check() {
    let (_server, pool, fence_a, a) = fenced_pool().await;
    let hold = Duration::from_secs(30);
    let start = |p: &str, check| CheckStart {
        proxy_id: id(p),
        check,
        hold,
    };
    let end_p1 = [CheckEnd {
        proxy_id: id("p1"),
        check: 1,
    }];
    // Not leading yet: refused before reaching Redis.
    assert_eq!(
        a.begin_checks(&[start("p1", 1)]).await.unwrap_err(),
        PoolError::Fenced
    );

    let t1 = granted(&pool, "a", Duration::from_millis(300)).await;
    fence_a.grant(t1);
    a.upsert(batch("op-1", &["p1", "p2"])).await.unwrap();
    let ups = ["p1", "p2"].map(|p| health(p, HealthVerdict::Available));
    a.apply_health(&ups).await.unwrap();
    assert!(matches!(
        a.begin_checks(&[start("p1", 1)]).await.unwrap()[..],
        [CheckMark::Marked(_)]
    ));

    tokio::time::sleep(Duration::from_millis(500)).await;
    let t2 = granted(&pool, "b", Duration::from_secs(30)).await;
    assert!(t2 > t1);
    fence_a.grant(t1);
    assert_eq!(a.end_checks(&end_p1).await.unwrap_err(), PoolError::Fenced);
    fence_a.grant(t1);
    assert_eq!(
        a.begin_checks(&[start("p2", 2)]).await.unwrap_err(),
        PoolError::Fenced
    );

    // p1 is still marked, p2 was not: an extraction takes p2 only.
    let req = extract_request("c", 2);
    match pool.extract(&req).await.unwrap() {
        ExtractOutcome::Extracted(x) => assert_eq!(
            x.proxies.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
            vec![id("p2")]
        ),
        other => panic!("{other:?}"),
    }

    // The new leader's writes go through.
    let fence_b = Fence::new();
    fence_b.grant(t2);
    let b = pool.fenced(fence_b);
    assert_eq!(b.end_checks(&end_p1).await.unwrap(), vec![true]);
}
