//! Activity-pool benchmark on a real `redis-server` (started by the testkit).
//!
//! `cargo bench -p activity-pool --bench pool` fills a pool of `POOL_BENCH_PROXIES`
//! proxies (default 100,000; 1,000 to 2,000,000, a multiple of 500) — 4 upstreams, 10
//! regions, 4 carriers and `POOL_BENCH_CITIES` cities per region, default 5; `0` gives
//! the proxies no city, as before the city dimension — measuring the upserts of 500
//! that fill it (proxies/s, Redis µs per proxy, first and last tenth of the fill) and
//! Redis's memory per proxy (`INFO memory`, and `MEMORY USAGE` of every key by kind).
//! Then it measures extract count 1 (without a filter, with a region filter, with a
//! region and city filter), extract count 5 with a region filter and a trivial
//! `EVALSHA` (`return 1`) as the baseline of one script round trip, sequential
//! (interleaved) and with 16 concurrent callers; prints ops/s, p50 and p99 per
//! operation and the rate relative to the baseline. Last, the maintenance sweep
//! (`Maintenance::purge_expired`, as the controller's maintenance loop calls it): once
//! with nothing expired, then, on a pool handle whose clock is 15 minutes ahead, with
//! the 1 % of the proxies the fill gave a 10-minute TTL past their hard expiry.
//! Sequential figures are one caller on one connection (latency-bound); concurrent
//! figures use 16 callers sharing the pool's multiplexed connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use activity_pool::model::*;
use activity_pool::ports::*;
use activity_pool::testkit::{RedisServer, bench_dial, commandstat};
use activity_pool::{PoolOptions, RedisOptions};

/// Proxies in the pool unless `POOL_BENCH_PROXIES` says otherwise.
const POOL_SIZE: usize = 100_000;
/// Every `EXPIRING`-th proxy lives `SHORT_TTL` instead of an hour: the part of the pool
/// the sweep measurement finds past its hard expiry (1 %).
const EXPIRING: usize = 100;
const SHORT_TTL: Duration = Duration::from_secs(600);
const REGIONS: usize = 10;
/// Cities per region unless `POOL_BENCH_CITIES` says otherwise.
const CITIES: usize = 5;
const CONCURRENCY: usize = 16;
/// The maintenance loop's default batch (`pool.maintenanceBatch`).
const SWEEP_BATCH: u32 = 1_000;
/// Interleaved rounds of the sequential measurement.
const ROUNDS: usize = 20;

static NEXT: AtomicU64 = AtomicU64::new(0);

fn next() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Proxies in the pool (`POOL_BENCH_PROXIES`, 1,000 to 2,000,000, a multiple of the
/// upsert batch of 500).
fn pool_size() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        let Ok(s) = std::env::var("POOL_BENCH_PROXIES") else {
            return POOL_SIZE;
        };
        match s.parse::<usize>() {
            Ok(n) if (1_000..=2_000_000).contains(&n) && n.is_multiple_of(500) => n,
            _ => {
                panic!("POOL_BENCH_PROXIES={s:?}: expected a multiple of 500 from 1000 to 2000000")
            }
        }
    })
}

/// Most cities per region: every (region, city) still holds 10 proxies, more than the
/// run extracts from one.
fn max_cities() -> usize {
    (pool_size() / REGIONS / 10).min(1_000)
}

/// Cities per region (`POOL_BENCH_CITIES`, 0 to [`max_cities`]; 0: the proxies have no
/// city).
fn cities() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        let Ok(s) = std::env::var("POOL_BENCH_CITIES") else {
            return CITIES;
        };
        let max = max_cities();
        match s.parse() {
            Ok(n) if n <= max => n,
            _ => panic!("POOL_BENCH_CITIES={s:?}: expected a whole number from 0 to {max}"),
        }
    })
}

/// Proxy `i`'s city within its region, if the proxies have cities.
fn city_of(i: usize) -> Option<String> {
    let n = cities();
    (n > 0).then(|| format!("t{}", (i / REGIONS) % n))
}

