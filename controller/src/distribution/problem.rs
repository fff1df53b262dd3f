//! Every error of the HTTP surface, and the one place it becomes an
//! `application/problem+json` response.
//!
//! Messages are built from typed facts only; an internal error's text never reaches
//! a client (it is logged by its kind, without secrets).

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The `type` URI prefix of every problem.
pub const PROBLEM_BASE: &str = "https://proxy-pool.local/problems/";
/// The problem media type.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The body is not valid JSON of the expected shape (unknown field, wrong type).
    #[error("the request body is not valid JSON for this operation: {0}")]
    InvalidJson(String),
    /// A header is malformed.
    #[error("header {header} is invalid: {reason}")]
    InvalidHeader {
        /// Header name.
        header: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// Headers too large or too many.
    #[error("request headers exceed the listener's limits")]
    HeadersTooLarge,
    /// No or wrong credentials.
    #[error("authentication is required and was missing or invalid")]
    Unauthenticated {
        /// `WWW-Authenticate` challenge.
        challenge: String,
    },
    /// The source address is outside `allowedSources`.
    #[error("requests from this source are not allowed")]
    SourceNotAllowed,
    /// The credential lacks a permission.
    #[error("the credential lacks the permission {0}")]
    PermissionDenied(&'static str),
    /// `count` is above the credential's `maxExtractCount`.
    #[error("count {requested} exceeds this client's maxExtractCount of {limit}")]
    CountAboveClientLimit {
        /// Asked.
        requested: u32,
        /// Allowed.
        limit: u32,
    },
    /// A filter value is outside the credential's allowed set.
    #[error("{field} is not allowed for this client")]
    FilterNotAllowed {
        /// `filters.allowedUpstreams[i]` or `filters.regions[i]`.
        field: String,
        /// `UPSTREAM_NOT_ALLOWED` or `REGION_NOT_ALLOWED`.
        code: &'static str,
    },
    /// allOrNothing could not be met.
    #[error("requested {requested} proxies but only {eligible} are currently eligible")]
    Insufficient {
        /// Asked.
        requested: u32,
        /// Eligible beyond the gateway reserve.
        eligible: u32,
    },
    /// The idempotency key was used with another body.
    #[error("the Idempotency-Key was already used with a different request body")]
    IdempotencyKeyReused,
    /// Body larger than the limit.
    #[error("the request body exceeds {limit} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit: u32,
    },
    /// Not `application/json`.
    #[error("the request body must be application/json")]
    UnsupportedMediaType,
    /// A business rule on one field.
    #[error("{field}: {reason}")]
    Validation {
        /// Field path.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Rate limited.
    #[error("rate limit exceeded; retry after {} s", retry_after_secs(*.retry_after))]
    RateLimited {
        /// When a retry may succeed.
        retry_after: Duration,
    },
    /// Too many failed authentications from this source or for this user name.
    #[error("too many failed authentications; retry after {} s", retry_after_secs(*.retry_after))]
    AuthThrottled {
        /// When an attempt will be judged again.
        retry_after: Duration,
    },
    /// The activity pool cannot answer.
    #[error("the proxy pool is temporarily unavailable")]
    PoolUnavailable,
    /// The extraction scan could not finish within its budget.
    #[error("the extraction could not be completed right now; retry shortly")]
    ScanBudgetExhausted,
    /// The credential verifier (e.g. a token review) cannot answer.
    #[error("authentication is temporarily unavailable")]
    AuthUnavailable,
    /// The distributed rate limiter cannot answer.
    #[error("the rate limiter is temporarily unavailable")]
    LimiterUnavailable,
    /// Too many requests in progress on this replica.
    #[error("the server is at its concurrency limit")]
    Overloaded,
    /// The request did not finish in time.
    #[error("the request did not complete in time; retry with the same Idempotency-Key")]
    Timeout,
    /// The controller is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// No such path.
    #[error("no such resource")]
    NotFound,
    /// Wrong method.
    #[error("method not allowed")]
    MethodNotAllowed {
        /// `Allow` header value.
        allow: &'static str,
    },
    /// Anything unexpected; the detail is fixed.
    #[error("an internal error occurred")]
    Internal,
}

fn retry_after_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

/// The JSON body of a problem.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ProblemBody<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'static str,
    status: u16,
    code: &'static str,
    detail: String,
    request_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl ApiError {
    /// Status, stable code and title.
    pub fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        use StatusCode as S;
        match self {
            Self::InvalidJson(_) => (S::BAD_REQUEST, "INVALID_JSON", "Invalid JSON"),
            Self::InvalidHeader { .. } => (S::BAD_REQUEST, "INVALID_HEADER", "Invalid header"),
            Self::HeadersTooLarge => (S::BAD_REQUEST, "HEADERS_TOO_LARGE", "Headers too large"),
            Self::Unauthenticated { .. } => (S::UNAUTHORIZED, "UNAUTHENTICATED", "Unauthenticated"),
            Self::PermissionDenied(_) => (S::FORBIDDEN, "PERMISSION_DENIED", "Permission denied"),
            Self::SourceNotAllowed => (S::FORBIDDEN, "SOURCE_NOT_ALLOWED", "Source not allowed"),
            Self::CountAboveClientLimit { .. } => (
                S::FORBIDDEN,
                "COUNT_EXCEEDS_CLIENT_LIMIT",
                "Count exceeds client limit",
            ),
            Self::FilterNotAllowed { code, .. } => (S::FORBIDDEN, code, "Filter not allowed"),
            Self::Insufficient { .. } => {
                (S::CONFLICT, "INSUFFICIENT_PROXIES", "Insufficient proxies")
            }
            Self::IdempotencyKeyReused => (
                S::CONFLICT,
                "IDEMPOTENCY_KEY_REUSED",
                "Idempotency key reused",
            ),
            Self::PayloadTooLarge { .. } => (
                S::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                "Payload too large",
            ),
            Self::UnsupportedMediaType => (
                S::UNSUPPORTED_MEDIA_TYPE,
                "UNSUPPORTED_MEDIA_TYPE",
                "Unsupported media type",
            ),
            Self::Validation { .. } => (
                S::UNPROCESSABLE_ENTITY,
                "VALIDATION_FAILED",
                "Validation failed",
            ),
            Self::RateLimited { .. } => (S::TOO_MANY_REQUESTS, "RATE_LIMITED", "Rate limited"),
            Self::AuthThrottled { .. } => (
                S::TOO_MANY_REQUESTS,
                "AUTH_THROTTLED",
                "Too many failed authentications",
            ),
            Self::PoolUnavailable => (
                S::SERVICE_UNAVAILABLE,
                "POOL_UNAVAILABLE",
                "Pool unavailable",
            ),
            Self::ScanBudgetExhausted => (
                S::SERVICE_UNAVAILABLE,
                "EXTRACTION_UNAVAILABLE",
                "Extraction temporarily unavailable",
            ),
            Self::LimiterUnavailable => (
                S::SERVICE_UNAVAILABLE,
                "RATE_LIMITER_UNAVAILABLE",
                "Rate limiter unavailable",
            ),
            Self::Overloaded => (S::SERVICE_UNAVAILABLE, "OVERLOADED", "Overloaded"),
            Self::AuthUnavailable => (
                S::SERVICE_UNAVAILABLE,
                "AUTH_UNAVAILABLE",
                "Authentication unavailable",
            ),
            Self::Timeout => (S::SERVICE_UNAVAILABLE, "TIMEOUT", "Request timed out"),
            Self::ShuttingDown => (S::SERVICE_UNAVAILABLE, "SHUTTING_DOWN", "Shutting down"),
            Self::NotFound => (S::NOT_FOUND, "NOT_FOUND", "Not found"),
            Self::MethodNotAllowed { .. } => (
                S::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                "Method not allowed",
            ),
            Self::Internal => (S::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR", "Internal error"),
        }
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        self.parts().1
    }

    /// The field a business error names.
    fn field(&self) -> Option<&str> {
        match self {
            Self::Validation { field, .. } | Self::FilterNotAllowed { field, .. } => Some(field),
            _ => None,
        }
    }

    /// The problem+json response. The only place an error becomes HTTP.
    pub fn into_problem(self, request_id: &str) -> Response {
        let (status, code, title) = self.parts();
        let body = ProblemBody {
            kind: format!(
                "{PROBLEM_BASE}{}",
                code.to_ascii_lowercase().replace('_', "-")
            ),
            title,
            status: status.as_u16(),
            code,
            detail: self.to_string(),
            request_id,
            field: self.field(),
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec());
        let mut resp = (status, bytes).into_response();
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        match &self {
            Self::RateLimited { retry_after } | Self::AuthThrottled { retry_after } => {
                h.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_secs(*retry_after)),
                );
            }
            Self::PoolUnavailable
            | Self::ScanBudgetExhausted
            | Self::LimiterUnavailable
            | Self::AuthUnavailable
            | Self::Overloaded
            | Self::Timeout
            | Self::ShuttingDown => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            Self::Unauthenticated { challenge } => {
                if let Ok(v) = HeaderValue::from_str(challenge) {
                    h.insert(header::WWW_AUTHENTICATE, v);
                }
            }
            Self::MethodNotAllowed { allow } => {
                h.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
        resp.extensions_mut().insert(ErrorCode(code));
        resp
    }
}

/// The problem code of an error response, for the access log and metrics.
#[derive(Clone, Copy, Debug)]
pub struct ErrorCode(pub &'static str);

/// An error bound to its request ID: what handlers return.
#[derive(Debug)]
pub struct Problem {
    /// The error.
    pub error: ApiError,
    /// The request's ID.
    pub request_id: String,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        self.error.into_problem(&self.request_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_carry_no_detail_and_rate_limits_a_retry_after() {
        let r = ApiError::Internal.into_problem("req_1");
        assert_eq!(r.status(), 500);
        assert_eq!(r.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let r = ApiError::RateLimited {
            retry_after: Duration::from_millis(1500),
        }
        .into_problem("req_1");
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn insufficient_detail_matches_the_seed() {
        let e = ApiError::Insufficient {
            requested: 10,
            eligible: 6,
        };
        assert_eq!(
            e.to_string(),
            "requested 10 proxies but only 6 are currently eligible"
        );
        assert_eq!(e.code(), "INSUFFICIENT_PROXIES");
    }
}
