//! Model-based property test: random operation sequences, with time advancing, applied
//! to the reference `MemoryPool` and to the Redis adapter (a real `redis-server`) must
//! give identical observable results after every step. Failing seeds are kept in
//! `pool_model.proptest-regressions` and replayed first on every run.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::*;
use activity_pool::ports::ActivityPool;
use activity_pool::testkit::{self, RedisServer};
use activity_pool::{
    ManualClock, MemoryPool, PoolOptions, RedisConnector, RedisOptions, RedisPool, Timestamp,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};

const IDS: usize = 10;
const UPSTREAMS: [&str; 2] = ["vendor-a", "vendor-b"];
const REGIONS: [&str; 2] = ["eu", "us"];
const WORKERS: [&str; 2] = ["w1", "w2"];

#[derive(Clone, Debug)]
enum Op {
    Upsert {
        upstream: usize,
        ids: Vec<usize>,
        ttl: u64,
        region: usize,
        max_size: u32,
    },
    Health {
        id: usize,
        verdict: u8,
    },
    /// Marks several proxies AVAILABLE at once, so sequences reach the owned states.
    Healthy {
        ids: Vec<usize>,
    },
    Extract {
        count: u32,
        all: bool,
        region: Option<usize>,
        upstream: Option<usize>,
        reserve: u32,
        key: Option<u8>,
        min_ttl: u64,
        fresh: Option<u64>,
    },
    Assign {
        id: usize,
        worker: usize,
        lease: u64,
    },
    /// `pick` chooses among the assignments made so far (so renew / drain / ack meet
    /// real assignments, including stale ones).
    Renew {
        pick: usize,
        lease: u64,
    },
    Drain {
        pick: usize,
    },
    Ack {
        pick: usize,
        active: u32,
    },
    Expire {
        limit: u32,
    },
    Remove {
        id: usize,
        upstream: usize,
    },
    Advance {
        millis: u64,
    },
    Purge {
        limit: u32,
    },
    /// A health check's mark; `check` from a small set, so ends and re-marks meet.
    BeginCheck {
        id: usize,
        check: u64,
        hold: u64,
    },
    EndCheck {
        id: usize,
        check: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2usize, prop::collection::vec(0..IDS, 1..5), prop::sample::select(vec![8u64, 20, 60, 120]), 0..2usize, 3..12u32)
            .prop_map(|(upstream, ids, ttl, region, max_size)| Op::Upsert { upstream, ids, ttl, region, max_size }),
        3 => (0..IDS, 0..4u8).prop_map(|(id, verdict)| Op::Health { id, verdict }),
        3 => prop::collection::vec(0..IDS, 1..6).prop_map(|ids| Op::Healthy { ids }),
        2 => (1..4u32, any::<bool>(), prop::option::of(0..2usize), prop::option::of(0..2usize), 0..2u32, prop::option::of(0..3u8), prop::sample::select(vec![0u64, 10, 30]), prop::option::of(prop::sample::select(vec![5u64, 30])))
            .prop_map(|(count, all, region, upstream, reserve, key, min_ttl, fresh)| Op::Extract { count, all, region, upstream, reserve, key, min_ttl, fresh }),
        4 => (0..IDS, 0..2usize, prop::sample::select(vec![5u64, 30])).prop_map(|(id, worker, lease)| Op::Assign { id, worker, lease }),
        2 => (0..8usize, prop::sample::select(vec![5u64, 30])).prop_map(|(pick, lease)| Op::Renew { pick, lease }),
        2 => (0..8usize).prop_map(|pick| Op::Drain { pick }),
        3 => (0..8usize, prop::sample::select(vec![0u32, 0, 1])).prop_map(|(pick, active)| Op::Ack { pick, active }),
        1 => (1..4u32).prop_map(|limit| Op::Expire { limit }),
        1 => (0..IDS, 0..2usize).prop_map(|(id, upstream)| Op::Remove { id, upstream }),
        2 => (1..8_000u64).prop_map(|millis| Op::Advance { millis }),
        1 => (1..5u32).prop_map(|limit| Op::Purge { limit }),
        2 => (0..IDS, 0..3u64, prop::sample::select(vec![1u64, 4, 20])).prop_map(|(id, check, hold)| Op::BeginCheck { id, check, hold }),
        2 => (0..IDS, 0..3u64).prop_map(|(id, check)| Op::EndCheck { id, check }),
    ]
}

