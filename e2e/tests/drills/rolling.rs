//! A rolling restart of every controller replica under load: each in turn gets SIGTERM,
//! exits, is started again and is Ready before the next one goes (what a Deployment's
//! rolling update does), while gateway traffic and extraction run.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::*;

/// Bound on one replica's clean exit after SIGTERM (its `shutdown.gracePeriod` is 5 s).
const EXIT_WITHIN: Duration = Duration::from_secs(30);
/// Load between two restarts.
const BETWEEN: Duration = Duration::from_secs(5);

#[test]
fn rolling_restart_of_every_replica_under_mixed_load() {
    let _one = one_stack();
    let (mut stack, _leader) = ready("drill-rolling");
    let load = baseline_load(&stack);
    let mut steps = Vec::new();
    let rolled = Instant::now();
    for i in 0..stack.replicas.len() {
        let old = format!("controller-{i}");
        let was_leader = block(leads(stack.replicas[i].admin)) == Some(true);
        let t = Instant::now();
        stack.procs.signal(&old, "TERM");
        let status = stack.procs.wait_exit(&old, EXIT_WITHIN);
        let exited = t.elapsed();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{old} must exit 0 after SIGTERM\n{}",
            stack.procs.logs()
        );
        let new = format!("controller-{i}-restarted");
        start_controller(&mut stack, i, &new);
        let admin = stack.replicas[i].admin;
        stack
            .procs
            .wait_until(&format!("{new} ready"), READY_WITHIN, || {
                block(get(admin, "/readyz", "")).0 == 200
            });
        let back = t.elapsed();
        let leader = wait_leader(&mut stack, None, LEASE + RETRY + SLACK * 5);
        steps.push(format!(
            "replica {i}{}: exited {} ms after SIGTERM, Ready again after {} ms, leader now {leader}",
            if was_leader { " (leader)" } else { "" },
            exited.as_millis(),
            back.as_millis(),
        ));
        std::thread::sleep(BETWEEN);
    }
    let took = rolled.elapsed();
    std::thread::sleep(AFTER);
    stack.procs.all_alive();
    let x = &load.extracted;
    let errors = x.errors.lock().unwrap().clone();
    let window = match (errors.first(), errors.last()) {
        (Some(a), Some(b)) => b.0 - a.0,
        _ => 0,
    };
    finish(
        "rolling-restart",
        &mut stack,
        load,
        &format!(
            "rolled {} replicas in {} ms: {}",
            steps.len(),
            took.as_millis(),
            steps.join("; ")
        ),
    );
    // Every replica but the one restarting answers extraction, and the client moves on
    // at once from one that does not answer: a bounded error window at most.
    assert!(
        errors.len() <= 2 && window <= 10_000,
        "extraction errors during the rolling restart: {errors:?}"
    );
    stack.tear_down();
}
