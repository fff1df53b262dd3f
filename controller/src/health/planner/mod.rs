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
use std::sync::Arc;
use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::{HealthVerdict, ProxyId};

use super::model::{Check, Observation, Tier};
use super::reducer::{Fact, HealthState, ProxyHealth, ReducerConfig, reduce};

mod config;
#[cfg(test)]
mod tests;

pub use config::{MAX_TARGETS, PlannerConfig, RoutingTargets, TargetSpec, UpstreamHealth};
use config::{Profile, routing_targets_for};

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
    /// Changes whenever a proxy's routing exclusions change (`exclusions_version`).
    exclusions_version: u64,
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
            exclusions_version: 0,
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

    /// A number that changes whenever some proxy's [`Planner::excluded`] does.
    pub fn exclusions_version(&self) -> u64 {
        self.exclusions_version
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
        let mut excluded_changed = false;
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
                    excluded_changed |= e.excluded.remove(routing);
                    // The tunnel was built: the proxy itself works.
                    fact.tier = Tier::Basic;
                } else if o.failure == Some(super::model::FailureCode::TargetUnreachable) {
                    let n = e.routing_failures.entry(routing.to_owned()).or_insert(0);
                    *n = n.saturating_add(1);
                    if *n >= profile.reducer.target_suspect_after.get() {
                        excluded_changed |= e.excluded.insert(routing.to_owned());
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
        if excluded_changed {
            self.exclusions_version += 1;
        }
        // Only the last verdict of a report matters to the pool.
        Some(verdicts.pop().into_iter().collect())
    }
}
