//! The task planner: which proxies need which checks when. Pure and synchronous (the
//! caller holds it under a lock and passes "now"); bounded in every dimension.
//!
//! New proxies (announced by the provider) are due at once and come first, in
//! announcement order; after each completed task a proxy is due again after the
//! interval of its state. A leased task not reported by its deadline (plus grace) is
//! handed out again. Reports for unknown or no-longer-leased tasks are ignored.
//!
//! TARGET checks come from two places: an upstream's `health.targets` (no routing: a
//! failure there counts against the proxy for everyone, through the reducer) and each
//! Routing's exact `targetHosts` (a failure there only excludes the proxy from that
//! routing: [`Planner::excluded`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::{HealthVerdict, ProxyId};

use super::model::{Check, Observation, Tier};
use super::reducer::{Fact, HealthState, ProxyHealth, ReducerConfig, reduce};

/// A TARGET check the planner adds to every task (one per routing target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSpec {
    /// Routing name.
    pub routing: String,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Planner settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannerConfig {
    /// Most proxies tracked; announcements beyond it are dropped (and counted).
    pub max_tracked: usize,
    /// Most tasks one lease call hands out.
    pub max_tasks_per_lease: usize,
    /// Re-check interval of AVAILABLE proxies.
    pub recheck_interval: Duration,
    /// Re-check interval of SUSPECT (and not yet decided) proxies.
    pub suspect_recheck_interval: Duration,
    /// Re-check interval of UNHEALTHY proxies.
    pub unhealthy_recheck_interval: Duration,
    /// Time a checker has to report a task.
    pub task_deadline: Duration,
    /// Extra time after the deadline before a task is handed out again.
    pub lease_grace: Duration,
    /// Every n-th check of a proxy includes EGRESS (1: every time, 0: never).
    pub egress_every: u32,
    /// TARGET checks added to every task (at most 16).
    pub targets: Vec<TargetSpec>,
    /// Settings of the proxies of these upstreams (by name), from `upstreams[].health`;
    /// proxies of other upstreams (or announced without one) use the fields above.
    pub upstreams: BTreeMap<String, UpstreamHealth>,
    /// Per-Routing TARGET checks: each routing's exact `targetHosts`, and the upstreams
    /// it draws from (empty: every one). A proxy of such an upstream is checked
    /// against them; a failure excludes it from that routing only.
    pub routing_targets: Vec<RoutingTargets>,
}

/// The TARGET checks one routing asks of the proxies it may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingTargets {
    /// Upstreams the routing draws from (empty: every upstream).
    pub upstreams: Vec<String>,
    /// Its checks (`routing` set to its name).
    pub targets: Vec<TargetSpec>,
}

/// Health settings of one upstream's proxies (`upstreams[].health`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamHealth {
    /// Re-check interval of its AVAILABLE proxies (`health.interval`).
    pub recheck_interval: Duration,
    /// Time a checker has per check of a task (`health.timeout`); a task's deadline
    /// is this times its number of checks.
    pub check_timeout: Duration,
    /// Every n-th check includes EGRESS (0: never; `health.egress`).
    pub egress_every: u32,
    /// Consecutive failures that make a proxy UNHEALTHY (`health.failureThreshold`).
    pub failure_threshold: NonZeroU32,
    /// TARGET checks of its proxies (`health.targets`), instead of the global ones.
    pub targets: Vec<TargetSpec>,
}

impl PlannerConfig {
    /// The planner settings for a validated controller config: production defaults
    /// plus each upstream's `health` section.
    pub fn from_config(config: &proxy_pool_api::config::Config) -> Self {
        let defaults = Self::default();
        let upstreams = config
            .upstreams
            .iter()
            .map(|u| {
                let h = &u.health;
                let targets = h
                    .targets
                    .iter()
                    .filter_map(|url| proxy_pool_api::config::target_url(url))
                    .map(|(host, port)| TargetSpec {
                        routing: String::new(),
                        host,
                        port,
                    })
                    .take(MAX_TARGETS)
                    .collect();
                let health = UpstreamHealth {
                    recheck_interval: h.interval,
                    check_timeout: h.timeout,
                    egress_every: if h.egress {
                        defaults.egress_every.max(1)
                    } else {
                        0
                    },
                    failure_threshold: h.failure_threshold,
                    targets,
                };
                (u.name.clone(), health)
            })
            .collect();
        let routing_targets = config
            .routings
            .iter()
            .map(|r| RoutingTargets {
                upstreams: r.upstreams.clone(),
                targets: r
                    .target_hosts
                    .iter()
                    .filter(|h| !h.starts_with("*."))
                    .map(|h| TargetSpec {
                        routing: r.name.clone(),
                        host: h.clone(),
                        port: r.target_check_port,
                    })
                    .collect(),
            })
            .filter(|r| !r.targets.is_empty())
            .collect();
        Self {
            upstreams,
            routing_targets,
            ..defaults
        }
    }
}