fn cand(i: usize) -> Candidate {
    Candidate {
        id: ProxyId::new(format!("p{i}")).unwrap(),
        dial: bench_dial(
            i,
            if i.is_multiple_of(4) {
                Protocol::Socks5
            } else {
                Protocol::Http
            },
        ),
        labels: Labels {
            region: Some(Label::new(format!("r{}", i % REGIONS)).unwrap()),
            carrier: Some(Label::new(format!("c{}", i % 4)).unwrap()),
            city: city_of(i).map(|c| Label::new(c).unwrap()),
        },
        ttl: if i % EXPIRING == EXPIRING - 1 {
            SHORT_TTL
        } else {
            Duration::from_secs(3600)
        },
        max_concurrency: 8,
    }
}

fn batch(range: std::ops::Range<usize>) -> FetchedBatch {
    FetchedBatch {
        quarantine: std::time::Duration::ZERO,
        upstream: UpstreamId::new(format!("vendor-{}", range.start / 500 % 4)).unwrap(),
        operation_id: OperationId::new(format!("bench-{}", next())).unwrap(),
        safety_margin: Duration::from_secs(10),
        max_size: NonZeroU32::new(1_000_000).unwrap(),
        candidates: range.map(cand).collect(),
    }
}

fn extract_req(count: u32, region: Option<&str>) -> ExtractRequest {
    extract_in(count, region, None)
}

fn extract_in(count: u32, region: Option<&str>, city: Option<&str>) -> ExtractRequest {
    let mut filters = Filters::default();
    if let Some(r) = region {
        filters.regions = vec![Label::new(r).unwrap()];
    }
    if let Some(c) = city {
        filters.cities = vec![Label::new(c).unwrap()];
    }
    ExtractRequest {
        client_id: ClientId::new("bench").unwrap(),
        request_id: RequestId::new(format!("req-{}", next())).unwrap(),
        idempotency_key: None,
        request_digest: RequestDigest::of(b"bench"),
        count: NonZeroU32::new(count).unwrap(),
        fulfillment: Fulfillment::Partial,
        filters,
        min_remaining_ttl: Duration::from_secs(30),
        max_health_check_age: Some(Duration::from_secs(3600)),
        reserve_for_gateway: 0,
        idempotency_ttl: Duration::from_secs(300),
    }
}

/// Redis's `EVALSHA` figures since the last reset (`INFO commandstats`): µs spent in
/// it and calls.
async fn evalsha_stats(conn: &mut redis::aio::MultiplexedConnection) -> (f64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    (
        commandstat(&info, "evalsha", "usec"),
        commandstat(&info, "evalsha", "calls"),
    )
}

/// Server-side µs of `EVALSHA` per operation since the last reset (`INFO commandstats`).
async fn server_usec(conn: &mut redis::aio::MultiplexedConnection, ops: usize) -> f64 {
    evalsha_stats(conn).await.0 / ops.max(1) as f64
}

async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .unwrap();
}

/// Runs one measurement after resetting the server's statistics, and adds the server's
/// own time per call to its figures.
async fn on_server(
    admin: &mut redis::aio::MultiplexedConnection,
    run: impl std::future::Future<Output = Figures>,
) -> Figures {
    reset_stats(admin).await;
    let mut f = run.await;
    let (usec, calls) = evalsha_stats(admin).await;
    f.server_us = usec / f.ops.max(1) as f64;
    f.scripts = calls / f.ops.max(1) as f64;
    f
}

