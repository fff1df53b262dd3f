//! Kubernetes `TokenReview`, once, for the controller (ServiceAccount clients of the
//! Distribution API, `docs/distribution-api.md`) and the operator (worker identities,
//! `docs/identity.md`):
//!
//! - the port [`TokenReviewer`] and its answer [`Review`] / [`ReviewUnavailable`];
//! - the one reading of the API server's answer ([`KubeTokenReviewer`], feature
//!   `kube`): a review without `status` is a malformed answer, so the review counts as
//!   not made — [`ReviewUnavailable`], which both callers answer with 503 and never
//!   cache; never an authentication. Not authenticated, no user name, or our audience
//!   not reported back (an authenticator that is not audience-aware): [`Review::Rejected`];
//! - the one cache rule ([`cache_ttl`]): a positive review is reused for at most
//!   [`MAX_CACHE_TTL`] (120 s), never past the token's own `exp`, and not at all for a
//!   token without a readable `exp`; rejections and failures are never cached.
//!   [`CachedReviewer`] applies it in process; the controller applies it to its Redis
//!   read-through cache.
//!
//! Tokens are never logged or stored: caches are keyed by a digest, and error texts
//! never contain the token.

mod cache;
#[cfg(feature = "kube")]
mod kube_reviewer;
mod memory;
mod review;

pub use cache::{CachedReviewer, MAX_CACHE_TTL, cache_ttl, digest};
#[cfg(feature = "kube")]
pub use kube_reviewer::KubeTokenReviewer;
pub use memory::MemoryReviewer;
pub use proxy_pool_api::token::jwt_expiry;
pub use review::{
    POD_NAME_EXTRA, POD_UID_EXTRA, Review, ReviewUnavailable, ReviewedToken, TokenReviewer,
};
