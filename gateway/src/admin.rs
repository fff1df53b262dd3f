//! A tiny ops listener: `GET /metrics` (Prometheus text), `GET /healthz` (always
//! 200) and `GET /readyz` (200 while a fresh snapshot with at least one usable proxy
//! is installed and shutdown has not begun, else 503: a worker that could only refuse
//! stays out of its Service). Reads at most one small request head per connection,
//! with a timeout.

use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::listener::Gateway;
use crate::snapshot::SnapshotHandle;
use crate::snapshot::live::now_ms;

const MAX_REQUEST: usize = 4096;
const TIMEOUT: Duration = Duration::from_secs(5);

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
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(err) => {
                    debug!(error = %err, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let gateway = gateway.clone();
        let snapshots = snapshots.clone();
        let terminating = terminating.is_cancelled();
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(TIMEOUT, answer(stream, &gateway, &snapshots, terminating))
                    .await;
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
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == buf.len() {
            return Ok(());
        }
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    }
    let path = buf[..len].split(|&b| b == b' ').nth(1).unwrap_or_default();
    let (status, body) = match path {
        b"/metrics" => ("200 OK", gateway.render_metrics()),
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
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await
}
