//! Wall-clock time as a port, so CA rotation and cache expiry are testable without
//! waiting: [`SystemClock`] in production, [`ManualClock`] in tests.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// A source of wall-clock time (certificates are about calendar time, not monotonic).
pub trait Clock: Debug + Send + Sync {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to.
#[derive(Clone, Debug)]
pub struct ManualClock {
    // A mutex, not an atomic: it is test-only and SystemTime is not a primitive.
    now: Arc<Mutex<SystemTime>>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: SystemTime) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.now.lock() += by;
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: SystemTime) {
        *self.now.lock() = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.lock()
    }
}
