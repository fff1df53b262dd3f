//! The one cache rule of TokenReview results, and an in-process cache applying it.
//!
//! Only authentication (who the token names) is ever cached; whether that user may do
//! something is decided by the caller on every request.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use parking_lot::Mutex;
use proxy_pool_runtime::Clock;
use sha2::{Digest as _, Sha256};

use crate::review::{Review, ReviewUnavailable, ReviewedToken, TokenReviewer};
use proxy_pool_api::token::jwt_expiry;

/// Upper bound on how long a review result may be reused (seed 002).
pub use proxy_pool_api::config::TOKEN_REVIEW_MAX_TTL as MAX_CACHE_TTL;

/// How long a positive review of a token expiring at `expires_at` may be reused at
/// `now`, with `configured` the caller's setting: `min(configured, 120 s,
/// expires_at − now)`. Zero — not cached — when the token has no readable expiry or
/// has expired.
pub fn cache_ttl(
    expires_at: Option<SystemTime>,
    configured: Duration,
    now: SystemTime,
) -> Duration {
    match expires_at {
        Some(exp) => exp
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(configured)
            .min(MAX_CACHE_TTL),
        None => Duration::ZERO,
    }
}

/// A digest of audience and token, the only form in which a token is ever a key.
pub fn digest(audience: &str, token: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(audience.as_bytes());
    h.update([0]);
    h.update(token.as_bytes());
    h.finalize().into()
}

/// A [`TokenReviewer`] that reuses positive results in process, by [`cache_ttl`].
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
        let ttl = cache_ttl(jwt_expiry(token), self.ttl, now);
        if ttl.is_zero() {
            return;
        }
        let until = now + ttl;
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
        let key = digest(audience, token);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryReviewer;
    use base64::Engine as _;
    use proxy_pool_runtime::ManualClock;
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

    #[test]
    fn the_rule_is_the_least_of_setting_120s_and_expiry() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let long = Duration::from_secs(600);
        let at = |s| Some(now + Duration::from_secs(s));
        assert_eq!(cache_ttl(at(30), long, now), Duration::from_secs(30));
        assert_eq!(cache_ttl(at(3600), long, now), MAX_CACHE_TTL);
        assert_eq!(
            cache_ttl(at(3600), Duration::from_secs(5), now),
            Duration::from_secs(5)
        );
        assert_eq!(
            cache_ttl(Some(now - Duration::from_secs(1)), long, now),
            Duration::ZERO
        );
        assert_eq!(cache_ttl(None, long, now), Duration::ZERO);
        assert_ne!(digest("a", "t"), digest("b", "t"));
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
        assert!(matches!(
            cache.review(&token, "other").await,
            Ok(Review::Rejected)
        ));
        assert!(matches!(
            cache.review(&token, "other").await,
            Ok(Review::Rejected)
        ));
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
