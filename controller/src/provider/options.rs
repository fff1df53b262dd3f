//! Typed options of one upstream's provider reconciler. Built once by the composition
//! root (from `api::config::UpstreamConfig` when it exists) and trusted afterwards.

use std::num::NonZeroU32;
use std::time::Duration;

use activity_pool::model::{Credentials, Label, Protocol, UpstreamId};
use rand::Rng;

use super::error::ProviderError;

/// Limits on one vendor fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchBudget {
    /// Most candidates taken from one response; the rest are counted `over_budget`.
    pub max_candidates: usize,
    /// Deadline of the whole request, body included.
    pub request_timeout: Duration,
    /// Largest response body accepted (declared or streamed).
    pub max_response_bytes: usize,
}

impl Default for FetchBudget {
    fn default() -> Self {
        Self {
            max_candidates: 2_000,
            request_timeout: Duration::from_secs(10),
            max_response_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Backoff after failed fetches: `initial × 2^(failures-1)`, capped at `max`, with
/// "equal jitter" (half fixed, half random) so a fleet does not retry in step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackoffOptions {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for BackoffOptions {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl BackoffOptions {
    /// The delay before the next attempt after `failures` consecutive failures (≥ 1).
    pub fn delay(&self, failures: u32, rng: &mut impl Rng) -> Duration {
        proxy_pool_runtime::Backoff::equal_jitter(self.initial, self.max)
            .delay(failures.saturating_sub(1), rng)
    }
}

/// Defaults for what a vendor entry leaves out, and the pool-side parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateDefaults {
    /// Protocol when the entry does not say.
    pub protocol: Protocol,
    /// Region label when the entry has none.
    pub region: Option<Label>,
    /// Carrier label when the entry has none.
    pub carrier: Option<Label>,
    /// City label when the entry has none.
    pub city: Option<Label>,
    /// TTL when neither the entry nor the response declares one.
    pub ttl: Duration,
    /// Per-proxy capacity.
    pub max_concurrency: u32,
    /// Credentials when the entry carries none (vendors that authenticate every
    /// proxy with one account).
    pub credentials: Option<Credentials>,
    /// Vendor-supplied addresses on refused ranges (loopback, link-local, metadata,
    /// configured internal CIDRs) are dropped (`egress_denied`).
    pub egress: proxy_pool_api::egress::EgressPolicy,
}

/// Everything one upstream's reconciler needs besides its ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderOptions {
    /// The upstream.
    pub upstream: UpstreamId,
    /// Defaults for candidates.
    pub defaults: CandidateDefaults,
    /// `usable_until = expires_at − safety_margin`.
    pub safety_margin: Duration,
    /// Hard cap on the upstream's un-extracted inventory.
    pub max_size: NonZeroU32,
    /// Hold-back of the upstream's proxies after a new pool generation begins.
    pub quarantine: Duration,
    /// Time between two successful fetches.
    pub fetch_interval: Duration,
    /// Limits of one fetch.
    pub budget: FetchBudget,
    /// Backoff after failures.
    pub backoff: BackoffOptions,
    /// Candidates per `upsert` call (≤ the pool's batch limit).
    pub chunk_size: usize,
    /// Mark upserted proxies AVAILABLE right away (static lists without a checker).
    pub assume_healthy: bool,
}

/// Most candidates per `upsert` call the reconciler sends.
pub const MAX_CHUNK: usize = 1_000;

impl ProviderOptions {
    /// Options with production defaults for everything but the upstream and TTL.
    pub fn new(upstream: UpstreamId, protocol: Protocol, ttl: Duration) -> Self {
        Self {
            upstream,
            defaults: CandidateDefaults {
                protocol,
                region: None,
                carrier: None,
                city: None,
                ttl,
                max_concurrency: 64,
                credentials: None,
                egress: proxy_pool_api::egress::EgressPolicy::default(),
            },
            safety_margin: Duration::from_secs(5),
            max_size: NonZeroU32::MIN.saturating_add(9_999),
            quarantine: ttl,
            fetch_interval: Duration::from_secs(10),
            budget: FetchBudget::default(),
            backoff: BackoffOptions::default(),
            chunk_size: 500,
            assume_healthy: false,
        }
    }

    /// Checks what the types cannot say; reports every problem at once.
    pub fn validate(&self) -> Result<(), ProviderError> {
        let mut problems = Vec::new();
        if self.fetch_interval.is_zero() {
            problems.push("fetch_interval: must be positive");
        }
        if self.budget.max_candidates == 0 {
            problems.push("budget.max_candidates: must be at least 1");
        }
        if self.budget.request_timeout.is_zero() {
            problems.push("budget.request_timeout: must be positive");
        }
        if self.budget.max_response_bytes == 0 {
            problems.push("budget.max_response_bytes: must be at least 1");
        }
        if self.backoff.initial.is_zero() || self.backoff.max < self.backoff.initial {
            problems.push("backoff: need 0 < initial <= max");
        }
        if self.chunk_size == 0 || self.chunk_size > MAX_CHUNK {
            problems.push("chunk_size: must be in 1..=1000");
        }
        if self.defaults.ttl <= self.safety_margin {
            problems.push("defaults.ttl: must be longer than safety_margin");
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ProviderError::option(
                format!("upstreams.{}", self.upstream),
                problems.join("; "),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters_within_bounds() {
        let b = BackoffOptions {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(8),
        };
        let mut rng = rand::rng();
        for (failures, base) in [(1, 1), (2, 2), (3, 4), (4, 8), (10, 8), (u32::MAX, 8)] {
            for _ in 0..50 {
                let d = b.delay(failures, &mut rng);
                let base = Duration::from_secs(base);
                assert!(d >= base / 2 && d <= base, "{failures}: {d:?}");
            }
        }
    }

    #[test]
    fn validation_reports_every_problem() {
        let mut o = ProviderOptions::new(
            UpstreamId::new("u").unwrap(),
            Protocol::Http,
            Duration::from_secs(1),
        );
        o.fetch_interval = Duration::ZERO;
        o.chunk_size = 0;
        let err = o.validate().unwrap_err().to_string();
        for part in [
            "fetch_interval",
            "chunk_size",
            "defaults.ttl",
            "upstreams.u",
        ] {
            assert!(err.contains(part), "{part} in {err}");
        }
    }
}
