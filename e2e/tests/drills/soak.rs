//! The soak: the drills' stack under mixed load for many minutes with periodic faults
//! (the leader SIGKILLed and started again, gateway 1 restarted), sampling every
//! process's RSS, open file descriptors and threads from `/proc` and the load's error
//! rates, into a Markdown report; growth over the second half is flagged.
//!
//! Not in CI (ignored); run it by its own command (`docs/reliability.md`):
//!
//! ```sh
//! PROXY_POOL_SOAK_MINUTES=30 cargo test -p proxy-pool-e2e --release --test drills soak \
//!     -- --ignored --nocapture
//! ```
//!
//! `PROXY_POOL_SOAK_MINUTES` (default 30), `PROXY_POOL_SOAK_FAULT_EVERY_SECONDS` (default
//! 120; faults alternate: leader SIGKILL, gateway 1 restart), `PROXY_POOL_SOAK_REPORT`
//! (default `soak-report.md` in the target directory).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proxy_pool_e2e::hostile::procstat::{self, Stat};

use crate::common::*;
use crate::*;

/// Time between two samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}: not a whole number: {v:?}")),
        Err(_) => default,
    }
}

/// One sample of one process instance: seconds since the load began, and the reading.
type Sample = (f64, Stat);

/// Least-squares slope of `ys` over `xs` (per unit of x).
fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        num += (x - mx) * (y - my);
        den += (x - mx) * (x - mx);
    }
    if den == 0.0 { 0.0 } else { num / den }
}

/// Growth over the second half of an instance's samples, when it looks unbounded:
/// the fitted growth across that half is above `floor` and above `share` of the mean,
/// and the last sample is the half's highest so far or close to it.
fn grows(samples: &[Sample], get: fn(&Stat) -> u64, floor: f64, share: f64) -> Option<String> {
    let half = &samples[samples.len() / 2..];
    if half.len() < 6 {
        return None;
    }
    let xs: Vec<f64> = half.iter().map(|(at_s, _)| *at_s).collect();
    let ys: Vec<f64> = half.iter().map(|(_, s)| get(s) as f64).collect();
    let span = xs[xs.len() - 1] - xs[0];
    let growth = slope(&xs, &ys) * span;
    let mean = ys.iter().sum::<f64>() / ys.len() as f64;
    let max = ys.iter().copied().fold(f64::MIN, f64::max);
    let last = ys[ys.len() - 1];
    (growth > floor && growth > share * mean && last >= 0.95 * max).then(|| {
        format!(
            "+{growth:.0} over the last {span:.0} s (mean {mean:.0}, {:.1}/min)",
            growth / span * 60.0
        )
    })
}

