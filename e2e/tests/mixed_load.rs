//! One pool, two consumers, as users run them: the real binaries — the vendor
//! simulator (its exclusivity auditor records every proxy use), the controller on a
//! private `redis-server`, a checker and two gateways — with steady traffic through
//! both gateways while an extraction client takes proxies in a loop. The gateways want
//! far more capacity than the pool has (`targetSlotsPerWorker` at its default), so
//! they own the whole pool and every extraction is served by draining gateway-owned
//! proxies on demand.
//!
//! Checked: extractions are served (each extracted proxy works for its client); the
//! gateways' traffic sees no failure while proxies are drained away from under them;
//! and the auditor finds no proxy used by a gateway once it was handed to the client.
//! Then the same with the controller SIGKILLed mid-run and started again. Each run
//! prints its figures (extraction latency p50/p99, drains, gateway requests and
//! errors, auditor counts).
//!
//! The extraction client connects to the proxies it got from `127.0.0.2`; everything
//! else (the gateways) comes from other loopback addresses: that is how the auditor
//! tells them apart.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use proxy_pool_e2e::sim::audit::Verdict;

fn run(tag: &str, kill_controller: bool) {
    let _one = one_stack();
    let mut stack = start(tag, 1, "");
    let admin = stack.replicas[0].admin;
    // The gateways own the whole pool before the load starts.
    stack
        .procs
        .wait_until("gateways owning the whole pool", READY_WITHIN, || {
            block(inventory(admin))
                .is_some_and(|(unextracted, available)| unextracted >= 10 && available == 0)
        });

    let rt = load_runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let gateways = Arc::new(Gateways::default());
    let extraction = Arc::new(Extraction::default());
    let echo = stack.echo;
    let mut tasks = gateway_clients(&rt, &stack, "load", &stop, &gateways);
    let (dist, sim) = (stack.replicas[0].dist, stack.sim);
    {
        let (stop, stats) = (stop.clone(), extraction.clone());
        tasks.push(rt.spawn(async move {
            let api_key = format!("X-API-Key: {API_KEY}\r\n");
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let r = post(
                    dist,
                    "/api/v1/proxies/extract",
                    &api_key,
                    r#"{"count":1,"fulfillment":"allOrNothing"}"#,
                )
                .await;
                let took = started.elapsed().as_millis() as u64;
                match r {
                    Ok((200, body)) => {
                        let at = now_ms();
                        stats.latencies_ms.lock().unwrap().push(took);
                        stats.served.fetch_add(1, Ordering::Relaxed);
                        let j: serde_json::Value = serde_json::from_str(&body).expect("JSON");
                        for p in j["proxies"].as_array().expect("proxies") {
                            match report_and_use(sim, echo, p, at).await {
                                Ok(()) => {
                                    stats.used_ok.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => stats.use_failures.lock().unwrap().push(e),
                            }
                        }
                    }
                    Ok((409, _)) => {
                        stats.insufficient.fetch_add(1, Ordering::Relaxed);
                    }
                    // The controller is down (killed) or coming up.
                    Ok((0 | 503, _)) | Err(_) => {
                        stats.controller_down.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok((status, body)) => {
                        stats.other.lock().unwrap().push(format!("{status} {body}"))
                    }
                }
                tokio::time::sleep(EXTRACT_EVERY).await;
            }
        }));
    }

    let started = Instant::now();
    if kill_controller {
        std::thread::sleep(KILL_AT);
        stack.procs.kill("controller-0");
        println!("[{tag}] controller SIGKILLed at {:?}", started.elapsed());
        std::thread::sleep(DOWN_FOR);
        start_controller(&mut stack, 0, "controller-0-restarted");
        println!("[{tag}] controller back at {:?}", started.elapsed());
    }
    while started.elapsed() < RUN {
        stack.procs.all_alive();
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
    });
    stack.procs.all_alive();

    let (status, body) = block(get(
        sim,
        &format!("/v1/sim/audit/verdict?clients={CLIENT_SOURCE}"),
        &format!("X-API-Key: {VENDOR_KEY}\r\n"),
    ));
    assert_eq!(status, 200, "{body}");
    let verdict: Verdict = serde_json::from_str(&body).expect("verdict");
    let mut lat = extraction.latencies_ms.lock().unwrap().clone();
    lat.sort_unstable();
    let drains = drains_logged(&stack.dir);
    let gw_errors = gateways.errors.lock().unwrap().clone();
    let served = extraction.served.load(Ordering::Relaxed);
    println!(
        "[{tag}] extraction: served {served}, 409 {}, controller down/503 {}, latency ms p50 {} p99 {} max {}; \
         drains begun {drains}; gateway requests ok {}, errors {}; auditor: uses {}, client uses {}, \
         handed out {}, violations {}, complete {}",
        extraction.insufficient.load(Ordering::Relaxed),
        extraction.controller_down.load(Ordering::Relaxed),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0),
        gateways.ok.load(Ordering::Relaxed),
        gw_errors.len(),
        verdict.uses,
        verdict.client_uses,
        verdict.handed_out,
        verdict.violations,
        verdict.complete,
    );
    let logs = || stack.procs.logs();
    assert!(
        verdict.violations == 0,
        "a gateway used a proxy after it was handed to the client: {:#?}\n{}",
        verdict.listed,
        logs()
    );
    assert!(verdict.complete, "the auditor dropped uses");
    assert!(
        served >= 10,
        "too few extractions served: {served}\n{}",
        logs()
    );
    assert!(
        drains >= served / 2,
        "extractions were not served by drains ({drains} drains)"
    );
    assert_eq!(
        extraction.used_ok.load(Ordering::Relaxed),
        served,
        "{:?}",
        extraction.use_failures.lock().unwrap()
    );
    assert!(
        extraction.other.lock().unwrap().is_empty(),
        "{:?}",
        extraction.other.lock().unwrap()
    );
    assert!(verdict.handed_out >= served && verdict.client_uses >= served);
    assert!(
        verdict.uses > verdict.client_uses + 100,
        "the gateways' traffic went through the simulator's proxies"
    );
    assert!(
        gw_errors.is_empty(),
        "gateway traffic failed: {gw_errors:#?}\n{}",
        logs()
    );
    stack.tear_down();
}

#[test]
fn extraction_beside_gateways_owning_the_whole_pool() {
    run("steady", false);
}

#[test]
fn extraction_beside_gateways_with_the_controller_killed_and_restarted() {
    run("controller-kill", true);
}
