//! Process plumbing every Proxy Pool binary shares, defined once:
//!
//! - [`clock`]: wall-clock time as a port ([`Clock`], [`SystemClock`], [`ManualClock`]).
//!   Crates that read time in their own unit (the pool's millisecond `Timestamp`,
//!   analytics' `jiff::Timestamp`) view these clocks through a typed trait with a
//!   blanket implementation; they do not implement clocks of their own.
//! - [`backoff`]: bounded exponential backoff with jitter ([`Backoff`]).
//! - [`signal`] (feature `signal`): SIGTERM / Ctrl-C → shutdown.
//! - [`net`] (feature `net`): accepting connections until shutdown.
//! - [`telemetry`] (feature `telemetry`): log set-up (text/JSON, no ANSI off a terminal)
//!   and the metric naming convention with `build_info`.
//!
//! Without the `signal` and `net` features this crate does no I/O (the contract crate `api` uses
//! it that way).

pub mod backoff;
pub mod clock;
#[cfg(feature = "net")]
pub mod net;
#[cfg(feature = "signal")]
pub mod signal;
#[cfg(feature = "telemetry")]
pub mod telemetry;

pub use backoff::{Backoff, Jitter};
pub use clock::{Clock, ManualClock, SystemClock};
#[cfg(feature = "signal")]
pub use signal::shutdown_signal;