/// Redis's `used_memory` (bytes).
async fn used_memory(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The kind of a pool key: its name after the key-space prefix, up to and including
/// the first `:` (`avail:`, `owned:`, `op:`, `idem:`), or the whole name (`records`).
fn key_kind(key: &str) -> String {
    let rest = key.split_once("}:v2:").map_or(key, |(_, r)| r);
    match rest.split_once(':') {
        Some((kind, _)) => format!("{kind}:*"),
        None => rest.to_owned(),
    }
}

/// Prints Redis's memory per proxy: `used_memory` after the fill less before, ÷ `n`,
/// and where the bytes are: `MEMORY USAGE … SAMPLES 0` (exact) of every key, summed by
/// kind, with each key's encoding.
async fn memory_report(conn: &mut redis::aio::MultiplexedConnection, n: usize, before: u64) {
    let after = used_memory(conn).await;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        keys.extend(page);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let mut kinds: std::collections::BTreeMap<String, (usize, u64, String)> = Default::default();
    for k in &keys {
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .arg("SAMPLES")
            .arg(0)
            .query_async(conn)
            .await
            .unwrap();
        let enc: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query_async(conn)
            .await
            .unwrap_or_default();
        let e = kinds.entry(key_kind(k)).or_default();
        e.0 += 1;
        e.1 += bytes.unwrap_or(0);
        if !e.2.split('/').any(|x| x == enc) {
            if !e.2.is_empty() {
                e.2.push('/');
            }
            e.2.push_str(&enc);
        }
    }
    let sample: Vec<String> = redis::cmd("HRANDFIELD")
        .arg("pp:{activity}:v2:records")
        .arg(200)
        .arg("WITHVALUES")
        .query_async(conn)
        .await
        .unwrap_or_default();
    let values: Vec<&String> = sample.iter().skip(1).step_by(2).collect();
    let mean_record =
        values.iter().map(|v| v.len()).sum::<usize>() as f64 / values.len().max(1) as f64;
    let total: u64 = kinds.values().map(|k| k.1).sum();
    println!(
        "Redis memory: used_memory {:.1} MiB before the fill, {:.1} MiB after upserts and health: \
         {:.0} bytes per proxy; keys ({}) sum to {:.1} MiB = {:.0} bytes per proxy; \
         a stored record's JSON averages {mean_record:.0} bytes",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        after.saturating_sub(before) as f64 / n as f64,
        keys.len(),
        total as f64 / 1048576.0,
        total as f64 / n as f64
    );
    println!(
        "{:<22} {:>6} {:>12} {:>10}  encoding",
        "key kind", "keys", "MiB", "B/proxy"
    );
    for (kind, (count, bytes, enc)) in &kinds {
        println!(
            "{kind:<22} {count:>6} {:>12.2} {:>10.1}  {enc}",
            *bytes as f64 / 1048576.0,
            *bytes as f64 / n as f64
        );
    }
}

/// The baseline: the cheapest script call there is (`return 1`, loaded as `sha`).
async fn trivial_script(conn: &mut redis::aio::MultiplexedConnection, sha: &str) {
    let _: i64 = redis::cmd("EVALSHA")
        .arg(sha)
        .arg(0)
        .query_async(conn)
        .await
        .unwrap();
}

struct Figures {
    server_us: f64,
    /// `EVALSHA` calls per operation.
    scripts: f64,
    name: String,
    ops: usize,
    rate: f64,
    p50: Duration,
    p99: Duration,
}

fn figures(name: &str, mut lat: Vec<Duration>, wall: Duration) -> Figures {
    lat.sort();
    let pick = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    Figures {
        server_us: 0.0,
        scripts: 0.0,
        name: name.to_owned(),
        ops: lat.len(),
        rate: lat.len() as f64 / wall.as_secs_f64(),
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

/// Runs `op` `n` times sequentially.
async fn sequential<F, Fut>(name: &str, n: usize, mut op: F) -> Figures
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        op(i).await;
        lat.push(t.elapsed());
    }
    figures(name, lat, start.elapsed())
}

/// Runs `op` `n` times from `CONCURRENCY` tasks.
async fn concurrent<F, Fut>(name: &str, n: usize, op: F) -> Figures
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..CONCURRENCY {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for i in (t..n).step_by(CONCURRENCY) {
                let s = Instant::now();
                op(i).await;
                lat.push(s.elapsed());
            }
            lat
        }));
    }
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    figures(name, lat, start.elapsed())
}

