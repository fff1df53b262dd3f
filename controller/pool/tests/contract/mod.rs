//! The activity pool's behaviour contract, written once and run against every
//! implementation (see `pool_contract.rs`). Every case takes a [`Kind`] and builds its
//! own pool on a [`ManualClock`], so timing is controlled, never slept.

#![allow(dead_code)]

pub mod checks;
pub mod extract;
pub mod generation;
pub mod lifecycle;
pub mod ownership;
pub mod runtime;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::*;
use activity_pool::ports::ActivityPool;
use activity_pool::testkit::{RedisServer, candidate, extract_request, pool_of};
use activity_pool::{ManualClock, PoolOptions};

/// Which implementation a case runs on.
pub use activity_pool::testkit::PoolKind as Kind;

/// A pool under test, its clock, and (for Redis) its private server.
pub struct Harness {
    pub pool: Arc<dyn ActivityPool>,
    pub clock: ManualClock,
    pub kind: Kind,
    pub server: Option<RedisServer>,
}

impl Harness {
    pub async fn new(kind: Kind) -> Self {
        Self::with_options(kind, |_| {}).await
    }

    /// A harness whose pool options are the defaults changed by `tune`.
    pub async fn with_options(kind: Kind, tune: impl FnOnce(&mut PoolOptions)) -> Self {
        let mut options = PoolOptions::default();
        tune(&mut options);
        let clock = ManualClock::starting_now();
        let (pool, server) = pool_of(kind, options, Arc::new(clock.clone())).await;
        Harness {
            pool,
            clock,
            kind,
            server,
        }
    }

    pub fn advance(&self, secs: f64) {
        self.clock
            .advance(Duration::from_millis((secs * 1000.0) as u64));
    }

    pub fn now(&self) -> activity_pool::Timestamp {
        use activity_pool::Clock;
        self.clock.now()
    }

    /// Upserts `candidates` for `upstream` (margin 5 s, max size 10,000).
    pub async fn upsert(&self, upstream: &str, candidates: Vec<Candidate>) -> UpsertReport {
        self.pool
            .upsert(batch(upstream, candidates))
            .await
            .expect("upsert")
    }

    /// Marks the proxies AVAILABLE after a successful check.
    pub async fn healthy(&self, ids: &[&str]) {
        let updates: Vec<_> = ids
            .iter()
            .map(|id| health(id, HealthVerdict::Available))
            .collect();
        let results = self.pool.apply_health(&updates).await.expect("health");
        assert!(
            results
                .iter()
                .all(|r| *r == HealthResult::Applied(ProxyState::Available)),
            "{results:?}"
        );
    }

    /// Applies one health verdict to `id` (`health`); its result.
    pub async fn verdict(&self, id: &str, verdict: HealthVerdict) -> HealthResult {
        let mut results = self
            .pool
            .apply_health(&[health(id, verdict)])
            .await
            .expect("health");
        assert_eq!(results.len(), 1, "{results:?}");
        results.remove(0)
    }

    /// Inserts `n` proxies `<prefix>-<i>` for `upstream` with `ttl` seconds and makes
    /// them AVAILABLE; returns their IDs.
    pub async fn available(&self, upstream: &str, prefix: &str, n: usize, ttl: u64) -> Vec<String> {
        let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
        let cands = ids.iter().map(|id| cand(id, ttl)).collect();
        let report = self.upsert(upstream, cands).await;
        assert_eq!(report.inserted as usize, n, "{report:?}");
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        self.healthy(&refs).await;
        ids
    }

    pub async fn record(&self, id: &str) -> Option<ProxyRecord> {
        self.pool
            .records(&[pid(id)])
            .await
            .expect("records")
            .pop()
            .flatten()
    }

    pub async fn state(&self, id: &str) -> Option<ProxyState> {
        self.record(id).await.map(|r| r.state)
    }

    pub async fn extract(&self, req: &ExtractRequest) -> Vec<String> {
        match self.pool.extract(req).await.expect("extract") {
            ExtractOutcome::Extracted(e) => {
                e.proxies.into_iter().map(|p| p.id.to_string()).collect()
            }
            ExtractOutcome::Insufficient { eligible } => panic!("insufficient: {eligible}"),
        }
    }

    /// Up to 10 assignable proxies of `upstream`.
    pub async fn assignable(&self, upstream: &str) -> Vec<ProxyId> {
        self.pool
            .assignable(&up(upstream), 10)
            .await
            .expect("assignable")
    }

    pub async fn inventory(&self, upstream: &str) -> UpstreamInventory {
        self.pool.inventory(&up(upstream)).await.expect("inventory")
    }

