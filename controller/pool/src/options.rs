//! Tunables shared by every pool implementation.

use std::time::Duration;

/// Most candidates one storage-level upsert step carries; larger batches are chunked.
pub const UPSERT_CHUNK: usize = 256;
/// Most candidates one `upsert` call accepts before it is refused as invalid.
pub const MAX_BATCH: usize = 20_000;
/// Most updates in one `apply_health` / `remove` call.
pub const MAX_UPDATE_BATCH: usize = 1_000;
/// Most entries in one runtime report.
pub const MAX_REPORT_ENTRIES: usize = 20_000;
/// Shortest a health check may mark a proxy (`CheckStart::hold`).
pub const MIN_CHECK_HOLD: Duration = Duration::from_millis(1);
/// Longest a health check may mark a proxy (`CheckStart::hold`).
pub const MAX_CHECK_HOLD: Duration = Duration::from_secs(3600);
/// How many of the latest record changes the change feed (`ProxyCatalog::changes`)
/// keeps.
pub const CHANGE_FEED_CAPACITY: usize = 262_144;
/// Most leases one `expire` / records one `purge_expired` call handles.
pub const MAX_SWEEP: u32 = 10_000;

/// Pool options. `Default` gives production values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    /// Index members one extraction may examine before answering "temporarily unavailable".
    pub extract_scan_budget: u32,
    /// Index members one inventory read may examine before failing closed.
    pub inventory_scan_budget: u32,
    /// Expired records each write step purges on the side.
    pub opportunistic_purge: u32,
    /// Longest vendor TTL accepted.
    pub max_ttl: Duration,
    /// How long an internal operation result answers a retry.
    pub operation_ttl: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            extract_scan_budget: 2_048,
            inventory_scan_budget: 20_000,
            opportunistic_purge: 16,
            max_ttl: Duration::from_secs(24 * 3600),
            operation_ttl: Duration::from_secs(600),
        }
    }
}
