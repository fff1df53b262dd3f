//! The proxy's outbound side: resolve a target, insist it is IPv4 loopback, connect
//! from the proxy's egress address, and relay bytes with an optional byte budget.
//! Never connects beyond loopback.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

/// Where a client asked to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Ip(SocketAddr),
    Domain(String, u16),
}

impl Target {
    /// Parses `host:port` / `[v6]:port` as found in a CONNECT request line.
    pub(super) fn parse_authority(authority: &str) -> Option<Self> {
        if let Ok(addr) = authority.parse::<SocketAddr>() {
            return Some(Self::Ip(addr));
        }
        let (host, port) = authority.rsplit_once(':')?;
        let port = port.parse().ok()?;
        if host.is_empty() || host.len() > 255 || host.contains(['[', ']', '@', '/']) {
            return None;
        }
        Some(Self::Domain(host.to_owned(), port))
    }
}

/// Why an outbound connection failed, as the client must be told.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    #[error("target is not an IPv4 loopback address")]
    NotAllowed,
    #[error("target name did not resolve")]
    Unresolved,
    #[error("target refused the connection")]
    Refused,
    #[error("connecting to the target timed out")]
    Timeout,
    #[error("connect failed: {0}")]
    Io(io::Error),
}

impl ConnectError {
    /// SOCKS5 reply code (RFC 1928 §6).
    pub(super) fn socks_reply(&self) -> u8 {
        match self {
            Self::NotAllowed => 0x02,
            Self::Unresolved => 0x04,
            Self::Refused => 0x05,
            Self::Timeout => 0x06,
            Self::Io(_) => 0x01,
        }
    }

    /// HTTP status for a failed CONNECT or forward.
    pub(super) fn http_status(&self) -> http::StatusCode {
        match self {
            Self::NotAllowed => http::StatusCode::FORBIDDEN,
            Self::Timeout => http::StatusCode::GATEWAY_TIMEOUT,
            _ => http::StatusCode::BAD_GATEWAY,
        }
    }
}

/// Connects to `target` with `egress` as the source address.
pub(super) async fn connect(
    target: &Target,
    egress: Ipv4Addr,
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
    let addr = match tokio::time::timeout(timeout, resolve(target)).await {
        Ok(resolved) => resolved?,
        Err(_) => return Err(ConnectError::Timeout),
    };
    let socket = TcpSocket::new_v4().map_err(ConnectError::Io)?;
    socket
        .bind(SocketAddr::from((egress, 0)))
        .map_err(ConnectError::Io)?;
    match tokio::time::timeout(timeout, socket.connect(SocketAddr::V4(addr))).await {
        Err(_) => Err(ConnectError::Timeout),
        Ok(Err(err)) if err.kind() == io::ErrorKind::ConnectionRefused => {
            Err(ConnectError::Refused)
        }
        Ok(Err(err)) => Err(ConnectError::Io(err)),
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
    }
}

async fn resolve(target: &Target) -> Result<SocketAddrV4, ConnectError> {
    match target {
        Target::Ip(SocketAddr::V4(addr)) if addr.ip().is_loopback() => Ok(*addr),
        Target::Ip(_) => Err(ConnectError::NotAllowed),
        Target::Domain(host, port) => {
            let addrs = tokio::net::lookup_host((host.as_str(), *port))
                .await
                .map_err(|_| ConnectError::Unresolved)?;
            let mut any = false;
            for addr in addrs {
                any = true;
                if let SocketAddr::V4(v4) = addr
                    && v4.ip().is_loopback()
                {
                    return Ok(v4);
                }
            }
            Err(if any {
                ConnectError::NotAllowed
            } else {
                ConnectError::Unresolved
            })
        }
    }
}

/// A stream whose reads stop with an error once `remaining` bytes have been read:
/// the `dropAfter` failure mode, applied to bytes coming back from the target.
#[derive(Debug)]
pub(super) struct Budgeted<S> {
    inner: S,
    remaining: Option<u64>,
}

impl<S> Budgeted<S> {
    pub(super) fn new(inner: S, budget: Option<u64>) -> Self {
        Self {
            inner,
            remaining: budget,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Budgeted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Some(remaining) = self.remaining else {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        };
        if remaining == 0 {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "simulated drop mid-tunnel",
            )));
        }
        let cap = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(buf.remaining());
        let n = {
            let mut limited = ReadBuf::new(buf.initialize_unfilled_to(cap));
            match Pin::new(&mut self.inner).poll_read(cx, &mut limited) {
                Poll::Ready(Ok(())) => limited.filled().len(),
                other => return other,
            }
        };
        buf.advance(n);
        self.remaining = Some(remaining - n as u64);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Budgeted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn authorities_parse() {
        assert_eq!(
            Target::parse_authority("127.0.0.1:443"),
            Some(Target::Ip("127.0.0.1:443".parse().unwrap()))
        );
        assert_eq!(
            Target::parse_authority("localhost:80"),
            Some(Target::Domain("localhost".into(), 80))
        );
        assert_eq!(Target::parse_authority("localhost"), None);
        assert_eq!(Target::parse_authority("a@b:1"), None);
        assert_eq!(Target::parse_authority(":1"), None);
    }

    #[tokio::test]
    async fn non_loopback_targets_are_refused_without_connecting() {
        let err = connect(
            &Target::Ip("192.0.2.1:80".parse().unwrap()),
            Ipv4Addr::LOCALHOST,
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ConnectError::NotAllowed));
        assert_eq!(err.socks_reply(), 0x02);
    }

    #[tokio::test]
    async fn connects_from_the_egress_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = Target::Ip(listener.local_addr().unwrap());
        let egress = Ipv4Addr::new(127, 0, 0, 77);
        let (stream, accepted) = tokio::join!(
            connect(&target, egress, Duration::from_secs(1)),
            listener.accept()
        );
        assert_eq!(stream.unwrap().local_addr().unwrap().ip(), egress);
        assert_eq!(accepted.unwrap().1.ip(), egress);
    }

    #[tokio::test]
    async fn budget_cuts_reads_after_n_bytes() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b"0123456789").await.unwrap();
        let mut budgeted = Budgeted::new(b, Some(4));
        let mut buf = [0u8; 16];
        let n = budgeted.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"0123");
        let err = budgeted.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
    }
}
