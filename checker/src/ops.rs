//! The checker's ops listener, for the kubelet's probes and Prometheus:
//! `GET /healthz` (200 while the process serves), `GET /readyz` (200 while a session is
//! registered with the controller, else 503) and `GET /metrics` (the run's counters).
//! Bounded like the echo server: connections at once, a header deadline, one request
//! per connection. Never reports a proxy, a task or a credential.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::runner::RunStats;

/// Connections the ops listener serves at once.
const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the ops endpoints report.
#[derive(Clone)]
pub struct OpsState {
    /// Whether the checker has a registered session with the controller now.
    pub registered: Arc<dyn Fn() -> bool + Send + Sync>,
    /// The task loop's counters.
    pub stats: Arc<RunStats>,
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
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p,
            () = stop.cancelled() => return,
        };
        let Ok(permit) = permit else {
            return;
        };
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "ops accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&req, &state)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "ops connection ended");
            }
        });
    }
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
        "/metrics" => reply(StatusCode::OK, render(state)),
        _ => reply(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

/// Prometheus text of the counters.
pub fn render(state: &OpsState) -> String {
    let s = &state.stats;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        ));
    };
    metric(
        "proxy_pool_checker_registered",
        "gauge",
        "1 while a session is registered with the controller.",
        u64::from((state.registered)()),
    );
    metric(
        "proxy_pool_checker_tasks_leased_total",
        "counter",
        "Check tasks leased from the controller.",
        n(&s.leased),
    );
    metric(
        "proxy_pool_checker_tasks_probed_total",
        "counter",
        "Check tasks whose probes completed.",
        n(&s.probed),
    );
    metric(
        "proxy_pool_checker_probes_cancelled_total",
        "counter",
        "Probes cut at the end of the shutdown grace period.",
        n(&s.cancelled),
    );
    metric(
        "proxy_pool_checker_observations_submitted_total",
        "counter",
        "Observations sent to the controller.",
        n(&s.submitted),
    );
    metric(
        "proxy_pool_checker_observations_dropped_total",
        "counter",
        "Observations dropped after failed submits.",
        n(&s.dropped),
    );
    out
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
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
        let state = OpsState {
            registered: Arc::new(move || flag.load(Ordering::Relaxed)),
            stats,
        };
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
        assert!(m.contains("proxy_pool_checker_registered 1"), "{m}");
        assert!(m.contains("proxy_pool_checker_tasks_leased_total 7"), "{m}");
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        stop.cancel();
        server.await.expect("server stops");
    }
}
