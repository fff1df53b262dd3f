//! Leader failures: the leader killed (SIGKILL), and the leader paused (SIGSTOP) past its
//! lease and resumed.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::*;

#[test]
fn leader_sigkill_under_mixed_load() {
    let _one = one_stack();
    let (mut stack, leader) = ready("drill-kill");
    let load = baseline_load(&stack);
    stack.procs.kill(&format!("controller-{leader}"));
    let killed = Instant::now();
    let next = wait_leader(&mut stack, Some(leader), LEASE + RETRY + SLACK * 5);
    let took = killed.elapsed();
    assert_ne!(next, leader);
    std::thread::sleep(AFTER);
    stack.procs.all_alive();
    finish(
        "leader-sigkill",
        &mut stack,
        load,
        &format!(
            "new leader after {} ms (bound {} ms)",
            took.as_millis(),
            (LEASE + RETRY).as_millis()
        ),
    );
    assert!(
        took <= LEASE + RETRY + SLACK,
        "new leader after {took:?}, bound {:?} (+{SLACK:?} slack)",
        LEASE + RETRY
    );
    stack.tear_down();
}

#[test]
fn leader_paused_past_its_lease_writes_nothing_when_resumed() {
    let _one = one_stack();
    let (mut stack, leader) = ready("drill-pause");
    let name = format!("controller-{leader}");
    let load = baseline_load(&stack);
    stack.procs.signal(&name, "STOP");
    let paused = Instant::now();
    let next = wait_leader(&mut stack, Some(leader), LEASE + RETRY + SLACK * 5);
    let took = paused.elapsed();
    assert_ne!(next, leader);
    // Well past its lease, and the new leader has been writing meanwhile.
    std::thread::sleep((LEASE * 2).saturating_sub(took));
    stack.procs.signal(&name, "CONT");
    let resumed = Instant::now();
    let exit = stack.procs.wait_exit(&name, Duration::from_secs(30));
    let log = std::fs::read_to_string(stack.dir.join(format!("{name}.log"))).unwrap_or_default();
    let log = log.lines().map(plain).collect::<Vec<_>>().join("\n");
    assert_eq!(
        exit.and_then(|s| s.code()),
        Some(3),
        "the resumed leader must step down and exit 3 (deposed)\n{log}"
    );
    let deposed_in = resumed.elapsed();
    assert!(
        log.contains("stepping down"),
        "the resumed leader says why it stopped\n{log}"
    );
    // Why it stopped: one of its writes was refused by Redis (a newer token exists), or
    // its own lease clock ran out first; either way nothing it wrote after losing the
    // lease reached the pool (controller/pool/tests/fencing.rs proves the refusal of
    // every leader-only script).
    assert!(
        log.contains("a leader-only write was fenced")
            || log.contains("leader lease not renewed in time"),
        "the resumed leader must stop for a fenced write or its lease clock\n{log}"
    );
    // The new leader stayed the leader throughout.
    assert_eq!(block(leads(stack.replicas[next].admin)), Some(true));
    std::thread::sleep(AFTER);
    stack.procs.all_alive();
    let fenced = log.matches("leader-only write fenced").count();
    finish(
        "leader-sigstop",
        &mut stack,
        load,
        &format!(
            "paused {} ms, new leader after {} ms, resumed one deposed in {} ms ({fenced} writes fenced in Redis)",
            (LEASE * 2).max(took).as_millis(),
            took.as_millis(),
            deposed_in.as_millis()
        ),
    );
    assert!(took <= LEASE + RETRY + SLACK, "new leader after {took:?}");
    stack.tear_down();
}
