//! The checker's domain values: tasks it receives, checks it runs, observations it
//! returns. Bindings (gRPC, in-process) convert to and from these at the edge.

use tokio::time::Instant;

/// How to dial the proxy under test: its protocol, address and vendor credentials
/// (`Debug` never shows the password): the contract's own types.
pub use proxy_pool_api::controlplane::model::{Credentials, Dial, Protocol};

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
    /// How to dial the proxy under test.
    pub dial: Dial,
    /// Checks in order; a failed BASIC skips the rest.
    pub checks: Vec<Check>,
    /// When the controller stops waiting for the answer.
    pub deadline: Instant,
}

/// Why a check failed (the wire contract's bounded code set).
pub use proxy_pool_api::controlplane::model::FailureCode;

/// What one check saw (the contract's own type; the checker sets `observed_at_ms`
/// when the check ends).
pub use proxy_pool_api::controlplane::model::Observation;

/// Wall-clock Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    proxy_pool_runtime::clock::unix_millis(std::time::SystemTime::now())
}
