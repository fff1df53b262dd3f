//! The HTTP proxy listener: per connection, read a bounded request head, then
//! either open a CONNECT tunnel (the connection becomes the tunnel) or forward an
//! absolute-URI request and wait for the next one (keep-alive). Errors are answered
//! with a status and an `X-Proxy-Pool-Error` reason, never with internal detail.

use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::{debug, instrument};

use super::Shared;
use super::forward::{self, Scratch};
use super::reply::{Failure, Next, moved_header, proxy_credentials, respond_error};
use super::tunnel;
use crate::clock::now_ms;
use crate::error::GatewayError;
use crate::io::{BufConn, ClientConn, ClientStream, HeadReadError};
use crate::metrics::ListenerKind;
use crate::parse::authority::parse_authority;
use crate::parse::http_head::parse_request;
use crate::route::Request;
use crate::upstream::Target;
use std::net::IpAddr;

/// Serves one client connection.
#[instrument(level = "debug", skip_all)]
pub(crate) async fn serve(shared: &Arc<Shared>, stream: TcpStream, peer: IpAddr) {
    let cfg = &shared.config;
    let mut conn = BufConn::new(ClientStream::new(stream), cfg.head.max_head_bytes);
    let mut scratch = Scratch::default();
    let mut first = true;
    // One registration with the drain token per connection, not one per request.
    let drain = shared.draining.cancelled();
    tokio::pin!(drain);
    loop {
        // The last request's bytes are metered (its error answer included): what
        // follows belongs to the next one.
        conn.stream.detach();
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

async fn handle(
    shared: &Shared,
    conn: &mut ClientConn,
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
            held: conn.stream.held(),
        };
        let (ticket, pick) = shared
            .router
            .admit_request(snap.as_deref(), &req, now_ms())?;
        (ticket, pick, Target::from_authority(&authority))
    };
    let mut ticket = ticket;
    conn.stream.attach(ticket.meter.clone());
    conn.stream.hold(ticket.hold.take());
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
    tunnel::relay(shared, ListenerKind::Http, conn, est).await;
    Ok(Next::Close)
}
