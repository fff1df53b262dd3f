//! Failure drills with real processes (`docs/reliability.md`): two controller
//! replicas on one `redis-server`, the vendor simulator with its exclusivity auditor, a
//! checker and two gateways given both controller endpoints, under mixed load
//! (gateway traffic, and an extraction client that spreads its requests over both
//! replicas' Distribution APIs). Each drill asserts its bound and prints its figures.
//!
//! - leader SIGKILL: a new leader within the failover bound; gateway requests never
//!   fail; no proxy handed out twice; the auditor sees no gateway use of a proxy after
//!   it was handed to the client;
//! - leader SIGSTOP past its lease, then SIGCONT: another replica leads meanwhile; the
//!   resumed one writes nothing (it is deposed and exits with code 3) and the same
//!   invariants hold;
//! - PostgreSQL stopped during extraction with usage analytics on (`postgres.rs`):
//!   extraction unaffected, and the usage of the outage reaches PostgreSQL once it is
//!   back;
//! - Redis master killed under Sentinel (`sentinel.rs`): failover time, the extraction
//!   error window, no proxy handed out twice, an idempotent replay after the failover
//!   returns the first answer;
//! - a gateway black-holed from every replica (`blackhole.rs`): serves until
//!   `maxStaleAge`, then refuses `snapshot-stale`, notices the dead path within its call
//!   deadline, serves again once the path returns;
//! - a rolling restart of every replica under load (`rolling.rs`);
//! - the soak (`soak.rs`, ignored: run by its own command).
//!
//! One module per drill family (`leader.rs`, …); this file holds the harness they share:
//! the mixed load, the leader wait and the invariants every drill checks.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod blackhole;
#[path = "../common/mod.rs"]
mod common;
mod data_loss;
mod leader;
mod postgres;
mod rolling;
mod sentinel;
mod soak;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use proxy_pool_e2e::sim::audit::Verdict;

/// Leader lease of the drills: short, so that they run in seconds.
pub(crate) const LEASE: Duration = Duration::from_secs(3);
pub(crate) const RETRY: Duration = Duration::from_millis(500);
pub(crate) const LEADERSHIP: &str =
    "leadership: {replicas: 2, lease: 3s, renewEvery: 1s, retryEvery: 500ms}";
/// Scheduling slack on a loaded 2-core machine on top of the failover bound.
pub(crate) const SLACK: Duration = Duration::from_secs(2);
/// Load before the fault, and after it.
pub(crate) const BEFORE: Duration = Duration::from_secs(8);
pub(crate) const AFTER: Duration = Duration::from_secs(15);

/// What the extraction client saw.
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    served: AtomicU64,
    /// When each served answer came (ms since the load began).
    served_at: Mutex<Vec<u64>>,
    insufficient: AtomicU64,
    /// Answers other than 200 / 409, with when they came (ms since the load began).
    errors: Mutex<Vec<(u64, String)>>,
    /// Hand-outs by proxy ID (a count above 1 is a proxy handed out twice).
    ids: Mutex<HashMap<String, u32>>,
    use_failures: Mutex<Vec<String>>,
}

pub(crate) struct Load {
    rt: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    gateways: Arc<Gateways>,
    extracted: Arc<Extracted>,
    began: Instant,
}

impl Load {
    /// When the load began.
    pub(crate) fn began(&self) -> Instant {
        self.began
    }

    /// When each served extraction answer came (ms since the load began).
    pub(crate) fn served_at(&self) -> Vec<u64> {
        self.extracted.served_at.lock().unwrap().clone()
    }

    /// Gateway request errors so far.
    pub(crate) fn gateway_errors(&self) -> Vec<String> {
        self.gateways.errors.lock().unwrap().clone()
    }

    /// Gateway requests that succeeded so far.
    pub(crate) fn gateway_ok(&self) -> u64 {
        self.gateways.ok.load(Ordering::Relaxed)
    }
}

/// [`load`], once it has run for [`BEFORE`]: the baseline before a fault.
pub(crate) fn baseline_load(stack: &Stack) -> Load {
    let load = load(stack);
    std::thread::sleep(BEFORE);
    load
}

