//! Time for the in-memory pool and for tests.
//!
//! The Redis adapter reads Redis server time (`TIME`, once per script) unless a clock
//! override is configured, which only tests do, so that both implementations can be
//! driven through the same timeline. The clocks are `proxy_pool_runtime`'s; this
//! module is the pool's millisecond view of them.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating.
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_millis(d)))
    }

    /// `self - d`, saturating.
    pub fn minus(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(duration_millis(d)))
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// Wall-clock now.
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Self(i64::try_from(ms).unwrap_or(i64::MAX))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Whole milliseconds of `d`, saturating at `i64::MAX`.
pub fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The pool's reading of a clock, in [`Timestamp`]s. The clocks themselves are the
/// runtime's ([`SystemClock`], [`ManualClock`]): every `proxy_pool_runtime::Clock` is
/// a pool clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: proxy_pool_runtime::Clock + ?Sized> Clock for C {
    fn now(&self) -> Timestamp {
        Timestamp::from(proxy_pool_runtime::Clock::now(self))
    }
}

pub use proxy_pool_runtime::clock::{ManualClock, SystemClock};

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        Self(proxy_pool_runtime::clock::unix_millis(t))
    }
}

impl From<Timestamp> for SystemTime {
    fn from(t: Timestamp) -> Self {
        proxy_pool_runtime::clock::from_unix_millis(t.0)
    }
}
