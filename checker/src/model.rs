//! The checker's domain values: tasks it receives, checks it runs, observations it
//! returns. Bindings (gRPC, in-process) convert to and from these at the edge.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Protocol of the proxy under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyProtocol {
    /// HTTP proxy (`CONNECT`, absolute-URI forwarding).
    Http,
    /// SOCKS5.
    Socks5,
}

/// Vendor credentials of a proxy. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyCredentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

impl fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyCredentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// A check tier (the wire contract's own type).
pub use proxy_pool_api::controlplane::model::CheckTier as Tier;

/// One check of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// BASIC.
    Basic,
    /// EGRESS.
    Egress,
    /// TARGET.
    Target {
        /// Routing it serves.
        routing: String,
        /// Target host.
        host: String,
        /// Target port.
        port: u16,
    },
}

impl Check {
    /// Its tier.
    pub fn tier(&self) -> Tier {
        match self {
            Self::Basic => Tier::Basic,
            Self::Egress => Tier::Egress,
            Self::Target { .. } => Tier::Target,
        }
    }
}

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
