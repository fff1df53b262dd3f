//! The port and its answer: what the API server said about a token.

use std::fmt;

use async_trait::async_trait;

/// Token extra naming the pod a bound ServiceAccount token was issued for.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// Token extra carrying that pod's UID.
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// What the API server said about an authenticated token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewedToken {
    /// The authenticated user (`system:serviceaccount:<namespace>:<name>` for
    /// ServiceAccount tokens).
    pub username: String,
    /// Audiences the token is valid for, among those asked about.
    pub audiences: Vec<String>,
    /// [`POD_NAME_EXTRA`], for pod-bound tokens.
    pub pod_name: Option<String>,
    /// [`POD_UID_EXTRA`], for pod-bound tokens.
    pub pod_uid: Option<String>,
}

impl ReviewedToken {
    /// `username`, with no audiences and no pod.
    pub fn user(username: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            audiences: Vec::new(),
            pod_name: None,
            pod_uid: None,
        }
    }
}

/// The outcome of a review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Review {
    /// The token is valid for the audience.
    Authenticated(ReviewedToken),
    /// Invalid, expired, revoked or for another audience (401 to the caller).
    Rejected,
}

/// The review could not be made, or its answer was malformed (503 to the caller;
/// never cached). The text never contains the token.
#[derive(Clone, Debug, thiserror::Error)]
#[error("token review unavailable: {0}")]
pub struct ReviewUnavailable(pub String);

/// Authenticates bearer tokens for an audience.
#[async_trait]
pub trait TokenReviewer: fmt::Debug + Send + Sync {
    /// Reviews `token` for `audience`.
    async fn review(&self, token: &str, audience: &str) -> Result<Review, ReviewUnavailable>;
}
