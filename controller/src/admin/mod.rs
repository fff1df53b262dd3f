//! The admin / ops listener: `/healthz` (alive), `/readyz` (serving and its store
//! reachable), `/metrics` (Prometheus text), a read-only inventory
//! (`GET /api/v1/inventory`, Managed and Available Slots per upstream) and, with
//! analytics on, the usage stats API and dashboard (`proxy-pool-analytics`).
//!
//! Read-only: nothing here changes the pool. Errors are problem+json like the API's.
//! The stats API and dashboard carry per-client usage: they need a credential of the
//! Distribution API's clients with `stats:read` (401 without one, 403 without the
//! permission); health, readiness, metrics and inventory are for the cluster's probes
//! and Prometheus, and the chart's NetworkPolicy keeps them to those.

use std::sync::Arc;

use activity_pool::model::UpstreamId;
use activity_pool::ports::InventoryReader;
use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::distribution::{ApiError, Authenticator, rfc3339};
use crate::metrics::{InventoryLabels, Metrics};
use crate::provider::FetchStatus;
use crate::redis_link::RedisLink;
use crate::shutdown::Shutdown;
use proxy_pool_api::config::Permission;
use proxy_pool_api::inventory::{FetchError, Inventory, UpstreamInventory};

/// What the admin endpoints read.
#[derive(Clone)]
pub struct AdminState {
    /// Shutdown phase (readiness).
    pub shutdown: Shutdown,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// Inventory port.
    pub inventory: Arc<dyn InventoryReader>,
    /// Configured upstreams (bounded label set).
    pub upstreams: Arc<Vec<UpstreamId>>,
    /// Redis reachability for readiness (`None` with the memory store).
    pub redis: Option<Arc<RedisLink>>,
    /// Each upstream's last fetch and current fetch failure.
    pub fetch: FetchStatus,
    /// The usage stats API and dashboard (`None`: analytics off). Not part of
    /// readiness: analytics never makes the controller unready.
    pub stats: Option<Router>,
    /// Who may read the stats (the Distribution API's clients, `stats:read`).
    pub auth: Arc<Authenticator>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

/// The admin router (with the stats API and dashboard when analytics is on:
/// `/api/v1/stats/…`, `/stats`).
pub fn app(state: AdminState) -> Router {
    let stats = state.stats.clone().map(|s| {
        s.layer(middleware::from_fn_with_state(
            state.auth.clone(),
            require_stats_read,
        ))
    });
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/api/v1/inventory", get(inventory))
        .fallback(|| async { ApiError::NotFound.into_problem("") })
        .with_state(state);
    match stats {
        Some(stats) => router.merge(stats),
        None => router,
    }
}

/// Lets a request through only with a credential holding `stats:read`.
async fn require_stats_read(
    State(auth): State<Arc<Authenticator>>,
    req: Request,
    next: Next,
) -> Response {
    let source = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    match auth.authenticate(req.headers(), source).await {
        Ok(id) if id.permissions.contains(&Permission::StatsRead) => next.run(req).await,
        Ok(_) => ApiError::PermissionDenied("stats:read").into_problem(""),
        Err(e) => e.into_problem(""),
    }
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n")
}

async fn readyz(State(st): State<AdminState>) -> Response {
    if !st.shutdown.is_running() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    }
    if let Some(redis) = &st.redis
        && redis.ping().await.is_err()
    {
        return text(StatusCode::SERVICE_UNAVAILABLE, "redis unavailable\n");
    }
    text(StatusCode::OK, "ready\n")
}

fn text(status: StatusCode, body: &'static str) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The admin inventory document's entries (`proxy_pool_api::inventory`, the one
/// definition the operator reads too).
async fn read_inventory(st: &AdminState) -> Result<Vec<UpstreamInventory>, ApiError> {
    let mut out = Vec::with_capacity(st.upstreams.len());
    for u in st.upstreams.iter() {
        let inv = st.inventory.inventory(u).await.map_err(|e| {
            if e.is_retryable() {
                ApiError::PoolUnavailable
            } else {
                ApiError::Internal
            }
        })?;
        let fetch = st.fetch.get(u.as_str()).unwrap_or_default();
        out.push(UpstreamInventory {
            name: u.to_string(),
            managed: inv.managed,
            unextracted: inv.unextracted,
            available: inv.available,
            available_slots: inv.available_slots,
            quarantined_until: inv.quarantined_until.map(rfc3339),
            last_fetch_time: fetch.last_success.map(rfc3339),
            fetch_error: fetch.failing.map(|(reason, at)| FetchError {
                reason,
                at: rfc3339(at),
                consecutive_failures: fetch.consecutive_failures,
            }),
        });
    }
    Ok(out)
}

async fn metrics(State(st): State<AdminState>) -> Response {
    if let Ok(inv) = read_inventory(&st).await {
        for u in inv {
            for (kind, v) in [
                ("managed", u.managed),
                ("unextracted", u.unextracted),
                ("available", u.available),
                ("available_slots", u.available_slots),
                (
                    "quarantined",
                    if u.quarantined_until.is_some() {
                        u.unextracted
                    } else {
                        0
                    },
                ),
            ] {
                st.metrics
                    .inventory
                    .get_or_create(&InventoryLabels {
                        upstream: u.name.clone(),
                        kind,
                    })
                    .set(i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
    }
    if let Ok(start) = st.inventory.generation().await {
        st.metrics
            .generation_start
            .set(start.map_or(0, |t| t.0 / 1000));
    }
    let mut r = st.metrics.encode().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}

async fn inventory(State(st): State<AdminState>) -> Response {
    match read_inventory(&st).await {
        Ok(upstreams) => {
            let mut r = axum::Json(Inventory { upstreams }).into_response();
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        Err(e) => e.into_problem(""),
    }
}
