//! Wall-clock time as a port, so expiry, rotation and day boundaries are testable
//! without waiting: [`SystemClock`] in production, [`ManualClock`] in tests.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// A source of wall-clock time (certificates, leases and days are about calendar time,
/// not monotonic time).
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

/// A clock that moves only when told to. Cloning shares the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    // A mutex, not an atomic: SystemTime is not a primitive, and this is for tests.
    now: Arc<Mutex<SystemTime>>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: impl Into<SystemTime>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start.into())),
        }
    }

    /// A clock standing at the current wall-clock time.
    pub fn starting_now() -> Self {
        Self::new(SystemTime::now())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.now.lock() += by;
    }

    /// Moves the clock forward by `secs` seconds (backwards when negative).
    pub fn advance_secs(&self, secs: i64) {
        let by = Duration::from_secs(secs.unsigned_abs());
        let mut now = self.now.lock();
        *now = if secs >= 0 { *now + by } else { *now - by };
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: impl Into<SystemTime>) {
        *self.now.lock() = to.into();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.lock()
    }
}

/// Milliseconds since the Unix epoch (negative before it), saturating at the `i64`
/// bounds.
pub fn unix_millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// The instant `ms` milliseconds after (before, when negative) the Unix epoch.
pub fn from_unix_millis(ms: i64) -> SystemTime {
    let d = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        UNIX_EPOCH.checked_add(d).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_sub(d).unwrap_or(UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_clones_share_it() {
        let start = UNIX_EPOCH + Duration::from_secs(1_000);
        let c = ManualClock::new(start);
        let shared = c.clone();
        c.advance(Duration::from_millis(1_500));
        assert_eq!(shared.now(), start + Duration::from_millis(1_500));
        c.advance_secs(-1);
        assert_eq!(shared.now(), start + Duration::from_millis(500));
        c.set(UNIX_EPOCH);
        assert_eq!(shared.now(), UNIX_EPOCH);
    }

    #[test]
    fn unix_millis_round_trips_both_sides_of_the_epoch() {
        for ms in [0, 1, -1, 1_764_486_000_123, -86_400_000] {
            assert_eq!(unix_millis(from_unix_millis(ms)), ms);
        }
    }
}
