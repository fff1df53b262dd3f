//! Token authentication as a port: [`TokenReviewer`] (the Kubernetes `TokenReview`
//! adapter is in `kube_adapters`), [`CachedReviewer`] which remembers positive results
//! for at most 120 s and never past the token's own expiry, and [`MemoryReviewer`]
//! for tests.
//!
//! Only authentication is cached here; whether the authenticated pod may have an
//! identity is decided afresh on every request. Tokens are never logged or stored:
//! the cache is keyed by a SHA-256 digest of audience and token.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use parking_lot::Mutex;
use sha2::{Digest as _, Sha256};

use super::clock::Clock;

/// Upper bound on how long a review result may be reused.
pub const MAX_CACHE_TTL: Duration = Duration::from_secs(120);

/// What the API server said about an authenticated token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewedToken {
    /// `system:serviceaccount:<namespace>:<name>` for ServiceAccount tokens.
    pub username: String,
    /// Audiences the token is valid for, among those asked about.
    pub audiences: Vec<String>,
    /// `authentication.kubernetes.io/pod-name` extra, for pod-bound tokens.
    pub pod_name: Option<String>,
    /// `authentication.kubernetes.io/pod-uid` extra, for pod-bound tokens.
    pub pod_uid: Option<String>,
}

/// The outcome of a review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Review {
    /// The token is valid for the audience.
    Authenticated(ReviewedToken),
    /// Invalid, expired, revoked or for another audience.
    Rejected,
}

/// The review could not be done (maps to 503; never cached).
#[derive(Debug, thiserror::Error)]
#[error("token review unavailable: {0}")]
pub struct ReviewUnavailable(pub String);

/// Authenticates bearer tokens for one audience.
#[async_trait]
pub trait TokenReviewer: fmt::Debug + Send + Sync {
    /// Reviews `token` for `audience`.
    async fn review(&self, token: &str, audience: &str) -> Result<Review, ReviewUnavailable>;
}

/// A [`TokenReviewer`] that reuses positive results briefly.
pub struct CachedReviewer {
    inner: Arc<dyn TokenReviewer>,
    clock: Arc<dyn Clock>,
    ttl: Duration,
    capacity: usize,
    // One short critical section per request, never held across the inner await.
    entries: Mutex<HashMap<[u8; 32], (ReviewedToken, SystemTime)>>,
}

impl fmt::Debug for CachedReviewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedReviewer")
            .field("inner", &self.inner)
            .field("ttl", &self.ttl)
            .field("entries", &self.entries.lock().len())
            .finish()
    }
}

