//! The checker's ops listener, for the kubelet's probes and Prometheus:
//! `GET /healthz` (200 while the process serves), `GET /readyz` (200 while a session is
//! registered with the controller, else 503) and `GET /metrics` (the run's counters).
//! Bounded like the echo server (the same listener, [`crate::listen`]): connections at
//! once in total and per source address, a header deadline, one request per
//! connection. Never reports a proxy, a task or a credential.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::listen::Limits;
use crate::runner::RunStats;

/// 64 connections at once, 16 from one source address, 5 s for a request head.
const LIMITS: Limits = Limits {
    max_connections: 64,
    max_per_source: 16,
    header_timeout: Duration::from_secs(5),
};

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
        "/metrics" => reply(StatusCode::OK, render(state)),
        _ => reply(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

/// Prometheus text of the counters.
pub fn render(state: &OpsState) -> String {
    let s = &state.stats;
    // The gauge first, then the task loop's counters, each with its help text.
    let registered = u64::from((state.registered)());
    let counters: [(&str, &str, &AtomicU64); 5] = [
        (
            "proxy_pool_checker_tasks_leased_total",
            "Check tasks leased from the controller.",
            &s.leased,
        ),
        (
            "proxy_pool_checker_tasks_probed_total",
            "Check tasks whose probes completed.",
            &s.probed,
        ),
        (
            "proxy_pool_checker_probes_cancelled_total",
            "Probes cut at the end of the shutdown grace period.",
            &s.cancelled,
        ),
        (
            "proxy_pool_checker_observations_submitted_total",
            "Observations sent to the controller.",
            &s.submitted,
        ),
        (
            "proxy_pool_checker_observations_dropped_total",
            "Observations dropped after failed submits.",
            &s.dropped,
        ),
    ];
    let mut out = metric(
        "proxy_pool_checker_registered",
        "gauge",
        "1 while a session is registered with the controller.",
        registered,
    );
    for (name, help, count) in counters {
        out.push_str(&metric(
            name,
            "counter",
            help,
            count.load(Ordering::Relaxed),
        ));
    }
    out
}

/// One sample in the Prometheus text format, with its `HELP` and `TYPE` lines.
fn metric(name: &str, kind: &str, help: &str, value: u64) -> String {
    format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n")
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    crate::listen::response(status, "text/plain; version=0.0.4", body)
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

    /// The exposition text, to the byte: names, types, help texts and order.
    #[test]
    fn metrics_text_is_stable() {
        let stats = Arc::new(RunStats::default());
        for (i, c) in [
            &stats.leased,
            &stats.probed,
            &stats.cancelled,
            &stats.submitted,
            &stats.dropped,
        ]
        .into_iter()
        .enumerate()
        {
            c.store(i as u64 + 1, Ordering::Relaxed);
        }
        let state = OpsState {
            registered: Arc::new(|| false),
            stats,
        };
        let want = "\
# HELP proxy_pool_checker_registered 1 while a session is registered with the controller.
# TYPE proxy_pool_checker_registered gauge
proxy_pool_checker_registered 0
# HELP proxy_pool_checker_tasks_leased_total Check tasks leased from the controller.
# TYPE proxy_pool_checker_tasks_leased_total counter
proxy_pool_checker_tasks_leased_total 1
# HELP proxy_pool_checker_tasks_probed_total Check tasks whose probes completed.
# TYPE proxy_pool_checker_tasks_probed_total counter
proxy_pool_checker_tasks_probed_total 2
# HELP proxy_pool_checker_probes_cancelled_total Probes cut at the end of the shutdown grace period.
# TYPE proxy_pool_checker_probes_cancelled_total counter
proxy_pool_checker_probes_cancelled_total 3
# HELP proxy_pool_checker_observations_submitted_total Observations sent to the controller.
# TYPE proxy_pool_checker_observations_submitted_total counter
proxy_pool_checker_observations_submitted_total 4
# HELP proxy_pool_checker_observations_dropped_total Observations dropped after failed submits.
# TYPE proxy_pool_checker_observations_dropped_total counter
proxy_pool_checker_observations_dropped_total 5
";
        assert_eq!(render(&state), want);
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
        let state = OpsState {
            registered: Arc::new(|| true),
            stats: Arc::new(RunStats::default()),
        };
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
