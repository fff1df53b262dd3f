//! The Redis master killed under Sentinel: three `redis-sentinel` (quorum 2), one
//! master, one replica; both controller replicas reach the store through the sentinels. Under mixed
//! load the master is SIGKILLed (no persistence: what it had not replicated is gone);
//! the drill measures the failover, the extraction error window and the gateway errors,
//! checks that no proxy is handed out twice, and that an extraction made with an
//! `Idempotency-Key` before the failover is replayed after it with the same proxies.
//!
//! Leadership here uses the default lease (10 s): a failover shorter than the lease
//! leaves the leader in place (its lease key was replicated); a longer one (a split
//! vote among the sentinels delays the promotion by twice their `failover-timeout`)
//! deposes it, and the drill restarts it as its supervisor would (exit code 3).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use activity_pool::testkit::{RedisSentinel, RedisServer};

use crate::common::*;
use crate::*;

const MASTER: &str = "pp-drill";
const LEADERSHIP_DEFAULT_LEASE: &str =
    "leadership: {replicas: 2, lease: 10s, renewEvery: 2s, retryEvery: 500ms}";
/// Sentinel's `down-after-milliseconds` in the testkit: the failover takes this plus
/// the sentinels' election and the promotion.
const DOWN_AFTER: Duration = Duration::from_secs(1);
/// The sentinels' `failover-timeout` here: an election that fails (split vote) is
/// retried after twice this.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound asserted on the failover (kill → sentinels name the new master): detection,
/// up to two failed elections, the promotion.
const FAILOVER_BOUND: Duration = Duration::from_secs(11);
const REPLAY_BODY: &str = r#"{"count":1,"fulfillment":"allOrNothing"}"#;

/// A connection to a Redis or a sentinel; `None` when it does not answer within 2 s
/// (a sentinel busy with the failover is asked again by the polling loops).
async fn redis_conn(addr: &str) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://{addr}/")).expect("redis url");
    tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()
}

/// A field of `SENTINEL MASTER <name>` as one sentinel sees it.
async fn master_field(sentinel: &RedisSentinel, field: &str) -> Option<String> {
    let mut c = redis_conn(&sentinel.addr()).await?;
    let flat: Vec<String> = tokio::time::timeout(
        Duration::from_secs(2),
        redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(MASTER)
            .query_async(&mut c),
    )
    .await
    .ok()?
    .ok()?;
    flat.chunks(2)
        .find(|kv| kv[0] == field)
        .and_then(|kv| kv.get(1).cloned())
}

/// The master's port as the first sentinel that answers names it.
async fn master_port(sentinels: &[RedisSentinel]) -> Option<u16> {
    for s in sentinels {
        let Some(mut c) = redis_conn(&s.addr()).await else {
            continue;
        };
        let r: Result<redis::RedisResult<(String, u16)>, _> = tokio::time::timeout(
            Duration::from_secs(2),
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER)
                .query_async(&mut c),
        )
        .await;
        if let Ok(Ok((_, port))) = r {
            return Some(port);
        }
    }
    None
}

/// Everything the master acknowledged so far has reached the replica.
async fn replicated(master: &RedisServer) -> bool {
    let mut c = redis_conn(&format!("127.0.0.1:{}", master.port()))
        .await
        .expect("the master answers");
    let _: () = redis::cmd("SET")
        .arg("pp-drill-sync")
        .arg(now_ms())
        .query_async(&mut c)
        .await
        .expect("SET");
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query_async(&mut c)
        .await
        .expect("WAIT");
    acked >= 1
}