/// Gateway traffic through both gateways and an extraction client rotating over every
/// replica (moving on at once when one does not answer, as a client of a Service).
pub(crate) fn load(stack: &Stack) -> Load {
    let rt = load_runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let gateways = Arc::new(Gateways::default());
    let extracted = Arc::new(Extracted::default());
    let began = Instant::now();
    let echo = stack.echo;
    let mut tasks = gateway_clients(&rt, stack, "drill", &stop, &gateways);
    let dists: Vec<SocketAddr> = stack.replicas.iter().map(|r| r.dist).collect();
    let sim = stack.sim;
    {
        let (stop, stats) = (stop.clone(), extracted.clone());
        tasks.push(rt.spawn(async move {
            let api_key = format!("X-API-Key: {API_KEY}\r\n");
            let mut next = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let body = r#"{"count":1,"fulfillment":"allOrNothing"}"#;
                let mut answer = None;
                for _ in 0..dists.len() {
                    let dist = dists[next % dists.len()];
                    next += 1;
                    match post(dist, "/api/v1/proxies/extract", &api_key, body).await {
                        Ok(a) => {
                            answer = Some(a);
                            break;
                        }
                        // Not answering (killed, paused): the next replica.
                        Err(_) => continue,
                    }
                }
                let at = began.elapsed().as_millis() as u64;
                match answer {
                    Some((200, body)) => {
                        stats.served.fetch_add(1, Ordering::Relaxed);
                        stats.served_at.lock().unwrap().push(at);
                        let j: serde_json::Value = serde_json::from_str(&body).expect("JSON");
                        for p in j["proxies"].as_array().expect("proxies") {
                            let id = p["id"].as_str().expect("id").to_owned();
                            *stats.ids.lock().unwrap().entry(id).or_default() += 1;
                            if let Err(e) = report_and_use(sim, echo, p, now_ms()).await {
                                stats.use_failures.lock().unwrap().push(e);
                            }
                        }
                    }
                    Some((409, _)) => {
                        stats.insufficient.fetch_add(1, Ordering::Relaxed);
                    }
                    Some((status, body)) => stats
                        .errors
                        .lock()
                        .unwrap()
                        .push((at, format!("{status} {}", body.trim()))),
                    None => stats
                        .errors
                        .lock()
                        .unwrap()
                        .push((at, "no replica answered".into())),
                }
                tokio::time::sleep(EXTRACT_EVERY).await;
            }
        }));
    }
    Load {
        rt,
        stop,
        tasks,
        gateways,
        extracted,
        began,
    }
}

