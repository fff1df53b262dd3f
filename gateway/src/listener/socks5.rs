//! The SOCKS5 listener: RFC 1928 method negotiation, RFC 1929 username/password
//! (the username carries routing parameters), CONNECT only — BIND and UDP ASSOCIATE
//! get "command not supported", unknown address types "address type not supported",
//! no proxy with room "general failure". The whole handshake runs under one timeout.
//! Before any snapshot is installed the credentials cannot be judged: the
//! sub-negotiation succeeds and the request is refused with "general failure"
//! (see `handshake`), so a client is never told its password is wrong when it is not.

use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{debug, instrument};

use super::Shared;
use super::tunnel;
use crate::clock::now_ms;
use crate::config::AuthMode;
use crate::error::GatewayError;
use crate::io::{BufConn, ClientConn, ClientStream};
use crate::metrics::ListenerKind;
use crate::parse::socks5::{
    self, Command, Parsed, Socks5Error, encode_reply, parse_greeting, parse_request,
    parse_user_pass, reply,
};
use crate::route::{Credentials, Pick, Request, Ticket};
use crate::upstream::Target;
use std::net::IpAddr;

/// Greeting (≤ 257) + credentials (≤ 513) + request (≤ 262) fit.
const HANDSHAKE_BUFFER: usize = 1100;

/// Serves one client connection.
#[instrument(level = "debug", skip_all)]
pub(crate) async fn serve(shared: &Arc<Shared>, stream: TcpStream, peer: IpAddr) {
    let mut conn = BufConn::new(ClientStream::new(stream), HANDSHAKE_BUFFER);
    let timeout = shared.config.handshake_timeout;
    let admitted = match tokio::time::timeout(timeout, handshake(shared, &mut conn, peer)).await {
        Ok(Ok(admitted)) => admitted,
        Ok(Err(err)) => {
            debug!(reason = err.reason(), "socks5 handshake failed");
            shared.metrics.error(&err);
            return;
        }
        Err(_) => {
            shared.metrics.error(&GatewayError::DownstreamTimeout);
            return;
        }
    };
    let (mut ticket, pick, target) = admitted;
    conn.stream.attach(ticket.meter.clone());
    conn.stream.hold(ticket.hold.take());
    match tunnel::establish(shared, &ticket, pick, &target).await {
        Ok(est) => {
            let bound = conn.stream.local_addr().ok();
            let replied = tokio::time::timeout(
                shared.config.write_timeout,
                write_reply(&mut conn, reply::SUCCEEDED, bound),
            )
            .await;
            if matches!(replied, Ok(Ok(()))) {
                tunnel::relay(shared, ListenerKind::Socks5, &mut conn, est).await;
            }
        }
        Err(err) => {
            debug!(reason = err.reason(), "socks5 connect failed");
            shared.metrics.error(&err);
            let _ = tokio::time::timeout(
                shared.config.write_timeout,
                write_reply(&mut conn, err.socks_reply(), None),
            )
            .await;
        }
    }
}

type Admitted = (Ticket, Pick, Target);

