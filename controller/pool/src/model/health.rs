//! Health values the pool stores: verdicts and their results, check marks
//! (`HealthStore::begin_checks` / `end_checks`) and a record's health facts.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ids::{Label, ProxyId};
use super::record::ProxyState;
use crate::clock::Timestamp;

/// A health verdict of the reducer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HealthVerdict {
    /// A check started.
    Checking,
    /// Healthy.
    Available,
    /// Doubtful.
    Suspect,
    /// Failed.
    Unhealthy,
}

impl HealthVerdict {
    /// The state this verdict sets.
    pub fn state(self) -> ProxyState {
        match self {
            Self::Checking => ProxyState::Checking,
            Self::Available => ProxyState::Available,
            Self::Suspect => ProxyState::Suspect,
            Self::Unhealthy => ProxyState::Unhealthy,
        }
    }
}

/// One health update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthUpdate {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// New state.
    pub verdict: HealthVerdict,
    /// Whether the check that led to it succeeded (sets `last_success_at`).
    pub success: bool,
    /// Measured latency, if any.
    pub latency: Option<Duration>,
    /// Failure code of the check (`None` clears it). A code, never free text.
    pub failure: Option<Label>,
}

/// Outcome of one health update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result", content = "state")]
pub enum HealthResult {
    /// Applied; the record is now in this state.
    Applied(ProxyState),
    /// No live record.
    NotFound,
    /// The record is DRAINING, EXTRACTED or REMOVED; unchanged.
    Ignored(ProxyState),
}

/// A health check about to go through a proxy (`HealthStore::begin_checks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckStart {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// The check's ID, unique per check: `end_checks` with this ID ends this check's
    /// mark and no other.
    pub check: u64,
    /// Longest the mark lasts, from the pool's now: past the last moment the check may
    /// go through the proxy (its deadline, plus slack for the clocks of whoever runs
    /// it). [`crate::options::MIN_CHECK_HOLD`] to [`crate::options::MAX_CHECK_HOLD`].
    pub hold: Duration,
}

/// The end of a health check (`HealthStore::end_checks`): its result was applied, or
/// it will not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckEnd {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// The ID its `CheckStart` carried.
    pub check: u64,
}

/// Outcome of one `begin_checks` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result", content = "until")]
pub enum CheckMark {
    /// Marked: no extraction takes the proxy before this instant (pool time), unless
    /// the check ends earlier (and no earlier check's mark lasts longer).
    Marked(Timestamp),
    /// No live record: the check must not run.
    NotFound,
    /// EXTRACTED or REMOVED: not marked, and the check must not run.
    Refused(ProxyState),
}
