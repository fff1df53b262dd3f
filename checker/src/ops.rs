//! The checker's ops listener, for the kubelet's probes and Prometheus:
//! `GET /healthz` (200 while the process serves), `GET /readyz` (200 while a session is
//! registered with the controller, else 503) and `GET /metrics` (OpenMetrics text of
//! [`crate::metrics`]). Bounded like the echo server (the same listener,
//! [`crate::listen`]): connections at once in total and per source address, a header
//! deadline, one request per connection. Never reports a proxy, a task or a credential.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::listen::Limits;
use crate::metrics::Metrics;
use crate::runner::RunStats;

/// 64 connections at once, 16 from one source address, 5 s for a request head.
const LIMITS: Limits = Limits {
    max_connections: 64,
    max_per_source: 16,
    header_timeout: Duration::from_secs(5),
};

/// The content type of `/metrics`.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the ops endpoints report.
#[derive(Clone)]
pub struct OpsState {
    /// Whether the checker has a registered session with the controller now.
    pub registered: Arc<dyn Fn() -> bool + Send + Sync>,
    /// The checker's metrics.
    pub metrics: Arc<Metrics>,
}

impl OpsState {
    /// The state of a checker whose session is `registered` and whose task loop counts
    /// into `stats`.
    pub fn new(registered: Arc<dyn Fn() -> bool + Send + Sync>, stats: Arc<RunStats>) -> Self {
        let metrics = Arc::new(Metrics::new(registered.clone(), stats));
        Self {
            registered,
            metrics,
        }
    }
}

impl std::fmt::Debug for OpsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpsState")
            .field("registered", &(self.registered)())
            .finish_non_exhaustive()
    }
}

/// Serves until `stop` is cancelled.
pub async fn serve(listener: TcpListener, state: OpsState, stop: CancellationToken) {
    crate::listen::serve("ops", listener, LIMITS, stop, move |req, _| {
        answer(req, &state)
    })
    .await;
}

fn answer(req: &Request<Incoming>, state: &OpsState) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    match req.uri().path() {
        "/healthz" => reply(StatusCode::OK, "ok\n".into()),
        "/readyz" if (state.registered)() => reply(StatusCode::OK, "ready\n".into()),
        "/readyz" => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "not registered with the controller\n".into(),
        ),
        "/metrics" => crate::listen::response(StatusCode::OK, OPENMETRICS, state.metrics.encode()),
        _ => reply(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    crate::listen::response(status, "text/plain; charset=utf-8", body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn ready_follows_the_registration_and_metrics_count() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let registered = Arc::new(AtomicBool::new(false));
        let flag = registered.clone();
        let stats = Arc::new(RunStats::default());
        stats.leased.store(7, Ordering::Relaxed);
        let state = OpsState::new(Arc::new(move || flag.load(Ordering::Relaxed)), stats);
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, state, stop.clone()));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let r = get(addr, "/readyz").await;
        assert!(
            r.starts_with("HTTP/1.1 503") && r.contains("not registered"),
            "{r}"
        );
        registered.store(true, Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        let m = get(addr, "/metrics").await;
        assert!(m.contains("application/openmetrics-text"), "{m}");
        assert!(m.contains("proxy_pool_checker_session_registered 1"), "{m}");
        assert!(
            m.contains("proxy_pool_checker_tasks_received_total 7"),
            "{m}"
        );
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        stop.cancel();
        server.await.expect("server stops");
    }

    async fn connect_from(
        src: std::net::Ipv4Addr,
        addr: std::net::SocketAddr,
    ) -> tokio::net::TcpStream {
        proxy_pool_e2e::hostile::attack::connect_from(src, addr)
            .await
            .expect("connect")
    }

    /// A source holding its share of idle connections gets no more (closed at accept),
    /// and the kubelet's probe from another address is answered meanwhile.
    #[tokio::test]
    async fn one_source_cannot_take_every_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = OpsState::new(Arc::new(|| true), Arc::new(RunStats::default()));
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, state, stop.clone()));
        let flooder = std::net::Ipv4Addr::new(127, 0, 7, 10);
        let mut idle = Vec::new();
        for _ in 0..LIMITS.max_per_source {
            idle.push(connect_from(flooder, addr).await);
        }
        let mut over = connect_from(flooder, addr).await;
        let mut b = [0u8; 64];
        let closed = tokio::time::timeout(LIMITS.header_timeout / 2, over.read(&mut b)).await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "over the per-source cap: closed at accept"
        );
        let mut s = connect_from(std::net::Ipv4Addr::new(127, 0, 7, 20), addr).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        let _ =
            tokio::time::timeout(LIMITS.header_timeout / 2, s.read_to_string(&mut answer)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        stop.cancel();
        server.await.expect("server stops");
    }
}