/// The replica that leads, once exactly one does (polled over every replica's metrics;
/// `skip` is not asked).
pub(crate) fn wait_leader(stack: &mut Stack, skip: Option<usize>, within: Duration) -> usize {
    let admins: Vec<SocketAddr> = stack.replicas.iter().map(|r| r.admin).collect();
    let deadline = Instant::now() + within;
    loop {
        let leading: Vec<usize> = admins
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .filter(|(_, a)| block(leads(**a)) == Some(true))
            .map(|(i, _)| i)
            .collect();
        if leading.len() == 1 {
            return leading[0];
        }
        assert!(
            leading.len() < 2,
            "two replicas lead at once: {leading:?}\n{}",
            stack.procs.logs()
        );
        assert!(
            Instant::now() < deadline,
            "no leader within {within:?}\n{}",
            stack.procs.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The replicas' supervisor: every replica whose process (`names[i]` for replica `i`)
/// has exited must have exited as deposed (code 3) and is started again, as
/// `<name>-again`; `names` then holds the new process names. The names that exited.
pub(crate) fn restart_deposed(stack: &mut Stack, names: &mut [String]) -> Vec<String> {
    let mut exited = Vec::new();
    for (i, name) in names.iter_mut().enumerate() {
        if let Some(status) = stack.procs.wait_exit(name, Duration::ZERO) {
            assert_eq!(
                status.code(),
                Some(3),
                "{name} must exit as deposed (3)\n{}",
                stack.procs.logs()
            );
            exited.push(std::mem::replace(name, format!("{name}-again")));
            start_controller(stack, i, name);
        }
    }
    exited
}

/// The process names of a stack's replicas as [`start`] names them.
pub(crate) fn replica_names(stack: &Stack) -> Vec<String> {
    (0..stack.replicas.len())
        .map(|i| format!("controller-{i}"))
        .collect()
}

/// Stops the load and checks the invariants every drill keeps; prints the figures.
pub(crate) fn finish(tag: &str, stack: &mut Stack, load: Load, figures: &str) {
    finish_allowing(tag, stack, load, figures, &|_| false);
}

/// [`finish`], where the gateway request errors `allowed` accepts are expected by the
/// drill (and counted, not failed on).
pub(crate) fn finish_allowing(
    tag: &str,
    stack: &mut Stack,
    load: Load,
    figures: &str,
    allowed: &dyn Fn(&str) -> bool,
) {
    load.stop.store(true, Ordering::Relaxed);
    load.rt.block_on(async {
        for t in load.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
    });
    let (status, body) = block(get(
        stack.sim,
        &format!("/v1/sim/audit/verdict?clients={CLIENT_SOURCE}"),
        &format!("X-API-Key: {VENDOR_KEY}\r\n"),
    ));
    assert_eq!(status, 200, "{body}");
    let verdict: Verdict = serde_json::from_str(&body).expect("verdict");
    let x = &load.extracted;
    let served = x.served.load(Ordering::Relaxed);
    let twice: Vec<(String, u32)> = x
        .ids
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| (id.clone(), *n))
        .collect();
    let errors = x.errors.lock().unwrap().clone();
    let window = match (errors.first(), errors.last()) {
        (Some(a), Some(b)) => b.0 - a.0,
        _ => 0,
    };
    let (expected, gw_errors): (Vec<String>, Vec<String>) = load
        .gateways
        .errors
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .partition(|e| allowed(e));
    println!(
        "[{tag}] {figures}; extraction: served {served}, 409 {}, errors {} over {window} ms, \
         handed out twice {}; gateway requests ok {}, errors {} (+{} expected); auditor: uses {}, client uses {}, \
         violations {}, complete {}",
        x.insufficient.load(Ordering::Relaxed),
        errors.len(),
        twice.len(),
        load.gateways.ok.load(Ordering::Relaxed),
        gw_errors.len(),
        expected.len(),
        verdict.uses,
        verdict.client_uses,
        verdict.violations,
        verdict.complete,
    );
    for (at, e) in errors.iter().take(5) {
        println!("[{tag}] extraction error at {at} ms: {e}");
    }
    let logs = stack.procs.logs();
    assert!(
        twice.is_empty(),
        "proxies handed out twice: {twice:?}\n{logs}"
    );
    assert_eq!(
        verdict.violations, 0,
        "a gateway used a proxy after it was handed to the client: {:#?}\n{logs}",
        verdict.listed
    );
    assert!(verdict.complete, "the auditor dropped uses");
    assert!(
        gw_errors.is_empty(),
        "gateway traffic failed: {gw_errors:#?}\n{logs}"
    );
    assert!(served >= 5, "too few extractions served: {served}\n{logs}");
    assert!(
        x.use_failures.lock().unwrap().is_empty(),
        "{:?}",
        x.use_failures.lock().unwrap()
    );
    let _ = load.began;
}

pub(crate) fn ready(tag: &str) -> (Stack, usize) {
    ready_with(tag, &Tuning::default())
}

/// [`ready`], with a drill's [`Tuning`] of the stack.
pub(crate) fn ready_with(tag: &str, tuning: &Tuning<'_>) -> (Stack, usize) {
    ready_stack(start_with(tag, 2, LEADERSHIP, tuning))
}

/// [`ready`] for a stack started another way ([`start`] with more config,
/// [`start_on`] another Redis): waits for the leader and the gateways owning the pool.
pub(crate) fn ready_stack(mut stack: Stack) -> (Stack, usize) {
    let leader = wait_leader(&mut stack, None, READY_WITHIN);
    let admin = stack.replicas[leader].admin;
    stack
        .procs
        .wait_until("gateways owning the whole pool", READY_WITHIN, || {
            block(inventory(admin))
                .is_some_and(|(unextracted, available)| unextracted >= 10 && available == 0)
        });
    (stack, leader)
}
