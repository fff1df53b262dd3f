//! The operator's one way to serve HTTP on a bound listener, for both of its
//! listeners (the ops endpoints in plaintext, the identity issuer over TLS): a cap on
//! open connections in total and per source address (more are closed at accept; a full
//! listener lets a source holding few displace the largest holder's oldest), a
//! deadline for the TLS handshake and
//! for every request head (the first one, and each next one on a kept-alive
//! connection — so an idle or half-open connection is closed), a bounded read buffer,
//! and a bounded grace period after shutdown. Binds nothing itself.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use proxy_pool_api::throttle::SourceSlots;
use proxy_pool_runtime::net::accept_or_stop;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more are closed on accept.
    pub max_connections: usize,
    /// Connections one source address may hold at once.
    pub max_per_source: usize,
    /// Deadline for the TLS handshake, and for each request head.
    pub head_timeout: Duration,
    /// Read buffer (bounds a request head).
    pub max_buf_size: usize,
    /// How long in-flight requests may run after shutdown begins.
    pub grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            max_per_source: 128,
            head_timeout: Duration::from_secs(10),
            max_buf_size: 16 * 1024,
            grace: Duration::from_secs(10),
        }
    }
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown`
/// completes, then lets in-flight requests finish for up to `limits.grace`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(SourceSlots::new(
        limits.max_connections,
        limits.max_per_source,
    ));
    tokio::pin!(shutdown);
    let on_error = |error: &std::io::Error| tracing::warn!(%error, "accept failed");
    let pause = Duration::from_millis(50);
    while let Some((tcp, peer)) = accept_or_stop(&listener, &mut shutdown, pause, on_error).await {
        let Some(slot) = slots.acquire(peer.ip()) else {
            tracing::debug!("connection limit reached; closing a new connection");
            continue;
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            tokio::select! {
                () = connection(tcp, acceptor, service, watcher, limits) => {}
                () = slot.evicted() => tracing::debug!("connection displaced by a smaller source"),
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("grace period over; dropping open connections");
    }
}

/// One connection: the TLS handshake under the head deadline (when TLS is on), then
/// HTTP/1 requests.
async fn connection(
    tcp: tokio::net::TcpStream,
    acceptor: Option<TlsAcceptor>,
    service: TowerToHyperService<Router>,
    watcher: hyper_util::server::graceful::Watcher,
    limits: Limits,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(limits.max_buf_size.max(8192));
    let result = match acceptor {
        Some(acceptor) => {
            let handshake = tokio::time::timeout(limits.head_timeout, acceptor.accept(tcp));
            let stream = match handshake.await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            watcher
                .watch(builder.serve_connection(TokioIo::new(stream), service))
                .await
        }
        None => {
            watcher
                .watch(builder.serve_connection(TokioIo::new(tcp), service))
                .await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}
