//! Errors of the provider reconciler. Messages carry codes and sizes only: never a
//! URL query, a header value, a vendor key or a proxy password.

use activity_pool::PoolError;
use proxy_pool_api::inventory::FetchFailure;

/// Why one fetch from a vendor source failed. Nothing was written to the pool.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The vendor refused our credentials (401 / 403).
    #[error("vendor rejected the credentials (status {0})")]
    Unauthorized(u16),
    /// Any other non-success status.
    #[error("vendor answered status {0}")]
    Status(u16),
    /// The response (declared or streamed) is larger than the budget allows.
    #[error("vendor response exceeds {limit} bytes")]
    TooLarge {
        /// The budget's cap.
        limit: usize,
    },
    /// The request did not complete within the budget's timeout.
    #[error("vendor request timed out")]
    Timeout,
    /// Connecting, TLS or the HTTP exchange failed.
    #[error("vendor request failed: {0}")]
    Transport(&'static str),
    /// The body is not a document of the configured format.
    #[error("vendor response is not a valid document of the configured format")]
    InvalidDocument,
}

impl FetchError {
    /// The failure's code (the admin inventory's `fetchError.reason`).
    pub fn failure(&self) -> FetchFailure {
        match self {
            Self::Unauthorized(_) => FetchFailure::Unauthorized,
            Self::Status(_) => FetchFailure::Status,
            Self::TooLarge { .. } => FetchFailure::TooLarge,
            Self::Timeout => FetchFailure::Timeout,
            Self::Transport(_) => FetchFailure::Transport,
            Self::InvalidDocument => FetchFailure::InvalidDocument,
        }
    }

    /// Stable label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        self.failure().as_str()
    }
}

/// Why one reconcile pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The vendor source failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The pool refused or could not take the batch.
    #[error("pool upsert failed: {0}")]
    Pool(#[from] PoolError),
    /// The options cannot work (reported at construction).
    #[error("invalid provider option {field}: {reason}")]
    InvalidOption {
        /// Field path.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

impl ProviderError {
    /// Stable label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Fetch(e) => e.kind(),
            Self::Pool(PoolError::Unavailable(_)) => "pool_unavailable",
            Self::Pool(PoolError::Fenced) => "fenced",
            Self::Pool(_) => "pool_error",
            Self::InvalidOption { .. } => "invalid_option",
        }
    }

    pub(crate) fn option(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidOption {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
