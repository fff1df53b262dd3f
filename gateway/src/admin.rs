//! A tiny ops listener: `GET /metrics` (OpenMetrics text), `GET /healthz` (always
//! 200) and `GET /readyz` (200 while a fresh snapshot with at least one usable proxy
//! is installed and shutdown has not begun, else 503: a worker that could only refuse
//! stays out of its Service).
//!
//! Bounded against hostile clients: at most [`MAX_CONNECTIONS`] connections, and
//! [`MAX_PER_SOURCE`] from one address (more are closed at accept), one small request head per connection read under
//! [`HEAD_TIMEOUT`] (searched incrementally), the answer written under
//! [`WRITE_TIMEOUT`], and the whole exchange cut at [`TIMEOUT`].

use proxy_pool_api::throttle::SourceSlots;
use proxy_pool_runtime::net::accept_or_stop;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::clock::now_ms;
use crate::listener::Gateway;
use crate::snapshot::SnapshotHandle;

const MAX_REQUEST: usize = 4096;
/// Connections served at once; more are closed right after accept.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections one source address may hold at once.
pub const MAX_PER_SOURCE: usize = 16;
/// Deadline for a request head to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest time one write of the answer may make no progress.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(3);
/// Deadline of a whole exchange.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the ops endpoints until `shutdown` resolves. Once `terminating` is
/// cancelled, `/readyz` answers 503 (the listeners may still be open: that is what
/// takes the pod out of its Service's endpoints before they close).
pub async fn serve_admin(
    listener: TcpListener,
    gateway: Gateway,
    snapshots: SnapshotHandle,
    terminating: CancellationToken,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let slots = Arc::new(SourceSlots::new(MAX_CONNECTIONS, MAX_PER_SOURCE));
    let on_error = |err: &std::io::Error| debug!(error = %err, "admin accept failed");
    let pause = Duration::from_millis(50);
    loop {
        let stop = &mut shutdown;
        let Some((stream, peer)) = accept_or_stop(&listener, stop, pause, on_error).await else {
            return;
        };
        let Some(slot) = slots.acquire(peer.ip()) else {
            debug!("admin connection limit reached; closing a new connection");
            continue;
        };
        let gateway = gateway.clone();
        let snapshots = snapshots.clone();
        let terminating = terminating.is_cancelled();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::timeout(TIMEOUT, answer(stream, &gateway, &snapshots, terminating)) => {}
                () = slot.evicted() => debug!("admin connection displaced by a smaller source"),
            }
            drop(slot);
        });
    }
}

async fn answer(
    mut stream: TcpStream,
    gateway: &Gateway,
    snapshots: &SnapshotHandle,
    terminating: bool,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut len = 0;
    let mut scanned = 0;
    let read_head = async {
        loop {
            if buf[scanned..len].windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            scanned = len.saturating_sub(3);
            if len == buf.len() {
                return Ok(false);
            }
            let n = stream.read(&mut buf[len..]).await?;
            if n == 0 {
                return Ok(false);
            }
            len += n;
        }
    };
    match tokio::time::timeout(HEAD_TIMEOUT, read_head).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) | Err(_) => return Ok(()),
        Ok(Err(e)) => return Err(e),
    }
    let path = buf[..len].split(|&b| b == b' ').nth(1).unwrap_or_default();
    let mut content_type = "text/plain; charset=utf-8";
    let (status, body) = match path {
        b"/metrics" => {
            content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
            ("200 OK", gateway.render_metrics())
        }
        b"/healthz" => ("200 OK", "ok\n".to_owned()),
        b"/readyz" if terminating => ("503 Service Unavailable", "shutting down\n".to_owned()),
        b"/readyz" => {
            let now = now_ms();
            match snapshots.load().as_ref() {
                Some(s) if s.is_stale(now) => {
                    ("503 Service Unavailable", "no fresh snapshot\n".to_owned())
                }
                Some(s) if !s.has_usable_proxy(now) => {
                    ("503 Service Unavailable", "no usable proxy\n".to_owned())
                }
                Some(_) => ("200 OK", "ready\n".to_owned()),
                None => ("503 Service Unavailable", "no fresh snapshot\n".to_owned()),
            }
        }
        _ => ("404 Not Found", "not found\n".to_owned()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    crate::io::write_all(&mut stream, head.as_bytes(), WRITE_TIMEOUT).await?;
    crate::io::write_all(&mut stream, body.as_bytes(), WRITE_TIMEOUT).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;
    use proxy_pool_e2e::hostile::attack;
    use std::net::{Ipv4Addr, SocketAddr};
    use tokio::io::AsyncWriteExt;

    async fn connect_from(src: Ipv4Addr, addr: SocketAddr) -> TcpStream {
        attack::connect_from(src, addr).await.expect("connect")
    }

    /// Whether the server closed `s` within `within` (EOF or reset).
    async fn closed(s: &mut TcpStream, within: Duration) -> bool {
        attack::until_closed(s, within).await.0.is_some()
    }

    #[tokio::test]
    async fn idle_and_excess_connections_are_closed_and_others_still_served() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let snapshots = SnapshotHandle::new(Duration::from_secs(60));
        let (gateway, _outcomes) = Gateway::new(snapshots.clone(), GatewayConfig::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_admin(
            listener,
            gateway,
            snapshots,
            CancellationToken::new(),
            async {
                let _ = stopped.await;
            },
        ));
        // One source holds its share and sends nothing; one more is closed at once.
        let flooder = Ipv4Addr::new(127, 0, 5, 10);
        let mut idle = Vec::new();
        for _ in 0..MAX_PER_SOURCE {
            idle.push(connect_from(flooder, addr).await);
        }
        let mut over = connect_from(flooder, addr).await;
        assert!(
            closed(&mut over, Duration::from_millis(500)).await,
            "over the per-source cap: closed at accept"
        );
        // Another source is served meanwhile.
        let mut s = connect_from(Ipv4Addr::new(127, 0, 6, 2), addr).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(TIMEOUT, s.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // The idle ones are closed at the head deadline.
        for s in &mut idle {
            assert!(
                closed(s, HEAD_TIMEOUT * 2).await,
                "an idle connection outlived the head deadline"
            );
        }
        let _ = stop.send(());
        server.await.expect("admin listener");
    }
}
