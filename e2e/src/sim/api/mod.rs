//! The vendor HTTP API (`GET /v1/proxies`) and the simulator's control API
//! (`/v1/sim/...`), both behind the vendor credentials. Errors become JSON in one
//! place ([`ApiError`]); internal detail and credentials never reach a response or a log.

mod control;
mod vendor;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use base64::Engine as _;
use serde::Serialize;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tracing::debug;

use super::core::SimCore;
use super::error::SimError;

/// Builds the router; the caller serves it on a bound listener.
pub(crate) fn app(core: Arc<SimCore>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/proxies", get(vendor::issue))
        .route("/v1/sim/info", get(control::info))
        .route("/v1/sim/proxies", get(control::list).post(control::create))
        .route(
            "/v1/sim/proxies/{id}",
            axum::routing::delete(control::expire),
        )
        .route("/v1/sim/proxies/{id}/failure", put(control::set_failure))
        .route(
            "/v1/sim/vendor/fault",
            get(control::vendor_fault).put(control::set_vendor_fault),
        )
        .route("/v1/sim/audit/uses", get(control::audit_uses))
        .route(
            "/v1/sim/audit/handouts",
            axum::routing::post(control::audit_handouts),
        )
        .route("/v1/sim/audit/verdict", get(control::audit_verdict))
        .with_state(core)
}

/// Every way a vendor or control request can fail.
#[derive(Debug)]
pub(super) enum ApiError {
    Unauthorized,
    BadRequest(String),
    NotFound,
    PoolExhausted,
    /// A simulated vendor failure with this status (see `VendorFault::Status`).
    Simulated(StatusCode),
    Internal,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error, message) = match self {
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "vendor credentials required".to_owned(),
            ),
            Self::BadRequest(msg) => (StatusCode::BAD_REQUEST, "bad_request", msg),
            Self::NotFound => (
                StatusCode::NOT_FOUND,
                "not_found",
                "no live proxy with that id".to_owned(),
            ),
            Self::PoolExhausted => (
                StatusCode::SERVICE_UNAVAILABLE,
                "pool_exhausted",
                "no proxies available right now".to_owned(),
            ),
            Self::Simulated(status) => (status, "simulated", "simulated vendor fault".to_owned()),
            Self::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error".to_owned(),
            ),
        };
        let mut resp = (status, Json(ErrorBody { error, message })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"vendor-sim\""),
            );
        }
        if matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        ) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

/// `{"proxies": [...]}`, the list shape of both APIs.
#[derive(Debug, Serialize)]
pub(super) struct ProxyList<T> {
    pub(super) proxies: Vec<T>,
}

impl From<SimError> for ApiError {
    fn from(err: SimError) -> Self {
        match err {
            SimError::PoolFull { .. } => Self::PoolExhausted,
            SimError::UnknownProxy(_) => Self::NotFound,
            other => {
                debug!(error = %other, "vendor api internal error");
                Self::Internal
            }
        }
    }
}

/// A request body (`Checked<Json<T>>`); one that does not parse answers 400 with
/// axum's description of the problem.
pub(super) struct Checked<E>(pub(super) E);

impl<E, S> FromRequest<S> for Checked<E>
where
    E: FromRequest<S>,
    E::Rejection: Into<ApiError>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        E::from_request(req, state)
            .await
            .map(Self)
            .map_err(Into::into)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self::BadRequest(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::BadRequest(rejection.body_text())
    }
}

/// Proof that the request carried the vendor credentials
/// (`X-API-Key` or `Authorization: Basic`).
pub(super) struct VendorAuth;

impl FromRequestParts<Arc<SimCore>> for VendorAuth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        core: &Arc<SimCore>,
    ) -> Result<Self, Self::Rejection> {
        if authorized(&parts.headers, core) {
            Ok(Self)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

fn authorized(headers: &HeaderMap, core: &SimCore) -> bool {
    let creds = &core.settings.credentials;
    if let Some(key) = headers.get("x-api-key") {
        return bool::from(key.as_bytes().ct_eq(creds.api_key.expose().as_bytes()));
    }
    let Some(basic) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) else {
        return false;
    };
    let expected = format!("{}:{}", creds.username, creds.password.expose());
    bool::from(decoded.ct_eq(expected.as_bytes()))
}
