//! Facts only the Redis adapter has to prove, on a real `redis-server` (and
//! `redis-sentinel`) started per test by `activity_pool::testkit`. Never skipped: a
//! missing binary fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use activity_pool::model::*;
use activity_pool::ports::*;
use activity_pool::testkit::{FaultProxy, RedisSentinel, RedisServer, candidate, extract_request};
use activity_pool::{PoolError, RedisConnector, RedisOptions, RedisPool, Timestamp};

const SECRET_PASSWORD: &str = "pw-NEVER-IN-KEYS";
const SECRET_USER: &str = "user-NEVER-IN-KEYS";
const IDEM: &str = "idem-NEVER-IN-KEYS";
const CLIENT: &str = "client-NEVER-IN-KEYS";
const REQUEST: &str = "req-NEVER-IN-KEYS";

/// The keys (below the prefix) every proxy write of `fill` touches: they expire with
/// the latest hard expiry.
const PROXY_KEYS: [&str; 10] = [
    "records",
    "unique",
    "idkeys",
    "expiry",
    "available",
    "inventory",
    "managed",
    "avail:vendor-a|http|eu|c1|",
    "combos",
    "combos-version",
];

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique(tag: &str) -> String {
    format!("{tag}-{}", NEXT.fetch_add(1, Ordering::SeqCst))
}

/// `testkit::candidate` in `region`, with the credentials no key may name.
fn cand(id: &str, region: &str, ttl_secs: u64) -> Candidate {
    let mut c = candidate(id, Duration::from_secs(ttl_secs));
    c.dial.credentials = Some(Credentials {
        username: format!("{SECRET_USER}-{id}"),
        password: Secret::new(SECRET_PASSWORD),
    });
    c.labels.region = Some(Label::new(region).unwrap());
    c
}

fn batch(upstream: &str, candidates: Vec<Candidate>) -> FetchedBatch {
    FetchedBatch {
        quarantine: std::time::Duration::ZERO,
        upstream: UpstreamId::new(upstream).unwrap(),
        operation_id: OperationId::new(unique("op")).unwrap(),
        safety_margin: Duration::from_secs(5),
        max_size: NonZeroU32::new(100_000).unwrap(),
        candidates,
    }
}

/// A partial extraction of `count` proxies by `client-a` (`testkit::extract_request`),
/// its digest naming the count, its result kept for an hour.
fn req(count: u32) -> ExtractRequest {
    ExtractRequest {
        request_digest: RequestDigest::of(format!("count={count}").as_bytes()),
        idempotency_ttl: Duration::from_secs(3600),
        ..extract_request("client-a", count)
    }
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

async fn pool_at(url: &str) -> RedisPool {
    let options = RedisOptions {
        command_timeout: Duration::from_millis(500),
        ..RedisOptions::default()
    };
    RedisPool::new(RedisConnector::direct(url).unwrap(), options)
        .await
        .expect("pool")
}

async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Runs the admin command `command` with `args` (one value or a tuple) on `conn` and
/// decodes its reply.
async fn query<T: redis::FromRedisValue>(
    conn: &mut impl redis::aio::ConnectionLike,
    command: &str,
    args: impl redis::ToRedisArgs,
) -> T {
    redis::cmd(command)
        .arg(args)
        .query_async(conn)
        .await
        .unwrap()
}

/// A lease of `proxy` to `worker` for `secs` seconds.
fn lease(proxy: &ProxyId, worker: &WorkerId, secs: u64) -> LeaseRequest {
    LeaseRequest {
        proxy_id: proxy.clone(),
        worker_id: worker.clone(),
        lease: Duration::from_secs(secs),
    }
}

/// Leases `proxy` to `worker` for `secs` seconds.
async fn assign(pool: &RedisPool, proxy: &str, worker: &WorkerId, secs: u64) -> Assignment {
    let proxy = ProxyId::new(proxy).unwrap();
    pool.assign(&lease(&proxy, worker, secs)).await.unwrap()
}

/// Session `session` of `worker`'s instance `instance`, `ttl_secs` seconds to live.
fn registration(
    worker: &WorkerId,
    instance: &str,
    session: &SessionId,
    ttl_secs: u64,
) -> SessionRegistration {
    SessionRegistration {
        worker_id: worker.clone(),
        instance_id: InstanceId::new(instance).unwrap(),
        session_id: session.clone(),
        ttl: Duration::from_secs(ttl_secs),
    }
}

/// The inventory figures of `vendor-a`.
async fn inventory(pool: &RedisPool) -> UpstreamInventory {
    pool.inventory(&UpstreamId::new("vendor-a").unwrap())
        .await
        .unwrap()
}

/// A pool at `url` holding `n` AVAILABLE proxies `<prefix>-<i>` (`fill`, two minutes to
/// live), and their IDs.
async fn filled(url: &str, prefix: &str, n: usize) -> (RedisPool, Vec<String>) {
    let pool = pool_at(url).await;
    let all = ids(prefix, n);
    fill(&pool, &all, 120).await;
    (pool, all)
}

/// Upserts `ids` (upstream `vendor-a`, region `eu`) and marks them AVAILABLE.
async fn fill(pool: &RedisPool, ids: &[String], ttl_secs: u64) {
    fill_batch(pool, ids, batch_of(ids, ttl_secs, Duration::ZERO)).await;
}

/// A batch of `ids` (upstream `vendor-a`, region `eu`) with `quarantine`.
fn batch_of(ids: &[String], ttl_secs: u64, quarantine: Duration) -> FetchedBatch {
    let mut b = batch(
        "vendor-a",
        ids.iter().map(|id| cand(id, "eu", ttl_secs)).collect(),
    );
    b.quarantine = quarantine;
    b
}

/// Upserts `b` (the candidates `ids`) and marks them AVAILABLE.
async fn fill_batch(pool: &RedisPool, ids: &[String], b: FetchedBatch) -> UpsertReport {
    let report = pool.upsert(b).await.unwrap();
    assert_eq!(
        report.inserted as usize + report.refreshed as usize,
        ids.len(),
        "{report:?}"
    );
    for r in pool.apply_health(&available(ids)).await.unwrap() {
        assert_eq!(r, HealthResult::Applied(ProxyState::Available));
    }
    report
}

/// Health updates that make `ids` AVAILABLE.
fn available(ids: &[String]) -> Vec<HealthUpdate> {
    ids.iter()
        .map(|id| HealthUpdate {
            proxy_id: ProxyId::new(id.as_str()).unwrap(),
            verdict: HealthVerdict::Available,
            success: true,
            latency: Some(Duration::from_millis(10)),
            failure: None,
        })
        .collect()
}

/// Upserts `n` proxies `<prefix>-00000…` of `vendor-a` in region `eu`, proxy `i` in city
/// `t<city(i)>`, marks them AVAILABLE, and checks that the pool now knows more index
/// A pool on the server at `url` whose scripts take "now" from the returned clock.
async fn pool_on_clock(url: &str) -> (RedisPool, activity_pool::ManualClock) {
    let clock = activity_pool::ManualClock::starting_now();
    let options = RedisOptions {
        clock_override: Some(std::sync::Arc::new(clock.clone())),
        ..RedisOptions::default()
    };
    let pool = RedisPool::new(RedisConnector::direct(url).unwrap(), options)
        .await
        .unwrap();
    (pool, clock)
}

/// `EVALSHA` calls the server has run since its statistics were last reset.
async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> usize {
    let stats: String = query(conn, "INFO", "commandstats").await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// keys than it passes to every call (the key book's pass-all bound, 256).
async fn fill_in_cities(
    pool: &RedisPool,
    prefix: &str,
    n: usize,
    ttl_secs: u64,
    city: impl Fn(usize) -> usize,
) -> Vec<String> {
    let all: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:05}")).collect();
    let cands: Vec<Candidate> = all
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut c = cand(id, "eu", ttl_secs);
            c.labels.city = Some(Label::new(format!("t{}", city(i))).unwrap());
            c
        })
        .collect();
    let report = pool.upsert(batch("vendor-a", cands)).await.unwrap();
    assert_eq!(report.inserted as usize, all.len(), "{report:?}");
    for chunk in all.chunks(1_000) {
        pool.apply_health(&available(chunk)).await.unwrap();
    }
    assert!(pool.known_index_keys() > 256, "{}", pool.known_index_keys());
    all
}

