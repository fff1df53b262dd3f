//! The HTTP proxy listener: per connection, read a bounded request head, then
//! either open a CONNECT tunnel (the connection becomes the tunnel) or forward an
//! absolute-URI request and wait for the next one (keep-alive). Errors are answered
//! with a status and an `X-Proxy-Pool-Error` reason, never with internal detail.

use base64::Engine as _;
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::{debug, instrument};

use super::Shared;
use super::forward::{self, Scratch};
use super::tunnel;
use crate::error::GatewayError;
use crate::io::{BufConn, HeadReadError};
use crate::parse::authority::parse_authority;
use crate::parse::http_head::{Headers, parse_request};
use crate::route::{Credentials, Request};
use crate::session::MoveReason;
use crate::snapshot::live::now_ms;
use crate::upstream::Target;
use std::net::IpAddr;

/// Header naming why the gateway refused or failed a request.
pub(crate) const ERROR_HEADER: &str = "X-Proxy-Pool-Error";
/// Header announcing that a sticky session moved to another proxy.
pub(crate) const MOVED_HEADER: &str = "X-Proxy-Pool-Session-Moved";
const MAX_AUTH_HEADER: usize = 1024;

/// Whether the client connection stays open for another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    KeepAlive,
    Close,
}

/// Serves one client connection.
#[instrument(level = "debug", skip_all)]
pub(crate) async fn serve(shared: &Arc<Shared>, stream: TcpStream, peer: IpAddr) {
    let cfg = &shared.config;
    let mut conn = BufConn::new(stream, cfg.head.max_head_bytes);
    let mut scratch = Scratch::default();
    let mut first = true;
    // One registration with the drain token per connection, not one per request.
    let drain = shared.draining.cancelled();
    tokio::pin!(drain);
    loop {
        let wait = if first {
            cfg.handshake_timeout
        } else {
            cfg.client_idle_timeout
        };
        let read = conn.read_head(cfg.head.max_head_bytes, wait);
        let head = if first {
            read.await
        } else {
            tokio::select! {
                head = read => head,
                () = &mut drain => return,
            }
        };
        let was_first = std::mem::replace(&mut first, false);
        let len = match head {
            Ok(Some(len)) => len,
            Ok(None) => return,
            Err(HeadReadError::Head(e)) => {
                let err = GatewayError::Head(e);
                shared.metrics.error(&err);
                let _ = respond_error(&mut conn.stream, &err, cfg.write_timeout).await;
                return;
            }
            Err(HeadReadError::Io(e)) => {
                debug!(error = %e, "client head read ended");
                // A client that never completed its first head within
                // `handshake_timeout`, or stalled part-way through a later one, is
                // counted like a SOCKS5 handshake timeout (`client-timeout`). An idle
                // kept-alive connection timing out between requests is not an error.
                if e.kind() == std::io::ErrorKind::TimedOut
                    && (was_first || !conn.buffered().is_empty())
                {
                    shared.metrics.error(&GatewayError::DownstreamTimeout);
                }
                return;
            }
        };
        match handle(shared, &mut conn, len, &mut scratch, peer).await {
            Ok(Next::KeepAlive) if !shared.draining.is_cancelled() => {}
            Ok(_) => return,
            Err(Failure { err, respond }) => {
                debug!(reason = err.reason(), "request failed");
                shared.metrics.error(&err);
                if respond {
                    let _ = respond_error(&mut conn.stream, &err, cfg.write_timeout).await;
                }
                return;
            }
        }
    }
}

/// A failed request, and whether the client can still be answered.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) err: GatewayError,
    pub(crate) respond: bool,
}

impl From<GatewayError> for Failure {
    fn from(err: GatewayError) -> Self {
        Self { err, respond: true }
    }
}

