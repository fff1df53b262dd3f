//! Proxy Pool usage analytics (seed 002 §5–8, brief §9).
//!
//! Owns: the `analytics` config section; the [`Collector`] handle (bounded queue, drops
//! and counts); the Redis working set (daily/cumulative counters and HyperLogLogs under
//! `<prefix>:analytics:v1:`, plain commands and MULTI pipelines, one compare-and-delete
//! script); the PostgreSQL store (explicit migrations, sequenced snapshots, 90-day
//! retention); the worker that applies events on every replica and, on the leader only,
//! flushes, recovers and does the final flush; the stats API and dashboard router. Must never: make a request wait on Redis or SQL, run DDL at
//! start-up, reset totals, or show an unknown day as zero.

mod collector;
mod day;
mod engine;
mod error;
mod link;
mod metrics;
mod model;
mod options;
mod pg;
mod stats;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod wiring;
mod ws;

pub use collector::{Collector, CollectorCounts, CollectorStats, MAX_UPSTREAMS_PER_EVENT};
pub use day::{Clock, Days, ManualClock, SystemClock, minus_days};
pub use engine::{
    APPLY_BATCH, Engine, FlushKind, FlushReport, IsWriter, WorkerMetrics, always_writer, reason,
    run,
};
pub use error::AnalyticsError;
pub use link::{Connect, RedisConn};
pub use metrics::AnalyticsMetrics;
pub use model::{Event, Kind, Subject, valid_name};
pub use options::{AnalyticsOptions, Settings};
pub use pg::{CommitOutcome, DailyRow, DayCoverage, Meta, PgStore, Snapshot, TotalRow, migrate};
pub use stats::{StatsState, router};
/// The PostgreSQL client config type (re-exported so embedders need no direct dependency).
pub use tokio_postgres::Config as PgConfig;
pub use wiring::{
    Analytics, Prepared, check_database, identity_key_from_file, pg_config, pg_config_from_file,
    prepare, start,
};
pub use ws::{Dirty, WorkingSet};