fn pid(i: usize) -> ProxyId {
    ProxyId::new(format!("p{i}")).unwrap()
}

/// The testkit's candidate `p<i>` (`p<i>.vendor.test`, its own user), every third one
/// SOCKS5, in `REGIONS[region]` without a carrier, capacity 2.
fn candidate(i: usize, ttl: u64, region: usize) -> Candidate {
    let mut c = testkit::candidate(pid(i).as_str(), Duration::from_secs(ttl));
    if i.is_multiple_of(3) {
        c.dial.protocol = Protocol::Socks5;
    }
    c.labels = Labels {
        region: Some(Label::new(REGIONS[region]).unwrap()),
        carrier: None,
        city: None,
    };
    c.max_concurrency = 2;
    c
}

/// The observable result of one operation, comparable across implementations.
fn observe<T: std::fmt::Debug>(r: activity_pool::PoolResult<T>) -> String {
    format!("{r:?}")
}

struct Epochs {
    /// Every successful assignment so far: (proxy, worker, epoch).
    made: Vec<(usize, usize, u64)>,
}

impl Epochs {
    fn pick(&self, pick: usize) -> (usize, usize, u64) {
        if self.made.is_empty() {
            (0, 0, 1)
        } else {
            self.made[self.made.len() - 1 - pick % self.made.len()]
        }
    }
}

async fn apply(
    pool: &dyn ActivityPool,
    clock: &ManualClock,
    step: usize,
    op: &Op,
    epochs: &mut Epochs,
) -> String {
    let w = |i: usize| WorkerId::new(WORKERS[i]).unwrap();
    let claim = |id: usize, worker: usize, epoch: u64| Claim {
        proxy_id: pid(id),
        worker_id: w(worker),
        epoch,
    };
    match op {
        Op::Upsert {
            upstream,
            ids,
            ttl,
            region,
            max_size,
        } => {
            let batch = FetchedBatch {
                quarantine: std::time::Duration::ZERO,
                upstream: UpstreamId::new(UPSTREAMS[*upstream]).unwrap(),
                operation_id: OperationId::new(format!("op-{step}")).unwrap(),
                safety_margin: Duration::from_secs(5),
                max_size: NonZeroU32::new(*max_size).unwrap(),
                candidates: ids.iter().map(|i| candidate(*i, *ttl, *region)).collect(),
            };
            observe(pool.upsert(batch).await)
        }
        Op::Health { id, verdict } => {
            let verdict = [
                HealthVerdict::Available,
                HealthVerdict::Suspect,
                HealthVerdict::Unhealthy,
                HealthVerdict::Checking,
            ][*verdict as usize];
            let u = HealthUpdate {
                proxy_id: pid(*id),
                verdict,
                success: verdict == HealthVerdict::Available,
                latency: Some(Duration::from_millis(7)),
                failure: None,
            };
            observe(pool.apply_health(&[u]).await)
        }
        Op::Healthy { ids } => {
            let updates: Vec<HealthUpdate> = ids
                .iter()
                .map(|i| HealthUpdate {
                    proxy_id: pid(*i),
                    verdict: HealthVerdict::Available,
                    success: true,
                    latency: None,
                    failure: None,
                })
                .collect();
            observe(pool.apply_health(&updates).await)
        }
        Op::Extract {
            count,
            all,
            region,
            upstream,
            reserve,
            key,
            min_ttl,
            fresh,
        } => {
            let req = ExtractRequest {
                client_id: ClientId::new("model").unwrap(),
                request_id: RequestId::new(format!("r{step}")).unwrap(),
                idempotency_key: key.map(|k| IdempotencyKey::new(format!("k{k}")).unwrap()),
                request_digest: RequestDigest::of(
                    format!("{count}{all}{region:?}{upstream:?}").as_bytes(),
                ),
                count: NonZeroU32::new(*count).unwrap(),
                fulfillment: if *all {
                    Fulfillment::AllOrNothing
                } else {
                    Fulfillment::Partial
                },
                filters: Filters {
                    regions: region
                        .map(|r| vec![Label::new(REGIONS[r]).unwrap()])
                        .unwrap_or_default(),
                    upstreams: upstream
                        .map(|u| vec![UpstreamId::new(UPSTREAMS[u]).unwrap()])
                        .unwrap_or_default(),
                    ..Filters::default()
                },
                min_remaining_ttl: Duration::from_secs(*min_ttl),
                max_health_check_age: fresh.map(Duration::from_secs),
                reserve_for_gateway: *reserve,
                idempotency_ttl: Duration::from_secs(40),
            };
            observe(pool.extract(&req).await)
        }
        Op::Assign { id, worker, lease } => {
            let r = pool
                .assign(&LeaseRequest {
                    proxy_id: pid(*id),
                    worker_id: w(*worker),
                    lease: Duration::from_secs(*lease),
                })
                .await;
            if let Ok(a) = &r {
                epochs.made.push((*id, *worker, a.epoch));
            }
            observe(r)
        }
        Op::Renew { pick, lease } => {
            let (id, worker, epoch) = epochs.pick(*pick);
            observe(
                pool.renew(&claim(id, worker, epoch), Duration::from_secs(*lease))
                    .await,
            )
        }
        Op::Drain { pick } => {
            let (id, worker, epoch) = epochs.pick(*pick);
            observe(pool.begin_drain(&claim(id, worker, epoch)).await)
        }
        Op::Ack { pick, active } => {
            let (id, worker, epoch) = epochs.pick(*pick);
            observe(
                pool.acknowledge_drain(&DrainAck {
                    claim: claim(id, worker, epoch),
                    active: *active,
                    reserved: 0,
                })
                .await,
            )
        }
        Op::Expire { limit } => observe(pool.expire(*limit).await),
        Op::Remove { id, upstream } => observe(
            pool.remove(&UpstreamId::new(UPSTREAMS[*upstream]).unwrap(), &[pid(*id)])
                .await,
        ),
        Op::Advance { millis } => {
            clock.advance(Duration::from_millis(*millis));
            String::new()
        }
        Op::Purge { limit } => observe(pool.purge_expired(*limit).await),
        Op::BeginCheck { id, check, hold } => observe(
            pool.begin_checks(&[CheckStart {
                proxy_id: pid(*id),
                check: *check,
                hold: Duration::from_secs(*hold),
            }])
            .await,
        ),
        Op::EndCheck { id, check } => observe(
            pool.end_checks(&[CheckEnd {
                proxy_id: pid(*id),
                check: *check,
            }])
            .await,
        ),
    }
}

