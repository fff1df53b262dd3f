//! Tests of the planner.

use super::*;
use crate::health::model::FailureCode;

fn id(s: &str) -> ProxyId {
    ProxyId::new(s).unwrap()
}

fn obs(task: u64, p: &str, success: bool) -> Observation {
    Observation {
        task_id: task,
        proxy_id: id(p),
        tier: Tier::Basic,
        routing: None,
        success,
        latency: None,
        failure: (!success).then_some(FailureCode::ConnectRefused),
        egress: None,
    }
}

/// A planner on the default configuration as `tune` changes it.
fn planner(tune: impl FnOnce(&mut PlannerConfig)) -> Planner {
    let mut cfg = PlannerConfig::default();
    tune(&mut cfg);
    Planner::new(cfg, ReducerConfig::default())
}

const ALL: [Tier; 3] = [Tier::Basic, Tier::Egress, Tier::Target];

#[test]
fn proxies_of_a_held_back_upstream_are_not_checked_before_the_hold_ends() {
    let mut p = planner(|_| {});
    let t0 = Timestamp(1_000_000);
    let until = t0.plus(Duration::from_secs(30));
    p.announce_held("held", &[id("h")], until);
    p.announce_in("free", &[id("f")]);
    let ids = |l: Vec<Lease>| l.into_iter().map(|l| l.proxy_id).collect::<Vec<_>>();
    assert_eq!(ids(p.lease(t0, 10, &ALL)), vec![id("f")]);
    // (`f`'s unreported task may be handed out again meanwhile.)
    assert!(!ids(p.lease(Timestamp(until.0 - 1), 10, &ALL)).contains(&id("h")));
    assert!(ids(p.lease(until, 10, &ALL)).contains(&id("h")));
}

