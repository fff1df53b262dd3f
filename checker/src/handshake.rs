//! Client handshakes through a vendor proxy: HTTP `CONNECT` and SOCKS5 (RFC 1928 /
//! RFC 1929). Every read is bounded; failures map to [`FailureCode`]s; nothing here
//! logs or returns a credential.

use std::io;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use proxy_pool_api::egress::EgressPolicy;
use proxy_pool_api::socks5;

use crate::model::{Credentials, FailureCode, Protocol};

/// Largest HTTP `CONNECT` response head read.
const MAX_HEAD: usize = 8 * 1024;

/// Connects to the proxy — never to an address `egress` refuses (the proxy address
/// comes from a vendor): a name is resolved here and each address judged, the first
/// allowed one dialled. Maps socket errors to failure codes.
pub async fn dial(host: &str, port: u16, egress: &EgressPolicy) -> Result<TcpStream, FailureCode> {
    let refused = |_| FailureCode::EgressDenied;
    egress.check_host(host).map_err(refused)?;
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| FailureCode::ConnectRefused)?
        .collect();
    let allowed = addrs
        .iter()
        .find(|a| egress.check_ip(a.ip()).is_ok())
        .ok_or(if addrs.is_empty() {
            FailureCode::ConnectRefused
        } else {
            FailureCode::EgressDenied
        })?;
    let stream = TcpStream::connect(allowed)
        .await
        .map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => FailureCode::ConnectTimeout,
            _ => FailureCode::ConnectRefused,
        })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// `Proxy-Authorization` value for `creds`.
pub fn basic_auth(creds: &Credentials) -> String {
    let raw = format!("{}:{}", creds.username, creds.password.expose());
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

fn authority(host: &str, port: u16) -> String {
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What a handshake through a vendor proxy asks for: a tunnel to `host:port`,
/// authenticated with `creds` if the proxy wants credentials.
#[derive(Clone, Copy, Debug)]
pub struct ConnectTo<'a> {
    /// Target host: a name or an IP address.
    pub host: &'a str,
    /// Target port.
    pub port: u16,
    /// The proxy's credentials.
    pub creds: Option<&'a Credentials>,
}

/// A stream a handshake runs over.
pub trait HandshakeStream: AsyncRead + AsyncWrite + Unpin {}

impl<S: AsyncRead + AsyncWrite + Unpin> HandshakeStream for S {}

/// Runs `protocol`'s handshake on `stream` (connected to the proxy). On `Ok` the
/// stream is a tunnel to the target.
pub async fn connect(
    protocol: Protocol,
    stream: &mut impl HandshakeStream,
    to: ConnectTo<'_>,
) -> Result<(), FailureCode> {
    match protocol {
        Protocol::Http => http_connect(stream, to).await,
        Protocol::Socks5 => socks5_connect(stream, to).await,
    }
}

/// Sends `CONNECT host:port` and reads the response head. On `Ok` the stream is a
/// tunnel to the target.
pub async fn http_connect(
    stream: &mut impl HandshakeStream,
    to: ConnectTo<'_>,
) -> Result<(), FailureCode> {
    let target = authority(to.host, to.port);
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(c) = to.creds {
        req.push_str("Proxy-Authorization: ");
        req.push_str(&basic_auth(c));
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(|_| FailureCode::HandshakeFailed)?;
    let head = read_head(stream).await?;
    match parse_status(&head) {
        Some(200..=299) => Ok(()),
        Some(407) => Err(FailureCode::AuthRejected),
        Some(502..=504) => Err(FailureCode::TargetUnreachable),
        _ => Err(FailureCode::HandshakeFailed),
    }
}

/// Reads up to the blank line ending an HTTP head, one byte at a time so that no
/// tunnel byte is consumed. Bounded by [`MAX_HEAD`].
async fn read_head(stream: &mut impl HandshakeStream) -> Result<Vec<u8>, FailureCode> {
    let mut head = Vec::with_capacity(128);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Err(FailureCode::HandshakeFailed);
        }
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return Err(FailureCode::HandshakeFailed),
        }
    }
    Ok(head)
}

