//! The operator's ops listener: `/metrics` (Prometheus text), `/healthz` (the process
//! runs) and `/readyz` (start-up finished: leading or standing by). It binds nothing
//! itself: `serve` takes a bound listener and a shutdown future.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// What the endpoints report.
#[derive(Clone, Debug, Default)]
pub struct Health {
    /// Reconcile metrics.
    pub metrics: Arc<Metrics>,
    /// Set once start-up finished.
    pub ready: Arc<AtomicBool>,
}

/// The router of the ops endpoints.
pub fn app(state: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
    )
}

async fn readyz(State(h): State<Health>) -> impl IntoResponse {
    if h.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// Serves the ops endpoints on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    state: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(app: Router, path: &str) -> (StatusCode, String) {
        let res = app
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let status = res.status();
        let body = res.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn health_ready_and_metrics() {
        let state = Health::default();
        assert_eq!(get(app(state.clone()), "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(app(state.clone()), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        state.ready.store(true, Ordering::Release);
        assert_eq!(get(app(state.clone()), "/readyz").await.0, StatusCode::OK);
        state.metrics.start("Upstream").finish(true);
        let (code, body) = get(app(state), "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert!(
            body.contains("proxy_pool_operator_reconciles_total"),
            "{body}"
        );
    }
}
