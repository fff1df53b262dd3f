//! The checker's domain values: tasks it receives, checks it runs, observations it
//! returns. Bindings (gRPC, in-process) convert to and from these at the edge.

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Protocol of the proxy under test (the contract's own type).
pub use proxy_pool_api::controlplane::model::Protocol as ProxyProtocol;

/// Vendor credentials of a proxy (the contract's own type): `Debug` never shows the
/// password.
pub use proxy_pool_api::controlplane::model::Credentials as ProxyCredentials;

/// A check tier (the wire contract's own type).
pub use proxy_pool_api::controlplane::model::CheckTier as Tier;

/// One check of a task (the contract's own type).
pub use proxy_pool_api::controlplane::model::Check;

/// A task: one proxy, its checks, a deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTask {
    /// Task ID (echoed back).
    pub task_id: String,
    /// Proxy ID (echoed back).
    pub proxy_id: String,
    /// Proxy protocol.
    pub protocol: ProxyProtocol,
    /// Proxy host.
    pub host: String,
    /// Proxy port.
    pub port: u16,
    /// Vendor credentials.
    pub credentials: Option<ProxyCredentials>,
    /// Checks in order; a failed BASIC skips the rest.
    pub checks: Vec<Check>,
    /// When the controller stops waiting for the answer.
    pub deadline: Instant,
}

/// Why a check failed (the wire contract's bounded code set).
pub use proxy_pool_api::controlplane::model::FailureCode;

/// What one check saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Task ID.
    pub task_id: String,
    /// Proxy ID.
    pub proxy_id: String,
    /// Tier.
    pub tier: Tier,
    /// Routing of a TARGET check.
    pub routing: Option<String>,
    /// Passed.
    pub success: bool,
    /// Time the check took.
    pub latency: Option<Duration>,
    /// Why it failed.
    pub failure: Option<FailureCode>,
    /// Egress address the echo server saw (EGRESS).
    pub egress: Option<IpAddr>,
}
