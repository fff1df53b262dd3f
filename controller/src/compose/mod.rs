//! The composition root: everything `Controller::build` and `Controller::run` put
//! together besides the Distribution API and the admin listener, one file a concern:
//!
//! - [`store`](build_store): the store the config names and, with Redis, the leader
//!   election;
//! - [`prepare`]: the gRPC control plane (listener, ownership manager, snapshot
//!   publisher; its settings from the config by [`control_plane_config`]), the provider
//!   reconcilers of vendor-API upstreams and the health reducer / planner bridged to
//!   the checker service — everything that can fail (reading key files, planning
//!   upstreams) when the controller is built;
//! - [`start`]: spawns the loops when it runs, and [`Running::stop`] ends them within
//!   the shutdown deadline;
//! - usage analytics ([`prepare_usage`]) and ServiceAccount clients
//!   ([`prepare_bearer`]).
//!
//! Nothing here logs a vendor key, a proxy password or TLS key material.

use activity_pool::PoolError;

use crate::provider::ProviderError;
use crate::store::BuildError;

mod control_plane;
mod prepare;
mod run;
mod store;
mod token_review;
mod usage;

pub use control_plane::{control_plane_config, routing_spec};
pub use prepare::{Prepared, prepare};
pub use run::{Running, start};
pub use store::{BuiltStore, build_store};
pub use token_review::{Bearer, prepare as prepare_bearer};
pub use usage::{Usage, UsageWorker, analytics_options, analytics_settings};
pub use usage::{check as check_usage, migrate, prepare as prepare_usage};

/// Checks queued for checkers at most.
const CHECK_QUEUE: usize = 1_024;
/// Checker observations waiting for the reducer at most.
const OBSERVATION_QUEUE: usize = 4_096;
/// Gateway outcomes waiting at most.
const OUTCOME_QUEUE: usize = 4_096;

/// Why the controller could not be composed.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    /// Store, secrets or static upstreams.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A vendor-API upstream cannot be planned.
    #[error("upstream {upstream}: {source}")]
    Provider {
        /// Upstream name.
        upstream: String,
        /// Why.
        source: ProviderError,
    },
    /// A TLS file of the control plane could not be read (content never shown).
    #[error("controlPlane.tls: cannot read {path}: {reason}")]
    TlsFile {
        /// The file.
        path: String,
        /// The I/O error kind.
        reason: String,
    },
    /// The leader election cannot be set up (Kubernetes backend).
    #[error("leadership: {0}")]
    Leadership(String),
    /// Inconsistent health thresholds.
    #[error("health: {0}")]
    Health(String),
    /// The pool.
    #[error("activity pool: {0}")]
    Pool(#[from] PoolError),
    /// Usage analytics cannot be set up (files, settings; never the DSN's content).
    #[error("analytics: {0}")]
    Analytics(String),
    /// ServiceAccount clients cannot be set up (Kubernetes API access; never a token).
    #[error("distribution.auth tokenReview: {0}")]
    TokenReview(String),
    /// The analytics database is not ready for this version: run `migrate`.
    #[error(
        "analytics: {0} (run `proxy-pool-controller migrate --config <file>` against this database first)"
    )]
    AnalyticsSchema(String),
}
