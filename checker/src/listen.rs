//! The one bounded HTTP/1 listener under the checker's small servers (the echo
//! endpoint and the ops listener): connections at once in total and per source
//! address (more are closed at accept; a source over its fair share is displaced), a
//! deadline for the request head, one request per connection, no request body read.
//! Owns the accept loop only; what is answered is the caller's.

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use proxy_pool_api::throttle::SourceSlots;
use proxy_pool_runtime::net::accept_or_stop;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A response of `status` with `body` of type `content_type` (what both listeners
/// answer with).
pub fn response(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(body.into()));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

/// Limits of one listener.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once, shared fairly between sources.
    pub max_connections: usize,
    /// Connections one source address may hold at once.
    pub max_per_source: usize,
    /// Time a client has to send its request head.
    pub header_timeout: Duration,
}

/// Serves `answer` (given the request and its peer) until `stop` is cancelled. `name`
/// labels the debug logs.
pub async fn serve<A>(
    name: &'static str,
    listener: TcpListener,
    limits: Limits,
    stop: CancellationToken,
    answer: A,
) where
    A: Fn(&Request<Incoming>, SocketAddr) -> Response<Full<Bytes>> + Clone + Send + Sync + 'static,
{
    let slots = Arc::new(SourceSlots::new(
        limits.max_connections,
        limits.max_per_source,
    ));
    let on_error =
        |e: &std::io::Error| tracing::debug!(listener = name, error = %e, "accept failed");
    let pause = Duration::from_millis(50);
    loop {
        let accepted = accept_or_stop(&listener, stop.cancelled(), pause, on_error).await;
        let Some((stream, peer)) = accepted else {
            return;
        };
        let Some(slot) = slots.acquire(peer.ip()) else {
            tracing::debug!(
                listener = name,
                "connection limit reached; closing a new connection"
            );
            continue;
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let reply = answer(&req, peer);
                async move { Ok::<_, Infallible>(reply) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = conn => {
                    if let Err(e) = r {
                        tracing::debug!(listener = name, error = %e, "connection ended");
                    }
                }
                () = slot.evicted() => tracing::debug!(listener = name, "connection displaced"),
            }
            drop(slot);
        });
    }
}
