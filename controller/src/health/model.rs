//! Value types of health checking, shared by the planner, the reducer and the
//! control-plane hand-off: tiers, tasks, observations, failure codes.

use std::net::IpAddr;
use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::{Credentials, Label, Protocol, ProxyId, UpstreamId};

/// A check tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// TCP connect and the proxy protocol handshake with the vendor credentials.
    Basic,
    /// The egress identity: which address a target sees, and whether ours leaks.
    Egress,
    /// A routing's target host:port is reachable through the proxy.
    Target,
}

impl Tier {
    /// Stable lower-case code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Basic => "basic",
            Self::Egress => "egress",
            Self::Target => "target",
        }
    }
}

/// Why a check failed: a bounded code set (metrics label, pool failure code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureCode {
    /// TCP connect to the proxy refused or reset.
    ConnectRefused,
    /// TCP connect to the proxy timed out.
    ConnectTimeout,
    /// The proxy rejected the vendor credentials.
    AuthRejected,
    /// The proxy protocol handshake failed otherwise.
    HandshakeFailed,
    /// The proxy could not reach the target.
    TargetUnreachable,
    /// The echo answer was missing or malformed.
    BadResponse,
    /// The target saw the checker's own address (the proxy is transparent / leaks).
    ClientLeaked,
    /// The check ran past its deadline.
    Timeout,
    /// The checker could not run the check (not the proxy's fault).
    CheckerError,
}

impl FailureCode {
    /// Stable snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConnectRefused => "connect_refused",
            Self::ConnectTimeout => "connect_timeout",
            Self::AuthRejected => "auth_rejected",
            Self::HandshakeFailed => "handshake_failed",
            Self::TargetUnreachable => "target_unreachable",
            Self::BadResponse => "bad_response",
            Self::ClientLeaked => "client_leaked",
            Self::Timeout => "timeout",
            Self::CheckerError => "checker_error",
        }
    }

    /// Inverse of [`FailureCode::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::ConnectRefused,
            Self::ConnectTimeout,
            Self::AuthRejected,
            Self::HandshakeFailed,
            Self::TargetUnreachable,
            Self::BadResponse,
            Self::ClientLeaked,
            Self::Timeout,
            Self::CheckerError,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }

    /// As a pool failure label.
    pub fn label(self) -> Option<Label> {
        Label::new(self.as_str()).ok()
    }
}

/// One check to run within a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// BASIC.
    Basic,
    /// EGRESS.
    Egress,
    /// TARGET for one routing.
    Target {
        /// The routing it serves.
        routing: String,
        /// Target host.
        host: String,
        /// Target port.
        port: u16,
    },
}

impl Check {
    /// The tier of this check.
    pub fn tier(&self) -> Tier {
        match self {
            Self::Basic => Tier::Basic,
            Self::Egress => Tier::Egress,
            Self::Target { .. } => Tier::Target,
        }
    }
}

/// A deadline-bound check task for one proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTask {
    /// Task ID (echoed in observations).
    pub task_id: u64,
    /// The proxy.
    pub proxy_id: ProxyId,
    /// Its upstream.
    pub upstream: UpstreamId,
    /// Its protocol.
    pub protocol: Protocol,
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Vendor credentials for the handshake (never logged).
    pub credentials: Option<Credentials>,
    /// Checks to run, in order; a BASIC failure skips the rest.
    pub checks: Vec<Check>,
    /// The task must be reported by then; later observations are ignored.
    pub deadline: Timestamp,
}

/// What a checker saw for one check.
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
