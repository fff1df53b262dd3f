//! Bounded exponential backoff with jitter — the one implementation every retry and
//! reconnect loop uses (control-plane reconnects, certificate renewal, provider
//! fetches, checker task polling and submits).
//!
//! The ceiling of attempt `n` (0-based) is `min(max, base · 2^n)`. The delay is drawn
//! uniformly from a range below that ceiling, chosen by [`Jitter`]:
//! - [`Jitter::AboveBase`]: `[base, ceiling]` — the first delay is exactly `base`
//!   (a worker reconnecting to the control plane);
//! - [`Jitter::Equal`]: `[ceiling / 2, ceiling]` — half fixed, half random, so a fleet
//!   does not retry in step.

use std::time::Duration;

use rand::Rng;

/// How a delay is spread below its ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// Uniformly in `[base, ceiling]` ("full jitter" above a floor).
    AboveBase,
    /// Uniformly in `[ceiling / 2, ceiling]` ("equal jitter").
    Equal,
}

/// Jittered, bounded exponential backoff. Stateless use: [`Backoff::delay`] with an
/// attempt number; stateful use: [`Backoff::next_delay`] and [`Backoff::reset`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    jitter: Jitter,
    attempt: u32,
}

/// The first delay of a worker's reconnect to the control plane.
pub const RECONNECT_BASE: Duration = Duration::from_millis(200);

/// The longest delay between a worker's reconnect attempts. Small on purpose: a worker
/// renews nothing while it is away, so once a new leader serves, the worker must be back
/// within seconds or the leases of its proxies (at least `renewBefore` left, less
/// `LEASE_SAFETY`) run out (`docs/reliability.md`, "Leader change and gateway leases").
pub const RECONNECT_MAX: Duration = Duration::from_secs(2);

impl Backoff {
    /// From `base` up to `max` (at least `base`), delays in `[base, ceiling]`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self::with_jitter(base, max, Jitter::AboveBase)
    }

    /// From `base` up to `max` (at least `base`), delays in `[ceiling / 2, ceiling]`.
    pub fn equal_jitter(base: Duration, max: Duration) -> Self {
        Self::with_jitter(base, max, Jitter::Equal)
    }

    /// From `base` up to `max` (at least `base`), spread by `jitter`.
    pub fn with_jitter(base: Duration, max: Duration, jitter: Jitter) -> Self {
        Self {
            base,
            max: max.max(base),
            jitter,
            attempt: 0,
        }
    }

    /// The backoff of a worker (gateway, checker) reconnecting to the control plane:
    /// [`RECONNECT_BASE`] up to [`RECONNECT_MAX`], the first delay exactly the base.
    pub fn reconnect() -> Self {
        Self::new(RECONNECT_BASE, RECONNECT_MAX)
    }

    /// The ceiling of attempt `attempt` (0-based): `min(max, base · 2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The delay before retry number `attempt` (0-based), drawn from `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(attempt);
        let floor = match self.jitter {
            Jitter::AboveBase => self.base,
            Jitter::Equal => ceiling / 2,
        };
        if ceiling <= floor {
            return floor;
        }
        let spread = u64::try_from((ceiling - floor).as_millis()).unwrap_or(u64::MAX);
        floor + Duration::from_millis(rng.random_range(0..=spread))
    }

    /// The delay before retry number `attempt` (0-based), from the thread's generator.
    pub fn jittered(&self, attempt: u32) -> Duration {
        self.delay(attempt, &mut rand::rng())
    }

    /// The next delay (attempts counted since the last [`Backoff::reset`]).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.jittered(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        d
    }

    /// Back to the first step (after an attempt that worked).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::reconnect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn above_base_starts_at_base_and_stays_within_bounds() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        assert_eq!(b.next_delay(), Duration::from_millis(100));
        for _ in 0..50 {
            let d = b.next_delay();
            assert!(d >= Duration::from_millis(100) && d <= Duration::from_secs(2));
        }
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn equal_jitter_is_between_half_the_ceiling_and_the_ceiling() {
        let b = Backoff::equal_jitter(Duration::from_secs(1), Duration::from_secs(8));
        let mut rng = rand::rng();
        for (attempt, ceiling) in [(0, 1), (1, 2), (2, 4), (3, 8), (9, 8), (u32::MAX, 8)] {
            let ceiling = Duration::from_secs(ceiling);
            assert_eq!(b.ceiling(attempt), ceiling);
            for _ in 0..50 {
                let d = b.delay(attempt, &mut rng);
                assert!(d >= ceiling / 2 && d <= ceiling, "{attempt}: {d:?}");
            }
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| b.delay(9, &mut rng)).collect();
        assert!(spread.len() > 10, "jittered");
    }
}
