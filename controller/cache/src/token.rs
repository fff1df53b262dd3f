//! The TokenReview rule (seed 002, defined once in `proxy_pool_token_review`): a review
//! result may be cached for at most 120 s and never past the token's own expiry. The key is a digest of the token, never the token.
//! Only the review (who the token names) is cached — whether that identity may do
//! something is decided on every request.

use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// Longest a TokenReview result is kept (`proxy_pool_token_review`, the one rule).
pub use proxy_pool_token_review::MAX_CACHE_TTL as TOKEN_REVIEW_MAX_TTL;

/// How long a review of a token expiring at `expires_at` may be cached at `now`:
/// `min(120 s, expires_at − now)`; zero (not cached) when already expired or the expiry
/// is unknown — `proxy_pool_token_review::cache_ttl`, the one rule.
pub fn token_review_ttl(expires_at: Option<SystemTime>, now: SystemTime) -> Duration {
    proxy_pool_token_review::cache_ttl(expires_at, TOKEN_REVIEW_MAX_TTL, now)
}

/// The cache key of a bearer token: a hex digest, so no token reaches Redis.
pub fn token_key(audience: &str, token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"proxy-pool/token-review/v1\0");
    h.update(audience.as_bytes());
    h.update([0]);
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

/// A bearer token to review, as a cache key: stored under its digest, never printed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TokenKey {
    /// The audience the token is reviewed for.
    pub audience: String,
    /// The token itself (kept in memory only for the loader).
    pub token: String,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKey")
            .field("audience", &self.audience)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl crate::mget::CacheKey for TokenKey {
    fn cache_key(&self) -> String {
        token_key(&self.audience, &self.token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_capped_by_expiry_and_120s() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            token_review_ttl(Some(now + Duration::from_secs(30)), now),
            Duration::from_secs(30)
        );
        assert_eq!(
            token_review_ttl(Some(now + Duration::from_secs(3600)), now),
            TOKEN_REVIEW_MAX_TTL
        );
        assert_eq!(
            token_review_ttl(Some(now - Duration::from_secs(1)), now),
            Duration::ZERO
        );
        assert_ne!(token_key("a", "t"), token_key("b", "t"));
        assert!(!token_key("a", "secret-token").contains("secret"));
    }
}
