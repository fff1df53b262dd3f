//! The one error type of the issuance endpoint and its single mapping to
//! `application/problem+json`. Internal detail (API server errors, signing failures)
//! is logged by the caller and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::wire::{PROBLEM_CONTENT_TYPE, Problem};

/// Why an issuance request failed.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// Malformed request or CSR (400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Body larger than the limit (413).
    #[error("request body too large")]
    PayloadTooLarge,
    /// Body not received within its deadline (408).
    #[error("request body not received in time")]
    BodyTimeout,
    /// Body is not JSON (415).
    #[error("content type must be application/json")]
    UnsupportedMediaType,
    /// Missing, invalid, expired or wrong-audience token (401).
    #[error("unauthenticated: {0}")]
    Unauthenticated(&'static str),
    /// Authenticated, but not a pod of a managed gateway Deployment or of the
    /// checker Deployment (403).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The Kubernetes API could not be asked (503, retry later).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else (500).
    #[error("internal: {0}")]
    Internal(String),
}

impl IssueError {
    /// HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Every [`reason`](Self::reason), for metrics that list them all from the start.
    pub const REASONS: [&'static str; 8] = [
        "bad-request",
        "payload-too-large",
        "body-timeout",
        "unsupported-media-type",
        "unauthenticated",
        "forbidden",
        "unavailable",
        "internal",
    ];

    /// A fixed, lower-case name of the error's kind (the `reason` metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad-request",
            Self::PayloadTooLarge => "payload-too-large",
            Self::BodyTimeout => "body-timeout",
            Self::UnsupportedMediaType => "unsupported-media-type",
            Self::Unauthenticated(_) => "unauthenticated",
            Self::Forbidden(_) => "forbidden",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }

    /// Whether the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Internal(_))
    }

    fn problem(&self) -> Problem {
        let status = self.status();
        let detail = match self {
            Self::BadRequest(d) | Self::Forbidden(d) => Some(d.clone()),
            Self::Unauthenticated(d) => Some((*d).to_owned()),
            Self::PayloadTooLarge | Self::UnsupportedMediaType | Self::BodyTimeout => {
                Some(self.to_string())
            }
            Self::Unavailable(_) => Some("the Kubernetes API is unavailable; retry later".into()),
            Self::Internal(_) => None,
        };
        Problem {
            type_: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail,
        }
    }
}

impl IntoResponse for IssueError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::to_vec(&self.problem()).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
