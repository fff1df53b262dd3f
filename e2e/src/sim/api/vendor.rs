//! `GET /v1/proxies`: sells fresh proxies as JSON or lines, honouring the vendor
//! fault currently set. Never issues more than the live cap allows.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rand::seq::IndexedRandom;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, instrument};

use super::{ApiError, ProxyList, VendorAuth};
use crate::sim::core::SimCore;
use crate::sim::error::SimError;
use crate::sim::failure::VendorFault;
use crate::sim::model::{Protocol, ProxySpec, SimProxy};
use crate::sim::proxy;
use proxy_pool_api::proxy::Labels;

/// Query of `GET /v1/proxies`; unknown parameters are ignored, as vendors do.
#[derive(Debug, Deserialize)]
pub(super) struct IssueQuery {
    count: Option<u32>,
    protocol: Option<String>,
    region: Option<String>,
    carrier: Option<String>,
    city: Option<String>,
    format: Option<String>,
}

#[instrument(level = "debug", skip_all)]
pub(super) async fn issue(
    _auth: VendorAuth,
    State(core): State<Arc<SimCore>>,
    query: Result<Query<IssueQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    if let Some(resp) = simulate_fault(&core).await? {
        return Ok(resp);
    }
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
    let city = known_label("city", q.city, &settings.cities)?;
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
                labels: Labels {
                    region: region
                        .clone()
                        .or_else(|| settings.regions.choose(&mut rng).cloned()),
                    carrier: carrier
                        .clone()
                        .or_else(|| settings.carriers.choose(&mut rng).cloned()),
                    city: city
                        .clone()
                        .or_else(|| settings.cities.choose(&mut rng).cloned()),
                },
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

/// Applies the vendor fault: an early response, a delay, or nothing.
async fn simulate_fault(core: &SimCore) -> Result<Option<Response>, ApiError> {
    match core.vendor_fault.get() {
        VendorFault::None => Ok(None),
        VendorFault::Status { status } => Err(ApiError::Simulated(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        )),
        fault @ VendorFault::Slow { delay_ms } => {
            debug!(?fault, "vendor api delaying");
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            Ok(None)
        }
        VendorFault::Garbage => {
            let mut resp = r#"{"proxies":[{"id":"px-"#.into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok(Some(resp))
        }
    }
}
