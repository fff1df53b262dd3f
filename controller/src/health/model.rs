//! Value types of health checking, shared by the planner, the reducer and the
//! control-plane hand-off: tiers, tasks, observations, failure codes.

use std::net::IpAddr;
use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::{Dial, HealthUpdate, HealthVerdict, Label, ProxyId, UpstreamId};

/// A check tier (the wire contract's own type).
pub use proxy_pool_api::controlplane::model::CheckTier as Tier;

/// Why a check failed (the wire contract's bounded code set).
pub use proxy_pool_api::controlplane::model::FailureCode;

/// Pool health updates putting each of `ids` in `verdict` with no check behind them:
/// AVAILABLE counts as a passed check (proxies the configuration vouches for), any
/// other verdict (CHECKING) as no result.
pub fn verdict_updates<'a>(
    ids: impl IntoIterator<Item = &'a ProxyId>,
    verdict: HealthVerdict,
) -> Vec<HealthUpdate> {
    ids.into_iter()
        .map(|id| HealthUpdate {
            proxy_id: id.clone(),
            verdict,
            success: verdict == HealthVerdict::Available,
            latency: None,
            failure: None,
        })
        .collect()
}

/// A failure code as a pool failure label.
pub fn failure_label(code: FailureCode) -> Option<Label> {
    Label::new(code.as_str()).ok()
}

/// One check of a task (the contract's own type).
pub use proxy_pool_api::controlplane::model::Check;

/// A deadline-bound check task for one proxy: every check the planner wants of it,
/// with what a probe needs (address, protocol, credentials).
///
/// Not the contract's `CheckTask`: that is one check on the wire (one tier, a text
/// task ID `h<task>-<check>`, the endpoint and target of that check); this is the
/// planner's whole task under its numeric ID, which [`crate::health::to_wire`] splits
/// into wire tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTask {
    /// Task ID (echoed in observations).
    pub task_id: u64,
    /// The proxy.
    pub proxy_id: ProxyId,
    /// Its upstream.
    pub upstream: UpstreamId,
    /// How to dial it; its credentials are for the handshake (never logged).
    pub dial: Dial,
    /// Checks to run, in order; a BASIC failure skips the rest.
    pub checks: Vec<Check>,
    /// The task must be reported by then; later observations are ignored.
    pub deadline: Timestamp,
}

/// What a checker saw for one check, as the reducer reads it.
///
/// The contract's `Observation` ([`crate::health::from_wire`] reads it into this) with
/// its two text IDs parsed: the planner's numeric task ID and a valid pool
/// [`ProxyId`], so the reducer never meets an ID it could not parse; the time it was
/// observed is not kept (the reducer applies it on arrival).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The task it belongs to.
    pub task_id: u64,
    /// The proxy.
    pub proxy_id: ProxyId,
    /// Tier.
    pub tier: Tier,
    /// Routing of a TARGET check.
    pub routing: Option<String>,
    /// Whether the check passed.
    pub success: bool,
    /// Latency of the check.
    pub latency: Option<Duration>,
    /// Why it failed.
    pub failure: Option<FailureCode>,
    /// The egress address a target saw (EGRESS).
    pub egress: Option<IpAddr>,
}

/// Identity of a checker (its registration with the control plane).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CheckerId(pub String);
