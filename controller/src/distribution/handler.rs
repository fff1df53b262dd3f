//! `POST /api/v1/proxies/extract`: the order of checks is the contract —
//! source → authentication → permission → rate limits → headers → body → business
//! validation → client constraints → one atomic extraction.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use activity_pool::PoolError;
use activity_pool::model::{ExtractOutcome, ExtractRequest, RequestId as PoolRequestId};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use proxy_pool_api::config::Permission;

use super::limits::Decision;
use super::problem::ApiError;
use super::request::{apply_constraints, check_content_type, idempotency_key, parse_body};
use super::response::ExtractResponse;
use super::source::source_ip;
use super::{AccessInfo, DistributionState, RequestId};
use crate::demand::Demand;

/// The extract handler.
pub async fn extract(State(st): State<DistributionState>, req: Request) -> Response {
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_default();
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let mut info = AccessInfo::default();
    let Ok(_permit) = st.in_flight.clone().try_acquire_owned() else {
        return finish(Err(ApiError::Overloaded), &request_id, info);
    };
    let (parts, body) = req.into_parts();
    let timeout = st.config.limits.request_timeout;
    let result = tokio::time::timeout(
        timeout,
        run(&st, &parts, body, peer, &request_id, &mut info),
    )
    .await
    .unwrap_or(Err(ApiError::Timeout));
    finish(result, &request_id, info)
}

fn finish(result: Result<Response, ApiError>, request_id: &str, info: AccessInfo) -> Response {
    let mut resp = result.unwrap_or_else(|e| e.into_problem(request_id));
    resp.extensions_mut().insert(info);
    resp
}

async fn run(
    st: &DistributionState,
    parts: &Parts,
    body: Body,
    peer: IpAddr,
    request_id: &str,
    info: &mut AccessInfo,
) -> Result<Response, ApiError> {
    let cfg = &st.config;
    let source = source_ip(peer, &parts.headers, &cfg.trusted_proxies)?;
    if !cfg.allowed_sources.is_empty() && !cfg.allowed_sources.iter().any(|n| n.contains(&source)) {
        return Err(ApiError::SourceNotAllowed);
    }
    let identity = st.auth.authenticate(&parts.headers, source).await?;
    info.client = Some(identity.client_id.to_string());
    if !identity
        .permissions
        .contains(&Permission::DistributionExtract)
    {
        return Err(ApiError::PermissionDenied("distribution:extract"));
    }
    let rate = identity.grants.rate_limit.or(cfg.per_client_rate);
    match st.limiter.admit(identity.client_id.as_str(), rate).await {
        Ok(Decision::Allow) => {}
        Ok(Decision::Deny(retry_after)) => return Err(ApiError::RateLimited { retry_after }),
        Err(_) => return Err(ApiError::LimiterUnavailable),
    }
    check_content_type(&parts.headers)?;
    let key = idempotency_key(&parts.headers)?;
    let pool_request_id = PoolRequestId::new(request_id).map_err(|_| ApiError::Internal)?;
    let limit = cfg.limits.max_body_bytes;
    if let Some(len) = parts.headers.get(header::CONTENT_LENGTH)
        && len
            .to_str()
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .is_none_or(|n| n > u64::from(limit))
    {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let bytes = Limited::new(body, limit as usize)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ApiError::PayloadTooLarge { limit }
            } else {
                ApiError::InvalidJson("the request body could not be read".into())
            }
        })?
        .to_bytes();
    let mut input = parse_body(&bytes, cfg.max_count_per_request, cfg.default_fulfillment)?;
    info.requested = Some(input.count.get());
    let digest = input.digest();
    apply_constraints(&mut input, &identity.grants)?;
    info.filters = Some(input.filter_summary());
    let request = ExtractRequest {
        client_id: identity.client_id.clone(),
        request_id: pool_request_id,
        idempotency_key: key,
        request_digest: digest,
        count: input.count,
        fulfillment: input.fulfillment,
        filters: input.filters,
        min_remaining_ttl: cfg.min_remaining_ttl,
        max_health_check_age: cfg.max_health_check_age,
        reserve_for_gateway: cfg.reserve_for_gateway,
        idempotency_ttl: cfg.idempotency_ttl,
    };
    let outcome = extract_with_drains(st, &request).await?;
    let extraction = match outcome {
        ExtractOutcome::Extracted(x) => x,
        ExtractOutcome::Insufficient { eligible } => {
            return Err(ApiError::Insufficient {
                requested: input.count.get(),
                eligible,
            });
        }
    };
    let body = ExtractResponse::new(
        request_id.to_owned(),
        input.count.get(),
        &extraction,
        st.clock.now(),
    );
    info.returned = Some(body.returned);
    info.replayed = extraction.replayed;
    if !extraction.replayed {
        st.metrics.extracted.inc_by(u64::from(body.returned));
        record_usage(st, &identity, &extraction.proxies);
    }
    let mut resp = (StatusCode::OK, axum::Json(body)).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if extraction.replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// While a request waits for drains, how often it tries again without a release
