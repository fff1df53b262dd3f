//! The health reducer's pure core: one proxy's health facts plus one observation give
//! the next facts and, when the pool must hear about it, a verdict. No I/O, no clock.
//!
//! | state now   | observation                          | next state                          | verdict sent |
//! |-------------|--------------------------------------|-------------------------------------|--------------|
//! | any         | checker error                        | unchanged                           | no           |
//! | UNCHECKED   | success                              | AVAILABLE                           | yes          |
//! | AVAILABLE   | success                              | AVAILABLE (freshness)               | yes          |
//! | SUSPECT     | success                              | AVAILABLE (SUSPECT if targets fail) | yes          |
//! | UNHEALTHY   | success, `recover_after` in a row, no open leak | AVAILABLE                | yes          |
//! | UNHEALTHY   | success, fewer in a row or leak open | UNHEALTHY                           | no           |
//! | any         | failure, streak ≥ `unhealthy_after`  | UNHEALTHY                           | on change    |
//! | any ≠ UNH.  | failure, streak ≥ `suspect_after`    | SUSPECT                             | on change    |
//! | any         | failure, streak below both           | unchanged                           | no           |
//! | any         | EGRESS `client_leaked` (if enabled)  | UNHEALTHY, leak open until an EGRESS success | on change |
//! | AVAILABLE   | TARGET unreachable, ≥ `target_suspect_after` in a row | SUSPECT            | on change    |
//! | AVAILABLE   | gateway outcome: proxy-side failure, ≥ `outcome_suspect_after` in a row | SUSPECT | on change |
//!
//! Gateway outcomes ([`reduce_outcome`]) are observations with their own weight: only
//! proxy-side failures count (a refused dial, a failed proxy handshake), a gateway
//! success or any checker success ends the streak, and target-side failures are not
//! the proxy's fault (the caller does not pass them). They can only take an AVAILABLE
//! proxy to SUSPECT; the checker decides what happens next.

use std::num::NonZeroU32;

use activity_pool::model::HealthVerdict;

use super::model::{FailureCode, Tier};

/// Thresholds of the reducer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReducerConfig {
    /// Consecutive connectivity failures that make a proxy SUSPECT (N).
    pub suspect_after: NonZeroU32,
    /// Consecutive connectivity failures that make it UNHEALTHY (M ≥ N).
    pub unhealthy_after: NonZeroU32,
    /// Consecutive successes that bring an UNHEALTHY proxy back (0: never).
    pub recover_after: u32,
    /// An EGRESS check that sees the checker's own address makes the proxy UNHEALTHY.
    pub unhealthy_on_leak: bool,
    /// Consecutive TARGET failures (with working BASIC) that make it SUSPECT.
    pub target_suspect_after: NonZeroU32,
    /// Consecutive proxy-side failures of gateway traffic that make it SUSPECT.
    pub outcome_suspect_after: NonZeroU32,
}

impl Default for ReducerConfig {
    fn default() -> Self {
        Self {
            suspect_after: NonZeroU32::MIN,
            unhealthy_after: NonZeroU32::MIN.saturating_add(2),
            recover_after: 2,
            unhealthy_on_leak: true,
            target_suspect_after: NonZeroU32::MIN.saturating_add(2),
            outcome_suspect_after: NonZeroU32::MIN.saturating_add(4),
        }
    }
}

impl ReducerConfig {
    /// Checks `suspect_after ≤ unhealthy_after`.
    pub fn validate(&self) -> Result<(), String> {
        if self.unhealthy_after < self.suspect_after {
            return Err("health.unhealthyAfter must be >= health.suspectAfter".into());
        }
        Ok(())
    }
}

/// The reducer's view of a proxy: the pool's verdicts (`HealthVerdict`) plus
/// `Unchecked`, the state of a proxy no check has judged yet, which no verdict
/// expresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HealthState {
    /// Fetched, no verdict yet.
    #[default]
    Unchecked,
    /// AVAILABLE.
    Available,
    /// SUSPECT.
    Suspect,
    /// UNHEALTHY.
    Unhealthy,
}

