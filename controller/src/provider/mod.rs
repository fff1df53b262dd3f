//! The provider reconciler: fetches vendor APIs (or static lists), turns what they
//! offer into pool candidates with stable IDs, and writes them through the pool's
//! [`Upserter`](activity_pool::ports::Upserter) in chunks, each with an operation ID
//! derived from the fetch, so a retried chunk never changes counts.
//!
//! It owns vendor parsing (bounded, never panicking), the fetch budget, backoff with
//! jitter and the provider metrics. It must never log, count or report a vendor key,
//! a proxy password or a vendor URL's query.

mod candidate;
mod config;
mod error;
mod http;
mod metrics;
mod model;
mod options;
mod parse;
mod reconciler;
mod source;
mod status;

pub use candidate::{candidates, stable_id};
pub use config::{ResolvedSecrets, UpstreamPlan, plan_upstream};
pub use error::{FetchError, ProviderError};
pub use http::{HttpVendorSource, VendorAuth, VendorFormat};
pub use metrics::ProviderMetrics;
pub use model::{ParseDrop, VendorBatch, VendorProxy};
pub use options::{BackoffOptions, CandidateDefaults, FetchBudget, MAX_CHUNK, ProviderOptions};
pub use parse::{MAX_LINE_BYTES, parse_json, parse_line, parse_lines, parse_time};
pub use reconciler::{FetchOutcome, ProviderReconciler, ProxyAnnouncer};
pub use source::{StaticSource, VendorSource};
pub use status::{FetchStatus, UpstreamFetch};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Starts one task per reconciler on `tracker`; each stops when `shutdown` fires.
pub fn spawn_all(
    reconcilers: Vec<ProviderReconciler>,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) {
    for r in reconcilers {
        tracker.spawn(r.run(shutdown.clone()));
    }
}
