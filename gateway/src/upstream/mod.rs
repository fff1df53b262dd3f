//! The outbound side: dial a vendor proxy (DIAL), then open a tunnel through it to
//! the target with HTTP CONNECT or SOCKS5 and its credentials (PROXY_HANDSHAKE).
//! TLS from the client passes through untouched. Plain-HTTP connections are kept
//! alive in [`pool::IdlePool`]. Never logs credentials.

pub mod pool;

use std::fmt;
use std::io::{self, Write as _};
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use proxy_pool_api::egress::{EgressDenied, EgressPolicy};

use crate::error::GatewayError;
use crate::io::{BufConn, HeadReadError};
use crate::parse::authority::{Authority, Host};
use crate::parse::http_head::{HeadLimits, parse_response};
use crate::parse::socks5::{self, reply};
use crate::snapshot::{ProxyEntry, UpstreamAddr};

/// A target address owned by a request (kept across retries).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Host.
    pub host: TargetHost,
    /// Port.
    pub port: u16,
}

/// A target host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetHost {
    /// IP literal.
    Ip(IpAddr),
    /// DNS name (resolved by the vendor proxy).
    Domain(Box<str>),
}

impl Target {
    /// Copies a parsed authority.
    pub fn from_authority(a: &Authority<'_>) -> Self {
        let host = match a.host {
            Host::Domain(d) => TargetHost::Domain(d.into()),
            other => TargetHost::Ip(other.ip().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
        };
        Self { host, port: a.port }
    }

    /// Borrowed view for routing matches.
    pub fn host(&self) -> Host<'_> {
        match &self.host {
            TargetHost::Ip(IpAddr::V4(ip)) => Host::V4(*ip),
            TargetHost::Ip(IpAddr::V6(ip)) => Host::V6(*ip),
            TargetHost::Domain(d) => Host::Domain(d),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host(), self.port)
    }
}

/// A vendor proxy's address refused by the egress policy: a dial failure of that
/// proxy (another one may be tried), counted by why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub EgressDenied);