/// The routing TARGET checks for proxies of `upstream` (`None`: an unknown upstream,
/// which only routings drawing from every upstream check).
fn routing_targets_for(all: &[RoutingTargets], upstream: Option<&str>) -> Vec<TargetSpec> {
    all.iter()
        .filter(|r| {
            r.upstreams.is_empty() || upstream.is_some_and(|u| r.upstreams.iter().any(|n| n == u))
        })
        .flat_map(|r| r.targets.iter().cloned())
        .collect()
}

/// The per-proxy settings an entry is planned with.
#[derive(Debug)]
struct Profile {
    recheck_interval: Duration,
    /// `None`: the planner's `task_deadline` per task.
    check_timeout: Option<Duration>,
    egress_every: u32,
    targets: Vec<TargetSpec>,
    reducer: ReducerConfig,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            max_tracked: 100_000,
            max_tasks_per_lease: 256,
            recheck_interval: Duration::from_secs(15),
            suspect_recheck_interval: Duration::from_secs(3),
            unhealthy_recheck_interval: Duration::from_secs(30),
            task_deadline: Duration::from_secs(10),
            lease_grace: Duration::from_secs(2),
            egress_every: 4,
            targets: Vec::new(),
            upstreams: BTreeMap::new(),
            routing_targets: Vec::new(),
        }
    }
}

/// Most TARGET specs per task.
pub const MAX_TARGETS: usize = 16;

#[derive(Clone, Debug)]
struct Entry {
    /// How this proxy is planned (its upstream's settings, or the defaults).
    profile: Arc<Profile>,
    health: ProxyHealth,
    /// Key in `due` while waiting; `None` while leased.
    due_key: Option<(Timestamp, u64)>,
    lease: Option<(u64, Timestamp)>,
    /// Checks of the current lease not yet reported.
    pending: usize,
    checks: u32,
    /// Routing TARGET failures in a row, by routing.
    routing_failures: BTreeMap<String, u32>,
    /// Routings this proxy must not serve (their TARGET checks failed).
    excluded: BTreeSet<String>,
    /// Gateway outcomes made it SUSPECT while a check task was out: that task's
    /// successes predate the verdict and do not undo it (the next task decides).
    outcome_hold: bool,
}

/// A task handed out: the proxy and which checks to run, by when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Task ID.
    pub task_id: u64,
    /// Proxy.
    pub proxy_id: ProxyId,
    /// Checks.
    pub checks: Vec<Check>,
    /// Deadline.
    pub deadline: Timestamp,
}

/// The verdict a completed observation produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Proxy.
    pub proxy_id: ProxyId,
    /// Verdict.
    pub verdict: HealthVerdict,
    /// Whether the observation that produced it succeeded.
    pub success: bool,
    /// Latency of the task's first timed check.
    pub latency: Option<Duration>,
    /// Failure code of the observation that produced it.
    pub failure: Option<super::model::FailureCode>,
}

/// What an `announce` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Announced {
    /// Newly tracked.
    pub added: u32,
    /// Dropped because `max_tracked` was reached.
    pub dropped: u32,
}

/// The planner state.
#[derive(Debug)]
pub struct Planner {
    cfg: PlannerConfig,
    /// Settings of proxies of an unknown upstream.
    default_profile: Arc<Profile>,
    /// Settings by upstream name.
    profiles: HashMap<String, Arc<Profile>>,
    entries: HashMap<ProxyId, Entry>,
    due: BTreeSet<(Timestamp, u64, ProxyId)>,
    leases: BTreeSet<(Timestamp, u64)>,
    tasks: HashMap<u64, ProxyId>,
    seq: u64,
}