async fn all_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = query(conn, "KEYS", "*").await;
    keys.sort();
    keys
}

fn proxy_ids(o: &ExtractOutcome) -> Vec<String> {
    match o {
        ExtractOutcome::Extracted(x) => x.proxies.iter().map(|p| p.id.to_string()).collect(),
        ExtractOutcome::Insufficient { .. } => Vec::new(),
    }
}

/// Records in `state` among `ids`.
async fn states(pool: &RedisPool, ids: &[String]) -> HashMap<ProxyState, usize> {
    let pids: Vec<ProxyId> = ids
        .iter()
        .map(|i| ProxyId::new(i.as_str()).unwrap())
        .collect();
    let mut out = HashMap::new();
    for r in pool.records(&pids).await.unwrap().into_iter().flatten() {
        *out.entry(r.state).or_default() += 1;
    }
    out
}

/// Every pool invariant a reader can check from outside: AVAILABLE indexes hold only
/// AVAILABLE, unowned records; counters equal the records they count.
async fn assert_consistent(url: &str) {
    let mut c = admin(url).await;
    let records: HashMap<String, String> =
        query(&mut c, "HGETALL", "pp:{activity}:v2:records").await;
    let owners: HashMap<String, String> = query(&mut c, "HGETALL", "pp:{activity}:v2:owners").await;
    let mut inventory: HashMap<String, i64> = HashMap::new();
    let mut managed: HashMap<String, i64> = HashMap::new();
    let mut available_expected = BTreeSet::new();
    for (id, raw) in &records {
        let v: serde_json::Value = serde_json::from_str(raw).unwrap();
        let st = v["st"].as_str().unwrap();
        let up = v["up"].as_str().unwrap().to_owned();
        if !matches!(st, "EXTRACTED" | "REMOVED") {
            *inventory.entry(up.clone()).or_default() += 1;
        }
        if matches!(
            st,
            "FETCHED" | "CHECKING" | "AVAILABLE" | "SUSPECT" | "DRAINING"
        ) {
            *managed.entry(up).or_default() += 1;
        }
        if st == "AVAILABLE" && !owners.contains_key(id) {
            available_expected.insert(id.clone());
        }
    }
    let available: Vec<String> =
        query(&mut c, "ZRANGE", ("pp:{activity}:v2:available", 0, -1)).await;
    let available: BTreeSet<String> = available.into_iter().collect();
    assert_eq!(
        available, available_expected,
        "available index == AVAILABLE unowned records"
    );
    // Each of them in exactly its own combination; the registry names exactly the
    // non-empty combinations.
    let mut combos_expected: HashMap<String, BTreeSet<String>> = HashMap::new();
    for id in &available {
        let v: serde_json::Value = serde_json::from_str(&records[id]).unwrap();
        let combo = v["ix"]["a"].as_str().unwrap().to_owned();
        let before_city = format!(
            "pp:{{activity}}:v2:avail:{}|{}|{}|{}",
            v["up"].as_str().unwrap(),
            v["proto"].as_str().unwrap(),
            v["region"].as_str().unwrap_or(""),
            v["carrier"].as_str().unwrap_or("")
        );
        let labels = format!("{before_city}|{}", v["city"].as_str().unwrap_or(""));
        // A record written before the city dimension names the four-part key.
        let legacy = v["city"].is_null() && combo == before_city;
        assert!(combo == labels || legacy, "combination of {id}: {combo}");
        combos_expected.entry(combo).or_default().insert(id.clone());
    }
    let registry: BTreeSet<String> = query(&mut c, "SMEMBERS", "pp:{activity}:v2:combos").await;
    let mut combos = HashMap::new();
    for k in &registry {
        let members: Vec<String> = query(&mut c, "ZRANGE", (k, 0, -1)).await;
        // A registered combination may be empty (until the maintenance sweep).
        if members.is_empty() {
            continue;
        }
        // Members are `<usable_until, 15 digits>|<id>`.
        let ids = members
            .iter()
            .map(|m| {
                let (uu, id) = m.split_at(16);
                let v: serde_json::Value = serde_json::from_str(&records[id]).unwrap();
                assert_eq!(uu, format!("{:015}|", v["uu"].as_i64().unwrap()), "{m}");
                id.to_owned()
            })
            .collect::<BTreeSet<_>>();
        combos.insert(k.clone(), ids);
    }
    let mut all = all_keys(&mut c).await;
    all.retain(|k| k.starts_with("pp:{activity}:v2:avail:"));
    let unregistered: Vec<&String> = all.iter().filter(|k| !registry.contains(*k)).collect();
    assert!(
        unregistered.is_empty(),
        "every combination key is registered: {unregistered:?}"
    );
    assert_eq!(combos, combos_expected, "combination indexes");
    let inv: HashMap<String, i64> = query(&mut c, "HGETALL", "pp:{activity}:v2:inventory").await;
    let man: HashMap<String, i64> = query(&mut c, "HGETALL", "pp:{activity}:v2:managed").await;
    assert_eq!(inv, inventory, "inventory counters");
    assert_eq!(man, managed, "managed counters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_is_under_the_prefix_and_no_secret_is_in_a_key_name() {
    let server = RedisServer::start();
    let (pool, _) = filled(&server.url(), "p", 20).await;
    let mut r = req(3);
    r.client_id = ClientId::new(CLIENT).unwrap();
    r.request_id = RequestId::new(REQUEST).unwrap();
    r.idempotency_key = Some(IdempotencyKey::new(IDEM).unwrap());
    r.filters.regions = vec![Label::new("eu").unwrap()];
    assert_eq!(proxy_ids(&pool.extract(&r).await.unwrap()).len(), 3);
    let worker = WorkerId::new("worker-1").unwrap();
    let a = assign(&pool, "p-10", &worker, 30).await;
    let session = SessionId::new("session-1").unwrap();
    pool.register(&registration(&worker, "instance-1", &session, 60))
        .await
        .unwrap();
    pool.acknowledge(&SnapshotAck {
        worker_id: worker.clone(),
        session_id: session.clone(),
        version: 1,
        epoch: a.epoch,
        ttl: Duration::from_secs(60),
    })
    .await
    .unwrap();
    let report = RuntimeReport {
        header: ReportHeader {
            worker_id: worker.clone(),
            session_id: session,
            sequence: 1,
            snapshot_version: 1,
            epoch: a.epoch,
        },
        entries: vec![RuntimeEntry {
            proxy_id: a.proxy_id.clone(),
            epoch: a.epoch,
            active: 1,
            reserved: 0,
            draining: false,
        }],
        ttl: Duration::from_secs(60),
    };
    assert_eq!(
        pool.write_report(&report).await.unwrap(),
        ReportAck::Accepted
    );
    inventory(&pool).await;
    pool.remove(
        &UpstreamId::new("vendor-a").unwrap(),
        &[ProxyId::new("p-11").unwrap()],
    )
    .await
    .unwrap();
    pool.purge_expired(100).await.unwrap();

    let mut c = admin(&server.url()).await;
    let keys = all_keys(&mut c).await;
    assert!(keys.len() > 10, "{keys:?}");
    for k in &keys {
        assert!(
            k.starts_with("pp:{activity}:v2:"),
            "key outside the prefix: {k}"
        );
        for secret in [SECRET_PASSWORD, SECRET_USER, IDEM, CLIENT, REQUEST] {
            assert!(!k.contains(secret), "{secret} leaked into key {k}");
        }
    }
    // The shapes of the doc's key table.
    let worker_keys = [
        "owners",
        "owner-expiry",
        "epoch",
        "worker-sessions",
        "worker-session-expiry",
        "worker-runtime",
        "worker-runtime-expiry",
    ];
    for k in PROXY_KEYS.into_iter().chain(worker_keys) {
        assert!(
            keys.contains(&format!("pp:{{activity}}:v2:{k}")),
            "missing {k} in {keys:?}"
        );
    }
    assert!(keys.iter().any(|k| k.starts_with("pp:{activity}:v2:idem:")));
    // Stored results name the extracted records; credentials live only in the records.
    for k in keys
        .iter()
        .filter(|k| k.contains(":idem:") || k.contains(":op:"))
    {
        let v: String = query(&mut c, "GET", k).await;
        assert!(!v.contains(SECRET_PASSWORD), "{k} holds a password");
    }
    assert!(keys.iter().any(|k| k.starts_with("pp:{activity}:v2:op:")));
    assert!(
        keys.iter()
            .any(|k| k.starts_with("pp:{activity}:v2:owned:"))
    );
    assert_consistent(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_key_ttls_follow_the_latest_hard_expiry() {
    let server = RedisServer::start();
    let pool = pool_at(&server.url()).await;
    let mut c = admin(&server.url()).await;
    let before = Timestamp::now().millis();
    fill(&pool, &ids("short", 5), 60).await;
    fill(&pool, &ids("long", 5), 120).await;
    let after = Timestamp::now().millis();
    let latest: Vec<(String, i64)> = query(
        &mut c,
        "ZRANGE",
        ("pp:{activity}:v2:expiry", -1, -1, "WITHSCORES"),
    )
    .await;
    let latest = latest[0].1;
    assert!(latest >= before + 120_000 && latest <= after + 120_000);
    for k in PROXY_KEYS {
        let at: i64 = query(&mut c, "PEXPIRETIME", format!("pp:{{activity}}:v2:{k}")).await;
        assert_eq!(at, latest, "{k} expires with the latest hard expiry");
    }
    // No key lives forever: a pool that stops being written frees itself. Except the
    // generation record (a few bytes per upstream): it must outlive the records, or a
    // pool that emptied itself would begin a new generation and be held back again.
    for k in all_keys(&mut c).await {
        if k == "pp:{activity}:v2:generation" {
            continue;
        }
        let at: i64 = query(&mut c, "PEXPIRETIME", &k).await;
        assert!(at > 0, "{k} has no expiry");
        assert!(
            at <= latest.max(Timestamp::now().millis() + 600_000),
            "{k} outlives the pool"
        );
    }
    // A later proxy pushes it further.
    fill(&pool, &ids("later", 1), 300).await;
    let at: i64 = query(&mut c, "PEXPIRETIME", "pp:{activity}:v2:records").await;
    assert!(at >= latest + 150_000, "pushed to the new latest expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_dropped_after_commit_returns_the_first_result() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let (pool, all) = filled(&proxy.url(), "d", 10).await;

    // Extraction: Redis commits, the reply is lost, the adapter reconnects and retries
    // with the same operation ID: the stored result comes back, nothing is taken twice.
    proxy.arm_drop_next_reply();
    let mut request = req(3);
    request.idempotency_key = Some(IdempotencyKey::new("drop-retry").unwrap());
    let first = pool.extract(&request).await.unwrap();
    assert_eq!(proxy.dropped_replies(), 1, "the reply was dropped");
    assert!(
        matches!(first, ExtractOutcome::Extracted(ref x) if !x.replayed),
        "the caller's first answer is not a replay: {first:?}"
    );
    // The same request again with its idempotency key (a client retry) is a replay.
    let again = pool.extract(&request).await.unwrap();
    assert!(matches!(again, ExtractOutcome::Extracted(ref x) if x.replayed));
    assert_eq!(proxy_ids(&again), proxy_ids(&first));
    let got = proxy_ids(&first);
    assert_eq!(got.len(), 3);
    let s = states(&pool, &all).await;
    assert_eq!(s.get(&ProxyState::Extracted), Some(&3), "{s:?}");
    let inv = inventory(&pool).await;
    assert_eq!(inv.unextracted, 7);

    // Upsert chunk: the stored chunk report answers the retry; counts do not change.
    proxy.arm_drop_next_reply();
    let report = pool
        .upsert(batch(
            "vendor-a",
            ids("n", 4).iter().map(|i| cand(i, "eu", 120)).collect(),
        ))
        .await
        .unwrap();
    assert_eq!(proxy.dropped_replies(), 2);
    assert_eq!(report.inserted, 4, "{report:?}");
    let inv = inventory(&pool).await;
    assert_eq!(inv.unextracted, 11);

    // Assignment: one epoch, one assignment.
    let worker = WorkerId::new("w1").unwrap();
    let target = ProxyId::new(all.iter().find(|i| !got.contains(i)).unwrap().as_str()).unwrap();
    proxy.arm_drop_next_reply();
    let a = pool.assign(&lease(&target, &worker, 30)).await.unwrap();
    assert_eq!(proxy.dropped_replies(), 3);
    assert_eq!(pool.get(&target).await.unwrap(), Some(a));
    assert_consistent(&server.url()).await;
}

/// A reply that comes back after the command timeout (Redis committed the extraction):
/// the adapter reconnects and retries the same call, so the caller gets the proxies that
/// were taken instead of a 503 while they are gone. Without an idempotency key too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reply_after_commit_returns_the_extraction() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let (pool, all) = filled(&proxy.url(), "s", 10).await;
    for (round, key) in [None, Some("slow-retry")].into_iter().enumerate() {
        let mut request = req(2);
        request.idempotency_key = key.map(|k| IdempotencyKey::new(k).unwrap());
        // Longer than the adapter's command timeout (500 ms).
        proxy.arm_delay_next_reply(Duration::from_millis(1_500));
        let got = pool
            .extract(&request)
            .await
            .expect("the committed extraction");
        assert_eq!(
            proxy.delayed_replies(),
            round as u64 + 1,
            "the reply was late"
        );
        let ExtractOutcome::Extracted(x) = &got else {
            panic!("{got:?}")
        };
        assert!(!x.replayed, "the caller's first answer: {got:?}");
        assert_eq!(x.proxies.len(), 2);
        let s = states(&pool, &all).await;
        assert_eq!(
            s.get(&ProxyState::Extracted),
            Some(&(2 * (round + 1))),
            "exactly what was returned is gone: {s:?}"
        );
    }
    let inv = inventory(&pool).await;
    assert_eq!(inv.unextracted, 6);
    assert_consistent(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_is_survived() {
    let server = RedisServer::start();
    let (pool, _) = filled(&server.url(), "f", 10).await;
    let mut c = admin(&server.url()).await;
    let _: () = query(&mut c, "SCRIPT", "FLUSH").await;
    assert_eq!(proxy_ids(&pool.extract(&req(2)).await.unwrap()).len(), 2);
    let _: () = query(&mut c, "SCRIPT", "FLUSH").await;
    fill(&pool, &ids("g", 3), 120).await;
    let _: () = query(&mut c, "SCRIPT", "FLUSH").await;
    assert_eq!(inventory(&pool).await.unextracted, 11);
    assert_consistent(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_calls_apply_fully_or_not_at_all() {
    let server = RedisServer::start();
    let (pool, all) = filled(&server.url(), "c", 200).await;
    let mut returned = BTreeSet::new();
    let mut cancelled = 0;
    for i in 0..200u64 {
        let mut r = req(1 + (i % 3) as u32);
        r.idempotency_key = Some(IdempotencyKey::new(format!("k-{i}")).unwrap());
        // Cancel at a different point of the call each time.
        let budget = Duration::from_micros(i * 7 % 400);
        match tokio::time::timeout(budget, pool.extract(&r)).await {
            Ok(Ok(o)) => {
                for id in proxy_ids(&o) {
                    assert!(returned.insert(id), "a proxy was handed out twice");
                }
            }
            Ok(Err(e)) => panic!("unexpected error {e:?}"),
            Err(_) => cancelled += 1,
        }
        if i % 4 == 0 {
            let worker = WorkerId::new("w").unwrap();
            let id = ProxyId::new(all[(i as usize * 13) % all.len()].as_str()).unwrap();
            let _ = tokio::time::timeout(budget, pool.assign(&lease(&id, &worker, 10))).await;
        }
    }
    assert!(cancelled > 0, "some calls must have been cancelled");
    assert_consistent(&server.url()).await;
    let s = states(&pool, &all).await;
    let extracted = s.get(&ProxyState::Extracted).copied().unwrap_or(0);
    assert!(
        extracted >= returned.len(),
        "every returned proxy is EXTRACTED"
    );
    let inv = inventory(&pool).await;
    assert_eq!(inv.unextracted as usize, all.len() - extracted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_unavailable_fast_and_restart_recovers() {
    let mut server = RedisServer::start();
    let (pool, _) = filled(&server.url(), "s", 5).await;
    server.stop();

    let up = UpstreamId::new("vendor-a").unwrap();
    let p = ProxyId::new("s-1").unwrap();
    let w = WorkerId::new("w").unwrap();
    let s = SessionId::new("s").unwrap();
    let claim = Claim {
        proxy_id: p.clone(),
        worker_id: w.clone(),
        epoch: 1,
    };
    let ttl = Duration::from_secs(5);
    let ack = SnapshotAck {
        worker_id: w.clone(),
        session_id: s.clone(),
        version: 1,
        epoch: 1,
        ttl,
    };
    let reject = SnapshotReject {
        worker_id: w.clone(),
        session_id: s.clone(),
        ttl,
    };
    let started = Instant::now();
    let results: Vec<(&str, Result<(), PoolError>)> = vec![
        (
            "upsert",
            pool.upsert(batch("vendor-a", vec![cand("x-1", "eu", 60)]))
                .await
                .map(|_| ()),
        ),
        (
            "remove",
            pool.remove(&up, std::slice::from_ref(&p)).await.map(|_| ()),
        ),
        (
            "health",
            pool.apply_health(&[HealthUpdate {
                proxy_id: p.clone(),
                verdict: HealthVerdict::Suspect,
                success: false,
                latency: None,
                failure: None,
            }])
            .await
            .map(|_| ()),
        ),
        ("extract", pool.extract(&req(1)).await.map(|_| ())),
        ("assign", pool.assign(&lease(&p, &w, 5)).await.map(|_| ())),
        (
            "renew",
            pool.renew(&claim, Duration::from_secs(5)).await.map(|_| ()),
        ),
        ("begin_drain", pool.begin_drain(&claim).await.map(|_| ())),
        (
            "acknowledge_drain",
            pool.acknowledge_drain(&DrainAck {
                claim: claim.clone(),
                active: 0,
                reserved: 0,
            })
            .await,
        ),
        ("get", pool.get(&p).await.map(|_| ())),
        ("expire", pool.expire(10).await.map(|_| ())),
        (
            "register",
            pool.register(&registration(&w, "i", &s, 5))
                .await
                .map(|_| ()),
        ),
        ("acknowledge", pool.acknowledge(&ack).await.map(|_| ())),
        ("reject", pool.reject_snapshot(&reject).await.map(|_| ())),
        ("session", pool.session(&w).await.map(|_| ())),
        (
            "report",
            pool.write_report(&RuntimeReport {
                header: ReportHeader {
                    worker_id: w.clone(),
                    session_id: s.clone(),
                    sequence: 1,
                    snapshot_version: 1,
                    epoch: 1,
                },
                entries: vec![],
                ttl: Duration::from_secs(5),
            })
            .await
            .map(|_| ()),
        ),
        ("runtime", pool.runtime(&w).await.map(|_| ())),
        ("inventory", pool.inventory(&up).await.map(|_| ())),
        (
            "records",
            pool.records(std::slice::from_ref(&p)).await.map(|_| ()),
        ),
        ("assignable", pool.assignable(&up, 5).await.map(|_| ())),
        ("purge", pool.purge_expired(10).await.map(|_| ())),
    ];
    for (name, r) in results {
        assert!(matches!(r, Err(PoolError::Unavailable(_))), "{name}: {r:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failing took {:?}",
        started.elapsed()
    );

    // Back (empty: the pool's generation ended); the same handle works again.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.inventory(&up).await.is_err() {
        assert!(Instant::now() < deadline, "pool never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(pool.inventory(&up).await.unwrap().unextracted, 0);
    let fresh = ids("r", 3);
    fill(&pool, &fresh, 120).await;
    assert_eq!(proxy_ids(&pool.extract(&req(2)).await.unwrap()).len(), 2);
    assert_consistent(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_fails_without_printing_it() {
    let server = RedisServer::start_with(vec!["--requirepass".into(), "right-PASSWORD-1".into()]);
    let connector = RedisConnector::direct(&server.url())
        .unwrap()
        .with_password(Secret::new("wrong-PASSWORD-2"));
    assert!(!format!("{connector:?}").contains("PASSWORD"));
    let err = RedisPool::new(connector, RedisOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PoolError::Unavailable(_)), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("PASSWORD"), "{err:?}");

    let url = format!("redis://:right-PASSWORD-1@127.0.0.1:{}/", server.port());
    let connector = RedisConnector::direct(&url).unwrap();
    assert!(
        !format!("{connector:?}").contains("PASSWORD"),
        "{connector:?}"
    );
    let pool = RedisPool::new(connector, RedisOptions::default())
        .await
        .unwrap();
    fill(&pool, &ids("a", 2), 60).await;
    let connector = RedisConnector::direct(&server.url())
        .unwrap()
        .with_password(Secret::new("right-PASSWORD-1"));
    let pool = RedisPool::new(connector, RedisOptions::default())
        .await
        .unwrap();
    assert_eq!(inventory(&pool).await.unextracted, 2);
}

async fn sentinel_master_port(sentinel: &RedisSentinel) -> u16 {
    let mut c = admin(&format!("redis://{}/", sentinel.addr())).await;
    let (_, port): (String, u16) =
        query(&mut c, "SENTINEL", ("get-master-addr-by-name", "pool")).await;
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_connector_resolves_the_master_and_follows_a_failover() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(master.port());
    let sentinel = RedisSentinel::start("pool", master.port());
    let connector = RedisConnector::sentinel("pool", vec![sentinel.addr()]).unwrap();
    let options = RedisOptions {
        command_timeout: Duration::from_millis(1000),
        ..RedisOptions::default()
    };
    let pool = RedisPool::new(connector, options)
        .await
        .expect("pool through sentinel");
    let all = ids("m", 10);
    fill(&pool, &all, 300).await;
    let worker = WorkerId::new("w").unwrap();
    let a1 = assign(&pool, "m-0", &worker, 60).await;

    // Let the replica catch up, wait until the sentinel knows it, then fail over.
    let mut m = admin(&master.url()).await;
    let synced = Instant::now() + Duration::from_secs(20);
    loop {
        let acked: i64 = query(&mut m, "WAIT", (1, 200)).await;
        if acked == 1 {
            break;
        }
        assert!(Instant::now() < synced, "replica never caught up");
    }
    let mut s = admin(&format!("redis://{}/", sentinel.addr())).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r: redis::RedisResult<String> = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg("pool")
            .query_async(&mut s)
            .await;
        if r.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sentinel never accepted FAILOVER: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    while sentinel_master_port(&sentinel).await != replica.port() {
        assert!(Instant::now() < deadline, "failover did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The old master turns replica: writes get READONLY, the adapter re-resolves.
    let mut last = None;
    while Instant::now() < deadline {
        match pool
            .assign(&lease(&ProxyId::new("m-1").unwrap(), &worker, 60))
            .await
        {
            Ok(a2) => {
                assert!(
                    a2.epoch > a1.epoch,
                    "epochs never go backwards across a failover"
                );
                last = None;
                break;
            }
            Err(e) => {
                assert!(matches!(e, PoolError::Unavailable(_)), "{e:?}");
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert!(last.is_none(), "never followed the new master: {last:?}");
    assert_eq!(proxy_ids(&pool.extract(&req(3)).await.unwrap()).len(), 3);
    let inv = inventory(&pool).await;
    assert_eq!(inv.unextracted, 7, "data followed the failover");
    assert_consistent(&replica.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowlog_never_holds_a_password() {
    let server = RedisServer::start();
    let mut c = admin(&server.url()).await;
    let _: () = query(&mut c, "CONFIG", ("SET", "slowlog-log-slower-than", 0)).await;
    let _: () = query(&mut c, "CONFIG", ("SET", "slowlog-max-len", 10_000)).await;
    let pool = pool_at(&server.url()).await;
    // One candidate per batch: the shortest payload, the password nearest its start.
    for id in ids("sl", 5) {
        fill(&pool, std::slice::from_ref(&id), 60).await;
    }
    fill(&pool, &ids("many", 40), 60).await;
    assert_eq!(proxy_ids(&pool.extract(&req(3)).await.unwrap()).len(), 3);
    let log: redis::Value = query(&mut c, "SLOWLOG", ("GET", 10_000)).await;
    let text = format!("{log:?}");
    assert!(text.contains("EVALSHA"), "the slowlog recorded the calls");
    assert!(
        text.contains("vendor-a"),
        "the payload's start is visible in the slowlog"
    );
    assert!(
        !text.contains(SECRET_PASSWORD),
        "a password reached the slowlog"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unanswering_redis_fails_every_caller_within_the_timeout() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let (pool, _) = filled(&proxy.url(), "b", 10).await;
    proxy.set_blackhole(true);

    // 20 callers at once: the live connection times out (500 ms), then one reconnect
    // attempt times out and the callers queued behind it share its failure.
    let started = Instant::now();
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.extract(&req(1)).await })
        })
        .collect();
    for c in calls {
        let r = c.await.unwrap();
        assert!(matches!(r, Err(PoolError::Unavailable(_))), "{r:?}");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "callers waited {took:?}"
    );
    let started = Instant::now();
    let r = pool.inventory(&UpstreamId::new("vendor-a").unwrap()).await;
    assert!(matches!(r, Err(PoolError::Unavailable(_))), "{r:?}");
    assert!(started.elapsed() < Duration::from_millis(1200));

    // Nothing was taken while Redis did not answer; it answers again, the pool recovers.
    proxy.set_blackhole(false);
    let deadline = Instant::now() + Duration::from_secs(10);
    let inv = loop {
        match pool.inventory(&UpstreamId::new("vendor-a").unwrap()).await {
            Ok(inv) => break inv,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("never recovered: {e:?}"),
        }
    };
    assert_eq!(
        inv.unextracted, 10,
        "a request that never reached Redis changed nothing"
    );
    assert_consistent(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_sweeps_run_in_bounded_scripts_and_report_more() {
    let server = RedisServer::start();
    let (pool, clock) = pool_on_clock(&server.url()).await;
    let all = ids("w", 1300);
    for chunk in all.chunks(650) {
        fill(&pool, chunk, 60).await;
    }
    let worker = WorkerId::new("w").unwrap();
    for id in &all[..700] {
        let p = ProxyId::new(id.as_str()).unwrap();
        pool.assign(&lease(&p, &worker, 10)).await.unwrap();
    }
    clock.advance(Duration::from_secs(20));
    let e = pool.expire(600).await.unwrap();
    assert_eq!((e.released.len(), e.more), (600, true));
    let e = pool.expire(600).await.unwrap();
    assert_eq!((e.released.len(), e.more), (100, false));

    clock.advance(Duration::from_secs(60));
    let p = pool.purge_expired(1000).await.unwrap();
    assert_eq!((p.purged, p.more), (1000, true));
    let p = pool.purge_expired(1000).await.unwrap();
    assert_eq!((p.purged, p.more), (300, false));
    let inv = inventory(&pool).await;
    assert_eq!((inv.unextracted, inv.managed), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangling_index_member_is_skipped_not_fatal() {
    let server = RedisServer::start();
    let (pool, _) = filled(&server.url(), "g", 5).await;
    // Damage the data behind the adapter's back: one record vanishes, its index
    // memberships stay.
    let mut c = admin(&server.url()).await;
    let _: i64 = query(&mut c, "HDEL", ("pp:{activity}:v2:records", "g-2")).await;
    let got = proxy_ids(&pool.extract(&req(5)).await.unwrap());
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(!got.contains(&"g-2".to_owned()));
}

/// No fixed key-book ceiling: 10,000 label combinations (100 regions × 100 carriers, one
/// proxy each). Filtered and unfiltered extraction, `inventory` and `assignable` work,
/// on this process and on a second one that starts with an empty book; combinations
/// the registry drops (emptied, then swept by maintenance) are forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_label_combinations_work_and_dropped_ones_are_forgotten() {
    const SIDE: usize = 100;
    let server = RedisServer::start();
    let pool = pool_at(&server.url()).await;
    let upstream = UpstreamId::new("vendor-a").unwrap();
    let mut all = Vec::with_capacity(SIDE * SIDE);
    for r in 0..SIDE {
        let cands: Vec<Candidate> = (0..SIDE)
            .map(|c| {
                let id = format!("k-{r}-{c}");
                let mut cand = cand(&id, &format!("r{r}"), 600);
                cand.labels.carrier = Some(Label::new(format!("c{c}")).unwrap());
                all.push(id);
                cand
            })
            .collect();
        let report = pool.upsert(batch("vendor-a", cands)).await.unwrap();
        assert_eq!(report.inserted as usize, SIDE, "{report:?}");
    }
    for chunk in all.chunks(1_000) {
        for r in pool.apply_health(&available(chunk)).await.unwrap() {
            assert_eq!(r, HealthResult::Applied(ProxyState::Available));
        }
    }
    assert!(
        pool.known_index_keys() >= SIDE * SIDE,
        "{}",
        pool.known_index_keys()
    );
    let mut conn = admin(&server.url()).await;
    let combos_key = "pp:{activity}:v2:combos";
    let registered: usize = query(&mut conn, "SCARD", combos_key).await;
    assert_eq!(registered, SIDE * SIDE);

    let filtered = |regions: &[&str], carriers: &[&str], count: u32| {
        let mut r = req(count);
        r.filters.regions = regions.iter().map(|v| Label::new(*v).unwrap()).collect();
        r.filters.carriers = carriers.iter().map(|v| Label::new(*v).unwrap()).collect();
        r
    };
    // One region: its 100 combinations.
    let got = proxy_ids(&pool.extract(&filtered(&["r7"], &[], 5)).await.unwrap());
    assert_eq!(got.len(), 5);
    assert!(got.iter().all(|id| id.starts_with("k-7-")), "{got:?}");
    // One region and one carrier: exactly one combination.
    let got = proxy_ids(&pool.extract(&filtered(&["r9"], &["c3"], 2)).await.unwrap());
    assert_eq!(got, vec!["k-9-3".to_string()]);
    // Unfiltered (the write is not given 10,000 keys: the script asks for its own).
    assert_eq!(proxy_ids(&pool.extract(&req(3)).await.unwrap()).len(), 3);
    let inv = pool.inventory(&upstream).await.unwrap();
    assert_eq!((inv.unextracted, inv.available), (9_991, 9_991));
    assert_eq!(pool.assignable(&upstream, 50).await.unwrap().len(), 50);

    // Another process with an empty book: it learns the whole registry once.
    let other = pool_at(&server.url()).await;
    let inv = other.inventory(&upstream).await.unwrap();
    assert_eq!(inv.available, 9_991);
    let got = proxy_ids(&other.extract(&filtered(&["r8"], &["c8"], 1)).await.unwrap());
    assert_eq!(got, vec!["k-8-8".to_string()]);
    let known = other.known_index_keys();
    assert!(known >= SIDE * SIDE, "{known}");

    // Empty region r1's 100 combinations; the maintenance sweep drops them from the
    // registry and both books forget them.
    let got = proxy_ids(&pool.extract(&filtered(&["r1"], &[], 100)).await.unwrap());
    assert_eq!(got.len(), 100);
    let before = pool.known_index_keys();
    pool.purge_expired(10_000).await.unwrap();
    let registered: usize = query(&mut conn, "SCARD", combos_key).await;
    // Every emptied combination: r1's 100, r7's 5, k-9-3, the 3 unfiltered and k-8-8.
    let emptied = SIDE + 5 + 1 + 3 + 1;
    assert_eq!(registered, SIDE * SIDE - emptied);
    assert_eq!(pool.known_index_keys(), before - emptied);
    // The other process re-learns the registry at its next read.
    assert_eq!(other.inventory(&upstream).await.unwrap().available, 9_890);
    let relearned = other.known_index_keys();
    assert!(
        relearned + emptied <= known && relearned >= SIDE * SIDE - emptied,
        "{known} -> {relearned}"
    );
    assert!(proxy_ids(&other.extract(&filtered(&["r1"], &[], 1)).await.unwrap()).is_empty());
    assert_consistent(&server.url()).await;
}

/// The maintenance sweep of emptied combinations walks only the index keys it was
/// given, not the fixed keys before them: relayed extraction demand (a list) waiting
/// for the leader does not break it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_combination_sweep_runs_while_demand_is_relayed() {
    let server = RedisServer::start();
    let pool = pool_at(&server.url()).await;
    fill(&pool, &ids("sw", 2), 600).await;
    assert_eq!(proxy_ids(&pool.extract(&req(2)).await.unwrap()).len(), 2);
    pool.push_demand(r#"{"count":1}"#, 8, Duration::from_secs(30))
        .await
        .unwrap();
    let before = pool.known_index_keys();
    pool.purge_expired(100).await.expect("maintenance sweep");
    assert_eq!(
        pool.known_index_keys(),
        before - 1,
        "the emptied combination is dropped"
    );
    assert_eq!(
        pool.take_demands(8).await.unwrap(),
        vec![r#"{"count":1}"#.to_string()]
    );
    assert_consistent(&server.url()).await;
}

/// Upserts `ids` (upstream `vendor-a`) with `quarantine` and marks them AVAILABLE.
async fn fill_held(pool: &RedisPool, ids: &[String], quarantine: Duration) -> UpsertReport {
    fill_batch(pool, ids, batch_of(ids, 600, quarantine)).await
}

/// The extracted IDs; an `Insufficient` answer fails the test.
fn extracted(outcome: ExtractOutcome) -> Vec<String> {
    if let ExtractOutcome::Insufficient { eligible } = outcome {
        panic!("insufficient: {eligible}");
    }
    proxy_ids(&outcome)
}

/// A `redis-server` restarted without its data (no persistence) begins a new pool
/// generation at the next upsert: the same vendor proxies, offered again, are held back
/// for the upstream's quarantine, so the ones extracted before the loss are not handed
/// out again at once (`docs/pool.md`, "Pool generations").
#[tokio::test]
async fn a_redis_restarted_without_its_data_begins_a_new_generation_that_holds_back_refetched_proxies()
 {
    let mut server = RedisServer::start();
    let pool = pool_at(&server.url()).await;
    let q = Duration::from_secs(2);
    let all = ids("gen", 4);
    let first = fill_held(&pool, &all, q).await;
    let g1 = first
        .generation_started
        .expect("the first upsert begins a generation");
    assert_eq!(pool.generation().await.unwrap(), Some(g1));
    assert!(extracted(pool.extract(&req(2)).await.unwrap()).is_empty());
    tokio::time::sleep(q).await;
    let before = extracted(pool.extract(&req(2)).await.unwrap());
    assert_eq!(before.len(), 2);

    server.restart();
    // The first call after the restart may meet the dropped connection.
    let mut report = None;
    for _ in 0..20 {
        match pool.upsert(batch_of(&all, 600, q)).await {
            Ok(r) => {
                report = Some(r);
                break;
            }
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    }
    let report = report.expect("upsert after the restart");
    assert_eq!(report.inserted, 4, "every proxy is new to the empty store");
    let g2 = report.generation_started.expect("a new generation");
    assert!(g2 > g1, "{g2:?} after {g1:?}");
    fill_held(&pool, &all, q).await;
    assert!(
        extracted(pool.extract(&req(4)).await.unwrap()).is_empty(),
        "nothing handed out again during the quarantine"
    );
    let inv = inventory(&pool).await;
    assert_eq!(inv.available, 0);
    assert_eq!(inv.quarantined_until, Some(Timestamp(g2.0 + 2_000)));
    tokio::time::sleep(q).await;
    assert_eq!(extracted(pool.extract(&req(4)).await.unwrap()).len(), 4);
    // The next upsert past the hold forgets it: every extraction reads the stored
    // holds, so a pool past them keeps only the generation's start.
    fill_held(&pool, &ids("gen-late", 1), q).await;
    let mut c = admin(&server.url()).await;
    let fields: Vec<String> = query(&mut c, "HKEYS", "pp:{activity}:v2:generation").await;
    assert_eq!(fields, vec!["start".to_string()]);
}

/// Records without a generation record predate generations (a pool written by an
/// earlier version): it lost nothing, so its generation counts as long begun and no
/// quarantine applies.
#[tokio::test]
async fn a_pool_written_before_generations_is_not_held_back() {
    let server = RedisServer::start();
    let pool = pool_at(&server.url()).await;
    let all = ids("old", 3);
    fill(&pool, &all, 600).await;
    let mut c = admin(&server.url()).await;
    let _: i64 = query(&mut c, "DEL", "pp:{activity}:v2:generation").await;
    let report = fill_held(&pool, &all, Duration::from_secs(3600)).await;
    assert_eq!(report.refreshed, 3);
    assert_eq!(report.generation_started, None);
    assert_eq!(pool.generation().await.unwrap(), Some(Timestamp(0)));
    assert_eq!(extracted(pool.extract(&req(3)).await.unwrap()).len(), 3);
}

/// A pool written before the city dimension (combination keys of four parts,
/// `avail:<upstream>|<protocol>|<region>|<carrier>`) keeps serving after the upgrade:
/// its keys parse as combinations without a city, filtered extractions find their
/// proxies, a refresh moves each record into its five-part key, and the maintenance
/// sweep drops the emptied old key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_written_before_the_city_dimension_keeps_serving() {
    let server = RedisServer::start();
    let (pool, all) = filled(&server.url(), "old", 4).await;
    let new_key = "pp:{activity}:v2:avail:vendor-a|http|eu|c1|";
    let old_key = "pp:{activity}:v2:avail:vendor-a|http|eu|c1";
    // Rewrite it as the previous version stored it: the same members under the
    // four-part key, named so by every record and by the registry.
    let mut c = admin(&server.url()).await;
    let _: () = query(&mut c, "RENAME", (new_key, old_key)).await;
    let records: HashMap<String, String> =
        query(&mut c, "HGETALL", "pp:{activity}:v2:records").await;
    for (id, raw) in records {
        let old = raw.replace(
            &format!("\"a\":\"{new_key}\""),
            &format!("\"a\":\"{old_key}\""),
        );
        assert_ne!(old, raw);
        let _: i64 = query(&mut c, "HSET", ("pp:{activity}:v2:records", id, old)).await;
    }
    let _: i64 = query(&mut c, "SREM", ("pp:{activity}:v2:combos", new_key)).await;
    let _: i64 = query(&mut c, "SADD", ("pp:{activity}:v2:combos", old_key)).await;
    let _: () = query(&mut c, "SET", ("pp:{activity}:v2:combos-version", "1")).await;
    assert_consistent(&server.url()).await;
    drop(pool);

    // The upgraded controller (an empty key book).
    let pool = pool_at(&server.url()).await;
    let filtered = |regions: &[&str], cities: &[&str], count: u32| {
        let mut r = req(count);
        r.filters.regions = regions.iter().map(|v| Label::new(*v).unwrap()).collect();
        r.filters.cities = cities.iter().map(|v| Label::new(*v).unwrap()).collect();
        r
    };
    let got = proxy_ids(&pool.extract(&filtered(&["eu"], &[], 1)).await.unwrap());
    assert_eq!(got.len(), 1, "the region filter finds the old combination");
    assert!(
        proxy_ids(&pool.extract(&filtered(&[], &["boston"], 1)).await.unwrap()).is_empty(),
        "an old record has no city"
    );
    assert_eq!(inventory(&pool).await.available, 3);

    // The next fetch refreshes the rest with a city: they move to the new key.
    let rest: Vec<String> = all.into_iter().filter(|id| !got.contains(id)).collect();
    let mut b = batch_of(&rest, 120, Duration::ZERO);
    for cand in &mut b.candidates {
        cand.labels.city = Some(Label::new("boston").unwrap());
    }
    assert_eq!(pool.upsert(b).await.unwrap().refreshed, 3);
    assert_consistent(&server.url()).await;
    let old_members: usize = query(&mut c, "ZCARD", old_key).await;
    assert_eq!(old_members, 0);
    let got = proxy_ids(
        &pool
            .extract(&filtered(&["eu"], &["boston"], 2))
            .await
            .unwrap(),
    );
    assert_eq!(got.len(), 2);
    pool.purge_expired(1_000).await.unwrap();
    let registry: BTreeSet<String> = query(&mut c, "SMEMBERS", "pp:{activity}:v2:combos").await;
    assert!(!registry.contains(old_key), "{registry:?}");
    assert_eq!(inventory(&pool).await.available, 1);
    assert_consistent(&server.url()).await;
}

/// Unfiltered extraction by concurrent callers on a pool whose key book is past the
/// pass-everything bound (300 label combinations, consecutive proxies in different
/// ones): a call is given the `owned:` keys only and the script asks for the
/// combination of the record at the head; by the retry other callers have taken it, and
/// the new head sits in another combination. Every call still settles within its rounds
/// (none answers `Unavailable("index_keys_unsettled")`) and every proxy is handed out
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_unfiltered_extractions_settle_beyond_the_pass_all_bound() {
    const COMBOS: usize = 300;
    const CALLERS: usize = 16;
    const PER_CALLER: usize = 100;
    let server = RedisServer::start();
    let pool = pool_at(&server.url()).await;
    fill_in_cities(&pool, "h", COMBOS * 8, 600, |i| i % COMBOS).await;

    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..PER_CALLER {
                match pool.extract(&req(1)).await {
                    Ok(o) => got.extend(proxy_ids(&o)),
                    Err(e) => return Err(e),
                }
            }
            Ok(got)
        }));
    }
    let mut handed = Vec::new();
    for t in tasks {
        handed.extend(t.await.unwrap().expect("every extraction settles"));
    }
    assert_eq!(handed.len(), CALLERS * PER_CALLER);
    let distinct: BTreeSet<&String> = handed.iter().collect();
    assert_eq!(distinct.len(), handed.len(), "a proxy handed out twice");
    assert_consistent(&server.url()).await;
}

/// Unfiltered extraction, one caller after the other, on a pool whose key book is past
/// the pass-everything bound (300 label combinations; the proxies in runs of 100, each
/// run in 50 combinations of its own, two proxies each): a call is given the `owned:`
/// keys and the combinations extractions were asked for lately, and an asking script
/// names those of the 128 records after its own too, so most calls find their
/// combination given: about one script call per extraction, not two (ask, then
/// extract) as when every call was given the `owned:` keys only.
#[tokio::test]
async fn unfiltered_extractions_beyond_the_pass_all_bound_rarely_ask_for_keys() {
    const RUNS: usize = 6;
    const EXTRACTIONS: usize = 400;
    let server = RedisServer::start();
    let pool = pool_at(&server.url()).await;
    fill_in_cities(&pool, "h", RUNS * 100, 600, |i| i / 100 * 50 + i % 50).await;

    let mut conn = admin(&server.url()).await;
    let () = query(&mut conn, "CONFIG", "RESETSTAT").await;
    let mut handed = BTreeSet::new();
    for _ in 0..EXTRACTIONS {
        let o = pool.extract(&req(1)).await.unwrap();
        let ids = proxy_ids(&o);
        assert_eq!(ids.len(), 1, "{o:?}");
        assert!(handed.insert(ids[0].clone()), "{ids:?} handed out twice");
    }
    let calls = script_calls(&mut conn).await;
    // An extraction that asks costs two calls; one in ten may.
    assert!(
        calls <= EXTRACTIONS + EXTRACTIONS / 10,
        "{calls} script calls for {EXTRACTIONS} extractions"
    );
    assert_consistent(&server.url()).await;
}

/// The maintenance purge on a pool whose key book is past the pass-everything bound
/// (300 label combinations, two expired records in each), in steps of 256: the first
/// step is given the `owned:` keys and asks for the combinations of its records (two
/// scripts), and, as it reports more due, the next steps are given every known key (one
/// script each, not two); then the combination sweep (two scripts of ≤ 256 keys).
#[tokio::test]
async fn purge_beyond_the_pass_all_bound_asks_once_per_call() {
    const COMBOS: usize = 300;
    let server = RedisServer::start();
    let (pool, clock) = pool_on_clock(&server.url()).await;
    fill_in_cities(&pool, "x", COMBOS * 2, 60, |i| i % COMBOS).await;

    clock.advance(Duration::from_secs(120));
    let mut conn = admin(&server.url()).await;
    let () = query(&mut conn, "CONFIG", "RESETSTAT").await;
    let p = pool.purge_expired(768).await.unwrap();
    assert_eq!((p.purged, p.more), (600, false));
    let calls = script_calls(&mut conn).await;
    assert_eq!(
        calls,
        2 + 1 + 1 + 2,
        "script calls for one purge of 600 in steps of 256"
    );
    let inv = inventory(&pool).await;
    assert_eq!((inv.unextracted, inv.managed), (0, 0));
    assert_consistent(&server.url()).await;
}