/// Everything observable about the pool's state.
async fn snapshot(pool: &dyn ActivityPool) -> String {
    let ids: Vec<ProxyId> = (0..IDS).map(pid).collect();
    let mut out = format!("{:?}", pool.records(&ids).await);
    for u in UPSTREAMS {
        let up = UpstreamId::new(u).unwrap();
        out.push_str(&format!(
            "|{:?}|{:?}",
            pool.inventory(&up).await,
            pool.assignable(&up, 100).await
        ));
    }
    out
}

#[test]
fn memory_and_redis_agree_on_random_operation_sequences() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = RedisServer::start();
    let url = server.url();
    let cases: u32 = std::env::var("POOL_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..80), |ops| {
        rt.block_on(async {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
            let start = Timestamp::now();
            let mem_clock = ManualClock::new(start);
            let redis_clock = ManualClock::new(start);
            let options = PoolOptions {
                extract_scan_budget: 6,
                inventory_scan_budget: 8,
                ..PoolOptions::default()
            };
            let memory = MemoryPool::with_clock(options.clone(), Arc::new(mem_clock.clone()));
            let redis_options = RedisOptions {
                pool: options,
                clock_override: Some(Arc::new(redis_clock.clone())),
                ..RedisOptions::default()
            };
            let redis = RedisPool::new(RedisConnector::direct(&url).unwrap(), redis_options)
                .await
                .unwrap();
            let (mut e1, mut e2) = (Epochs { made: Vec::new() }, Epochs { made: Vec::new() });
            for (step, op) in ops.iter().enumerate() {
                let a = apply(&memory, &mem_clock, step, op, &mut e1).await;
                let b = apply(&redis, &redis_clock, step, op, &mut e2).await;
                prop_assert_eq!(&a, &b, "step {} {:?}", step, op);
                let (sa, sb) = (snapshot(&memory).await, snapshot(&redis).await);
                prop_assert_eq!(sa, sb, "state after step {} {:?}", step, op);
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
