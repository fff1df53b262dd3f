//! The SOCKS5 proxy kind: RFC 1928 with RFC 1929 username/password (the only method
//! offered), `CONNECT` only; other commands and address types get their reply codes.
//! Every read is bounded by the protocol's own length bytes and by the handshake timeout.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use super::ConnCtx;
use super::upstream::{Target, connect};
use crate::sim::audit::{UseGuard, UseKind};

const VERSION: u8 = 0x05;
const AUTH_VERSION: u8 = 0x01;
const METHOD_USER_PASS: u8 = 0x02;
const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;
const CMD_CONNECT: u8 = 0x01;
const REPLY_SUCCEEDED: u8 = 0x00;
const REPLY_GENERAL_FAILURE: u8 = 0x01;
const REPLY_COMMAND_NOT_SUPPORTED: u8 = 0x07;
const REPLY_ADDRESS_NOT_SUPPORTED: u8 = 0x08;

/// Serves one client connection: handshake under the timeout, then relay.
pub(super) async fn serve(ctx: Arc<ConnCtx>, mut stream: TcpStream) {
    // For the auditor: a SOCKS5 connection is one use, from its handshake to its end.
    let info = &ctx.proxy.info;
    let used = ctx
        .core
        .audit
        .begin(&info.id, info.port, ctx.peer, UseKind::Socks5);
    let timeout = ctx.core.settings.handshake_timeout;
    let upstream = match tokio::time::timeout(timeout, handshake(&ctx, &mut stream, &used)).await {
        Ok(Ok(Some(upstream))) => upstream,
        Ok(Ok(None)) => return,
        Ok(Err(err)) => return debug!(error = %err, "socks5 handshake failed"),
        Err(_) => return debug!("socks5 handshake timed out"),
    };
    ctx.relay(&mut stream, upstream, &used, "socks5").await;
}

/// Runs the handshake; `Ok(None)` means the client was answered and must be closed.
/// The target it names is recorded on `used`.
async fn handshake(
    ctx: &ConnCtx,
    stream: &mut TcpStream,
    used: &UseGuard,
) -> io::Result<Option<TcpStream>> {
    if !authenticate(stream, |user, pass| ctx.credentials_ok(user, pass)).await? {
        debug!("socks5 authentication failed");
        return Ok(None);
    }
    let target = match read_request(stream).await? {
        Ok(target) => target,
        Err(code) => {
            write_reply(stream, code, None).await?;
            return Ok(None);
        }
    };
    used.target(match &target {
        Target::Ip(addr) => addr.to_string(),
        Target::Domain(host, port) => format!("{host}:{port}"),
    });
    let settings = &ctx.core.settings;
    match connect(&target, ctx.egress_ip(), settings.connect_timeout).await {
        Ok(upstream) => {
            write_reply(stream, REPLY_SUCCEEDED, upstream.local_addr().ok()).await?;
            Ok(Some(upstream))
        }
        Err(err) => {
            debug!(error = %err, "socks5 dial failed");
            write_reply(stream, err.socks_reply(), None).await?;
            Ok(None)
        }
    }
}

/// Method negotiation and RFC 1929 sub-negotiation. Returns whether the client
/// authenticated; on `false` the client has already been told.
async fn authenticate<S>(stream: &mut S, check: impl Fn(&[u8], &[u8]) -> bool) -> io::Result<bool>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await?;
    if head[0] != VERSION {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not SOCKS5"));
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    stream.read_exact(&mut methods).await?;
    if !methods.contains(&METHOD_USER_PASS) {
        stream.write_all(&[VERSION, METHOD_NONE_ACCEPTABLE]).await?;
        return Ok(false);
    }
    stream.write_all(&[VERSION, METHOD_USER_PASS]).await?;
    let mut ver = [0u8; 1];
    stream.read_exact(&mut ver).await?;
    if ver[0] != AUTH_VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad auth version",
        ));
    }
    let username = read_short_field(stream).await?;
    let password = read_short_field(stream).await?;
    let ok = check(&username, &password);
    stream.write_all(&[AUTH_VERSION, u8::from(!ok)]).await?;
    Ok(ok)
}

/// Reads one length-prefixed field (at most 255 bytes).
async fn read_short_field<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<Vec<u8>> {
    let len = stream.read_u8().await?;
    let mut field = vec![0u8; usize::from(len)];
    stream.read_exact(&mut field).await?;
    Ok(field)
}

