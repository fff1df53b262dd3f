//! `/v1/sim/...`: the simulator's control API for tests — info, live proxies,
//! direct creation, failure modes, early expiry, vendor faults.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

use super::{ApiError, Checked, ProxyList, VendorAuth};
use crate::sim::audit::{Handout, Use, Verdict};
use crate::sim::core::SimCore;
use crate::sim::failure::{FailureMode, VendorFault};
use crate::sim::model::{Protocol, ProxySpec, ProxyStatus, SimProxy};
use crate::sim::proxy;
use proxy_pool_api::proxy::Labels;

/// Where the echo servers are and the CA PEM to trust for HTTPS.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SimInfo {
    echo_http: String,
    echo_https: String,
    ca_pem: String,
    live_proxies: usize,
    max_live_proxies: usize,
}

pub(super) async fn info(_auth: VendorAuth, State(core): State<Arc<SimCore>>) -> Json<SimInfo> {
    Json(SimInfo {
        echo_http: format!("http://{}", core.echo.http),
        echo_https: format!("https://{}", core.echo.https),
        ca_pem: core.echo.ca_pem.clone(),
        live_proxies: core.registry.len(),
        max_live_proxies: core.settings.max_live_proxies,
    })
}

pub(super) async fn list(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
) -> Json<ProxyList<ProxyStatus>> {
    let proxies = core.registry.list().iter().map(|p| p.status()).collect();
    Json(ProxyList { proxies })
}

/// Body of `POST /v1/sim/proxies`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CreateProxy {
    protocol: Protocol,
    ttl_ms: u64,
    #[serde(default)]
    failure: FailureMode,
    region: Option<String>,
    carrier: Option<String>,
    city: Option<String>,
}

/// Longest TTL the control API accepts for a directly created proxy.
const MAX_CONTROL_TTL: Duration = Duration::from_secs(24 * 3600);

pub(super) async fn create(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    Checked(Json(req)): Checked<Json<CreateProxy>>,
) -> Result<(StatusCode, Json<SimProxy>), ApiError> {
    let ttl = Duration::from_millis(req.ttl_ms);
    if ttl.is_zero() || ttl > MAX_CONTROL_TTL {
        return Err(ApiError::BadRequest("ttlMs must be in 1..=86400000".into()));
    }
    req.failure.check().map_err(ApiError::BadRequest)?;
    let spec = ProxySpec {
        protocol: req.protocol,
        ttl,
        failure: req.failure,
        labels: Labels {
            region: req.region,
            carrier: req.carrier,
            city: req.city,
        },
    };
    let created = proxy::spawn(&core, spec).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

pub(super) async fn set_failure(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    Path(id): Path<String>,
    Checked(Json(mode)): Checked<Json<FailureMode>>,
) -> Result<StatusCode, ApiError> {
    mode.check().map_err(ApiError::BadRequest)?;
    core.registry.get(&id)?.failure.set(mode);
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn expire(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    core.registry.expire(&id)?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn vendor_fault(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
) -> Json<VendorFault> {
    Json(core.vendor_fault.get())
}

pub(super) async fn set_vendor_fault(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    Checked(Json(fault)): Checked<Json<VendorFault>>,
) -> Result<StatusCode, ApiError> {
    fault.check().map_err(ApiError::BadRequest)?;
    core.vendor_fault.set(fault);
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/sim/audit/uses`: every recorded use, in start order.
pub(super) async fn audit_uses(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
) -> Json<Vec<Use>> {
    Json(core.audit.uses())
}

/// `POST /v1/sim/audit/handouts`: `[{"port": …, "atMs": …}]`, proxies a client got.
pub(super) async fn audit_handouts(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    Checked(Json(handouts)): Checked<Json<Vec<Handout>>>,
) -> Result<StatusCode, ApiError> {
    if handouts.len() > 10_000 {
        return Err(ApiError::BadRequest(
            "at most 10000 handouts per call".into(),
        ));
    }
    core.audit.handouts(&handouts);
    Ok(StatusCode::NO_CONTENT)
}

/// Query of `GET /v1/sim/audit/verdict`.
#[derive(Debug, Deserialize)]
pub(super) struct VerdictQuery {
    /// Comma-separated source addresses of the extraction clients.
    clients: String,
}

/// `GET /v1/sim/audit/verdict?clients=127.0.0.2,…`: uses by anyone else after a
/// proxy was handed to a client.
pub(super) async fn audit_verdict(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    query: Result<Query<VerdictQuery>, QueryRejection>,
) -> Result<Json<Verdict>, ApiError> {
    let Query(q) = query?;
    let clients = q
        .clients
        .split(',')
        .filter(|s| !s.is_empty())
        .take(64)
        .map(|s| s.trim().parse::<std::net::IpAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| ApiError::BadRequest("clients: comma-separated IP addresses".into()))?;
    Ok(Json(core.audit.verdict(&clients)))
}