fn print(rows: &[Figures], baseline: f64) {
    println!(
        "{:<44} {:>7} {:>10} {:>9} {:>9} {:>8} {:>10} {:>10}",
        "operation", "ops", "ops/s", "p50", "p99", "×base", "server µs", "scripts/op"
    );
    for f in rows {
        println!(
            "{:<44} {:>7} {:>10.0} {:>7.3}ms {:>7.3}ms {:>8.3} {:>10.1} {:>10.2}",
            f.name,
            f.ops,
            f.rate,
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3,
            f.rate / baseline,
            f.server_us,
            f.scripts
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let redis_server = RedisServer::start();
    let options = RedisOptions {
        pool: PoolOptions::default(),
        command_timeout: Duration::from_secs(5),
        clock_override: None,
    };
    let pool = redis_server.pool_with(options.clone()).await;
    let client = redis::Client::open(redis_server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query_async(&mut conn)
        .await
        .unwrap();

    // Fill: upserts of 500, then health for everything; Redis's memory before and
    // after.
    let n = pool_size();
    let mem_empty = used_memory(&mut admin).await;
    let batches = n / 500;
    let tenth = (batches / 10).max(1);
    let mut fill_lat = Vec::with_capacity(batches);
    // Redis µs spent in `EVALSHA` at the end of every tenth of the fill (cumulative).
    let mut marks = vec![0.0f64];
    reset_stats(&mut admin).await;
    let fill_start = Instant::now();
    for i in 0..batches {
        let t = Instant::now();
        let r = pool.upsert(batch(i * 500..(i + 1) * 500)).await.unwrap();
        fill_lat.push(t.elapsed());
        assert_eq!(r.inserted, 500);
        if (i + 1) % tenth == 0 {
            marks.push(server_usec(&mut admin, 1).await);
        }
    }
    let fill_wall = fill_start.elapsed();
    let (fill_redis_us, fill_scripts) = evalsha_stats(&mut admin).await;
    let mut upsert = figures(
        &format!("upsert batch 500 (filling to {n})"),
        fill_lat.clone(),
        fill_lat.iter().sum(),
    );
    upsert.server_us = fill_redis_us / batches as f64;
    upsert.scripts = fill_scripts / batches as f64;
    let proxies_in_tenth = (tenth * 500) as f64;
    let first_tenth = (marks[1] - marks[0]) / proxies_in_tenth;
    let last_tenth = (marks[marks.len() - 1] - marks[marks.len() - 2]) / proxies_in_tenth;
    let tenth_p50 = |from: usize| {
        let mut l: Vec<Duration> = fill_lat[from..from + tenth].to_vec();
        l.sort();
        l[l.len() / 2].as_secs_f64() * 1e3
    };
    println!(
        "\nfill: {n} proxies in {batches} upserts of 500, {:.1} s, {:.0} proxies/s; \
         Redis {:.1} µs per upserted proxy ({:.2} ms per upsert of 500); \
         first tenth of the fill {:.1} µs/proxy (p50 {:.2} ms per upsert), \
         last tenth {:.1} µs/proxy (p50 {:.2} ms)",
        fill_wall.as_secs_f64(),
        n as f64 / fill_wall.as_secs_f64(),
        fill_redis_us / n as f64,
        fill_redis_us / batches as f64 / 1e3,
        first_tenth,
        tenth_p50(0),
        last_tenth,
        tenth_p50(batches - tenth),
    );
    reset_stats(&mut admin).await;
    let health_start = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let updates: Vec<_> = chunk
            .iter()
            .map(|i| HealthUpdate {
                proxy_id: ProxyId::new(format!("p{i}")).unwrap(),
                verdict: HealthVerdict::Available,
                success: true,
                latency: Some(Duration::from_millis(20)),
                failure: None,
            })
            .collect();
        pool.apply_health(&updates).await.unwrap();
    }
    println!(
        "health AVAILABLE for all: {:.1} s, {:.0} proxies/s, Redis {:.1} µs per proxy",
        health_start.elapsed().as_secs_f64(),
        n as f64 / health_start.elapsed().as_secs_f64(),
        server_usec(&mut admin, n).await
    );
    memory_report(&mut admin, n, mem_empty).await;

    if let Some(secs) = std::env::var("POOL_BENCH_HOLD_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        println!(
            "holding: extract-5 region filter for {secs} s (port {})",
            redis_server.url()
        );
        let end = Instant::now() + Duration::from_secs(secs);
        let mut i = 0usize;
        while Instant::now() < end {
            let region = format!("r{}", i % REGIONS);
            pool.extract(&extract_req(5, Some(&region))).await.unwrap();
            i += 1;
        }
        println!("held: {i} extractions");
        return;
    }

    // Sequential, interleaved: every round runs a block of each operation, so the
    // baseline and the extractions see the same machine load; a shared, busy box moves
    // absolute figures a lot, their ratio much less.
    // The region and city filter: a city of the region that proxies hold (the fill gives
    // proxy `i` region `i % REGIONS` and city `(i / REGIONS) % cities`), or none.
    let with_city = cities() > 0;
    let mut lat: [Vec<Duration>; 5] = Default::default();
    let mut server = [0.0f64; 5];
    let mut scripts = [0.0f64; 5];
    let blocks = [500usize, 100, 40, 100, if with_city { 100 } else { 0 }];
    for round in 0..ROUNDS {
        for (op, &n) in blocks.iter().enumerate() {
            let before = evalsha_stats(&mut admin).await;
            for i in 0..n {
                let t = Instant::now();
                match op {
                    0 => trivial_script(&mut conn, &sha).await,
                    1 => {
                        let o = pool.extract(&extract_req(1, None)).await.unwrap();
                        assert!(
                            matches!(o, ExtractOutcome::Extracted(ref x) if x.proxies.len() == 1)
                        );
                    }
                    3 => {
                        let region = format!("r{}", (round * n + i) % REGIONS);
                        let o = pool.extract(&extract_req(1, Some(&region))).await.unwrap();
                        assert!(
                            matches!(o, ExtractOutcome::Extracted(ref x) if x.proxies.len() == 1)
                        );
                    }
                    4 => {
                        let k = round * n + i;
                        let region = format!("r{}", k % REGIONS);
                        let city = format!("t{}", (k / REGIONS) % cities());
                        let o = pool
                            .extract(&extract_in(1, Some(&region), Some(&city)))
                            .await
                            .unwrap();
                        assert!(
                            matches!(o, ExtractOutcome::Extracted(ref x) if x.proxies.len() == 1)
                        );
                    }
                    _ => {
                        let region = format!("r{}", (round * n + i) % REGIONS);
                        let o = pool.extract(&extract_req(5, Some(&region))).await.unwrap();
                        assert!(
                            matches!(o, ExtractOutcome::Extracted(ref x) if x.proxies.len() == 5)
                        );
                    }
                }
                lat[op].push(t.elapsed());
            }
            let after = evalsha_stats(&mut admin).await;
            server[op] += after.0 - before.0;
            scripts[op] += after.1 - before.1;
        }
    }
    let names = [
        "trivial EVALSHA `return 1` (baseline)",
        "extract count 1, no filter",
        "extract count 5, region filter",
        "extract count 1, region filter",
        "extract count 1, region and city filter",
    ];
    let mut rows = Vec::new();
    for (op, samples) in lat.into_iter().enumerate() {
        if samples.is_empty() {
            continue;
        }
        let spent: Duration = samples.iter().sum();
        let n = samples.len();
        let mut f = figures(names[op], samples, spent);
        f.server_us = server[op] / n as f64;
        f.scripts = scripts[op] / n as f64;
        rows.push(f);
    }
    let baseline = rows[0].rate;
    rows.push(upsert);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "\nActivity pool on redis-server, {n} proxies, {REGIONS} regions, {} cities per region — sequential (1 caller); load average {}",
        cities(),
        load.join(" ")
    );
    print(&rows, baseline);

    let conn2 = conn.clone();
    let sha2 = sha.clone();
    let base = concurrent("trivial EVALSHA `return 1` (baseline)", 50_000, move |_| {
        let mut c = conn2.clone();
        let sha = sha2.clone();
        async move { trivial_script(&mut c, &sha).await }
    });
    let base_con = on_server(&mut admin, base).await;
    let p1 = pool.clone();
    let e1 = concurrent("extract count 1, no filter", 8_000, move |_| {
        let p = p1.clone();
        async move {
            p.extract(&extract_req(1, None)).await.unwrap();
        }
    });
    let e1c = on_server(&mut admin, e1).await;
    let p5 = pool.clone();
    let e5 = concurrent("extract count 5, region filter", 3_000, move |i| {
        let p = p5.clone();
        async move {
            let region = format!("r{}", i % REGIONS);
            p.extract(&extract_req(5, Some(&region))).await.unwrap();
        }
    });
    let e5c = on_server(&mut admin, e5).await;
    let baseline = base_con.rate;
    println!("\nconcurrent ({CONCURRENCY} callers, one multiplexed connection)");
    print(&[base_con, e1c, e5c], baseline);

    // The maintenance sweep as the controller's loop runs it (`purge_expired` with its
    // default batch of 1,000, repeated while it reports more). First with nothing
    // expired, on this pool (its key book knows every combination, as a running
    // controller's does).
    let pool_ref = &pool;
    let idle = on_server(
        &mut admin,
        sequential("sweep, nothing expired", 50, |_| async move {
            let r = pool_ref.purge_expired(SWEEP_BATCH).await.unwrap();
            assert_eq!(r.purged, 0);
        }),
    )
    .await;
    // Then 15 minutes ahead: the 1 % of the proxies with a 10-minute TTL are past
    // their hard expiry. A second pool handle on that clock, its key book filled
    // first by a filtered extraction (which learns every combination).
    let ahead = redis_server
        .pool_with(RedisOptions {
            clock_override: Some(Arc::new(activity_pool::ManualClock::new(
                std::time::SystemTime::now() + Duration::from_secs(900),
            ))),
            ..options
        })
        .await;
    ahead.extract(&extract_req(1, Some("r0"))).await.unwrap();
    let expected = n / EXPIRING;
    reset_stats(&mut admin).await;
    let mut sweep_lat = Vec::new();
    let mut purged = 0usize;
    let sweep_start = Instant::now();
    for _ in 0..expected / SWEEP_BATCH as usize + 16 {
        let t = Instant::now();
        let r = ahead.purge_expired(SWEEP_BATCH).await.unwrap();
        sweep_lat.push(t.elapsed());
        purged += r.purged as usize;
        if !r.more {
            break;
        }
    }
    let sweep_wall = sweep_start.elapsed();
    let (sweep_us, sweep_scripts) = evalsha_stats(&mut admin).await;
    let calls = sweep_lat.len();
    let mut drain = figures(
        &format!("sweep of {SWEEP_BATCH}, 1 % expired"),
        sweep_lat,
        sweep_wall,
    );
    drain.server_us = sweep_us / calls as f64;
    drain.scripts = sweep_scripts / calls as f64;
    println!(
        "\nmaintenance sweep (purge_expired({SWEEP_BATCH}) until no more; server µs per call)"
    );
    print(&[idle, drain], 1.0);
    println!(
        "1 % expired: {purged} of {expected} expected records purged in {calls} calls, {:.0} ms; \
         Redis {:.1} µs per purged record",
        sweep_wall.as_secs_f64() * 1e3,
        sweep_us / purged.max(1) as f64
    );
}
