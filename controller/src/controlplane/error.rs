//! The control plane's one error type and its one mapping to gRPC `Status`.
//!
//! Client-visible messages are short codes; internal detail (pool text, peer data)
//! stays in the server's logs and never carries a secret.

use activity_pool::{ConflictReason, PoolError};
use proxy_pool_api::controlplane::ConvertError;
use tonic::{Code, Status};

/// Why a control-plane call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// No usable client identity.
    #[error("unauthenticated: {0}")]
    Unauthenticated(&'static str),
    /// The certificate's identity does not match the message's ID.
    #[error("identity mismatch")]
    IdentityMismatch,
    /// A request field is invalid.
    #[error(transparent)]
    Invalid(#[from] ConvertError),
    /// The client speaks no protocol version this controller speaks.
    #[error("incompatible protocol version")]
    IncompatibleVersion,
    /// The session is not (or no longer) the worker's current one.
    #[error("stale session")]
    StaleSession,
    /// An ACK names a (version, epoch, checksum) the controller never issued.
    #[error("snapshot was not issued")]
    NotIssued,
    /// An ACK for a version older than one already acknowledged in this session.
    #[error("snapshot acknowledgement out of order")]
    AckRegression,
    /// A batch or list is larger than the configured limit.
    #[error("{0} exceeds the configured limit")]
    TooLarge(&'static str),
    /// A configured limit on streams is reached.
    #[error("{0}")]
    Exhausted(&'static str),
    /// The activity pool refused or failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The server is shutting down.
    #[error("shutting down")]
    ShuttingDown,
}

impl From<ControlPlaneError> for Status {
    fn from(e: ControlPlaneError) -> Status {
        use ControlPlaneError as E;
        let (code, msg): (Code, String) = match &e {
            E::Unauthenticated(why) => (Code::Unauthenticated, (*why).to_owned()),
            E::IdentityMismatch => (Code::PermissionDenied, "identity_mismatch".into()),
            E::Invalid(c) => (Code::InvalidArgument, c.to_string()),
            E::IncompatibleVersion => (
                Code::FailedPrecondition,
                "incompatible_protocol_version".into(),
            ),
            E::StaleSession => (Code::FailedPrecondition, "stale_session".into()),
            E::NotIssued => (Code::FailedPrecondition, "snapshot_not_issued".into()),
            E::AckRegression => (Code::FailedPrecondition, "ack_regression".into()),
            E::TooLarge(what) => (Code::InvalidArgument, format!("{what}_too_large")),
            E::Exhausted(what) => (Code::ResourceExhausted, (*what).to_owned()),
            E::ShuttingDown => (Code::Unavailable, "shutting_down".into()),
            E::Pool(p) => match p {
                PoolError::Unavailable(_) | PoolError::ScanBudgetExhausted => {
                    (Code::Unavailable, "pool_unavailable".into())
                }
                PoolError::Conflict(ConflictReason::StaleSession) => {
                    (Code::FailedPrecondition, "stale_session".into())
                }
                PoolError::Conflict(r) => (Code::FailedPrecondition, r.as_str().to_owned()),
                PoolError::InvalidInput { field, reason } => {
                    (Code::InvalidArgument, format!("invalid {field}: {reason}"))
                }
                PoolError::NotFound => (Code::NotFound, "not_found".into()),
                PoolError::Internal(_) => (Code::Internal, "internal".into()),
                PoolError::Fenced => (Code::Unavailable, "not_leader".into()),
            },
        };
        if code == Code::Internal || code == Code::Unavailable {
            tracing::warn!(error = %e, "control-plane call failed");
        } else {
            tracing::debug!(error = %e, "control-plane call refused");
        }
        Status::new(code, msg)
    }
}

/// Result alias.
pub type CpResult<T> = Result<T, ControlPlaneError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_errors_map_without_internal_text() {
        let s = Status::from(ControlPlaneError::Pool(PoolError::Internal(
            "raw redis reply".into(),
        )));
        assert_eq!(s.code(), Code::Internal);
        assert!(!s.message().contains("redis"));
        let s = Status::from(ControlPlaneError::Pool(PoolError::Conflict(
            ConflictReason::FenceClosed,
        )));
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "fence_closed");
    }
}