async fn handle(
    shared: &Shared,
    conn: &mut BufConn,
    len: usize,
    scratch: &mut Scratch,
    peer: IpAddr,
) -> Result<Next, Failure> {
    let is_connect = conn.buffered().starts_with(b"CONNECT ");
    if !is_connect {
        return forward::forward(shared, conn, len, scratch, peer).await;
    }
    let (ticket, pick, target) = {
        let Scratch { ranges, creds, .. } = scratch;
        let head = parse_request(conn.buffered(), shared.config.head, ranges)
            .map_err(GatewayError::Head)?
            .ok_or(GatewayError::Unsupported("incomplete head"))?;
        let authority = parse_authority(head.target).map_err(GatewayError::Target)?;
        let credentials = proxy_credentials(&head.headers, creds)?;
        let snap = shared.snapshots.load();
        let req = Request {
            creds: credentials,
            target: &authority.host,
            connect_port: Some(authority.port),
            source: Some(peer),
        };
        let (ticket, pick) = shared
            .router
            .admit_request(snap.as_deref(), &req, now_ms())?;
        (ticket, pick, Target::from_authority(&authority))
    };
    conn.consume(len);
    let est = tunnel::establish(shared, &ticket, pick, &target).await?;
    let mut head = Vec::with_capacity(128);
    head.extend_from_slice(b"HTTP/1.1 200 Connection established\r\n");
    moved_header(&mut head, est.moved, shared);
    head.extend_from_slice(b"\r\n");
    crate::io::write_all(&mut conn.stream, &head, shared.config.write_timeout)
        .await
        .map_err(|e| Failure {
            err: GatewayError::DownstreamIo(e),
            respond: false,
        })?;
    tunnel::relay(shared, conn, est).await;
    Ok(Next::Close)
}

/// Appends the session-moved header when a session moved.
pub(crate) fn moved_header(out: &mut Vec<u8>, moved: Option<MoveReason>, shared: &Shared) {
    if let Some(reason) = moved {
        shared
            .metrics
            .sessions_moved
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        out.extend_from_slice(MOVED_HEADER.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(reason.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// Decodes `Proxy-Authorization: Basic …` into `buf`; `None` when absent.
pub fn proxy_credentials<'a>(
    headers: &Headers<'_>,
    buf: &'a mut Vec<u8>,
) -> Result<Option<Credentials<'a>>, GatewayError> {
    let Some(value) = headers.get(b"proxy-authorization") else {
        return Ok(None);
    };
    if value.len() > MAX_AUTH_HEADER {
        return Err(GatewayError::AuthFailed);
    }
    let (scheme, encoded) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (&value[..i], crate::parse::http_head::trim(&value[i + 1..])),
        None => return Err(GatewayError::AuthFailed),
    };
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Err(GatewayError::AuthFailed);
    }
    buf.clear();
    base64::engine::general_purpose::STANDARD
        .decode_vec(encoded, buf)
        .map_err(|_| GatewayError::AuthFailed)?;
    let colon = buf
        .iter()
        .position(|&b| b == b':')
        .ok_or(GatewayError::AuthFailed)?;
    let (username, password) = buf.split_at(colon);
    Ok(Some(Credentials {
        username,
        password: &password[1..],
    }))
}

/// Writes an error response and asks the client to close.
pub(crate) async fn respond_error(
    stream: &mut TcpStream,
    err: &GatewayError,
    write_timeout: std::time::Duration,
) -> std::io::Result<()> {
    let status = err.http_status();
    let reason = err.reason();
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {text}\r\n{ERROR_HEADER}: {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason.len() + 1
    );
    if status == 407 {
        out.push_str("Proxy-Authenticate: Basic realm=\"proxy-pool\"\r\n");
    }
    if status == 503 {
        out.push_str("Retry-After: 1\r\n");
    }
    if status == 429 {
        out.push_str("Retry-After: 6\r\n");
    }
    out.push_str("\r\n");
    out.push_str(reason);
    out.push('\n');
    crate::io::write_all(stream, out.as_bytes(), write_timeout).await
}