/// The status code of an HTTP/1.x response head.
pub fn parse_status(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// SOCKS5 greeting, optional username/password sub-negotiation, and `CONNECT`.
pub async fn socks5_connect(
    stream: &mut impl HandshakeStream,
    to: ConnectTo<'_>,
) -> Result<(), FailureCode> {
    let ConnectTo { host, port, creds } = to;
    let fail = |_| FailureCode::HandshakeFailed;
    let method = if creds.is_some() { 2u8 } else { 0u8 };
    let reply: [u8; 2] = exchange(stream, &[5, 1, method]).await?;
    if reply[0] != 5 {
        return Err(FailureCode::HandshakeFailed);
    }
    if reply[1] == 0xff {
        return Err(FailureCode::AuthRejected);
    }
    if reply[1] != method {
        return Err(FailureCode::HandshakeFailed);
    }
    if let Some(c) = creds {
        let (user, pass) = (c.username.as_bytes(), c.password.expose().as_bytes());
        let msg = socks5::password_request(user, pass).ok_or(FailureCode::AuthRejected)?;
        let status: [u8; 2] = exchange(stream, &msg).await?;
        if status[1] != 0 {
            return Err(FailureCode::AuthRejected);
        }
    }
    let req = socks5::connect_request(host, port).ok_or(FailureCode::CheckerError)?;
    let head: [u8; 4] = exchange(stream, &req).await?;
    if head[0] != 5 {
        return Err(FailureCode::HandshakeFailed);
    }
    match head[1] {
        0 => {}
        1 | 3..=6 => return Err(FailureCode::TargetUnreachable),
        _ => return Err(FailureCode::HandshakeFailed),
    }
    let addr_len = match head[3] {
        1 => 4,
        4 => 16,
        3 => {
            let mut len = [0u8; 1];
            stream.read_exact(&mut len).await.map_err(fail)?;
            usize::from(len[0])
        }
        _ => return Err(FailureCode::HandshakeFailed),
    };
    let mut rest = vec![0u8; addr_len + 2];
    stream.read_exact(&mut rest).await.map_err(fail)?;
    Ok(())
}

/// Writes `msg` and reads the `N` bytes the proxy answers it with (all of a fixed-size
/// reply, or the head of a longer one).
async fn exchange<const N: usize>(
    stream: &mut impl HandshakeStream,
    msg: &[u8],
) -> Result<[u8; N], FailureCode> {
    let fail = |_| FailureCode::HandshakeFailed;
    stream.write_all(msg).await.map_err(fail)?;
    let mut reply = [0u8; N];
    stream.read_exact(&mut reply).await.map_err(fail)?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_api::controlplane::model::Secret;
    use tokio::io::duplex;

    #[test]
    fn status_lines() {
        assert_eq!(
            parse_status(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Some(200)
        );
        assert_eq!(parse_status(b"HTTP/1.0 407 x\r\n"), Some(407));
        assert_eq!(parse_status(b"SSH-2.0\r\n"), None);
        assert_eq!(parse_status(b""), None);
        assert_eq!(parse_status(b"HTTP/1.1 abc\r\n"), None);
    }

    #[tokio::test]
    async fn oversized_connect_head_is_refused() {
        let (mut client, mut server) = duplex(64 * 1024);
        let junk = vec![b'a'; MAX_HEAD + 10];
        server.write_all(&junk).await.unwrap();
        let to = ConnectTo {
            host: "h",
            port: 1,
            creds: None,
        };
        let err = http_connect(&mut client, to).await.unwrap_err();
        assert_eq!(err, FailureCode::HandshakeFailed);
    }

    #[tokio::test]
    async fn socks5_garbage_and_rejections() {
        for (answer, want) in [
            (&[4u8, 0][..], FailureCode::HandshakeFailed),
            (&[5, 0xff], FailureCode::AuthRejected),
            (&[5, 2, 1, 1], FailureCode::AuthRejected),
            (&[5, 2, 1, 0, 5, 5, 0, 1], FailureCode::TargetUnreachable),
            (&[5, 2, 1, 0, 5, 0, 0, 9], FailureCode::HandshakeFailed),
            (&[5], FailureCode::HandshakeFailed),
        ] {
            let (mut client, mut server) = duplex(1024);
            server.write_all(answer).await.unwrap();
            server.shutdown().await.unwrap();
            let creds = Credentials {
                username: "u".into(),
                password: Secret::new("p"),
            };
            let to = ConnectTo {
                host: "127.0.0.1",
                port: 80,
                creds: Some(&creds),
            };
            let err = socks5_connect(&mut client, to).await.unwrap_err();
            assert_eq!(err, want, "{answer:?}");
            drop(server);
        }
    }

    #[test]
    fn basic_auth_encodes() {
        let c = Credentials {
            username: "u".into(),
            password: Secret::new("p"),
        };
        assert_eq!(basic_auth(&c), "Basic dTpw");
    }
}
