//! Activity-pool benchmark on a real `redis-server` (started by the testkit).
//!
//! `cargo bench -p activity-pool --bench pool` fills a pool of 100,000 proxies (10
//! regions, 4 carriers and `POOL_BENCH_CITIES` cities per region, default 5; `0` gives
//! the proxies no city, as before the city dimension), then measures extract count 1
//! (without a filter, with a region filter, with a region and city filter), extract
//! count 5 with a region filter, upsert batches of 500, and a trivial `EVALSHA`
//! (`return 1`) as the baseline of one script round trip;
//! prints ops/s, p50 and p99 per operation and the rate relative to the baseline.
//! Sequential figures are one caller on one connection (latency-bound); concurrent
//! figures use 16 callers sharing the pool's multiplexed connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use activity_pool::model::*;
use activity_pool::ports::*;
use activity_pool::testkit::{RedisServer, bench_dial};
use activity_pool::{PoolOptions, RedisOptions};

const POOL_SIZE: usize = 100_000;
const REGIONS: usize = 10;
/// Cities per region unless `POOL_BENCH_CITIES` says otherwise.
const CITIES: usize = 5;
const CONCURRENCY: usize = 16;
/// Interleaved rounds of the sequential measurement.
const ROUNDS: usize = 20;

static NEXT: AtomicU64 = AtomicU64::new(0);

fn next() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Most cities per region: every (region, city) still holds 10 proxies, more than the
/// run extracts from one.
const MAX_CITIES: usize = POOL_SIZE / REGIONS / 10;

/// Cities per region (`POOL_BENCH_CITIES`, 0 to [`MAX_CITIES`]; 0: the proxies have no
/// city).
fn cities() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        let Ok(s) = std::env::var("POOL_BENCH_CITIES") else {
            return CITIES;
        };
        match s.parse() {
            Ok(n) if n <= MAX_CITIES => n,
            _ => panic!("POOL_BENCH_CITIES={s:?}: expected a whole number from 0 to {MAX_CITIES}"),
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
        ttl: Duration::from_secs(3600),
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

/// Server-side µs of `EVALSHA` per operation since the last reset (`INFO commandstats`).
async fn server_usec(conn: &mut redis::aio::MultiplexedConnection, ops: usize) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or("");
    let usec: f64 = line
        .split([',', ':'])
        .find_map(|kv| kv.strip_prefix("usec="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    usec / ops.max(1) as f64
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
    f.server_us = server_usec(admin, f.ops).await;
    f
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
        "{:<44} {:>7} {:>10} {:>9} {:>9} {:>8} {:>10}",
        "operation", "ops", "ops/s", "p50", "p99", "×base", "server µs"
    );
    for f in rows {
        println!(
            "{:<44} {:>7} {:>10.0} {:>7.3}ms {:>7.3}ms {:>8.3} {:>10.1}",
            f.name,
            f.ops,
            f.rate,
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3,
            f.rate / baseline,
            f.server_us
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = RedisServer::start();
    let options = RedisOptions {
        pool: PoolOptions::default(),
        command_timeout: Duration::from_secs(5),
        clock_override: None,
    };
    let pool = server.pool_with(options).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query_async(&mut conn)
        .await
        .unwrap();

    // Fill: 200 upserts of 500, then health for everything.
    let pool_ref = &pool;
    let upsert = on_server(
        &mut admin,
        sequential(
            "upsert batch 500 (filling to 100,000)",
            POOL_SIZE / 500,
            |i| async move {
                let r = pool_ref
                    .upsert(batch(i * 500..(i + 1) * 500))
                    .await
                    .unwrap();
                assert_eq!(r.inserted, 500);
            },
        ),
    )
    .await;
    for chunk in (0..POOL_SIZE).collect::<Vec<_>>().chunks(1000) {
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

    if let Some(secs) = std::env::var("POOL_BENCH_HOLD_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        println!(
            "holding: extract-5 region filter for {secs} s (port {})",
            server.url()
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
    let blocks = [500usize, 100, 40, 100, if with_city { 100 } else { 0 }];
    for round in 0..ROUNDS {
        for (op, &n) in blocks.iter().enumerate() {
            let before = server_usec(&mut admin, 1).await;
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
            server[op] += server_usec(&mut admin, 1).await - before;
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
        rows.push(f);
    }
    let baseline = rows[0].rate;
    rows.push(upsert);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "\nActivity pool on redis-server, {POOL_SIZE} proxies, {REGIONS} regions, {} cities per region — sequential (1 caller); load average {}",
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
}