impl HealthState {
    fn verdict(self) -> Option<HealthVerdict> {
        match self {
            Self::Unchecked => None,
            Self::Available => Some(HealthVerdict::Available),
            Self::Suspect => Some(HealthVerdict::Suspect),
            Self::Unhealthy => Some(HealthVerdict::Unhealthy),
        }
    }
}

/// Health facts the reducer keeps per proxy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyHealth {
    /// Current state.
    pub state: HealthState,
    /// Connectivity failures in a row.
    pub failures: u32,
    /// Successes in a row.
    pub successes: u32,
    /// TARGET failures in a row.
    pub target_failures: u32,
    /// An EGRESS check saw the checker's address; only an EGRESS success clears it,
    /// and until then the proxy stays UNHEALTHY whatever else succeeds.
    pub leaked: bool,
    /// Proxy-side failures of gateway traffic in a row.
    pub outcome_failures: u32,
}

/// The part of an observation the reducer looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fact {
    /// Tier.
    pub tier: Tier,
    /// Passed.
    pub success: bool,
    /// Failure code.
    pub failure: Option<FailureCode>,
}

/// Reduces one observation. Returns the next facts and the verdict to send, if any.
pub fn reduce(
    cfg: &ReducerConfig,
    prev: ProxyHealth,
    fact: Fact,
) -> (ProxyHealth, Option<HealthVerdict>) {
    let mut next = prev;
    if !fact.success && fact.failure == Some(FailureCode::CheckerError) {
        return (prev, None);
    }
    if fact.success {
        next.failures = 0;
        next.outcome_failures = 0;
        next.successes = next.successes.saturating_add(1);
        if fact.tier == Tier::Target {
            next.target_failures = 0;
        }
        if fact.tier == Tier::Egress {
            next.leaked = false;
        }
        let targets_bad = next.target_failures >= cfg.target_suspect_after.get();
        next.state = match prev.state {
            HealthState::Unhealthy
                if next.leaked || cfg.recover_after == 0 || next.successes < cfg.recover_after =>
            {
                HealthState::Unhealthy
            }
            _ if targets_bad => HealthState::Suspect,
            _ => HealthState::Available,
        };
        // Still UNHEALTHY: nothing to write (and the failure code that made it so stays).
        let verdict =
            if prev.state == HealthState::Unhealthy && next.state == HealthState::Unhealthy {
                None
            } else {
                next.state.verdict()
            };
        return (next, verdict);
    }
    next.successes = 0;
    let leaked = fact.failure == Some(FailureCode::ClientLeaked);
    if leaked && cfg.unhealthy_on_leak {
        next.state = HealthState::Unhealthy;
        next.leaked = true;
    } else if fact.tier == Tier::Target && fact.failure == Some(FailureCode::TargetUnreachable) {
        next.target_failures = next.target_failures.saturating_add(1);
        if next.target_failures >= cfg.target_suspect_after.get()
            && prev.state == HealthState::Available
        {
            next.state = HealthState::Suspect;
        }
    } else {
        next.failures = next.failures.saturating_add(1);
        if next.failures >= cfg.unhealthy_after.get() {
            next.state = HealthState::Unhealthy;
        } else if next.failures >= cfg.suspect_after.get() && prev.state != HealthState::Unhealthy {
            next.state = HealthState::Suspect;
        }
    }
    let verdict = if next.state == prev.state {
        None
    } else {
        next.state.verdict()
    };
    (next, verdict)
}