/// Runs the handshake up to admission. On an error the client has been answered
/// (refused) where the protocol allows it.
async fn handshake(
    shared: &Shared,
    conn: &mut ClientConn,
    peer: IpAddr,
) -> Result<Admitted, GatewayError> {
    let n = buffer_msg(conn, |b| parse_greeting(b).map(done_len)).await?;
    let Ok(Parsed::Done(greeting, _)) = parse_greeting(conn.buffered()) else {
        return Err(GatewayError::Unsupported("greeting"));
    };
    conn.consume(n);
    let open = shared.config.auth == AuthMode::Open;
    let method = if greeting.user_pass {
        socks5::METHOD_USER_PASS
    } else if open && greeting.no_auth {
        socks5::METHOD_NO_AUTH
    } else {
        send(conn, &[socks5::VERSION, socks5::METHOD_NONE_ACCEPTABLE]).await?;
        return Err(GatewayError::AuthRequired);
    };
    send(conn, &[socks5::VERSION, method]).await?;
    // Credentials are kept as `username || password` with the split point.
    let mut creds = Vec::new();
    let mut split = 0;
    // Credentials accepted without a client list to check them against (no snapshot).
    let mut unjudged = false;
    if method == socks5::METHOD_USER_PASS {
        let n = buffer_msg(conn, |b| parse_user_pass(b).map(done_len)).await?;
        if let Ok(Parsed::Done(up, _)) = parse_user_pass(conn.buffered()) {
            creds.extend_from_slice(up.username);
            creds.extend_from_slice(up.password);
            split = up.username.len();
        }
        conn.consume(n);
        let (username, password) = creds.split_at(split);
        let credentials = Credentials { username, password };
        let snap = shared.snapshots.load();
        let verdict = shared
            .router
            .check_credentials(snap.as_deref(), credentials, Some(peer));
        drop(snap);
        // RFC 1929 has one failure status, which clients read as "wrong password".
        // Without a snapshot there is no client list to judge the credentials against:
        // answering 0x01 would blame the client for the gateway's state. The
        // sub-negotiation is then answered 0x00 but the connection stays unauthenticated:
        // whatever request follows gets reply 0x01 (general SOCKS server failure) and
        // the connection is closed, nothing forwarded — even if a snapshot arrived
        // meanwhile. A stale snapshot still has its client list, so credentials are
        // judged strictly then (and the request refused as `snapshot-stale`).
        unjudged = match verdict {
            Ok(()) => false,
            Err(GatewayError::NoSnapshot) => true,
            Err(err) => {
                send(conn, &[socks5::AUTH_VERSION, 0x01]).await?;
                return Err(err);
            }
        };
        send(conn, &[socks5::AUTH_VERSION, 0x00]).await?;
    }
    let n = match buffer_msg(conn, |b| parse_request(b).map(done_len)).await {
        Ok(n) => n,
        Err(GatewayError::Socks(e)) => {
            refuse(conn, e.reply_code()).await?;
            return Err(GatewayError::Socks(e));
        }
        Err(e) => return Err(e),
    };
    let Ok(Parsed::Done(request, _)) = parse_request(conn.buffered()) else {
        return Err(GatewayError::Unsupported("request"));
    };
    if unjudged {
        refuse(conn, reply::GENERAL_FAILURE).await?;
        return Err(GatewayError::NoSnapshot);
    }
    if request.command != Command::Connect {
        // Counted (reason `unsupported`) like every other refusal.
        refuse(conn, reply::COMMAND_NOT_SUPPORTED).await?;
        return Err(GatewayError::Unsupported("socks5 command"));
    }
    let target = Target {
        host: match request.host.ip() {
            Some(ip) => crate::upstream::TargetHost::Ip(ip),
            None => match request.host {
                crate::parse::authority::Host::Domain(d) => {
                    crate::upstream::TargetHost::Domain(d.into())
                }
                _ => return Err(GatewayError::Unsupported("address")),
            },
        },
        port: request.port,
    };
    conn.consume(n);
    let credentials = (method == socks5::METHOD_USER_PASS).then(|| {
        let (username, password) = creds.split_at(split);
        Credentials { username, password }
    });
    let snap = shared.snapshots.load();
    let host = target.host();
    // The credentials were judged (and throttled) in the sub-negotiation already.
    let req = Request {
        creds: credentials,
        target: &host,
        connect_port: Some(target.port),
        source: None,
        held: None,
    };
    let admitted = shared.router.admit_request(snap.as_deref(), &req, now_ms());
    drop(snap);
    match admitted {
        Ok((ticket, pick)) => Ok((ticket, pick, target)),
        Err(err) => {
            refuse(conn, err.socks_reply()).await?;
            Err(err)
        }
    }
}

fn done_len<T>(p: Parsed<T>) -> Option<usize> {
    match p {
        Parsed::Done(_, n) => Some(n),
        Parsed::Incomplete => None,
    }
}

/// Reads until `complete` reports a whole message; returns its length.
async fn buffer_msg(
    conn: &mut ClientConn,
    complete: impl Fn(&[u8]) -> Result<Option<usize>, Socks5Error>,
) -> Result<usize, GatewayError> {
    loop {
        if let Some(n) = complete(conn.buffered())? {
            return Ok(n);
        }
        // The caller's handshake timeout bounds the total wait.
        match conn.fill(std::time::Duration::from_secs(3600)).await {
            Ok(0) => {
                return Err(GatewayError::DownstreamIo(
                    std::io::ErrorKind::UnexpectedEof.into(),
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(GatewayError::DownstreamIo(e)),
        }
    }
}

/// Handshake replies: the whole handshake runs under its own timeout.
async fn send(conn: &mut ClientConn, bytes: &[u8]) -> Result<(), GatewayError> {
    conn.stream
        .write_all(bytes)
        .await
        .map_err(GatewayError::DownstreamIo)
}

async fn refuse(conn: &mut ClientConn, code: u8) -> Result<(), GatewayError> {
    write_reply(conn, code, None)
        .await
        .map_err(GatewayError::DownstreamIo)
}

async fn write_reply(
    conn: &mut ClientConn,
    code: u8,
    bound: Option<std::net::SocketAddr>,
) -> std::io::Result<()> {
    let (buf, n) = encode_reply(code, bound);
    conn.stream.write_all(&buf[..n]).await
}
