//! The vendor HTTP API (`GET /v1/proxies`) and the simulator's control API
//! (`/v1/sim/...`), both behind the vendor credentials. Errors become JSON in one
//! place ([`ApiError`]); internal detail and credentials never reach a response or a log.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use base64::Engine as _;
use rand::seq::IndexedRandom;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tracing::{debug, instrument};

use super::core::SimCore;
use super::error::SimError;
use super::failure::FailureMode;
use super::model::{Protocol, ProxySpec, ProxyStatus, SimProxy};
use super::proxy;

/// Builds the router; the caller serves it on a bound listener.
pub(crate) fn app(core: Arc<SimCore>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/proxies", get(issue))
        .route("/v1/sim/info", get(info))
        .route("/v1/sim/proxies", get(list).post(create))
        .route("/v1/sim/proxies/{id}", axum::routing::delete(expire))
        .route("/v1/sim/proxies/{id}/failure", put(set_failure))
        .with_state(core)
}

/// Every way a vendor or control request can fail.
#[derive(Debug)]
pub(crate) enum ApiError {
    Unauthorized,
    BadRequest(String),
    NotFound,
    PoolExhausted,
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
        resp
    }
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

/// Proof that the request carried the vendor credentials
/// (`X-API-Key` or `Authorization: Basic`).
struct VendorAuth;

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
        return bool::from(key.as_bytes().ct_eq(creds.api_key.as_bytes()));
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
    let expected = format!("{}:{}", creds.username, creds.password);
    bool::from(decoded.ct_eq(expected.as_bytes()))
}

/// Query of `GET /v1/proxies`; unknown parameters are ignored, as vendors do.
#[derive(Debug, Deserialize)]
struct IssueQuery {
    count: Option<u32>,
    protocol: Option<String>,
    region: Option<String>,
    carrier: Option<String>,
    format: Option<String>,
}

#[derive(Debug, Serialize)]
struct ProxyList<T> {
    proxies: Vec<T>,
}

#[instrument(level = "debug", skip_all)]
async fn issue(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    query: Result<Query<IssueQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let settings = &core.settings;
    let count = q.count.unwrap_or(1);
    if count == 0 || count > settings.max_per_request {
        return Err(ApiError::BadRequest(format!(
            "count must be in 1..={}",
            settings.max_per_request
        )));
    }
    let protocol = match q.protocol.as_deref() {
        None => Protocol::Http,
        Some(p) => p.parse().map_err(ApiError::BadRequest)?,
    };
    let lines = match q.format.as_deref() {
        None | Some("json") => false,
        Some("lines") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "unknown format {other:?} (json or lines)"
            )));
        }
    };
    let region = known_label("region", q.region, &settings.regions)?;
    let carrier = known_label("carrier", q.carrier, &settings.carriers)?;
    // One TTL per batch, as vendors quote one validity for a purchase.
    let ttl = settings.ttl.sample(&mut rand::rng());
    let mut issued = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let spec = {
            let mut rng = rand::rng();
            ProxySpec {
                protocol,
                ttl,
                failure: settings.draw_failure(&mut rng),
                region: region
                    .clone()
                    .or_else(|| settings.regions.choose(&mut rng).cloned()),
                carrier: carrier
                    .clone()
                    .or_else(|| settings.carriers.choose(&mut rng).cloned()),
            }
        };
        match proxy::spawn(&core, spec).await {
            Ok(p) => issued.push(p),
            Err(SimError::PoolFull { .. }) => break,
            Err(err) => return Err(err.into()),
        }
    }
    debug!(requested = count, issued = issued.len(), %protocol, "vendor issue");
    if issued.is_empty() {
        return Err(ApiError::PoolExhausted);
    }
    Ok(if lines {
        lines_response(&issued, ttl)
    } else {
        Json(ProxyList { proxies: issued }).into_response()
    })
}

fn known_label(
    what: &str,
    wanted: Option<String>,
    labels: &[String],
) -> Result<Option<String>, ApiError> {
    match wanted {
        Some(label) if !labels.contains(&label) => {
            Err(ApiError::BadRequest(format!("unknown {what} {label:?}")))
        }
        other => Ok(other),
    }
}

/// `protocol://user:pass@host:port` per line; TTL and expiry in headers.
fn lines_response(issued: &[SimProxy], ttl: Duration) -> Response {
    let mut body = String::new();
    for p in issued {
        body.push_str(&p.url());
        body.push('\n');
    }
    let mut resp = body.into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert("x-proxy-ttl-seconds", HeaderValue::from(ttl.as_secs()));
    headers.insert("x-proxy-count", HeaderValue::from(issued.len()));
    if let Some(first) = issued.first()
        && let Ok(value) = HeaderValue::from_str(&first.expires_at)
    {
        headers.insert("x-proxy-expires-at", value);
    }
    resp
}

/// Where the echo servers are and the CA PEM to trust for HTTPS.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SimInfo {
    echo_http: String,
    echo_https: String,
    ca_pem: String,
    live_proxies: usize,
    max_live_proxies: usize,
}

async fn info(_auth: VendorAuth, State(core): State<Arc<SimCore>>) -> Json<SimInfo> {
    Json(SimInfo {
        echo_http: format!("http://{}", core.echo.http),
        echo_https: format!("https://{}", core.echo.https),
        ca_pem: core.echo.ca_pem.clone(),
        live_proxies: core.registry.len(),
        max_live_proxies: core.settings.max_live_proxies,
    })
}

async fn list(_auth: VendorAuth, State(core): State<Arc<SimCore>>) -> Json<ProxyList<ProxyStatus>> {
    let proxies = core.registry.list().iter().map(|p| p.status()).collect();
    Json(ProxyList { proxies })
}

/// Body of `POST /v1/sim/proxies`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreateProxy {
    protocol: Protocol,
    ttl_ms: u64,
    #[serde(default)]
    failure: FailureMode,
    region: Option<String>,
    carrier: Option<String>,
}

/// Longest TTL the control API accepts for a directly created proxy.
const MAX_CONTROL_TTL: Duration = Duration::from_secs(24 * 3600);

async fn create(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    body: Result<Json<CreateProxy>, JsonRejection>,
) -> Result<(StatusCode, Json<SimProxy>), ApiError> {
    let Json(req) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let ttl = Duration::from_millis(req.ttl_ms);
    if ttl.is_zero() || ttl > MAX_CONTROL_TTL {
        return Err(ApiError::BadRequest("ttlMs must be in 1..=86400000".into()));
    }
    req.failure.check().map_err(ApiError::BadRequest)?;
    let spec = ProxySpec {
        protocol: req.protocol,
        ttl,
        failure: req.failure,
        region: req.region,
        carrier: req.carrier,
    };
    let created = proxy::spawn(&core, spec).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn set_failure(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    Path(id): Path<String>,
    body: Result<Json<FailureMode>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let Json(mode) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    mode.check().map_err(ApiError::BadRequest)?;
    core.registry.get(&id)?.failure.set(mode);
    Ok(StatusCode::NO_CONTENT)
}

async fn expire(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    core.registry.expire(&id)?;
    Ok(StatusCode::NO_CONTENT)
}