/// notice (new proxies may also become AVAILABLE unowned).
const DRAIN_POLL: Duration = Duration::from_millis(250);

/// One atomic extraction. When the unowned pool falls short, the shortfall goes to
/// the control plane as demand (it drains gateway-owned proxies); an answer that
/// changed nothing (allOrNothing short, or a partial one with no proxy) is tried again
/// as drains release proxies, until `drain_wait` is over. A partial answer with
/// proxies is final: it was stored for replays.
async fn extract_with_drains(
    st: &DistributionState,
    request: &ExtractRequest,
) -> Result<ExtractOutcome, ApiError> {
    let deadline = tokio::time::Instant::now() + st.drain_wait;
    let mut released = st.drains.as_ref().map(|d| d.released());
    let mut asked = 0u32;
    loop {
        let outcome = st.store.extract(request).await.map_err(pool_error)?;
        let count = request.count.get();
        let (short, unchanged) = match &outcome {
            ExtractOutcome::Extracted(x) if x.replayed => (0, false),
            ExtractOutcome::Extracted(x) => {
                let got = u32::try_from(x.proxies.len()).unwrap_or(u32::MAX);
                (count.saturating_sub(got), got == 0)
            }
            ExtractOutcome::Insufficient { eligible } => (count.saturating_sub(*eligible), true),
        };
        let Some(drains) = st.drains.as_ref() else {
            return Ok(outcome);
        };
        if short == 0 {
            return Ok(outcome);
        }
        if short > asked {
            drains.request(Demand {
                filters: request.filters.clone(),
                count: short - asked,
                min_remaining_ttl: request.min_remaining_ttl,
            });
            asked = short;
        }
        let now = tokio::time::Instant::now();
        if !unchanged || now >= deadline {
            return Ok(outcome);
        }
        let wait = (deadline - now).min(DRAIN_POLL);
        match released.as_mut() {
            Some(rx) => {
                let _ = tokio::time::timeout(wait, rx.changed()).await;
            }
            None => tokio::time::sleep(wait).await,
        }
    }
}

/// Anonymous callers (no-auth mode) are counted under this client name.
pub const ANONYMOUS_CLIENT: &str = "anonymous";

/// Usage analytics of a first (not replayed) successful extraction with at least one
/// proxy: one request for the client and for each upstream that supplied proxies.
/// A `try_send`: never waits, a full queue drops and counts.
fn record_usage(
    st: &DistributionState,
    identity: &super::Identity,
    proxies: &[activity_pool::model::ExtractedProxy],
) {
    if proxies.is_empty() {
        return;
    }
    let mut per_upstream: Vec<(&str, u32)> = Vec::new();
    for p in proxies {
        let u = p.upstream.as_str();
        match per_upstream.iter_mut().find(|(n, _)| *n == u) {
            Some((_, n)) => *n += 1,
            None => per_upstream.push((u, 1)),
        }
    }
    let client = identity.client_name.as_deref().unwrap_or(ANONYMOUS_CLIENT);
    st.collector
        .extraction(client, &identity.credential, &per_upstream);
}

fn pool_error(e: PoolError) -> ApiError {
    match e {
        PoolError::Unavailable(_) => ApiError::PoolUnavailable,
        PoolError::ScanBudgetExhausted => ApiError::ScanBudgetExhausted,
        PoolError::Conflict(activity_pool::ConflictReason::IdempotencyKeyReused) => {
            ApiError::IdempotencyKeyReused
        }
        PoolError::InvalidInput { field, reason } => ApiError::Validation { field, reason },
        other => {
            tracing::error!(error = %other, "extraction failed unexpectedly");
            ApiError::Internal
        }
    }
}
