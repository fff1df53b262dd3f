//! The operator's ops listener: `/metrics` (Prometheus text), `/healthz` (the process
//! runs) and `/readyz` (start-up finished: leading or standing by). It binds nothing
//! itself: `serve` takes a bound listener and a shutdown future, and serves with the
//! operator's bounds ([`crate::serve`]): at most [`MAX_CONNECTIONS`] connections, a
//! [`HEAD_TIMEOUT`] for every request head (idle and half-open connections close).

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

/// Connections the ops listener serves at once (probes and Prometheus need few).
pub const MAX_CONNECTIONS: usize = 64;
/// Deadline of each request head.
pub const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves the ops endpoints on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    state: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = crate::serve::Limits {
        max_connections: MAX_CONNECTIONS,
        max_per_source: MAX_CONNECTIONS / 4,
        head_timeout: HEAD_TIMEOUT,
        max_buf_size: 16 * 1024,
        grace: std::time::Duration::from_secs(5),
    };
    crate::serve::serve(listener, None, app(state), limits, shutdown).await;
    Ok(())
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

    /// Whether the server closed `s` within `within` (EOF or reset on read).
    async fn closed(s: &mut tokio::net::TcpStream, within: std::time::Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut b = [0u8; 64];
        matches!(
            tokio::time::timeout(within, s.read(&mut b)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn idle_and_excess_connections_are_closed_and_others_still_served() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Health::default();
        state.ready.store(true, Ordering::Release);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, state, async {
            let _ = stopped.await;
        }));
        // One source opens more than its share and sends nothing.
        let mut idle = Vec::new();
        for _ in 0..(MAX_CONNECTIONS / 4 + 8) {
            idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        }
        let mut refused = 0;
        for s in &mut idle[MAX_CONNECTIONS / 4..] {
            refused += usize::from(closed(s, std::time::Duration::from_secs(2)).await);
        }
        assert_eq!(
            refused, 8,
            "connections over the per-source cap are closed at once"
        );
        // Another source is served meanwhile.
        let other = tokio::net::TcpSocket::new_v4().expect("socket");
        other
            .bind("127.0.0.2:0".parse().expect("addr"))
            .expect("bind 127.0.0.2");
        let mut s = other.connect(addr).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // The idle ones are closed at the head deadline, not kept forever.
        for s in &mut idle[..MAX_CONNECTIONS / 4] {
            assert!(
                closed(s, HEAD_TIMEOUT * 2).await,
                "an idle connection stayed open"
            );
        }
        let _ = stop.send(());
        server.await.expect("join").expect("served");
    }
}
