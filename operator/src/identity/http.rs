//! The HTTPS issuance endpoint: `fn router(issuer) -> Router` (tested with `oneshot`)
//! and [`serve`], which takes a bound listener, the TLS config and a shutdown future.
//! Server-only TLS: the caller proves itself with its token, not a client certificate.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::routing::post;
use rustls::server::ResolvesServerCert;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::error::IssueError;
use super::issuer::Issuer;
use super::wire::{ISSUE_PATH, IssueRequest, IssueResponse, MAX_REQUEST_BYTES};

/// Deadline for the TLS handshake and for reading request headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline for the request body (a few KiB: a token header and a CSR). Read before
/// an issuance slot is taken, so slow senders hold no slot.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline for one issuance (TokenReview + lookups + signing).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; more are closed on accept.
const MAX_CONNECTIONS: usize = 512;
/// How long in-flight requests may run after shutdown begins.
const GRACE: Duration = Duration::from_secs(10);
/// Issuances in progress at once; more get 503 at once. Bounds the TokenReview and
/// lookup load unauthenticated callers can push onto the API server. A slot is taken
/// only once the whole (bounded) body is in, so trickling clients hold none.
pub const MAX_IN_FLIGHT: usize = 64;

#[derive(Clone, Debug)]
struct AppState {
    issuer: Arc<Issuer>,
    in_flight: Arc<Semaphore>,
}

/// The endpoint's routes.
pub fn router(issuer: Arc<Issuer>) -> Router {
    Router::new()
        .route(ISSUE_PATH, post(issue))
        .with_state(AppState {
            issuer,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        })
}

async fn issue(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<IssueResponse>, IssueError> {
    let result = handle(&state, &headers, body).await;
    state.issuer.metrics().record(&result);
    match &result {
        Err(e @ (IssueError::Unavailable(_) | IssueError::Internal(_))) => {
            tracing::warn!(error = %e, "identity issuance failed");
        }
        Err(e) => tracing::debug!(status = e.status().as_u16(), "identity request refused"),
        Ok(_) => {}
    }
    result.map(Json)
}

/// Cheap checks, then the body under its deadline and size cap, and only then an
/// issuance slot for the TokenReview, the lookups and the signing.
async fn handle(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<IssueResponse, IssueError> {
    let token = bearer(headers).ok_or(IssueError::Unauthenticated("missing bearer token"))?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(IssueError::UnsupportedMediaType);
    }
    let bytes = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_REQUEST_BYTES))
        .await
        .map_err(|_| IssueError::BodyTimeout)?
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                IssueError::PayloadTooLarge
            } else {
                IssueError::BadRequest("could not read the request body".into())
            }
        })?;
    let request: IssueRequest = serde_json::from_slice(&bytes)
        .map_err(|_| IssueError::BadRequest(r#"body must be {"csr": "<PEM CSR>"}"#.into()))?;
    let Ok(_slot) = state.in_flight.try_acquire() else {
        return Err(IssueError::Unavailable(
            "too many issuances in flight".into(),
        ));
    };
    tokio::time::timeout(REQUEST_TIMEOUT, state.issuer.issue(token, &request.csr))
        .await
        .map_err(|_| IssueError::Unavailable("issuance timed out".into()))?
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A server-only TLS configuration (ring, TLS 1.2/1.3, `http/1.1`).
pub fn server_tls(
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` over TLS on `listener` until `shutdown` completes, then lets
/// in-flight requests finish for up to a bounded grace period.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) {
    let limits = crate::serve::Limits {
        max_connections: MAX_CONNECTIONS,
        max_per_source: MAX_CONNECTIONS / 4,
        head_timeout: HANDSHAKE_TIMEOUT,
        max_buf_size: 16 * 1024,
        grace: GRACE,
    };
    crate::serve::serve(listener, Some(tls), app, limits, shutdown).await;
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