impl CachedReviewer {
    /// Caches `inner`'s positive results for `ttl` (capped at [`MAX_CACHE_TTL`]),
    /// holding at most `capacity` entries.
    pub fn new(
        inner: Arc<dyn TokenReviewer>,
        clock: Arc<dyn Clock>,
        ttl: Duration,
        capacity: usize,
    ) -> Self {
        Self {
            inner,
            clock,
            ttl: ttl.min(MAX_CACHE_TTL),
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn insert(&self, key: [u8; 32], token: &str, reviewed: &ReviewedToken) {
        let now = self.clock.now();
        // Without a readable expiry the token is not cached at all.
        let Some(exp) = jwt_expiry(token) else {
            return;
        };
        let until = (now + self.ttl).min(exp);
        if until <= now {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity {
            entries.retain(|_, (_, t)| *t > now);
            if entries.len() >= self.capacity {
                return;
            }
        }
        entries.insert(key, (reviewed.clone(), until));
    }
}

#[async_trait]
impl TokenReviewer for CachedReviewer {
    async fn review(&self, token: &str, audience: &str) -> Result<Review, ReviewUnavailable> {
        let key = cache_key(token, audience);
        let now = self.clock.now();
        let hit = self.entries.lock().get(&key).cloned();
        if let Some((reviewed, until)) = hit
            && until > now
        {
            return Ok(Review::Authenticated(reviewed));
        }
        let review = self.inner.review(token, audience).await?;
        if let Review::Authenticated(reviewed) = &review {
            self.insert(key, token, reviewed);
        }
        Ok(review)
    }
}

fn cache_key(token: &str, audience: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(audience.as_bytes());
    h.update([0]);
    h.update(token.as_bytes());
    h.finalize().into()
}

pub use proxy_pool_api::token::jwt_expiry;

/// An in-memory [`TokenReviewer`]: fixed answers per (token, audience), a switch that
/// makes it unavailable, and a call counter.
#[derive(Debug, Default)]
pub struct MemoryReviewer {
    answers: Mutex<HashMap<(String, String), ReviewedToken>>,
    unavailable: Mutex<bool>,
    calls: AtomicUsize,
}

impl MemoryReviewer {
    /// Authenticates `token` for `audience` as `reviewed`.
    pub fn allow(&self, token: &str, audience: &str, reviewed: ReviewedToken) {
        self.answers
            .lock()
            .insert((token.to_owned(), audience.to_owned()), reviewed);
    }

    /// Makes every review fail as unavailable (or work again).
    pub fn set_unavailable(&self, unavailable: bool) {
        *self.unavailable.lock() = unavailable;
    }

    /// Number of reviews asked for.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl TokenReviewer for MemoryReviewer {
    async fn review(&self, token: &str, audience: &str) -> Result<Review, ReviewUnavailable> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if *self.unavailable.lock() {
            return Err(ReviewUnavailable("memory reviewer switched off".into()));
        }
        Ok(self
            .answers
            .lock()
            .get(&(token.to_owned(), audience.to_owned()))
            .cloned()
            .map_or(Review::Rejected, Review::Authenticated))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::clock::ManualClock;
    use base64::Engine as _;
    use std::time::UNIX_EPOCH;

    fn jwt(exp: u64) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!(
            "{}.{}.sig",
            b64(r#"{"alg":"RS256"}"#),
            b64(&format!(r#"{{"exp":{exp},"sub":"x"}}"#))
        )
    }

    fn who() -> ReviewedToken {
        ReviewedToken {
            username: "system:serviceaccount:ns:gw".into(),
            audiences: vec!["aud".into()],
            pod_name: Some("gw-1".into()),
            pod_uid: Some("uid-1".into()),
        }
    }

    #[tokio::test]
    async fn caches_at_most_ttl_and_never_past_expiry() {
        let start = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let clock = ManualClock::new(start);
        let inner = Arc::new(MemoryReviewer::default());
        let long = jwt(1_000_000 + 3600);
        let short = jwt(1_000_000 + 30);
        inner.allow(&long, "aud", who());
        inner.allow(&short, "aud", who());
        let cache = CachedReviewer::new(
            inner.clone(),
            Arc::new(clock.clone()),
            Duration::from_secs(600), // capped at 120 s
            16,
        );
        for _ in 0..3 {
            assert!(matches!(
                cache.review(&long, "aud").await,
                Ok(Review::Authenticated(_))
            ));
            assert!(matches!(
                cache.review(&short, "aud").await,
                Ok(Review::Authenticated(_))
            ));
        }
        assert_eq!(inner.calls(), 2, "repeat reviews come from the cache");

        clock.advance(Duration::from_secs(31)); // past the short token's expiry
        let _ = cache.review(&short, "aud").await;
        let _ = cache.review(&long, "aud").await;
        assert_eq!(inner.calls(), 3, "the short token is reviewed again");

        clock.advance(Duration::from_secs(90)); // 121 s after the first review
        let _ = cache.review(&long, "aud").await;
        assert_eq!(inner.calls(), 4, "no entry outlives 120 s");
    }

    #[tokio::test]
    async fn rejections_errors_other_audiences_and_opaque_tokens_are_not_cached() {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(10));
        let inner = Arc::new(MemoryReviewer::default());
        let token = jwt(1_000);
        inner.allow(&token, "aud", who());
        inner.allow("opaque", "aud", who());
        let cache = CachedReviewer::new(inner.clone(), Arc::new(clock), MAX_CACHE_TTL, 16);
        assert_eq!(
            cache.review(&token, "other").await.unwrap(),
            Review::Rejected
        );
        assert_eq!(
            cache.review(&token, "other").await.unwrap(),
            Review::Rejected
        );
        assert_eq!(inner.calls(), 2, "rejections are not cached");
        assert!(matches!(
            cache.review(&token, "aud").await,
            Ok(Review::Authenticated(_))
        ));
        let _ = cache.review("opaque", "aud").await;
        let _ = cache.review("opaque", "aud").await;
        assert_eq!(inner.calls(), 5, "no exp claim, no caching");
        inner.set_unavailable(true);
        assert!(cache.review(&jwt(2_000), "aud").await.is_err());
        assert!(cache.review(&jwt(2_000), "aud").await.is_err());
        assert_eq!(inner.calls(), 7, "errors are not cached");
        // A token reviewed a moment ago is still authenticated while the API is down.
        assert!(matches!(
            cache.review(&token, "aud").await,
            Ok(Review::Authenticated(_))
        ));
        assert_eq!(inner.calls(), 7);
    }
}