    /// Redis only: the storage footprint — structural keys (everything but operation and
    /// idempotency results), entries in the records hash, `used_memory` — after checking
    /// that every operation / idempotency result carries a native TTL of at most `max_ttl`.
    pub async fn redis_footprint(&self, max_ttl: Duration) -> Option<(u64, u64, u64)> {
        let server = self.server.as_ref()?;
        let client = redis::Client::open(server.url()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        let mut structural = 0;
        for k in &keys {
            if k.starts_with("pp:{activity}:v2:op:") || k.starts_with("pp:{activity}:v2:idem:") {
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(k)
                    .query_async(&mut conn)
                    .await
                    .expect("PTTL");
                // -2: the key expired between KEYS and PTTL, so it did carry a TTL
                // (a key without one answers -1 and fails below).
                if ttl == -2 {
                    continue;
                }
                assert!(
                    ttl > 0 && ttl as u128 <= max_ttl.as_millis(),
                    "{k} has TTL {ttl} ms"
                );
            } else {
                structural += 1;
            }
        }
        let records: u64 = redis::cmd("HLEN")
            .arg("pp:{activity}:v2:records")
            .query_async(&mut conn)
            .await
            .expect("HLEN");
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        let used = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory");
        Some((structural, records, used))
    }

    /// Purges until nothing expired remains.
    pub async fn purge_all(&self) {
        for _ in 0..1000 {
            if !self.pool.purge_expired(500).await.expect("purge").more {
                return;
            }
        }
        panic!("purge never finished");
    }
}

pub fn pid(s: &str) -> ProxyId {
    ProxyId::new(s).expect("proxy id")
}
pub fn up(s: &str) -> UpstreamId {
    UpstreamId::new(s).expect("upstream id")
}
pub fn wid(s: &str) -> WorkerId {
    WorkerId::new(s).expect("worker id")
}
pub fn label(s: &str) -> Label {
    Label::new(s).expect("label")
}

/// An HTTP candidate `id` at `<id>.vendor.test:8080` with credentials and `ttl` seconds.
/// (`testkit::candidate`: region `eu`, carrier `c1`, capacity 4.)
pub fn cand(id: &str, ttl: u64) -> Candidate {
    candidate(id, Duration::from_secs(ttl))
}

/// A lease of `id` to `worker` for `lease`.
pub fn lease_of(id: &str, worker: &str, lease: Duration) -> LeaseRequest {
    LeaseRequest {
        proxy_id: pid(id),
        worker_id: wid(worker),
        lease,
    }
}

/// `worker`'s assignment of `id` under `epoch`.
pub fn claim(id: &str, worker: &str, epoch: u64) -> Claim {
    Claim {
        proxy_id: pid(id),
        worker_id: wid(worker),
        epoch,
    }
}

/// `worker`'s drain ACK of `id` under `epoch` with these uses left.
pub fn drain_ack(id: &str, worker: &str, epoch: u64, active: u32, reserved: u32) -> DrainAck {
    DrainAck {
        claim: claim(id, worker, epoch),
        active,
        reserved,
    }
}

pub fn batch(upstream: &str, candidates: Vec<Candidate>) -> FetchedBatch {
    FetchedBatch {
        quarantine: std::time::Duration::ZERO,
        upstream: up(upstream),
        operation_id: OperationId::new(format!("op-{}", uuid_like())).expect("op"),
        safety_margin: Duration::from_secs(5),
        max_size: NonZeroU32::new(10_000).expect("nonzero"),
        candidates,
    }
}

pub fn health(id: &str, verdict: HealthVerdict) -> HealthUpdate {
    HealthUpdate {
        proxy_id: pid(id),
        verdict,
        success: verdict == HealthVerdict::Available,
        latency: Some(Duration::from_millis(42)),
        failure: (verdict != HealthVerdict::Available).then(|| label("connect_refused")),
    }
}

/// An extraction of `count` proxies by `client`, partial, no filters, fresh request ID
/// (`testkit::extract_request`), its digest naming client and count, its result kept
/// for an hour.
pub fn req(client: &str, count: u32) -> ExtractRequest {
    ExtractRequest {
        request_digest: RequestDigest::of(format!("{client}:{count}").as_bytes()),
        idempotency_ttl: Duration::from_secs(3600),
        ..extract_request(client, count)
    }
}

pub fn uuid_like() -> String {
    use rand::Rng;
    format!("{:016x}", rand::rng().random::<u64>())
}

/// Asserts a call was refused with the given conflict.
pub fn assert_conflict<T: std::fmt::Debug>(
    r: activity_pool::PoolResult<T>,
    reason: activity_pool::ConflictReason,
) {
    match r {
        Err(activity_pool::PoolError::Conflict(got)) => assert_eq!(got, reason),
        other => panic!("expected conflict {reason:?}, got {other:?}"),
    }
}
