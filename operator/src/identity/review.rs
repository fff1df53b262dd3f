//! Token authentication as a port — `proxy_pool_token_review`, the one TokenReview
//! implementation shared with the controller, re-exported at its old path:
//! [`TokenReviewer`] (the Kubernetes adapter is `KubeTokenReviewer`), [`CachedReviewer`]
//! which remembers positive results for at most 120 s and never past the token's own
//! expiry, and [`MemoryReviewer`] for tests.
//!
//! Only authentication is cached here; whether the authenticated pod may have an
//! identity is decided afresh on every request. Tokens are never logged or stored:
//! the cache is keyed by a SHA-256 digest of audience and token.

pub use proxy_pool_token_review::{
    CachedReviewer, MAX_CACHE_TTL, MemoryReviewer, Review, ReviewUnavailable, ReviewedToken,
    TokenReviewer, jwt_expiry,
};