#[test]
fn new_proxies_first_then_rechecks_by_state() {
    let cfg = PlannerConfig {
        egress_every: 2,
        recheck_interval: Duration::from_secs(5),
        ..PlannerConfig::default()
    };
    let mut p = Planner::new(cfg, ReducerConfig::default());
    let t0 = Timestamp(1_000_000);
    p.announce(&[id("a"), id("b")]);
    let leases = p.lease(t0, 10, &ALL);
    assert_eq!(
        leases
            .iter()
            .map(|l| l.proxy_id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(leases[0].checks, vec![Check::Basic, Check::Egress]);
    assert!(
        p.lease(t0, 10, &ALL).is_empty(),
        "leased tasks are not handed out twice"
    );
    let t = leases[0].task_id;
    let v = p.complete(t0, t, &[obs(t, "a", true)]).unwrap();
    assert_eq!(v[0].verdict, HealthVerdict::Available);
    let egress = Observation {
        tier: Tier::Egress,
        ..obs(t, "a", true)
    };
    assert!(
        p.complete(t0, t, &[egress]).is_some(),
        "checks may come in separate reports"
    );
    assert!(
        p.complete(t0, leases[0].task_id, &[]).is_none(),
        "second report ignored"
    );
    p.announce(&[id("c"), id("a")]);
    let leases2 = p.lease(t0, 10, &ALL);
    assert_eq!(leases2.len(), 1);
    assert_eq!(leases2[0].proxy_id, id("c"));
    let later = t0.plus(Duration::from_secs(5));
    let again = p.lease(later, 10, &[Tier::Basic]);
    assert_eq!(
        again.len(),
        1,
        "a is due after the recheck interval; b is still leased"
    );
    assert_eq!(again[0].checks, vec![Check::Basic]);
}

#[test]
fn unreported_tasks_are_reclaimed_and_late_reports_ignored() {
    let mut p = planner(|_| {});
    let t0 = Timestamp(1_000_000);
    p.announce(&[id("a")]);
    let l = p.lease(t0, 1, &ALL).remove(0);
    let late = t0.plus(Duration::from_secs(13));
    let again = p.lease(late, 1, &ALL);
    assert_eq!(again.len(), 1);
    assert!(
        p.complete(late, l.task_id, &[obs(l.task_id, "a", true)])
            .is_none()
    );
    assert!(
        p.complete(late, again[0].task_id, &[obs(again[0].task_id, "a", true)])
            .is_some()
    );
}

#[test]
fn tracking_is_bounded_and_forget_cleans_up() {
    let mut p = planner(|c| c.max_tracked = 2);
    let a = p.announce(&[id("a"), id("b"), id("c")]);
    assert_eq!((a.added, a.dropped), (2, 1));
    let l = p.lease(Timestamp(1), 5, &ALL);
    p.forget(&id("a"));
    assert!(p.complete(Timestamp(1), l[0].task_id, &[]).is_none());
    assert_eq!(p.len(), 1);
    assert_eq!(p.announce(&[id("c")]).added, 1);
}

#[test]
fn an_open_leak_is_rechecked_with_egress_every_time() {
    let mut p = planner(|c| c.egress_every = 0);
    let mut now = Timestamp(1_000_000);
    p.announce(&[id("a")]);
    let l = p.lease(now, 1, &ALL).remove(0);
    assert_eq!(
        l.checks,
        vec![Check::Basic],
        "egress_every 0: no EGRESS normally"
    );
    let leak = Observation {
        tier: Tier::Egress,
        failure: Some(FailureCode::ClientLeaked),
        ..obs(l.task_id, "a", false)
    };
    p.complete(now, l.task_id, &[leak]).unwrap();
    assert!(p.health(&id("a")).unwrap().leaked);
    now = now.plus(Duration::from_secs(60));
    let l = p.lease(now, 1, &ALL).remove(0);
    assert_eq!(l.checks, vec![Check::Basic, Check::Egress]);
    assert_eq!(p.lease(now, 1, &[Tier::Basic]).len(), 0);
}

#[test]
fn lease_size_is_bounded() {
    let mut p = planner(|c| c.max_tasks_per_lease = 3);
    let ids: Vec<ProxyId> = (0..10).map(|i| id(&format!("p{i}"))).collect();
    p.announce(&ids);
    assert_eq!(p.lease(Timestamp(1), 100, &ALL).len(), 3);
}

#[test]
fn upstream_health_settings_plan_their_proxies() {
    let config = proxy_pool_api::config::load_yaml(
        r#"
upstreams:
  - name: tight
    ttl: 10m
    maxSize: 10
    source: {static: {proxies: ["192.0.2.1:1"]}}
    health:
      interval: 40s
      timeout: 2s
      failureThreshold: 1
      egress: false
      targets: ["https://example.com/health", "http://[::1]:8080/"]
  - name: plain
    ttl: 10m
    maxSize: 10
    source: {static: {proxies: ["192.0.2.1:2"]}}
"#,
    )
    .expect("valid");
    let cfg = PlannerConfig::from_config(&config);
    let tight = &cfg.upstreams["tight"];
    assert_eq!(tight.recheck_interval, Duration::from_secs(40));
    assert_eq!(tight.check_timeout, Duration::from_secs(2));
    assert_eq!(tight.egress_every, 0);
    assert_eq!(tight.failure_threshold.get(), 1);
    assert_eq!(
        tight.targets,
        vec![
            TargetSpec {
                routing: String::new(),
                host: "example.com".into(),
                port: 443
            },
            TargetSpec {
                routing: String::new(),
                host: "::1".into(),
                port: 8080
            },
        ]
    );
    // No health section: the documented defaults (15 s, 5 s, threshold 2, no EGRESS).
    let plain = &cfg.upstreams["plain"];
    assert_eq!(plain.recheck_interval, Duration::from_secs(15));
    assert_eq!(plain.failure_threshold.get(), 2);
    assert_eq!(plain.egress_every, 0);

    let mut p = Planner::new(cfg, ReducerConfig::default());
    let t0 = Timestamp(1_000_000);
    p.announce_in("tight", &[id("t")]);
    p.announce_in("plain", &[id("p")]);
    p.announce(&[id("d")]);
    let leases = p.lease(t0, 10, &ALL);
    let by = |name: &str| {
        leases
            .iter()
            .find(|l| l.proxy_id == id(name))
            .unwrap()
            .clone()
    };
    let (t, pl, d) = (by("t"), by("p"), by("d"));
    // Its own targets, no EGRESS; deadline = timeout × checks (3 × 2 s).
    assert_eq!(t.checks.len(), 3);
    assert!(!t.checks.contains(&Check::Egress));
    assert_eq!(t.deadline, t0.plus(Duration::from_secs(6)));
    assert_eq!(pl.checks, vec![Check::Basic]);
    assert_eq!(pl.deadline, t0.plus(Duration::from_secs(5)));
    // Unknown upstream: the planner defaults (EGRESS on the first check, 10 s).
    assert_eq!(d.checks, vec![Check::Basic, Check::Egress]);
    assert_eq!(d.deadline, t0.plus(PlannerConfig::default().task_deadline));

    // failureThreshold 1: one failure makes "t" UNHEALTHY; "p" (threshold 2) is
    // only SUSPECT after one.
    let v = p
        .complete(t0, t.task_id, &[obs(t.task_id, "t", false)])
        .unwrap();
    assert_eq!(v[0].verdict, HealthVerdict::Unhealthy);
    let v = p
        .complete(t0, pl.task_id, &[obs(pl.task_id, "p", false)])
        .unwrap();
    assert_eq!(v[0].verdict, HealthVerdict::Suspect);

    // A success: "t"-like proxies are re-checked after their own 40 s interval.
    p.announce_in("tight", &[id("t2")]);
    let l = p.lease(t0, 10, &[Tier::Basic]).remove(0);
    assert_eq!(l.proxy_id, id("t2"));
    p.complete(t0, l.task_id, &[obs(l.task_id, "t2", true)])
        .unwrap();
    let mut due = |at: Duration| {
        p.lease(t0.plus(at), 10, &[Tier::Basic])
            .into_iter()
            .any(|l| l.proxy_id == id("t2"))
    };
    assert!(!due(Duration::from_secs(39)), "not before its interval");
    assert!(due(Duration::from_secs(40)), "due after its interval");
}

#[derive(Clone, Debug)]
enum Op {
    Announce(Vec<u8>),
    Lease(usize),
    Complete(usize, bool),
    Forget(u8),
    Advance(u64),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        proptest::collection::vec(0u8..20, 0..5).prop_map(Op::Announce),
        (0usize..6).prop_map(Op::Lease),
        (0usize..8, any::<bool>()).prop_map(|(i, ok)| Op::Complete(i, ok)),
        (0u8..20).prop_map(Op::Forget),
        (0u64..20_000).prop_map(Op::Advance),
    ]
}

proptest::proptest! {
    /// Whatever happens, a tracked proxy is never leased twice at once, the bounds
    /// hold, and no tracked proxy is ever lost from the schedule.
    #[test]
    fn schedule_invariants(ops in proptest::collection::vec(op(), 0..60)) {
        use std::collections::{HashMap, HashSet};
        let cfg = PlannerConfig { max_tracked: 12, max_tasks_per_lease: 4, ..PlannerConfig::default() };
        let mut p = Planner::new(cfg, ReducerConfig::default());
        let mut now = Timestamp(1_000_000);
        let mut out: HashMap<u64, (ProxyId, Timestamp)> = HashMap::new();
        let grace = PlannerConfig::default().lease_grace;
        for o in ops {
            match o {
                Op::Announce(ids) => {
                    let ids: Vec<ProxyId> = ids.iter().map(|i| id(&format!("p{i}"))).collect();
                    p.announce(&ids);
                }
                Op::Lease(n) => {
                    let leases = p.lease(now, n, &ALL);
                    proptest::prop_assert!(leases.len() <= 4);
                    for l in leases {
                        // Only a lease past its deadline + grace may be superseded.
                        let old: Vec<u64> = out
                            .iter()
                            .filter(|(_, (pid, _))| *pid == l.proxy_id)
                            .map(|(t, _)| *t)
                            .collect();
                        for t in old {
                            let (_, deadline) = out.remove(&t).unwrap();
                            proptest::prop_assert!(deadline.plus(grace) <= now, "leased twice");
                        }
                        out.insert(l.task_id, (l.proxy_id, l.deadline));
                    }
                }
                Op::Complete(i, ok) => {
                    let mut keys: Vec<u64> = out.keys().copied().collect();
                    keys.sort_unstable();
                    if let Some(&t) = keys.get(i) {
                        let pid = out[&t].0.clone();
                        let res = p.complete(now, t, &[obs(t, pid.as_str(), ok)]);
                        if res.is_some() {
                            out.remove(&t);
                        }
                    }
                }
                Op::Forget(i) => {
                    let pid = id(&format!("p{i}"));
                    p.forget(&pid);
                    out.retain(|_, (x, _)| *x != pid);
                }
                Op::Advance(ms) => now = Timestamp(now.0 + ms as i64),
            }
            proptest::prop_assert!(p.len() <= 12);
        }
        // Liveness: far in the future every tracked proxy is handed out again.
        let later = now.plus(Duration::from_secs(3600));
        let mut seen = HashSet::new();
        for _ in 0..10 {
            for l in p.lease(later, 4, &ALL) {
                seen.insert(l.proxy_id);
            }
        }
        proptest::prop_assert_eq!(seen.len(), p.len());
    }
}

#[test]
fn gateway_outcomes_make_suspect_and_an_older_check_does_not_undo_it() {
    let mut p = planner(|_| {});
    let t0 = Timestamp(1_000_000);
    p.announce(&[id("p")]);
    let l = p.lease(t0, 1, &ALL).pop().unwrap();
    p.complete(t0, l.task_id, &[obs(l.task_id, "p", true)])
        .unwrap();
    assert_eq!(p.health(&id("p")).unwrap().state, HealthState::Available);
    // A check is out when gateway traffic starts failing through the proxy.
    let t1 = t0.plus(Duration::from_secs(15));
    let l = p.lease(t1, 1, &ALL).pop().unwrap();
    let fail = Some(FailureCode::ConnectRefused);
    let verdicts: Vec<_> = (0..5)
        .filter_map(|_| p.outcome(t1, &id("p"), fail))
        .collect();
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0].verdict, HealthVerdict::Suspect);
    assert_eq!(p.health(&id("p")).unwrap().state, HealthState::Suspect);
    // That check's success predates the verdict: it stays SUSPECT, due again soon.
    let v = p
        .complete(t1, l.task_id, &[obs(l.task_id, "p", true)])
        .unwrap();
    assert!(v.is_empty(), "{v:?}");
    assert_eq!(p.health(&id("p")).unwrap().state, HealthState::Suspect);
    let t2 = t1.plus(Duration::from_secs(3));
    let l = p
        .lease(t2, 1, &ALL)
        .pop()
        .expect("due on the SUSPECT schedule");
    // A check made after the verdict decides.
    let v = p
        .complete(t2, l.task_id, &[obs(l.task_id, "p", true)])
        .unwrap();
    assert_eq!(v[0].verdict, HealthVerdict::Available);
    // Without a check out, the outcome verdict moves the next check to the SUSPECT
    // schedule.
    let t3 = t2.plus(Duration::from_secs(1));
    for _ in 0..5 {
        p.outcome(t3, &id("p"), fail);
    }
    assert!(p.lease(t3.plus(Duration::from_secs(2)), 1, &ALL).is_empty());
    assert_eq!(p.lease(t3.plus(Duration::from_secs(3)), 1, &ALL).len(), 1);
}