/// Reads the request; `Err(code)` is the reply to send before closing.
async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<Result<Target, u8>> {
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).await?;
    let [ver, cmd, _rsv, atyp] = head;
    if ver != VERSION {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not SOCKS5"));
    }
    let target = match atyp {
        0x01 => {
            let mut ip = [0u8; 4];
            stream.read_exact(&mut ip).await?;
            let port = stream.read_u16().await?;
            Target::Ip(SocketAddr::from((Ipv4Addr::from(ip), port)))
        }
        0x03 => {
            let name = read_short_field(stream).await?;
            let port = stream.read_u16().await?;
            match String::from_utf8(name) {
                Ok(name) if !name.is_empty() => Target::Domain(name, port),
                _ => return Ok(Err(REPLY_GENERAL_FAILURE)),
            }
        }
        0x04 => {
            let mut ip = [0u8; 16];
            stream.read_exact(&mut ip).await?;
            let port = stream.read_u16().await?;
            Target::Ip(SocketAddr::from((Ipv6Addr::from(ip), port)))
        }
        _ => return Ok(Err(REPLY_ADDRESS_NOT_SUPPORTED)),
    };
    if cmd != CMD_CONNECT {
        return Ok(Err(REPLY_COMMAND_NOT_SUPPORTED));
    }
    Ok(Ok(target))
}

async fn write_reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    code: u8,
    bound: Option<SocketAddr>,
) -> io::Result<()> {
    let (ip, port) = match bound {
        Some(SocketAddr::V4(addr)) => (*addr.ip(), addr.port()),
        _ => (Ipv4Addr::UNSPECIFIED, 0),
    };
    let mut reply = [0u8; 10];
    reply[..4].copy_from_slice(&[VERSION, code, 0x00, 0x01]);
    reply[4..8].copy_from_slice(&ip.octets());
    reply[8..].copy_from_slice(&port.to_be_bytes());
    stream.write_all(&reply).await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run_auth(client_bytes: &[u8]) -> (io::Result<bool>, Vec<u8>) {
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(client_bytes).await.unwrap();
        let result = authenticate(&mut server, |u, p| u == b"user" && p == b"pw").await;
        drop(server);
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        (result, out)
    }

    #[tokio::test]
    async fn accepts_right_credentials() {
        let (ok, out) = run_auth(b"\x05\x02\x00\x02\x01\x04user\x02pw").await;
        assert!(ok.unwrap());
        assert_eq!(out, [0x05, 0x02, 0x01, 0x00]);
    }

    #[tokio::test]
    async fn rejects_wrong_credentials_with_status_one() {
        let (ok, out) = run_auth(b"\x05\x01\x02\x01\x04user\x02no").await;
        assert!(!ok.unwrap());
        assert_eq!(out, [0x05, 0x02, 0x01, 0x01]);
    }

    #[tokio::test]
    async fn no_acceptable_method_without_user_pass() {
        let (ok, out) = run_auth(b"\x05\x01\x00").await;
        assert!(!ok.unwrap());
        assert_eq!(out, [0x05, 0xFF]);
    }

    #[tokio::test]
    async fn arbitrary_bytes_never_panic_and_reads_stay_bounded() {
        use rand::{Rng, RngCore};
        let mut rng = rand::rng();
        for _ in 0..2_000 {
            let len = rng.random_range(0..64);
            let mut bytes = vec![0u8; len];
            rng.fill_bytes(&mut bytes);
            if rng.random_bool(0.5) && !bytes.is_empty() {
                bytes[0] = VERSION;
            }
            let mut input: &[u8] = &bytes;
            let _ = read_request(&mut input).await;
            let (mut client, mut server) = tokio::io::duplex(1024);
            client.write_all(&bytes).await.unwrap();
            drop(client);
            let _ = authenticate(&mut server, |_, _| true).await;
        }
    }

    #[tokio::test]
    async fn requests_parse_and_unsupported_ones_get_codes() {
        let mut connect_v4: &[u8] = b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50";
        assert_eq!(
            read_request(&mut connect_v4).await.unwrap(),
            Ok(Target::Ip("127.0.0.1:80".parse().unwrap()))
        );
        let mut connect_name: &[u8] = b"\x05\x01\x00\x03\x09localhost\x01\xbb";
        assert_eq!(
            read_request(&mut connect_name).await.unwrap(),
            Ok(Target::Domain("localhost".into(), 443))
        );
        let mut bind: &[u8] = b"\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50";
        assert_eq!(read_request(&mut bind).await.unwrap(), Err(0x07));
        let mut udp: &[u8] = b"\x05\x03\x00\x01\x7f\x00\x00\x01\x00\x50";
        assert_eq!(read_request(&mut udp).await.unwrap(), Err(0x07));
        let mut bad_atyp: &[u8] = b"\x05\x01\x00\x09";
        assert_eq!(read_request(&mut bad_atyp).await.unwrap(), Err(0x08));
        let mut not_socks: &[u8] = b"\x04\x01\x00\x01";
        assert!(read_request(&mut not_socks).await.is_err());
    }
}