impl Planner {
    /// An empty planner.
    pub fn new(mut cfg: PlannerConfig, reducer: ReducerConfig) -> Self {
        cfg.targets.truncate(MAX_TARGETS);
        cfg.max_tasks_per_lease = cfg.max_tasks_per_lease.max(1);
        let mut default_targets = cfg.targets.clone();
        default_targets.extend(routing_targets_for(&cfg.routing_targets, None));
        default_targets.truncate(MAX_TARGETS);
        let default_profile = Arc::new(Profile {
            recheck_interval: cfg.recheck_interval,
            check_timeout: None,
            egress_every: cfg.egress_every,
            targets: default_targets,
            reducer: reducer.clone(),
        });
        let profiles = cfg
            .upstreams
            .iter()
            .map(|(name, h)| {
                // The threshold is the UNHEALTHY streak; SUSPECT comes no later.
                let threshold = h.failure_threshold;
                let upstream_reducer = ReducerConfig {
                    unhealthy_after: threshold,
                    suspect_after: reducer.suspect_after.min(threshold),
                    ..reducer.clone()
                };
                let mut targets = h.targets.clone();
                targets.extend(routing_targets_for(&cfg.routing_targets, Some(name)));
                targets.truncate(MAX_TARGETS);
                let profile = Profile {
                    recheck_interval: h.recheck_interval,
                    check_timeout: Some(h.check_timeout),
                    egress_every: h.egress_every,
                    targets,
                    reducer: upstream_reducer,
                };
                (name.clone(), Arc::new(profile))
            })
            .collect();
        Self {
            cfg,
            default_profile,
            profiles,
            entries: HashMap::new(),
            due: BTreeSet::new(),
            leases: BTreeSet::new(),
            tasks: HashMap::new(),
            seq: 0,
        }
    }

