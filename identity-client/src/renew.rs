//! When to renew and how to back off: renew at about half-life with jitter (so a fleet
//! started together does not renew together), retry failures with jittered exponential
//! backoff, and keep serving the current certificate until a new one arrives.

use std::future::Future;
use std::time::{Duration, SystemTime};

use rand::Rng;

use crate::client::IdentityClient;
use crate::handle::{Identity, IdentityHandle};

/// Jittered, bounded exponential backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// First delay.
    pub min: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            min: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// Delay before retry number `attempt` (0-based): uniformly in `[d/2, d]` with
    /// `d = min(max, min · 2^attempt)` (`proxy_pool_runtime::Backoff`, equal jitter).
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        proxy_pool_runtime::Backoff::equal_jitter(self.min, self.max).delay(attempt, rng)
    }
}

/// When renewal happens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RenewalPolicy {
    /// Fraction of the lifetime after which to renew (0.5 = half-life).
    pub at_fraction: f64,
    /// ± this fraction of the lifetime, uniformly.
    pub jitter_fraction: f64,
    /// Retry backoff.
    pub backoff: Backoff,
}

impl Default for RenewalPolicy {
    fn default() -> Self {
        Self {
            at_fraction: 0.5,
            jitter_fraction: 0.1,
            backoff: Backoff::default(),
        }
    }
}

impl RenewalPolicy {
    /// The instant to renew a certificate valid over `[not_before, not_after)`.
    pub fn renew_at(
        &self,
        not_before: SystemTime,
        not_after: SystemTime,
        rng: &mut impl Rng,
    ) -> SystemTime {
        let lifetime = not_after
            .duration_since(not_before)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let jitter = if self.jitter_fraction > 0.0 {
            rng.random_range(-self.jitter_fraction..=self.jitter_fraction)
        } else {
            0.0
        };
        let fraction = (self.at_fraction + jitter).clamp(0.05, 0.95);
        not_before + Duration::from_secs_f64(lifetime * fraction)
    }
}

/// Keeps `handle` holding a valid identity until `shutdown` completes: issues at once
/// when the handle is empty, then renews on `policy`'s schedule and backs off on
/// failures. The current certificate keeps being served while renewals fail.
pub async fn run_renewal(
    client: IdentityClient,
    handle: IdentityHandle,
    policy: RenewalPolicy,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut due = handle
        .current()
        .map(|i| schedule(&policy, &i))
        .unwrap_or_else(SystemTime::now);
    let mut failures = 0u32;
    loop {
        let wait = due
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(wait) => {}
        }
        match client.issue().await {
            Ok(identity) => {
                failures = 0;
                due = schedule(&policy, &identity);
                tracing::info!(
                    spiffe_id = identity.spiffe_id(),
                    valid_secs = secs_between(identity.not_before(), identity.not_after()),
                    renew_in_secs = secs_between(SystemTime::now(), due),
                    "workload certificate renewed"
                );
                handle.store(identity);
            }
            Err(error) => {
                let delay = policy.backoff.delay(failures, &mut rand::rng());
                failures = failures.saturating_add(1);
                let valid = handle
                    .current()
                    .is_some_and(|i| i.is_valid_at(SystemTime::now()));
                tracing::warn!(
                    %error,
                    retryable = error.is_retryable(),
                    failures,
                    still_valid = valid,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "workload certificate issuance failed"
                );
                due = SystemTime::now() + delay;
            }
        }
    }
}

fn schedule(policy: &RenewalPolicy, identity: &Identity) -> SystemTime {
    policy.renew_at(
        identity.not_before(),
        identity.not_after(),
        &mut rand::rng(),
    )
}

fn secs_between(from: SystemTime, to: SystemTime) -> u64 {
    to.duration_since(from).unwrap_or(Duration::ZERO).as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn renewal_is_near_half_life_and_jittered() {
        let policy = RenewalPolicy::default();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let end = start + Duration::from_secs(24 * 3600);
        let mut rng = StdRng::seed_from_u64(7);
        let times: Vec<_> = (0..200)
            .map(|_| policy.renew_at(start, end, &mut rng))
            .collect();
        for t in &times {
            let at = t.duration_since(start).unwrap().as_secs_f64() / (24.0 * 3600.0);
            assert!((0.4..=0.6).contains(&at), "renewal at {at} of the lifetime");
        }
        let distinct: std::collections::HashSet<_> = times.iter().collect();
        assert!(distinct.len() > 150, "jitter spreads renewals");
    }

    #[test]
    fn backoff_grows_is_bounded_and_jittered() {
        let b = Backoff::default();
        let mut rng = StdRng::seed_from_u64(1);
        for attempt in 0..40 {
            let d = b.delay(attempt, &mut rng);
            let ceiling = (b.min * 2u32.pow(attempt.min(20))).min(b.max);
            assert!(d >= ceiling / 2 && d <= ceiling, "attempt {attempt}: {d:?}");
        }
        let late: std::collections::HashSet<_> = (0..50).map(|_| b.delay(10, &mut rng)).collect();
        assert!(late.len() > 10, "jittered");
    }
}
