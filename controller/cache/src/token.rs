//! The TokenReview rule (seed 002): a review result may be cached for at most 120 s and
//! never past the token's own expiry. The key is a digest of the token, never the token.
//! Only the review (who the token names) is cached — whether that identity may do
//! something is decided on every request.

use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// Longest a TokenReview result is kept.
pub const TOKEN_REVIEW_MAX_TTL: Duration = Duration::from_secs(120);

/// How long a review of a token expiring at `expires_at` may be cached at `now`:
/// `min(120 s, expires_at − now)`, zero when already expired or unknown expiry is past.
pub fn token_review_ttl(expires_at: Option<SystemTime>, now: SystemTime) -> Duration {
    match expires_at {
        Some(exp) => exp
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(TOKEN_REVIEW_MAX_TTL),
        None => TOKEN_REVIEW_MAX_TTL,
    }
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
