//! Extraction demand the pool could not meet from unowned proxies, on its way from the
//! Distribution API to the ownership manager, which drains gateway-owned proxies to
//! meet it (`docs/control-plane.md`, "Drain on demand"). A leaf module: both sides
//! depend on it, neither on the other.

use std::time::Duration;

use activity_pool::model::Filters;
use tokio::sync::watch;

/// Proxies an extraction wanted and could not get unowned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    /// The request's filters (client constraints applied).
    pub filters: Filters,
    /// How many more proxies it needed.
    pub count: u32,
    /// Each proxy must still have this much life when it is handed out.
    pub min_remaining_ttl: Duration,
}

/// Where the Distribution API sends unmet demand.
pub trait DrainDemand: Send + Sync + std::fmt::Debug {
    /// Records demand; `false` when the bounded queue dropped it.
    fn request(&self, demand: Demand) -> bool;
    /// Changes whenever drains release proxies for extraction (a waiting request
    /// tries again then).
    fn released(&self) -> watch::Receiver<u64>;
}
