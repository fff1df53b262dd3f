//! The planner's settings: defaults, each upstream's `health` section and the
//! routings' TARGET checks, and the per-proxy profile an entry is planned with.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use super::super::reducer::ReducerConfig;

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
pub(super) fn routing_targets_for(
    all: &[RoutingTargets],
    upstream: Option<&str>,
) -> Vec<TargetSpec> {
    all.iter()
        .filter(|r| {
            r.upstreams.is_empty() || upstream.is_some_and(|u| r.upstreams.iter().any(|n| n == u))
        })
        .flat_map(|r| r.targets.iter().cloned())
        .collect()
}

/// The per-proxy settings an entry is planned with.
#[derive(Debug)]
pub(super) struct Profile {
    pub(super) recheck_interval: Duration,
    /// `None`: the planner's `task_deadline` per task.
    pub(super) check_timeout: Option<Duration>,
    pub(super) egress_every: u32,
    pub(super) targets: Vec<TargetSpec>,
    pub(super) reducer: ReducerConfig,
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