/// Opens a TCP connection to the vendor proxy — never to an address `egress` refuses
/// (a name is resolved here and every address it resolves to is judged; the first
/// allowed one is dialled). A refusal is reported to `refused` and fails the dial.
pub async fn dial(
    entry: &ProxyEntry,
    timeout: Duration,
    egress: &EgressPolicy,
    refused: impl FnOnce(EgressDenied),
) -> Result<TcpStream, GatewayError> {
    let denied = || GatewayError::Dial(io::ErrorKind::PermissionDenied);
    let connect = async {
        match &entry.addr {
            UpstreamAddr::Ip(addr) => match egress.check_ip(addr.ip()) {
                Ok(()) => Ok(TcpStream::connect(addr).await),
                Err(why) => Err(why),
            },
            UpstreamAddr::Name(host, port) => {
                egress.check_host(host)?;
                let addrs = match tokio::net::lookup_host((&**host, *port)).await {
                    Ok(a) => a,
                    Err(e) => return Ok(Err(e)),
                };
                let mut first_refusal = None;
                for addr in addrs {
                    match egress.check_ip(addr.ip()) {
                        Ok(()) => return Ok(TcpStream::connect(addr).await),
                        Err(why) => {
                            first_refusal.get_or_insert(why);
                        }
                    }
                }
                match first_refusal {
                    Some(why) => Err(why),
                    None => Ok(Err(io::ErrorKind::NotFound.into())),
                }
            }
        }
    };
    let stream = match tokio::time::timeout(timeout, connect).await {
        Err(_) => return Err(GatewayError::UpstreamTimeout),
        Ok(Err(why)) => {
            refused(why);
            return Err(denied());
        }
        Ok(Ok(s)) => s.map_err(|e| GatewayError::Dial(e.kind()))?,
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Asks an HTTP vendor proxy for a tunnel (`CONNECT`), within `timeout` for the whole
/// exchange. Bytes the proxy sent after its response head stay buffered in `conn`.
pub async fn http_connect(
    conn: &mut BufConn,
    entry: &ProxyEntry,
    target: &Target,
    timeout: Duration,
) -> Result<(), GatewayError> {
    let deadline = Instant::now() + timeout;
    let mut req = Vec::with_capacity(256);
    // Writing into a Vec cannot fail.
    let _ = write!(req, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &entry.auth {
        req.extend_from_slice(b"Proxy-Authorization: ");
        req.extend_from_slice(auth.basic.as_bytes());
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    // One bound for the exchange without a timer of its own: the write (at once on a
    // fresh connection, no timer then) and the response head's read share the deadline.
    crate::io::write_all(&mut conn.stream, &req, timeout)
        .await
        .map_err(handshake_io)?;
    let limit = conn_limit(conn);
    let left = deadline.saturating_duration_since(Instant::now());
    let len = conn
        .read_head(limit, left)
        .await
        .map_err(|e| match e {
            HeadReadError::Head(_) => GatewayError::ProxyHandshake("malformed CONNECT response"),
            HeadReadError::Io(e) => handshake_io(e),
        })?
        .ok_or(GatewayError::ProxyHandshake("closed during CONNECT"))?;
    let mut ranges = Vec::new();
    let limits = HeadLimits {
        max_head_bytes: limit,
        max_headers: 64,
    };
    let status = parse_response(conn.buffered(), limits, &mut ranges)
        .map_err(|_| GatewayError::ProxyHandshake("malformed CONNECT response"))?
        .map(|h| h.status)
        .ok_or(GatewayError::ProxyHandshake("malformed CONNECT response"))?;
    conn.consume(len);
    match status {
        200..=299 => Ok(()),
        407 => Err(GatewayError::ProxyHandshake("proxy rejected credentials")),
        s => Err(GatewayError::TargetUnreachable(s)),
    }
}

fn conn_limit(conn: &BufConn) -> usize {
    // The connection's buffer is the bound; heads never exceed it.
    conn.capacity()
}

fn handshake_io(e: io::Error) -> GatewayError {
    if e.kind() == io::ErrorKind::TimedOut {
        GatewayError::UpstreamTimeout
    } else {
        GatewayError::ProxyHandshake("connection failed during handshake")
    }
}

/// Opens a SOCKS5 tunnel through a vendor proxy (username/password if it has
/// credentials). Domain targets are resolved by the proxy.
pub async fn socks5_connect(
    conn: &mut BufConn,
    entry: &ProxyEntry,
    target: &Target,
    timeout: Duration,
) -> Result<(), GatewayError> {
    let exchange = async {
        let method = if entry.auth.is_some() {
            socks5::METHOD_USER_PASS
        } else {
            socks5::METHOD_NO_AUTH
        };
        conn.stream
            .write_all(&[socks5::VERSION, 1, method])
            .await
            .map_err(handshake_io)?;
        let choice = read_exact::<2>(conn, timeout).await?;
        if choice != [socks5::VERSION, method] {
            return Err(GatewayError::ProxyHandshake("SOCKS5 method refused"));
        }
        if let Some(auth) = &entry.auth {
            let (u, p) = (auth.username.as_bytes(), auth.password.as_bytes());
            let mut msg = Vec::with_capacity(3 + u.len() + p.len());
            msg.push(socks5::AUTH_VERSION);
            msg.push(u8::try_from(u.len()).unwrap_or(u8::MAX));
            msg.extend_from_slice(&u[..u.len().min(255)]);
            msg.push(u8::try_from(p.len()).unwrap_or(u8::MAX));
            msg.extend_from_slice(&p[..p.len().min(255)]);
            conn.stream.write_all(&msg).await.map_err(handshake_io)?;
            let status = read_exact::<2>(conn, timeout).await?;
            if status[1] != 0 {
                return Err(GatewayError::ProxyHandshake("proxy rejected credentials"));
            }
        }
        conn.stream
            .write_all(&socks_request(target))
            .await
            .map_err(handshake_io)?;
        let head = read_exact::<4>(conn, timeout).await?;
        if head[0] != socks5::VERSION {
            return Err(GatewayError::ProxyHandshake("malformed SOCKS5 reply"));
        }
        if head[1] != reply::SUCCEEDED {
            return Err(GatewayError::TargetUnreachable(u16::from(head[1])));
        }
        let rest = match head[3] {
            0x01 => 4 + 2,
            0x04 => 16 + 2,
            0x03 => usize::from(read_exact::<1>(conn, timeout).await?[0]) + 2,
            _ => return Err(GatewayError::ProxyHandshake("malformed SOCKS5 reply")),
        };
        skip(conn, rest, timeout).await
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| GatewayError::UpstreamTimeout)?
}

fn socks_request(target: &Target) -> Vec<u8> {
    let mut msg = Vec::with_capacity(262);
    msg.extend_from_slice(&[socks5::VERSION, 0x01, 0x00]);
    match &target.host {
        TargetHost::Ip(IpAddr::V4(ip)) => {
            msg.push(0x01);
            msg.extend_from_slice(&ip.octets());
        }
        TargetHost::Ip(IpAddr::V6(ip)) => {
            msg.push(0x04);
            msg.extend_from_slice(&ip.octets());
        }
        TargetHost::Domain(d) => {
            let d = &d.as_bytes()[..d.len().min(255)];
            msg.push(0x03);
            msg.push(u8::try_from(d.len()).unwrap_or(u8::MAX));
            msg.extend_from_slice(d);
        }
    }
    msg.extend_from_slice(&target.port.to_be_bytes());
    msg
}

async fn read_exact<const N: usize>(
    conn: &mut BufConn,
    timeout: Duration,
) -> Result<[u8; N], GatewayError> {
    while conn.buffered().len() < N {
        match conn.fill(timeout).await {
            Ok(0) => return Err(GatewayError::ProxyHandshake("closed during handshake")),
            Ok(_) => {}
            Err(e) => return Err(handshake_io(e)),
        }
    }
    let mut out = [0u8; N];
    out.copy_from_slice(&conn.buffered()[..N]);
    conn.consume(N);
    Ok(out)
}

async fn skip(conn: &mut BufConn, mut n: usize, timeout: Duration) -> Result<(), GatewayError> {
    while n > 0 {
        if conn.buffered().is_empty() {
            match conn.fill(timeout).await {
                Ok(0) => return Err(GatewayError::ProxyHandshake("closed during handshake")),
                Ok(_) => {}
                Err(e) => return Err(handshake_io(e)),
            }
        }
        let k = n.min(conn.buffered().len());
        conn.consume(k);
        n -= k;
    }
    Ok(())
}
