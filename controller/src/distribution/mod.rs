//! The Distribution HTTP API (`POST /api/v1/proxies/extract`): a thin adapter that
//! decodes strictly, authenticates and admits before reading the body, and maps every
//! outcome of the activity pool's `ExtractionStore` to the contract.
//!
//! It never logs a proxy address or credential, and never sends internal error text.

mod auth;
mod handler;
mod limits;
mod problem;
mod request;
mod response;
#[cfg(any(test, feature = "testkit"))]
pub mod review_testkit;
mod source;
mod token_review;

use std::sync::Arc;
use std::time::{Duration, Instant};

use activity_pool::Clock;
use activity_pool::ports::ExtractionStore;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::post;
use proxy_pool_analytics::Collector;
use proxy_pool_api::config::DistributionConfig;
use tokio::sync::Semaphore;

pub use auth::{
    AuthError, AuthThrottle, Authenticator, BearerVerifier, Identity, StaticBearerVerifier,
    ThrottleConfig, Verified, hash_password, hash_secret,
};
pub use limits::{Decision, LimiterError, LocalLimiter, RateLimiter, RedisLimiter};
pub use problem::{ApiError, ErrorCode, PROBLEM_BASE, PROBLEM_JSON, Problem};
pub use response::{proxy_url, rfc3339};
pub use token_review::{
    KubeTokenReviewer, MAX_CONCURRENT_REVIEWS, Review, ReviewGuard, ReviewUnavailable,
    ReviewedToken, ReviewedUser, TokenReviewBearerVerifier, TokenReviewer, jwt_expiry,
};

use crate::demand::DrainDemand;
use crate::metrics::{Metrics, StatusLabels};
use crate::shutdown::Shutdown;

/// The extract path.
pub const EXTRACT_PATH: &str = "/api/v1/proxies/extract";
/// Longest accepted `X-Request-ID`.
const MAX_REQUEST_ID: usize = 128;

/// Everything a Distribution request needs. Cheap to clone.
#[derive(Clone)]
pub struct DistributionState {
    /// Listener settings.
    pub config: Arc<DistributionConfig>,
    /// Authentication.
    pub auth: Arc<Authenticator>,
    /// Admission rate limits.
    pub limiter: Arc<dyn RateLimiter>,
    /// The activity pool's extraction port.
    pub store: Arc<dyn ExtractionStore>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Shutdown phase.
    pub shutdown: Shutdown,
    /// Bounds requests in progress.
    pub in_flight: Arc<Semaphore>,
    /// Wall clock for `remainingTtlSeconds`.
    pub clock: Arc<dyn Clock>,
    /// Usage analytics (never waits; disabled unless analytics is on).
    pub collector: Collector,
    /// Where unmet demand goes (the control plane drains gateway-owned proxies);
    /// `None` without a control plane.
    pub drains: Option<Arc<dyn DrainDemand>>,
    /// How long a request the unowned pool cannot serve waits for drains.
    pub drain_wait: Duration,
}

impl std::fmt::Debug for DistributionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributionState")
            .field("listen", &self.config.listen)
            .finish_non_exhaustive()
    }
}

impl DistributionState {
    /// A state with the in-flight bound from the config.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Arc<DistributionConfig>,
        auth: Arc<Authenticator>,
        limiter: Arc<dyn RateLimiter>,
        store: Arc<dyn ExtractionStore>,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let in_flight = Arc::new(Semaphore::new(config.limits.max_in_flight as usize));
        Self {
            config,
            auth,
            limiter,
            store,
            metrics,
            shutdown,
            in_flight,
            clock,
            collector: Collector::disabled(),
            drains: None,
            drain_wait: Duration::ZERO,
        }
    }

    /// Sends unmet demand to `drains` and lets a request wait up to `wait` for the
    /// drains it caused (`None`: no control plane, nothing to drain).
    #[must_use]
    pub fn with_drains(mut self, drains: Option<Arc<dyn DrainDemand>>, wait: Duration) -> Self {
        self.drains = drains;
        self.drain_wait = wait;
        self
    }

    /// Records successful extractions in `collector` (`None`: analytics off).
    #[must_use]
    pub fn with_collector(mut self, collector: Option<Collector>) -> Self {
        self.collector = collector.unwrap_or_else(Collector::disabled);
        self
    }
}