/// Reduces one gateway outcome: `proxy_failed` is a proxy-side failure (refused dial,
/// failed proxy handshake), `false` a success. Target-side failures are not passed in.
pub fn reduce_outcome(
    cfg: &ReducerConfig,
    prev: ProxyHealth,
    proxy_failed: bool,
) -> (ProxyHealth, Option<HealthVerdict>) {
    let mut next = prev;
    if !proxy_failed {
        next.outcome_failures = 0;
        return (next, None);
    }
    next.outcome_failures = next.outcome_failures.saturating_add(1);
    if next.outcome_failures >= cfg.outcome_suspect_after.get()
        && prev.state == HealthState::Available
    {
        next.state = HealthState::Suspect;
        return (next, Some(HealthVerdict::Suspect));
    }
    (next, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg(n: u32, m: u32) -> ReducerConfig {
        ReducerConfig {
            suspect_after: NonZeroU32::new(n).unwrap(),
            unhealthy_after: NonZeroU32::new(m).unwrap(),
            ..ReducerConfig::default()
        }
    }

    /// A passed check of `tier`.
    const fn passed(tier: Tier) -> Fact {
        Fact {
            tier,
            success: true,
            failure: None,
        }
    }

    /// A check of `tier` failed with `code`.
    const fn failed(tier: Tier, code: FailureCode) -> Fact {
        Fact {
            tier,
            success: false,
            failure: Some(code),
        }
    }

    const OK: Fact = passed(Tier::Basic);
    const FAIL: Fact = failed(Tier::Basic, FailureCode::ConnectRefused);
    /// The egress check saw the client's own address.
    const LEAK: Fact = failed(Tier::Egress, FailureCode::ClientLeaked);
    const EGRESS_OK: Fact = passed(Tier::Egress);
    /// The checker itself failed: says nothing of the proxy.
    const CHECKER_ERROR: Fact = failed(Tier::Basic, FailureCode::CheckerError);
    const TARGET_FAIL: Fact = failed(Tier::Target, FailureCode::TargetUnreachable);
    const TARGET_OK: Fact = passed(Tier::Target);

    fn run(cfg: &ReducerConfig, facts: &[Fact]) -> (ProxyHealth, Vec<Option<HealthVerdict>>) {
        let mut h = ProxyHealth::default();
        let mut out = Vec::new();
        for f in facts {
            let (n, v) = reduce(cfg, h, *f);
            h = n;
            out.push(v);
        }
        (h, out)
    }

    #[test]
    fn the_state_table() {
        let c = cfg(2, 4);
        use HealthVerdict::*;
        let (h, v) = run(&c, &[OK, FAIL, FAIL, FAIL, FAIL, OK, OK, FAIL, FAIL, OK]);
        assert_eq!(
            v,
            vec![
                Some(Available),
                None,
                Some(Suspect),
                None,
                Some(Unhealthy),
                None,
                Some(Available),
                None,
                Some(Suspect),
                Some(Available)
            ]
        );
        assert_eq!(h.state, HealthState::Available);
    }

    #[test]
    fn fresh_proxy_failing_goes_straight_to_the_thresholds() {
        let (h, v) = run(&cfg(1, 2), &[FAIL, FAIL]);
        assert_eq!(
            v,
            vec![Some(HealthVerdict::Suspect), Some(HealthVerdict::Unhealthy)]
        );
        assert_eq!(h.failures, 2);
    }

    #[test]
    fn leak_is_unhealthy_and_checker_errors_are_ignored() {
        let c = cfg(2, 4);
        let (h, v) = run(&c, &[OK, CHECKER_ERROR, CHECKER_ERROR, CHECKER_ERROR, LEAK]);
        assert_eq!(
            v,
            vec![
                Some(HealthVerdict::Available),
                None,
                None,
                None,
                Some(HealthVerdict::Unhealthy)
            ]
        );
        assert_eq!(h.state, HealthState::Unhealthy);
    }

    #[test]
    fn target_failures_make_suspect_and_target_success_clears() {
        let c = cfg(2, 4);
        let (h, v) = run(
            &c,
            &[OK, TARGET_FAIL, TARGET_FAIL, TARGET_FAIL, OK, TARGET_OK],
        );
        assert_eq!(v[3], Some(HealthVerdict::Suspect));
        assert_eq!(
            v[4],
            Some(HealthVerdict::Suspect),
            "basic success does not clear target trouble"
        );
        assert_eq!(v[5], Some(HealthVerdict::Available));
        assert_eq!(h.target_failures, 0);
    }

    #[test]
    fn unhealthy_stays_when_recovery_is_disabled() {
        let c = ReducerConfig {
            recover_after: 0,
            ..cfg(1, 1)
        };
        let (h, _) = run(&c, &[FAIL, OK, OK, OK, OK]);
        assert_eq!(h.state, HealthState::Unhealthy);
    }

    #[test]
    fn an_open_leak_blocks_recovery_until_egress_succeeds() {
        let c = cfg(2, 4);
        // BASIC successes (even reported after the leak) never bring it back.
        let (h, v) = run(&c, &[OK, LEAK, OK, OK, OK]);
        assert_eq!(h.state, HealthState::Unhealthy);
        assert!(h.leaked);
        assert_eq!(
            &v[2..],
            &[None, None, None],
            "nothing written: the failure code stays"
        );
        let (h, v) = run(&c, &[OK, LEAK, OK, EGRESS_OK]);
        assert_eq!(h.state, HealthState::Available);
        assert_eq!(v[3], Some(HealthVerdict::Available));
    }

    fn fact() -> impl Strategy<Value = Fact> {
        let tier = prop_oneof![Just(Tier::Basic), Just(Tier::Egress), Just(Tier::Target)];
        let code = prop_oneof![
            Just(None),
            Just(Some(FailureCode::ConnectRefused)),
            Just(Some(FailureCode::Timeout)),
            Just(Some(FailureCode::ClientLeaked)),
            Just(Some(FailureCode::TargetUnreachable)),
            Just(Some(FailureCode::CheckerError)),
        ];
        (tier, any::<bool>(), code).prop_map(|(tier, success, failure)| Fact {
            tier,
            success,
            failure: if success {
                None
            } else {
                failure.or(Some(FailureCode::HandshakeFailed))
            },
        })
    }

    /// One input of the reducer: a checker observation or a gateway outcome
    /// (`true`: a proxy-side failure).
    #[derive(Clone, Copy, Debug)]
    enum Event {
        Check(Fact),
        Outcome(bool),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            3 => fact().prop_map(Event::Check),
            2 => any::<bool>().prop_map(Event::Outcome),
        ]
    }

    /// A deliberately naive model: recompute everything from the whole history.
    fn model(c: &ReducerConfig, events: &[Event]) -> HealthState {
        let mut state = HealthState::Unchecked;
        for (i, e) in events.iter().enumerate() {
            let relevant: Vec<&Fact> = events[..=i]
                .iter()
                .filter_map(|e| match e {
                    Event::Check(f) if f.failure != Some(FailureCode::CheckerError) => Some(f),
                    _ => None,
                })
                .collect();
            let f = match e {
                Event::Outcome(false) => continue,
                Event::Outcome(true) => {
                    // trailing proxy-side gateway failures, ended by a gateway success or
                    // a checker success
                    let ostreak = events[..=i]
                        .iter()
                        .rev()
                        .take_while(|e| match e {
                            Event::Outcome(failed) => *failed,
                            Event::Check(f) => !f.success,
                        })
                        .filter(|e| matches!(e, Event::Outcome(true)))
                        .count() as u32;
                    if ostreak >= c.outcome_suspect_after.get() && state == HealthState::Available {
                        state = HealthState::Suspect;
                    }
                    continue;
                }
                Event::Check(f) if f.failure == Some(FailureCode::CheckerError) => continue,
                Event::Check(f) => *f,
            };
            let hist = &relevant[..];
            let conn_fail = |f: &&&Fact| {
                let leak = f.failure == Some(FailureCode::ClientLeaked) && c.unhealthy_on_leak;
                let target =
                    f.tier == Tier::Target && f.failure == Some(FailureCode::TargetUnreachable);
                !(f.success || leak || target)
            };
            let is_target_fail = |f: &Fact| {
                f.tier == Tier::Target && f.failure == Some(FailureCode::TargetUnreachable)
            };
            // trailing run of connectivity failures, skipping target failures and leaks
            let streak = hist
                .iter()
                .rev()
                .take_while(|f| !f.success)
                .filter(conn_fail)
                .count() as u32;
            let tstreak = hist
                .iter()
                .rev()
                .take_while(|f| !(f.success && f.tier == Tier::Target))
                .filter(|f| is_target_fail(f))
                .count() as u32;
            let wins = hist.iter().rev().take_while(|f| f.success).count() as u32;
            // a leak not yet cleared by a later EGRESS success
            let leak_open = c.unhealthy_on_leak
                && hist
                    .iter()
                    .rev()
                    .take_while(|f| !(f.success && f.tier == Tier::Egress))
                    .any(|f| f.failure == Some(FailureCode::ClientLeaked));
            state = if f.success {
                if state == HealthState::Unhealthy
                    && (leak_open || c.recover_after == 0 || wins < c.recover_after)
                {
                    HealthState::Unhealthy
                } else if tstreak >= c.target_suspect_after.get() {
                    HealthState::Suspect
                } else {
                    HealthState::Available
                }
            } else if f.failure == Some(FailureCode::ClientLeaked) && c.unhealthy_on_leak {
                HealthState::Unhealthy
            } else if is_target_fail(&f) {
                if tstreak >= c.target_suspect_after.get() && state == HealthState::Available {
                    HealthState::Suspect
                } else {
                    state
                }
            } else if streak >= c.unhealthy_after.get() {
                HealthState::Unhealthy
            } else if streak >= c.suspect_after.get() && state != HealthState::Unhealthy {
                HealthState::Suspect
            } else {
                state
            };
        }
        state
    }

    proptest! {
        #[test]
        fn reducer_matches_the_model(
            n in 1u32..4, extra in 0u32..3, recover in 0u32..3, outcomes in 1u32..5,
            events in proptest::collection::vec(event(), 0..48),
        ) {
            let c = ReducerConfig {
                recover_after: recover,
                outcome_suspect_after: NonZeroU32::new(outcomes).unwrap(),
                ..cfg(n, n + extra)
            };
            let mut h = ProxyHealth::default();
            for (i, e) in events.iter().enumerate() {
                let (next, verdict) = match e {
                    Event::Check(f) => reduce(&c, h, *f),
                    Event::Outcome(failed) => reduce_outcome(&c, h, *failed),
                };
                prop_assert_eq!(next.state, model(&c, &events[..=i]), "after {:?}", &events[..=i]);
                // a verdict always names the state it leaves the proxy in
                if let Some(v) = verdict {
                    prop_assert_eq!(Some(v), next.state.verdict());
                }
                match e {
                    Event::Check(f) => {
                        // successes report (freshness) unless the proxy stays UNHEALTHY;
                        // failures only on change
                        let stays_unhealthy = h.state == HealthState::Unhealthy
                            && next.state == HealthState::Unhealthy;
                        if f.success && !stays_unhealthy {
                            prop_assert_eq!(verdict, next.state.verdict());
                        }
                        if stays_unhealthy || (!f.success && next.state == h.state) {
                            prop_assert_eq!(verdict, None);
                        }
                    }
                    // gateway outcomes only ever take AVAILABLE to SUSPECT
                    Event::Outcome(_) => {
                        if next.state != h.state {
                            prop_assert_eq!((h.state, next.state), (HealthState::Available, HealthState::Suspect));
                        } else {
                            prop_assert_eq!(verdict, None);
                        }
                    }
                }
                // never AVAILABLE with a failure streak at the threshold
                if next.state == HealthState::Available {
                    prop_assert!(next.failures < c.suspect_after.get());
                    prop_assert!(next.outcome_failures < c.outcome_suspect_after.get());
                }
                if next.failures >= c.unhealthy_after.get() {
                    prop_assert_eq!(next.state, HealthState::Unhealthy);
                }
                h = next;
            }
        }
    }

    #[test]
    fn gateway_outcomes_condemn_a_failing_proxy_but_not_a_healthy_one() {
        let c = ReducerConfig::default();
        let (mut h, _) = reduce(&c, ProxyHealth::default(), OK);
        assert_eq!(h.state, HealthState::Available);
        // A few proxy-side failures between successes: nothing.
        for failed in [
            true, true, false, true, true, true, true, false, true, false,
        ] {
            let (next, v) = reduce_outcome(&c, h, failed);
            assert_eq!(v, None);
            h = next;
        }
        assert_eq!(h.state, HealthState::Available);
        // Every attempt fails: SUSPECT after `outcome_suspect_after` (5) in a row.
        let mut verdicts = Vec::new();
        for _ in 0..5 {
            let (next, v) = reduce_outcome(&c, h, true);
            verdicts.push(v);
            h = next;
        }
        assert_eq!(verdicts[..4], [None, None, None, None]);
        assert_eq!(verdicts[4], Some(HealthVerdict::Suspect));
        // A checker success brings it back and clears the streak.
        let (h, v) = reduce(&c, h, OK);
        assert_eq!(
            (h.state, v, h.outcome_failures),
            (HealthState::Available, Some(HealthVerdict::Available), 0)
        );
    }
}