    /// Tracked proxies.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The reducer's current view of a proxy.
    pub fn health(&self, id: &ProxyId) -> Option<ProxyHealth> {
        self.entries.get(id).map(|e| e.health)
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn schedule(&mut self, id: &ProxyId, at: Timestamp) {
        let seq = self.next_seq();
        if let Some(e) = self.entries.get_mut(id) {
            if let Some((t, s)) = e.due_key.take() {
                self.due.remove(&(t, s, id.clone()));
            }
            e.due_key = Some((at, seq));
            self.due.insert((at, seq, id.clone()));
        }
    }

    /// Tracks new proxies (already tracked ones are left alone) with the default
    /// settings. They are due first.
    pub fn announce(&mut self, ids: &[ProxyId]) -> Announced {
        let profile = self.default_profile.clone();
        self.announce_with(&profile, ids, Timestamp(0))
    }

    /// Tracks new proxies of `upstream`, planned with its `health` settings (the
    /// defaults when it has none configured).
    pub fn announce_in(&mut self, upstream: &str, ids: &[ProxyId]) -> Announced {
        self.announce_held(upstream, ids, Timestamp(0))
    }

    /// [`Planner::announce_in`], the first check not before `not_before`: the end of
    /// the upstream's hold-back after a new pool generation, so that no check goes
    /// through a proxy a client may still hold from before a data loss.
    pub fn announce_held(
        &mut self,
        upstream: &str,
        ids: &[ProxyId],
        not_before: Timestamp,
    ) -> Announced {
        let profile = self
            .profiles
            .get(upstream)
            .unwrap_or(&self.default_profile)
            .clone();
        self.announce_with(&profile, ids, not_before)
    }

    fn announce_with(
        &mut self,
        profile: &Arc<Profile>,
        ids: &[ProxyId],
        not_before: Timestamp,
    ) -> Announced {
        let mut out = Announced::default();
        for id in ids {
            if self.entries.contains_key(id) {
                continue;
            }
            if self.entries.len() >= self.cfg.max_tracked {
                out.dropped += 1;
                continue;
            }
            self.entries.insert(
                id.clone(),
                Entry {
                    profile: profile.clone(),
                    health: ProxyHealth::default(),
                    due_key: None,
                    lease: None,
                    pending: 0,
                    checks: 0,
                    routing_failures: BTreeMap::new(),
                    excluded: BTreeSet::new(),
                    outcome_hold: false,
                },
            );
            self.schedule(id, not_before);
            out.added += 1;
        }
        out
    }

    /// Routings `id` must not serve: their TARGET checks failed through it
    /// `target_suspect_after` times in a row (until one succeeds). Sorted.
    pub fn excluded(&self, id: &ProxyId) -> Vec<String> {
        self.entries
            .get(id)
            .map(|e| e.excluded.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// One gateway outcome for a tracked proxy: `failure` is the code of a proxy-side
    /// failure (`None`: a success). Returns the verdict to write, if any. A proxy the
    /// outcomes made SUSPECT is re-checked on the SUSPECT schedule from now (not at a
    /// check that was due anyway a moment later).
    pub fn outcome(
        &mut self,
        now: Timestamp,
        id: &ProxyId,
        failure: Option<super::model::FailureCode>,
    ) -> Option<Verdict> {
        let e = self.entries.get_mut(id)?;
        let (next, verdict) =
            super::reducer::reduce_outcome(&e.profile.reducer, e.health, failure.is_some());
        e.health = next;
        let v = verdict?;
        if e.lease.is_some() {
            e.outcome_hold = true;
        } else {
            let at = now.plus(self.cfg.suspect_recheck_interval);
            self.schedule(id, at);
        }
        Some(Verdict {
            proxy_id: id.clone(),
            verdict: v,
            success: false,
            latency: None,
            failure,
        })
    }

    /// Stops tracking a proxy (gone from the pool, extracted, removed, expired);
    /// whether it was tracked.
    pub fn forget(&mut self, id: &ProxyId) -> bool {
        let Some(e) = self.entries.remove(id) else {
            return false;
        };
        if let Some((t, s)) = e.due_key {
            self.due.remove(&(t, s, id.clone()));
        }
        if let Some((task, deadline)) = e.lease {
            self.leases.remove(&(deadline, task));
            self.tasks.remove(&task);
        }
        true
    }

    /// Extra time after a task's deadline before it is handed out again (and before
    /// its late reports are ignored).
    pub fn lease_grace(&self) -> Duration {
        self.cfg.lease_grace
    }

    /// The proxy of a task still out (leased, not yet completed or reclaimed).
    pub fn task_proxy(&self, task_id: u64) -> Option<&ProxyId> {
        self.tasks.get(&task_id)
    }

    /// Checks of `id`'s current (or just completed) task not reported yet: 0 once
    /// every check of it is in; more when it ended early (a BASIC failed, the checker
    /// gave up) while another of its checks may still be under way.
    pub fn unreported(&self, id: &ProxyId) -> Option<usize> {
        self.entries.get(id).map(|e| e.pending)
    }

    /// Puts a leased proxy back to be due at `at` without a verdict (e.g. the task
    /// could not be built).
    pub fn release(&mut self, task_id: u64, at: Timestamp) {
        if let Some(id) = self.tasks.remove(&task_id) {
            if let Some(e) = self.entries.get_mut(&id)
                && let Some((task, deadline)) = e.lease.take()
            {
                self.leases.remove(&(deadline, task));
            }
            self.schedule(&id, at);
        }
    }

    /// Hands out up to `max` due tasks with the checks of the given tiers.
    pub fn lease(&mut self, now: Timestamp, max: usize, tiers: &[Tier]) -> Vec<Lease> {
        self.reclaim(now);
        let max = max.min(self.cfg.max_tasks_per_lease);
        let mut out = Vec::new();
        while out.len() < max {
            let Some(first) = self.due.first().cloned() else {
                break;
            };
            if first.0 > now {
                break;
            }
            self.due.remove(&first);
            let (_, _, id) = first;
            let task_id = self.next_seq();
            let Some(e) = self.entries.get_mut(&id) else {
                continue;
            };
            let n = e.checks;
            e.checks = e.checks.saturating_add(1);
            let checks = Self::checks(&e.profile, n, e.health.leaked, tiers);
            let budget = match e.profile.check_timeout {
                Some(per_check) => {
                    per_check.saturating_mul(u32::try_from(checks.len()).unwrap_or(u32::MAX))
                }
                None => self.cfg.task_deadline,
            };
            let deadline = now.plus(budget);
            e.due_key = None;
            e.lease = Some((task_id, deadline));
            e.pending = checks.len();
            self.leases.insert((deadline, task_id));
            self.tasks.insert(task_id, id.clone());
            out.push(Lease {
                task_id,
                proxy_id: id,
                checks,
                deadline,
            });
        }
        out
    }

    fn checks(cfg: &Profile, n: u32, leaked: bool, tiers: &[Tier]) -> Vec<Check> {
        let mut checks = vec![Check::Basic];
        let every = cfg.egress_every;
        // An open leak is re-checked by EGRESS every time: nothing else can clear it.
        if tiers.contains(&Tier::Egress) && (leaked || (every > 0 && n.is_multiple_of(every))) {
            checks.push(Check::Egress);
        }
        if tiers.contains(&Tier::Target) {
            checks.extend(cfg.targets.iter().map(|t| Check::Target {
                routing: t.routing.clone(),
                host: t.host.clone(),
                port: t.port,
            }));
        }
        checks
    }

    /// Re-queues tasks whose deadline plus grace has passed.
    fn reclaim(&mut self, now: Timestamp) {
        let cutoff = now.minus(self.cfg.lease_grace);
        while let Some(&(deadline, task)) = self.leases.first() {
            if deadline > cutoff {
                break;
            }
            self.release(task, now);
        }
    }

    /// Applies observations of a task (in order). A task's checks may be reported
    /// together or across several calls; the proxy is rescheduled once every check is
    /// in, a BASIC check failed, or an empty report says the checker gave up. Returns
    /// the verdicts to write, or `None` if the task is unknown, finished, or late.
    pub fn complete(
        &mut self,
        now: Timestamp,
        task_id: u64,
        observations: &[Observation],
    ) -> Option<Vec<Verdict>> {
        let id = self.tasks.get(&task_id)?.clone();
        let grace = self.cfg.lease_grace;
        let e = self.entries.get_mut(&id)?;
        let (_, deadline) = e.lease?;
        if now > deadline.plus(grace) {
            return None;
        }
        let mut health = e.health;
        let profile = e.profile.clone();
        let hold = e.outcome_hold;
        let mut verdicts = Vec::new();
        let mut done = observations.is_empty();
        let latency = observations.iter().find_map(|o| o.latency);
        let mine: Vec<&Observation> = observations.iter().filter(|o| o.proxy_id == id).collect();
        for o in &mine {
            let mut fact = Fact {
                tier: o.tier,
                success: o.success,
                failure: o.failure,
            };
            if hold && o.success {
                continue;
            }
            // A routing's TARGET check: the target side is that routing's business.
            if let Some(routing) = o.routing.as_deref().filter(|r| !r.is_empty())
                && o.tier == Tier::Target
            {
                if o.success {
                    e.routing_failures.remove(routing);
                    e.excluded.remove(routing);
                    // The tunnel was built: the proxy itself works.
                    fact.tier = Tier::Basic;
                } else if o.failure == Some(super::model::FailureCode::TargetUnreachable) {
                    let n = e.routing_failures.entry(routing.to_owned()).or_insert(0);
                    *n = n.saturating_add(1);
                    if *n >= profile.reducer.target_suspect_after.get() {
                        e.excluded.insert(routing.to_owned());
                    }
                    continue;
                }
            }
            let (next, verdict) = reduce(&profile.reducer, health, fact);
            health = next;
            done |= o.tier == Tier::Basic && !o.success;
            if let Some(v) = verdict {
                verdicts.push(Verdict {
                    proxy_id: id.clone(),
                    verdict: v,
                    success: o.success,
                    latency,
                    failure: o.failure,
                });
            }
        }
        e.health = health;
        e.pending = e.pending.saturating_sub(mine.len());
        if done || e.pending == 0 {
            e.lease = None;
            e.outcome_hold = false;
            self.tasks.remove(&task_id);
            self.leases.remove(&(deadline, task_id));
            let interval = match health.state {
                HealthState::Available => profile.recheck_interval,
                HealthState::Unhealthy => self.cfg.unhealthy_recheck_interval,
                HealthState::Suspect | HealthState::Unchecked => self.cfg.suspect_recheck_interval,
            };
            self.schedule(&id, now.plus(interval));
        }
        // Only the last verdict of a report matters to the pool.
        Some(verdicts.pop().into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
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

    const ALL: [Tier; 3] = [Tier::Basic, Tier::Egress, Tier::Target];

    #[test]
    fn proxies_of_a_held_back_upstream_are_not_checked_before_the_hold_ends() {
        let mut p = Planner::new(PlannerConfig::default(), ReducerConfig::default());
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
        let mut p = Planner::new(PlannerConfig::default(), ReducerConfig::default());
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
        let cfg = PlannerConfig {
            max_tracked: 2,
            ..PlannerConfig::default()
        };
        let mut p = Planner::new(cfg, ReducerConfig::default());
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
        let cfg = PlannerConfig {
            egress_every: 0,
            ..PlannerConfig::default()
        };
        let mut p = Planner::new(cfg, ReducerConfig::default());
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
        let cfg = PlannerConfig {
            max_tasks_per_lease: 3,
            ..PlannerConfig::default()
        };
        let mut p = Planner::new(cfg, ReducerConfig::default());
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
        let mut p = Planner::new(PlannerConfig::default(), ReducerConfig::default());
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
}