/// The request's ID, set by the envelope middleware.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

/// Facts the access log line reports, set by the handler on its response.
#[derive(Clone, Debug, Default)]
pub struct AccessInfo {
    /// Client ID.
    pub client: Option<String>,
    /// `count`.
    pub requested: Option<u32>,
    /// Proxies returned.
    pub returned: Option<u32>,
    /// Filter summary.
    pub filters: Option<String>,
    /// An idempotent replay.
    pub replayed: bool,
}

/// The Distribution router.
pub fn app(state: DistributionState) -> Router {
    Router::new()
        .route(
            EXTRACT_PATH,
            post(handler::extract).fallback(method_not_allowed),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), envelope))
        .with_state(state)
}

async fn not_found(req: Request) -> Response {
    ApiError::NotFound.into_problem(&request_id_of(&req))
}

async fn method_not_allowed(req: Request) -> Response {
    ApiError::MethodNotAllowed { allow: "POST" }.into_problem(&request_id_of(&req))
}

fn request_id_of(req: &Request) -> String {
    req.extensions()
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_default()
}

fn new_request_id() -> String {
    format!("req_{}", uuid::Uuid::new_v4().simple())
}

/// Request ID, header limits, shutdown refusal, metrics and the access log line.
async fn envelope(State(st): State<DistributionState>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let (request_id, early) = admit_headers(&st, &req);
    let mut resp = match early {
        Some(err) => err.into_problem(&request_id),
        None => {
            req.extensions_mut().insert(RequestId(request_id.clone()));
            next.run(req).await
        }
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let elapsed = started.elapsed();
    let status = resp.status().as_u16();
    st.metrics
        .requests
        .get_or_create(&StatusLabels {
            status: status.to_string(),
        })
        .inc();
    st.metrics.latency.observe(elapsed.as_secs_f64());
    let info = resp
        .extensions()
        .get::<AccessInfo>()
        .cloned()
        .unwrap_or_default();
    let code = resp.extensions().get::<ErrorCode>().map_or("OK", |c| c.0);
    tracing::info!(
        target: "access",
        request_id = %request_id,
        client = info.client.as_deref().unwrap_or("-"),
        requested = info.requested,
        returned = info.returned,
        filters = info.filters.as_deref().unwrap_or("-"),
        replayed = info.replayed,
        status,
        code,
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        "extract"
    );
    resp
}

/// Validates `X-Request-ID` and the header limits; refuses work while shutting down.
fn admit_headers(st: &DistributionState, req: &Request) -> (String, Option<ApiError>) {
    let mut ids = req.headers().get_all("x-request-id").iter();
    let (id, mut err) = match (ids.next(), ids.next()) {
        (None, _) => (new_request_id(), None),
        (Some(v), None) => match v.to_str() {
            Ok(s)
                if activity_pool::model::RequestId::new(s).is_ok() && s.len() <= MAX_REQUEST_ID =>
            {
                (s.to_owned(), None)
            }
            _ => (
                new_request_id(),
                Some(ApiError::InvalidHeader {
                    header: "X-Request-ID",
                    reason: "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -",
                }),
            ),
        },
        (Some(_), Some(_)) => (
            new_request_id(),
            Some(ApiError::InvalidHeader {
                header: "X-Request-ID",
                reason: "must appear at most once",
            }),
        ),
    };
    let limits = &st.config.limits;
    let headers = req.headers();
    let bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if headers.len() > limits.max_headers as usize || bytes > limits.max_header_bytes as usize {
        err = Some(ApiError::HeadersTooLarge);
    }
    if err.is_none() && !st.shutdown.is_running() {
        err = Some(ApiError::ShuttingDown);
    }
    (id, err)
}
