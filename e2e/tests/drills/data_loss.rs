//! Data loss: `redis-server` killed and restarted on the same port without its data (no
//! persistence) during extraction, while the vendor keeps listing the same proxies.
//!
//! The vendor of this drill lists every proxy it has alive (`/v1/sim/proxies`), as a
//! vendor account's proxy list does; a feeder buys a new proxy every 500 ms, each living
//! `PROXY_TTL`. After the loss the leader's fencing token is gone with the data: it is
//! deposed and exits 3 (its supervisor, here the drill, starts it again); a replica
//! takes the lease and its first fetch re-inserts the listed proxies into the empty
//! store, beginning a new pool generation. The quarantine (the upstream's `ttl`, the
//! longest a vendor proxy lives) holds every proxy back until no proxy alive before the
//! loss is alive any more, so none is handed out a second time and no gateway is given
//! one a client holds. The extraction gap this costs is printed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::*;

/// Lifetime of every proxy of this drill's vendor, and the upstream's `ttl`.
const PROXY_TTL: Duration = Duration::from_secs(30);
/// The upstream's quarantine (its default: `ttl`).
const QUARANTINE: &str = "30s";
/// A new vendor proxy this often.
const FEED_EVERY: Duration = Duration::from_millis(500);

/// Buys vendor proxies (`POST /v1/sim/proxies`) until `stop`.
fn feeder(sim: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = load_runtime();
        let body = format!(r#"{{"protocol":"http","ttlMs":{}}}"#, PROXY_TTL.as_millis());
        let key = format!("X-API-Key: {VENDOR_KEY}\r\n");
        while !stop.load(Ordering::Relaxed) {
            let _ = rt.block_on(post(sim, "/v1/sim/proxies", &key, &body));
            std::thread::sleep(FEED_EVERY);
        }
    })
}

/// `proxy_pool_controller_pool_generation_start_timestamp_seconds` of the replica at `admin`.
fn generation_start(admin: std::net::SocketAddr) -> Option<u64> {
    block(metric(
        admin,
        "proxy_pool_controller_pool_generation_start_timestamp_seconds",
    ))?
    .parse()
    .ok()
}

