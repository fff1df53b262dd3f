//! Wall-clock time as a port, so CA rotation and cache expiry are testable without
//! waiting: [`SystemClock`] in production, [`ManualClock`] in tests — the runtime's
//! clocks (`proxy_pool_runtime::clock`), re-exported at their old path.

pub use proxy_pool_runtime::clock::{Clock, ManualClock, SystemClock};