/// One extraction with `key` as its `Idempotency-Key`, tried on every replica in turn
/// until one answers 200 (bounded by `within`); its proxies.
fn extract_with_key(dists: &[SocketAddr], key: &str, within: Duration) -> Vec<serde_json::Value> {
    let headers = format!("X-API-Key: {API_KEY}\r\nIdempotency-Key: {key}\r\n");
    let deadline = Instant::now() + within;
    let mut last = None;
    while Instant::now() < deadline {
        for d in dists {
            match block(post(*d, "/api/v1/proxies/extract", &headers, REPLAY_BODY)) {
                Ok((200, body)) => {
                    let j: serde_json::Value = serde_json::from_str(&body).expect("JSON");
                    return j["proxies"].as_array().expect("proxies").clone();
                }
                other => last = Some(format!("{other:?}")),
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("no 200 for the idempotent extraction within {within:?}: {last:?}");
}

/// How long after `killed` `done` held (polled every 50 ms); fails the drill with `what`
/// and the logs once three times [`FAILOVER_BOUND`] have passed.
fn since_kill(stack: &Stack, killed: Instant, what: &str, done: impl Fn() -> bool) -> Duration {
    loop {
        let took = done().then(|| killed.elapsed());
        assert!(
            killed.elapsed() < FAILOVER_BOUND * 3,
            "{what}\n{}",
            stack.procs.logs()
        );
        if let Some(took) = took {
            return took;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ids(proxies: &[serde_json::Value]) -> Vec<String> {
    proxies
        .iter()
        .map(|p| p["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn redis_master_killed_with_sentinel() {
    let _one = one_stack();
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(master.port());
    let logs = std::env::temp_dir().join(format!("pp-drill-sentinels-{}", std::process::id()));
    std::fs::create_dir_all(&logs).expect("sentinel log dir");
    let sentinels: Vec<RedisSentinel> = (0..3)
        .map(|i| {
            let conf = format!(
                "sentinel failover-timeout {MASTER} {}\nlogfile {}\n",
                FAILOVER_TIMEOUT.as_millis(),
                logs.join(format!("sentinel-{i}.log")).display()
            );
            RedisSentinel::start_with(MASTER, master.port(), &conf)
        })
        .collect();
    // Quorum 2 of 3, as in production: with quorum 1 every sentinel declares the
    // master down on its own at the same moment and votes for itself (a split vote).
    for s in &sentinels {
        let set: Option<String> = block(async {
            let mut c = redis_conn(&s.addr()).await?;
            redis::cmd("SENTINEL")
                .arg("SET")
                .arg(MASTER)
                .arg("quorum")
                .arg(2)
                .query_async(&mut c)
                .await
                .ok()
        });
        assert_eq!(set.as_deref(), Some("OK"), "SENTINEL SET quorum 2");
    }
    // The sentinels know the replica and each other before anything fails.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !block(async {
        for s in &sentinels {
            let replicas = master_field(s, "num-slaves").await;
            let others = master_field(s, "num-other-sentinels").await;
            if replicas.as_deref() != Some("1") || others.as_deref() != Some("2") {
                return false;
            }
        }
        true
    }) {
        assert!(
            Instant::now() < deadline,
            "sentinels never saw the replica and each other"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let addresses = sentinels
        .iter()
        .map(|s| format!("\"{}\"", s.addr()))
        .collect::<Vec<_>>()
        .join(", ");
    let store = format!(
        "{{sentinel: {{masterName: {MASTER}, addresses: [{addresses}]}}, commandTimeout: 500ms}}"
    );
    let (mut stack, leader) = ready_stack(start_on(
        "drill-sentinel",
        2,
        LEADERSHIP_DEFAULT_LEASE,
        master,
        &store,
    ));
    let dists: Vec<SocketAddr> = stack.replicas.iter().map(|r| r.dist).collect();
    let load = baseline_load(&stack);
    let x = load.extracted.clone();

    // An idempotent extraction, handed to the client like the load's.
    let first = extract_with_key(&dists, "drill-replay-1", Duration::from_secs(30));
    for p in &first {
        let id = p["id"].as_str().expect("id").to_owned();
        *x.ids.lock().unwrap().entry(id).or_default() += 1;
        let r = load
            .rt
            .block_on(report_and_use(stack.sim, stack.echo, p, now_ms()));
        assert!(r.is_ok(), "{r:?}");
    }
    assert!(
        block(replicated(&stack.redis)),
        "the replica never caught up"
    );

    let served_before = x.served.load(Ordering::Relaxed);
    stack.redis.stop();
    let killed = Instant::now();
    let killed_at = killed.duration_since(load.began).as_millis() as u64;
    let failover = since_kill(&stack, killed, "no failover", || {
        block(master_port(&sentinels)) == Some(replica.port())
    });
    let back = since_kill(&stack, killed, "extraction never came back", || {
        x.served.load(Ordering::Relaxed) > served_before
    });

    // The replay after the failover: the first answer, not a new extraction.
    let replay = extract_with_key(&dists, "drill-replay-1", Duration::from_secs(30));
    assert_eq!(
        ids(&replay),
        ids(&first),
        "the replay returns the first answer"
    );

    std::thread::sleep(AFTER);
    // The supervisor: a leader deposed by a failover longer than its lease exits 3 and
    // starts again as a follower.
    let mut names = replica_names(&stack);
    let restarted = restart_deposed(&mut stack, &mut names);
    stack.procs.all_alive();
    let leader_now = wait_leader(&mut stack, None, READY_WITHIN);
    let errors = x.errors.lock().unwrap().clone();
    let window = errors
        .iter()
        .map(|(at, _)| at.saturating_sub(killed_at))
        .max()
        .unwrap_or(0);
    let late: Vec<_> = errors
        .iter()
        .filter(|(at, _)| {
            *at < killed_at || at - killed_at > (failover + SLACK * 3).as_millis() as u64
        })
        .cloned()
        .collect();
    finish(
        "redis-sentinel-failover",
        &mut stack,
        load,
        &format!(
            "failover (kill → sentinels name the replica) {} ms (down-after {} ms, \
             failover-timeout {} ms; sentinel logs in {}); extraction served again {} ms after \
             the kill, last error {window} ms after it; leader {} (before {leader}), deposed \
             and restarted: {restarted:?}; idempotent replay after the failover: same proxies",
            failover.as_millis(),
            DOWN_AFTER.as_millis(),
            FAILOVER_TIMEOUT.as_millis(),
            logs.display(),
            back.as_millis(),
            if leader_now == leader {
                "kept"
            } else {
                "changed"
            },
        ),
    );
    assert!(
        failover <= FAILOVER_BOUND,
        "failover took {failover:?}, bound {FAILOVER_BOUND:?}"
    );
    assert!(
        late.is_empty(),
        "extraction errors outside the failover window: {late:?}"
    );
    stack.tear_down();
    drop(sentinels);
    drop(replica);
    let _ = std::fs::remove_dir_all(&logs);
}