#[test]
fn redis_restarted_without_its_data_during_extraction_hands_nothing_out_twice() {
    let _one = one_stack();
    let stop_feed = Arc::new(AtomicBool::new(false));
    let up = UpstreamSpec {
        path: "/v1/sim/proxies".into(),
        ttl: format!("{}s", PROXY_TTL.as_secs()),
        quarantine: QUARANTINE.into(),
    };
    let feed_started = std::cell::RefCell::new(None);
    let mut stack = start_with(
        "drill-loss",
        2,
        LEADERSHIP,
        &Tuning {
            upstream: up,
            before_controllers: Some(&|sim| {
                *feed_started.borrow_mut() = Some(feeder(sim, stop_feed.clone()));
            }),
            ..Tuning::default()
        },
    );
    let feed = feed_started.into_inner();
    let leader = wait_leader(&mut stack, None, READY_WITHIN);
    let admin = stack.replicas[leader].admin;
    // The first generation's quarantine runs from the first fetch.
    stack.procs.wait_until(
        "gateways owning the whole pool",
        READY_WITHIN + PROXY_TTL,
        || {
            block(inventory(admin))
                .is_some_and(|(unextracted, available)| unextracted >= 10 && available == 0)
        },
    );
    // Owned in the pool is not yet served: each gateway must have applied the snapshot
    // that holds its proxies before the baseline counts its errors.
    let echo = stack.echo;
    for (i, (http, _)) in stack.gateways.clone().into_iter().enumerate() {
        stack.procs.wait_until(
            &format!("gateway {i} serving before the loss"),
            READY_WITHIN,
            || block(via_gateway(http, echo, "/before-the-loss")).is_ok(),
        );
    }
    let load = baseline_load(&stack);

    let first_generation = generation_start(admin);
    let errors_at_loss = load.gateway_errors().len();
    let served_before = load.served_at().len();
    let lost_at = load.began().elapsed().as_millis() as u64;
    stack.redis.restart();
    let lost = Instant::now();

    // The replica that led is deposed (its token went with the data) and exits 3; its
    // supervisor starts it again. Another one leads meanwhile.
    let mut names = replica_names(&stack);
    let mut restarted = Vec::new();
    let deadline = Instant::now() + LEASE * 4 + SLACK * 5;
    let next = loop {
        for name in restart_deposed(&mut stack, &mut names) {
            restarted.push((name, lost.elapsed()));
        }
        let leading: Vec<usize> = (0..stack.replicas.len())
            .filter(|i| block(leads(stack.replicas[*i].admin)) == Some(true))
            .collect();
        if leading.len() == 1 && !restarted.is_empty() {
            break leading[0];
        }
        assert!(
            Instant::now() < deadline,
            "no new leader after the data loss\n{}",
            stack.procs.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let new_leader_after = lost.elapsed();

    // The quarantine, then enough load to see extraction and gateways serve again.
    std::thread::sleep((PROXY_TTL + AFTER / 2).saturating_sub(lost.elapsed()));
    // Each gateway serves again (its snapshot holds proxies after the hold), then one
    // more second for answers still in flight; from there on no request may fail.
    for (i, (http, _)) in stack.gateways.clone().into_iter().enumerate() {
        stack.procs.wait_until(
            &format!("gateway {i} serving after the quarantine"),
            AFTER,
            || block(via_gateway(http, echo, "/after-quarantine")).is_ok(),
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let (ok_mid, errors_mid) = (load.gateway_ok(), load.gateway_errors().len());
    std::thread::sleep(
        (PROXY_TTL + AFTER)
            .saturating_sub(lost.elapsed())
            .max(Duration::from_secs(3)),
    );
    stack.procs.all_alive();
    let served_at = load.served_at();
    let gw_errors = load.gateway_errors();
    let (ok_end, errors_end) = (load.gateway_ok(), gw_errors.len());
    // Answers that were in flight at the kill may land just after it.
    let after: Vec<u64> = served_at
        .iter()
        .copied()
        .filter(|t| *t > lost_at + 1_000)
        .collect();
    let first_after = after.first().map(|t| t - lost_at);
    let last_before = served_at[..served_before].last().copied();
    let gap = match (last_before, after.first()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let second_generation = generation_start(stack.replicas[next].admin);
    finish_allowing(
        "redis-data-loss",
        &mut stack,
        load,
        &format!(
            "redis restarted empty at {lost_at} ms; replicas deposed and restarted: {restarted:?}; \
             leader after {} ms; generation start {first_generation:?} → {second_generation:?} (s); \
             quarantine {QUARANTINE}; extraction served {} before the loss, \
             {} after; first extraction after the loss +{} ms; extraction gap {} ms; \
             gateway errors before the loss {errors_at_loss}, during the quarantine {}, \
             after it {} (ok after it {})",
            new_leader_after.as_millis(),
            served_before,
            after.len(),
            first_after.map_or("none".into(), |v| v.to_string()),
            gap.map_or("none".into(), |v| v.to_string()),
            errors_mid - errors_at_loss,
            errors_end - errors_mid,
            ok_end - ok_mid,
        ),
        // Bounded by this drill itself (above): gateways fail while the pool is empty.
        &|_| true,
    );
    stop_feed.store(true, Ordering::Relaxed);
    if let Some(f) = feed {
        let _ = f.join();
    }
    assert!(
        first_after.is_some_and(|t| t + 500 >= PROXY_TTL.as_millis() as u64),
        "extraction served during the quarantine: first +{first_after:?} ms after the loss"
    );
    assert!(
        after.len() >= 3,
        "extraction did not resume after the quarantine: {} served",
        after.len()
    );
    assert!(
        first_generation.is_some_and(|g| g > 0)
            && second_generation.is_some_and(|g| Some(g) > first_generation),
        "a new pool generation after the loss: {first_generation:?} → {second_generation:?}"
    );
    assert_eq!(
        errors_at_loss,
        0,
        "gateway errors before the loss: {:?}",
        &gw_errors[..errors_at_loss]
    );
    assert!(
        ok_end > ok_mid && errors_end == errors_mid,
        "gateways serve again after the quarantine: {} ok, {} errors in the last {:?}",
        ok_end - ok_mid,
        errors_end - errors_mid,
        AFTER / 2
    );
    stack.tear_down();
}