#[test]
#[ignore = "the soak runs by its own command (docs/reliability.md), not in CI"]
fn soak() {
    let _one = one_stack();
    let minutes = env_u64("PROXY_POOL_SOAK_MINUTES", 30);
    let fault_every = Duration::from_secs(env_u64("PROXY_POOL_SOAK_FAULT_EVERY_SECONDS", 120));
    let report = std::env::var("PROXY_POOL_SOAK_REPORT").map_or_else(
        |_| proxy_pool_e2e::procs::target_dir().join("soak-report.md"),
        std::path::PathBuf::from,
    );
    assert!(minutes >= 1 && fault_every >= Duration::from_secs(10));
    // Extracted proxies stay live at the vendor until their TTL (90–150 s): at this
    // extraction rate that is more than the simulator's default cap of 256 live proxies,
    // past which it answers 503 and gateways starve for supply.
    let (mut stack, _) = ready_with(
        "soak",
        &Tuning {
            vendor_max_live: Some(2_000),
            ..Tuning::default()
        },
    );
    let load = load(&stack);
    let began = Instant::now();
    let run = Duration::from_secs(minutes * 60);

    // Live process names; a restarted one gets a new name (its log stays).
    let mut names: Vec<String> = ["vendor-sim", "controller-0", "controller-1", "checker"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain((0..stack.gateways.len()).map(|i| format!("gateway-{i}")))
        .collect();
    // Samples by instance (name, pid).
    let mut series: BTreeMap<(String, u32), Vec<Sample>> = BTreeMap::new();
    // Load rates per sample: (at, gateway ok, gateway errors, served, 409, extraction errors).
    let mut rates: Vec<(f64, u64, u64, u64, u64, u64)> = Vec::new();
    let mut faults: Vec<String> = Vec::new();
    let mut last = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut next_sample = Instant::now();
    let mut next_fault = Instant::now() + fault_every;
    let mut restarts = 0usize;
    while began.elapsed() < run {
        if Instant::now() >= next_sample {
            next_sample += SAMPLE_EVERY;
            let at = began.elapsed().as_secs_f64();
            for name in &names {
                let pid = stack.procs.pid(name);
                if let Some(s) = procstat::sample(pid) {
                    series.entry((name.clone(), pid)).or_default().push((at, s));
                }
            }
            let now = (
                load.gateways.ok.load(Ordering::Relaxed),
                load.gateways.errors.lock().unwrap().len() as u64,
                load.extracted.served.load(Ordering::Relaxed),
                load.extracted.insufficient.load(Ordering::Relaxed),
                load.extracted.errors.lock().unwrap().len() as u64,
            );
            rates.push((
                at,
                now.0 - last.0,
                now.1 - last.1,
                now.2 - last.2,
                now.3 - last.3,
                now.4 - last.4,
            ));
            last = now;
        }
        if Instant::now() >= next_fault {
            next_fault += fault_every;
            restarts += 1;
            let at = began.elapsed().as_secs();
            if restarts % 2 == 1 {
                let leader = wait_leader(&mut stack, None, LEASE + RETRY + SLACK * 5);
                let name = names
                    .iter()
                    .find(|n| n.starts_with(&format!("controller-{leader}")))
                    .cloned()
                    .expect("leader process");
                stack.procs.kill(&name);
                let t = Instant::now();
                let next = wait_leader(&mut stack, Some(leader), LEASE + RETRY + SLACK * 5);
                let took = t.elapsed();
                let new = format!("controller-{leader}-r{restarts}");
                start_controller(&mut stack, leader, &new);
                names.retain(|n| n != &name);
                names.push(new);
                faults.push(format!(
                    "{at} s: leader (replica {leader}) SIGKILLed; replica {next} led after {} ms",
                    took.as_millis()
                ));
            } else {
                let name = names
                    .iter()
                    .find(|n| n.starts_with("gateway-1"))
                    .cloned()
                    .expect("gateway 1");
                stack.procs.signal(&name, "TERM");
                let exit = stack.procs.wait_exit(&name, Duration::from_secs(60));
                let new = format!("gateway-1-r{restarts}");
                let admin = stack.gateways[1].1;
                let t = Instant::now();
                let cps = stack.cp_endpoints();
                start_gateway(&mut stack, 1, &new, &cps);
                stack
                    .procs
                    .wait_until("restarted gateway 1 ready", READY_WITHIN, || {
                        block(get(admin, "/readyz", "")).0 == 200
                    });
                names.retain(|n| n != &name);
                names.push(new);
                faults.push(format!(
                    "{at} s: gateway 1 restarted (SIGTERM, exit {:?}), ready again after {} ms",
                    exit.and_then(|s| s.code()),
                    t.elapsed().as_millis()
                ));
            }
        }
        stack.procs.all_alive();
        std::thread::sleep(Duration::from_millis(200));
    }

    // The report.
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Soak report\n\n{minutes} min of mixed load, a fault every {} s, a sample every {} s.\n",
        fault_every.as_secs(),
        SAMPLE_EVERY.as_secs()
    );
    let _ = writeln!(md, "## Faults\n");
    for f in &faults {
        let _ = writeln!(md, "- {f}");
    }
    let _ = writeln!(
        md,
        "\n## Processes\n\nPer process instance: first and last sample, maximum, and growth over \
         the second half of its life (flagged when unbounded-looking).\n\n\
         | process | pid | samples | RSS MiB first → last (max) | fds first → last (max) | threads first → last (max) | growth |\n\
         |---|---|---|---|---|---|---|"
    );
    let mut flagged = Vec::new();
    for ((name, pid), s) in &series {
        let (a, b) = (s[0].1, s[s.len() - 1].1);
        let max = |f: fn(&Stat) -> u64| s.iter().map(|(_, x)| f(x)).max().unwrap_or(0);
        let mut growth = Vec::new();
        if let Some(g) = grows(s, |x| x.rss_kib, 8.0 * 1024.0, 0.10) {
            growth.push(format!("RSS KiB {g}"));
        }
        if let Some(g) = grows(s, |x| x.fds, 8.0, 0.20) {
            growth.push(format!("fds {g}"));
        }
        if let Some(g) = grows(s, |x| x.threads, 4.0, 0.20) {
            growth.push(format!("threads {g}"));
        }
        let _ = writeln!(
            md,
            "| {name} | {pid} | {} | {:.1} → {:.1} ({:.1}) | {} → {} ({}) | {} → {} ({}) | {} |",
            s.len(),
            a.rss_kib as f64 / 1024.0,
            b.rss_kib as f64 / 1024.0,
            max(|x| x.rss_kib) as f64 / 1024.0,
            a.fds,
            b.fds,
            max(|x| x.fds),
            a.threads,
            b.threads,
            max(|x| x.threads),
            if growth.is_empty() {
                "none".to_owned()
            } else {
                growth.join("; ")
            },
        );
        // The simulator is the test's fixture (its auditor keeps every use it saw):
        // reported, not judged.
        if !growth.is_empty() && name != "vendor-sim" {
            flagged.push(format!("{name} ({pid}): {}", growth.join("; ")));
        }
    }
    let _ = writeln!(
        md,
        "\n## Load per minute\n\n| minute | gateway ok | gateway errors | extractions served | 409 | extraction errors |\n|---|---|---|---|---|---|"
    );
    let mut per_minute: BTreeMap<u64, (u64, u64, u64, u64, u64)> = BTreeMap::new();
    for (at, ok, err, served, insufficient, xerr) in &rates {
        let m = per_minute.entry((*at / 60.0) as u64).or_default();
        m.0 += ok;
        m.1 += err;
        m.2 += served;
        m.3 += insufficient;
        m.4 += xerr;
    }
    for (minute, (ok, err, served, insufficient, xerr)) in &per_minute {
        let _ = writeln!(
            md,
            "| {minute} | {ok} | {err} | {served} | {insufficient} | {xerr} |"
        );
    }
    let gateway_errors = load.gateways.errors.lock().unwrap().clone();
    // By gateway and answer (the request path left out).
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for e in &gateway_errors {
        let (gw, rest) = e.split_once(' ').unwrap_or((e, ""));
        let answer = rest.split_once(": ").map_or(rest, |(_, a)| a);
        let which = stack
            .gateways
            .iter()
            .position(|(http, _)| http.to_string() == gw)
            .map_or_else(|| gw.to_owned(), |i| format!("gateway {i}"));
        *kinds.entry(format!("{which}: {answer}")).or_default() += 1;
    }
    let _ = writeln!(md, "\n## Gateway request errors by gateway and answer\n");
    for (kind, n) in &kinds {
        let _ = writeln!(md, "- {n} × `{kind}`");
    }
    std::fs::write(&report, &md).expect("write the soak report");
    println!("{md}\n[soak] report written to {}", report.display());

    // Gateway request errors are rates to report (gateway 1 is down while it restarts),
    // not failures of the soak; the exclusivity invariants are.
    finish_allowing(
        "soak",
        &mut stack,
        load,
        &format!("{minutes} min, {} faults", faults.len()),
        &|_| true,
    );
    assert!(flagged.is_empty(), "unbounded-looking growth: {flagged:#?}");
    stack.tear_down();
}
