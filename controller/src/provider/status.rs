//! Where each upstream's fetching stands: the last successful fetch and, while fetches
//! fail, why. Read by the admin inventory (and through it the operator's Upstream
//! status: `lastFetchTime`, a `Degraded` condition with the reason).
//!
//! Lock choice: one `parking_lot::Mutex` over a small map keyed by configured upstream
//! names (bounded by the config), updated once per fetch, never held across I/O.

use std::collections::HashMap;
use std::sync::Arc;

use activity_pool::Timestamp;
use parking_lot::Mutex;
use proxy_pool_api::inventory::FetchFailure;

/// One upstream's fetch state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamFetch {
    /// When the source was last fetched (and written to the pool) successfully.
    pub last_success: Option<Timestamp>,
    /// The failure since the last success, if any: why, and when it last happened.
    pub failing: Option<(FetchFailure, Timestamp)>,
    /// Failed fetches since the last success.
    pub consecutive_failures: u32,
}

/// Fetch state of every upstream. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct FetchStatus {
    inner: Arc<Mutex<HashMap<String, UpstreamFetch>>>,
}

impl FetchStatus {
    /// A successful fetch of `upstream` at `at`.
    pub fn succeeded(&self, upstream: &str, at: Timestamp) {
        let mut m = self.inner.lock();
        let e = m.entry(upstream.to_owned()).or_default();
        e.last_success = Some(at);
        e.failing = None;
        e.consecutive_failures = 0;
    }

    /// A failed fetch of `upstream` at `at`, with its reason code.
    pub fn failed(&self, upstream: &str, reason: FetchFailure, at: Timestamp) {
        let mut m = self.inner.lock();
        let e = m.entry(upstream.to_owned()).or_default();
        e.failing = Some((reason, at));
        e.consecutive_failures = e.consecutive_failures.saturating_add(1);
    }

    /// The state of `upstream` (`None`: not fetched yet).
    pub fn get(&self, upstream: &str) -> Option<UpstreamFetch> {
        self.inner.lock().get(upstream).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_clears_the_failure() {
        let s = FetchStatus::default();
        assert_eq!(s.get("u"), None);
        s.failed("u", FetchFailure::Unauthorized, Timestamp(10));
        s.failed("u", FetchFailure::Timeout, Timestamp(20));
        let f = s.get("u").unwrap();
        assert_eq!(
            (f.failing, f.consecutive_failures),
            (Some((FetchFailure::Timeout, Timestamp(20))), 2)
        );
        assert_eq!(f.last_success, None);
        s.succeeded("u", Timestamp(30));
        assert_eq!(
            s.get("u").unwrap(),
            UpstreamFetch {
                last_success: Some(Timestamp(30)),
                failing: None,
                consecutive_failures: 0
            }
        );
    }
}
