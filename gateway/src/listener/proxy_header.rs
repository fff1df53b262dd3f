//! The PROXY protocol on an accepted connection: from a trusted source (a load balancer
//! the operator named), the first bytes must be a v1 or v2 header, and the client
//! address it carries replaces the peer's for authentication throttling, connection
//! limits and logs. Read with `peek`, then exactly the header's bytes are consumed, so
//! the HTTP or SOCKS5 handler reads the client's own bytes untouched.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::parse::proxy_protocol::{MAX_V2_LEN, ProxyProtocolError, parse_proxy_header};
use crate::parse::socks5::Parsed;

/// How long to wait between looks at a header that has not fully arrived (load balancers
/// send it in the connection's first segment; a split one is rare).
const REPEEK: Duration = Duration::from_millis(2);

/// Which sources must send a PROXY protocol header. Empty: none (the default; the
/// header is then never parsed, so a client cannot forge its address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedSources(Vec<IpNet>);

impl TrustedSources {
    /// Sources within `nets`.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self(nets)
    }

    /// Whether no source is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a connection from `peer` must start with a header.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.0.iter().any(|net| net.contains(&peer))
    }
}

/// Why a trusted source's connection was closed before its first request.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// The bytes were not a valid header.
    #[error(transparent)]
    Invalid(#[from] ProxyProtocolError),
    /// The header did not arrive within the deadline.
    #[error("PROXY protocol header timed out")]
    Timeout,
    /// The peer closed or the socket failed.
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads the header a trusted source must send, within `timeout`: the client address it
/// carries, or `peer` when it carries none (a v2 `LOCAL` health check, v1 `UNKNOWN`).
pub async fn read_client_address(
    stream: &TcpStream,
    peer: IpAddr,
    timeout: Duration,
) -> Result<IpAddr, HeaderError> {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; MAX_V2_LEN];
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .map_err(|_| HeaderError::Timeout)??;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        match parse_proxy_header(&buf[..n])? {
            Parsed::Done(header, len) => {
                consume(stream, len, deadline).await?;
                return Ok(header.source.map_or(peer, |s| s.ip().to_canonical()));
            }
            Parsed::Incomplete if n == buf.len() => {
                return Err(ProxyProtocolError::BadV2Length.into());
            }
            Parsed::Incomplete => {
                if Instant::now() + REPEEK > deadline {
                    return Err(HeaderError::Timeout);
                }
                tokio::time::sleep(REPEEK).await;
            }
        }
    }
}

/// Reads and drops exactly `len` bytes (already seen by `peek`).
async fn consume(stream: &TcpStream, mut len: usize, deadline: Instant) -> Result<(), HeaderError> {
    let mut sink = [0u8; 512];
    while len > 0 {
        tokio::time::timeout_at(deadline, stream.readable())
            .await
            .map_err(|_| HeaderError::Timeout)??;
        let want = len.min(sink.len());
        match stream.try_read(&mut sink[..want]) {
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => len -= n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected pair on loopback: (client side, server side, server's view of the peer).
    async fn pair() -> (TcpStream, TcpStream, IpAddr) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, peer) = listener.accept().await.unwrap();
        (client, server, peer.ip())
    }

    #[test]
    fn trusted_sources_match_by_network_and_mapped_addresses() {
        let trusted = TrustedSources::new(vec!["10.0.0.0/8".parse().unwrap()]);
        assert!(trusted.trusts(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))));
        assert!(trusted.trusts(IpAddr::V6(Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped())));
        assert!(!trusted.trusts(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))));
        assert!(!trusted.trusts(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert!(!TrustedSources::default().trusts(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }

    #[tokio::test]
    async fn the_header_is_consumed_and_the_client_bytes_follow() {
        let (mut client, mut server, peer) = pair().await;
        client
            .write_all(b"PROXY TCP4 198.51.100.7 10.0.0.1 51234 3128\r\nCONNECT x:443 HTTP/1.1\r\n")
            .await
            .unwrap();
        let ip = read_client_address(&server, peer, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(ip, IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)));
        let mut rest = [0u8; 24];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"CONNECT x:443 HTTP/1.1\r\n");
    }

    #[tokio::test]
    async fn a_header_split_across_segments_is_waited_for() {
        let (mut client, mut server, peer) = pair().await;
        let mut header = crate::parse::proxy_protocol::V2_SIGNATURE.to_vec();
        header.extend_from_slice(&[0x21, 0x11, 0, 12, 203, 0, 113, 9, 10, 0, 0, 1, 0, 80, 0, 81]);
        let writer = tokio::spawn(async move {
            for chunk in header.chunks(5) {
                client.write_all(chunk).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            client.write_all(b"\x05").await.unwrap();
            client
        });
        let ip = read_client_address(&server, peer, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(ip, IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)));
        let _client = writer.await.unwrap();
        assert_eq!(server.read_u8().await.unwrap(), 5);
    }

    #[tokio::test]
    async fn local_keeps_the_peer_and_bad_or_missing_headers_fail() {
        let (mut client, server, peer) = pair().await;
        let mut local = crate::parse::proxy_protocol::V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 0]);
        client.write_all(&local).await.unwrap();
        let got = read_client_address(&server, peer, Duration::from_secs(5)).await;
        assert_eq!(got.unwrap(), peer);

        // A client speaking HTTP straight away, from a trusted source: refused.
        let (mut client, server, peer) = pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let got = read_client_address(&server, peer, Duration::from_secs(5)).await;
        assert!(
            matches!(got, Err(HeaderError::Invalid(ProxyProtocolError::Missing))),
            "{got:?}"
        );

        // Silence: the deadline ends the wait.
        let (_client, server, peer) = pair().await;
        let got = read_client_address(&server, peer, Duration::from_millis(50)).await;
        assert!(matches!(got, Err(HeaderError::Timeout)), "{got:?}");

        // An incomplete header, then the peer closes.
        let (mut client, server, peer) = pair().await;
        client.write_all(b"PROXY TCP4 1.2.3.4").await.unwrap();
        drop(client);
        let got = read_client_address(&server, peer, Duration::from_millis(500)).await;
        assert!(
            matches!(got, Err(HeaderError::Timeout | HeaderError::Io(_))),
            "{got:?}"
        );
    }
}
