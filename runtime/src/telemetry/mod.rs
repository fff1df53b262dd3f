//! Telemetry every binary sets up the same way (feature `telemetry`):
//!
//! - [`logging`]: one `tracing` subscriber: text or JSON lines, the level from `RUST_LOG`
//!   (`info` when unset), ANSI colour only on a terminal.
//! - [`metrics`]: the naming convention (`proxy_pool_<component>_…`), the `build_info`
//!   gauge, and the parsers the metric-name tests use to compare what a binary exports
//!   with what `docs/operations.md` documents.
//! - [`histogram`]: a lock-free histogram (fixed buckets, atomic counts and sum) for
//!   hot paths, encoded as a prometheus-client histogram.

pub mod histogram;
pub mod logging;
pub mod metrics;
