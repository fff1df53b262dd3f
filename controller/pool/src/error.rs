//! The one error type of the activity pool.
//!
//! Messages never carry proxy passwords, credential references or raw Redis replies.

use std::fmt;

/// Why a state-changing call was refused. Every refusal changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConflictReason {
    /// The proxy is not AVAILABLE, is owned, or is past `usable_until`.
    NotAssignable,
    /// The proxy has no assignment, or it belongs to another worker.
    NotOwner,
    /// The assignment exists for this worker but under another epoch.
    EpochMismatch,
    /// The lease already ran out; only `expire` may release it now.
    LeaseExpired,
    /// `acknowledge_drain` before `begin_drain`.
    NotDraining,
    /// `acknowledge_drain` while the worker still reports Active or Reserved use.
    Busy,
    /// The idempotency key (or request ID) was used before with another request body.
    IdempotencyKeyReused,
    /// The worker session is missing, expired, or was replaced by a newer instance.
    StaleSession,
    /// A negative snapshot ACK closed the runtime write fence.
    FenceClosed,
    /// The report's snapshot version / epoch is not the session's ACKed bound.
    BoundMismatch,
    /// `report_sequence` is lower than one already accepted.
    SequenceRegression,
    /// Same `report_sequence` as the last accepted report but other content.
    SequenceReplayMismatch,
    /// A non-zero count names a proxy this worker does not own under that epoch.
    OwnershipMismatch,
    /// The operation ID was used before for another operation.
    OperationReused,
}

impl ConflictReason {
    /// Stable machine-readable code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAssignable => "not_assignable",
            Self::NotOwner => "not_owner",
            Self::EpochMismatch => "epoch_mismatch",
            Self::LeaseExpired => "lease_expired",
            Self::NotDraining => "not_draining",
            Self::Busy => "busy",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::StaleSession => "stale_session",
            Self::FenceClosed => "fence_closed",
            Self::BoundMismatch => "bound_mismatch",
            Self::SequenceRegression => "sequence_regression",
            Self::SequenceReplayMismatch => "sequence_replay_mismatch",
            Self::OwnershipMismatch => "ownership_mismatch",
            Self::OperationReused => "operation_reused",
        }
    }

    /// Inverse of [`ConflictReason::as_str`].
    pub fn parse(code: &str) -> Option<Self> {
        const ALL: [ConflictReason; 14] = [
            ConflictReason::NotAssignable,
            ConflictReason::NotOwner,
            ConflictReason::EpochMismatch,
            ConflictReason::LeaseExpired,
            ConflictReason::NotDraining,
            ConflictReason::Busy,
            ConflictReason::IdempotencyKeyReused,
            ConflictReason::StaleSession,
            ConflictReason::FenceClosed,
            ConflictReason::BoundMismatch,
            ConflictReason::SequenceRegression,
            ConflictReason::SequenceReplayMismatch,
            ConflictReason::OwnershipMismatch,
            ConflictReason::OperationReused,
        ];
        ALL.into_iter().find(|r| r.as_str() == code)
    }
}

impl fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of every pool port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// The backing store cannot be reached or did not answer in time. Nothing was
    /// changed by this call, or (after a dropped connection) the change is recoverable
    /// by retrying with the same operation ID. Retryable.
    #[error("activity pool unavailable: {0}")]
    Unavailable(String),
    /// A bounded scan ran out of budget before the answer was certain. Nothing changed.
    /// Retryable; never to be reported as "insufficient inventory".
    #[error("activity pool scan budget exhausted")]
    ScanBudgetExhausted,
    /// The call was refused by the pool's rules. Nothing changed.
    #[error("activity pool conflict: {0}")]
    Conflict(ConflictReason),
    /// The input is invalid; `field` names its path. Nothing was sent to storage.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// Path of the offending field, e.g. `filters.regions[3]`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The named proxy does not exist (or has passed its hard expiry).
    #[error("proxy not found")]
    NotFound,
    /// The store answered something the adapter cannot decode. Not retryable.
    #[error("activity pool internal error: {0}")]
    Internal(String),
    /// A leader-only write was refused: its fencing token is not the newest (another
    /// controller replica became leader since, or this one never was). Nothing
    /// changed. Not retryable: the caller is no longer the leader and must step down.
    #[error("activity pool write fenced: not the leader")]
    Fenced,
}

impl From<proxy_pool_api::ids::IdError> for PoolError {
    fn from(e: proxy_pool_api::ids::IdError) -> Self {
        Self::invalid(e.field, e.reason)
    }
}

impl PoolError {
    /// Builds an [`PoolError::InvalidInput`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Whether the same call may succeed if retried later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::ScanBudgetExhausted)
    }
}

/// Result alias of the pool ports.
pub type PoolResult<T> = Result<T, PoolError>;
