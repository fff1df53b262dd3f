//! Serves an axum `Router` on a bound listener with hard limits (connections in total
//! and per source address, header buffer, header read timeout — which also bounds how
//! long a connection may sit idle before its next request) and the graceful shutdown
//! protocol. A connection over a cap is closed right after accept; when the listener is
//! full, a source holding few connections displaces the largest holder's oldest one
//! ([`SourceSlots`]), so a flood from many addresses cannot lock the others out.
//!
//! Takes a bound listener (tests bind `127.0.0.1:0`); never binds sockets itself.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use proxy_pool_api::throttle::SourceSlots;
use proxy_pool_runtime::net::accept_or_stop;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::shutdown::{Phase, Shutdown};

/// Connection-level limits of one listener.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// Most open connections (shared fairly between sources).
    pub max_connections: usize,
    /// hyper's read buffer, which bounds the request head (≥ 8192).
    pub max_buf_size: usize,
    /// Deadline for a request head to arrive (the first one, and each next one on a
    /// kept-alive connection).
    pub header_read_timeout: Duration,
    /// Most open connections from one source address.
    pub max_connections_per_source: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_buf_size: 64 * 1024,
            header_read_timeout: Duration::from_secs(10),
            max_connections_per_source: 64,
        }
    }
}

/// Serves `router` until the shutdown phase reaches Stopping, then lets in-flight
/// requests finish until the shutdown deadline and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: Shutdown,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(SourceSlots::new(
        options.max_connections,
        options.max_connections_per_source,
    ));
    let on_error = |e: &std::io::Error| tracing::debug!(error = %e, "accept failed");
    let pause = Duration::from_millis(20);
    while let Some((stream, peer)) = accept_or_stop(
        &listener,
        shutdown.reached(Phase::Stopping),
        pause,
        on_error,
    )
    .await
    {
        let Some(slot) = slots.acquire(peer.ip()) else {
            tracing::debug!("connection limit reached; closing a new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            let router = router.clone();
            async move {
                let resp = router.oneshot(req.map(Body::new)).await;
                Ok::<_, Infallible>(resp.unwrap_or_else(|e| match e {}))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(options.header_read_timeout)
            .max_buf_size(options.max_buf_size.max(8192))
            .keep_alive(true);
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let watched = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::select! {
                _ = watched => {}
                () = slot.evicted() => {
                    tracing::debug!("connection displaced by a smaller source");
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    let wait = graceful.shutdown();
    match shutdown.deadline() {
        Some(at) => {
            if tokio::time::timeout_at(at, wait).await.is_err() {
                tracing::warn!("grace period over: closing remaining connections");
            }
        }
        None => wait.await,
    }
}
