//! One operation of each mode, over real sockets: an absolute-URI request on a kept-alive
//! proxy connection, a CONNECT tunnel with one request inside, a SOCKS5 tunnel with one
//! request inside.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::response::ReadBuf;
use super::{Mode, OpError, ProxyEndpoint, Target};
use base64::Engine as _;
use proxy_pool_api::socks5;

/// Precomputed request bytes of one (proxy, target) pair.
#[derive(Debug, Clone)]
pub(crate) struct Requests {
    /// `GET http://host:port/path` with `Proxy-Authorization` (HTTP-proxy mode).
    absolute: Vec<u8>,
    /// `CONNECT host:port` with `Proxy-Authorization`.
    connect: Vec<u8>,
    /// `GET /path` sent inside a tunnel.
    inner: Vec<u8>,
    /// SOCKS5 greeting, auth sub-negotiation (if any) and CONNECT request.
    socks_greeting: Vec<u8>,
    socks_auth: Option<Vec<u8>>,
    socks_connect: Vec<u8>,
}

impl Requests {
    pub(crate) fn new(proxy: &ProxyEndpoint, target: &Target) -> Self {
        let authority = target.authority();
        let auth = proxy.credentials.as_ref().map(|(u, p)| {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            format!("Proxy-Authorization: Basic {token}\r\n")
        });
        let auth = auth.as_deref().unwrap_or("");
        let absolute = format!(
            "GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\n{auth}User-Agent: proxy-pool-loadgen\r\n\r\n",
            path = target.path
        );
        let connect = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n");
        let inner = format!(
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: proxy-pool-loadgen\r\n\r\n",
            path = target.path
        );
        // Lengths (≤ 255) are validated by `LoadConfig::validate`, so neither
        // encoding is ever refused.
        let (socks_greeting, socks_auth) = match &proxy.credentials {
            Some((u, p)) => (
                vec![5u8, 1, 2],
                socks5::password_request(u.as_bytes(), p.as_bytes()),
            ),
            None => (vec![5u8, 1, 0], None),
        };
        let socks_connect = socks5::connect_request(&target.host, target.port).unwrap_or_default();
        Self {
            absolute: absolute.into_bytes(),
            connect: connect.into_bytes(),
            inner: inner.into_bytes(),
            socks_greeting,
            socks_auth,
            socks_connect,
        }
    }
}

/// A kept-alive client connection (HTTP-proxy mode) or an open tunnel.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) rb: ReadBuf,
}

pub(crate) async fn dial(addr: SocketAddr) -> Result<Conn, OpError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|_| OpError::Connect)?;
    stream.set_nodelay(true).map_err(|_| OpError::Io)?;
    Ok(Conn {
        stream,
        rb: ReadBuf::default(),
    })
}

/// One request/response on `conn` (absolute URI or inside a tunnel): the final
/// status and whether the connection may carry another request.
async fn exchange(conn: &mut Conn, request: &[u8]) -> Result<(u16, bool), OpError> {
    conn.stream
        .write_all(request)
        .await
        .map_err(|_| OpError::Io)?;
    let head = conn.rb.read_head(&mut conn.stream, false).await?;
    conn.rb.skip_body(&mut conn.stream, &head).await?;
    Ok((head.status, head.keep_alive && conn.rb.pending() == 0))
}

fn check_status(status: u16) -> Result<(), OpError> {
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(OpError::Status(status))
    }
}

/// Opens a tunnel to the target through the proxy (CONNECT or SOCKS5).
pub(crate) async fn open_tunnel(
    mode: Mode,
    addr: SocketAddr,
    req: &Requests,
) -> Result<Conn, OpError> {
    let mut conn = dial(addr).await?;
    match mode {
        Mode::Connect | Mode::HttpProxy => {
            conn.stream
                .write_all(&req.connect)
                .await
                .map_err(|_| OpError::Io)?;
            let head = conn.rb.read_head(&mut conn.stream, true).await?;
            if !(200..300).contains(&head.status) {
                return Err(OpError::ProxyStatus(head.status));
            }
            if conn.rb.pending() > 0 {
                // The target speaks only after our request: bytes here are a protocol error.
                return Err(OpError::BadResponse);
            }
        }
        Mode::Socks5 => socks5_handshake(&mut conn.stream, req).await?,
    }
    Ok(conn)
}

/// Sends one SOCKS5 message and reads the `N`-byte start of the reply, which must
/// carry version 5.
async fn socks_step<const N: usize>(s: &mut TcpStream, message: &[u8]) -> Result<[u8; N], OpError> {
    s.write_all(message).await.map_err(|_| OpError::Io)?;
    let mut reply = [0u8; N];
    read_exact(s, &mut reply).await?;
    if reply[0] != 5 {
        return Err(OpError::BadResponse);
    }
    Ok(reply)
}

async fn socks5_handshake(s: &mut TcpStream, req: &Requests) -> Result<(), OpError> {
    let mut two: [u8; 2] = socks_step(s, &req.socks_greeting).await?;
    match (two[1], &req.socks_auth) {
        (0, None) => {}
        (2, Some(auth)) => {
            s.write_all(auth).await.map_err(|_| OpError::Io)?;
            read_exact(s, &mut two).await?;
            if two[1] != 0 {
                return Err(OpError::SocksAuth);
            }
        }
        _ => return Err(OpError::SocksMethod),
    }
    let head: [u8; 4] = socks_step(s, &req.socks_connect).await?;
    if head[1] != 0 {
        return Err(OpError::SocksReply(head[1]));
    }
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut len = [0u8; 1];
            read_exact(s, &mut len).await?;
            usize::from(len[0]) + 2
        }
        _ => return Err(OpError::BadResponse),
    };
    let mut skip = [0u8; 258];
    read_exact(s, &mut skip[..rest]).await
}

async fn read_exact(s: &mut TcpStream, buf: &mut [u8]) -> Result<(), OpError> {
    match s.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(OpError::Closed),
        Err(_) => Err(OpError::Io),
    }
}

/// One operation of `mode`. `conn` is the worker's kept-alive connection (HTTP-proxy
/// mode only); it is emptied whenever it cannot be reused.
pub(crate) async fn run_op(
    mode: Mode,
    addr: SocketAddr,
    req: &Requests,
    conn: &mut Option<Conn>,
) -> Result<(), OpError> {
    match mode {
        Mode::HttpProxy => {
            let (mut c, reused) = match conn.take() {
                Some(c) => (c, true),
                None => (dial(addr).await?, false),
            };
            let mut outcome = exchange(&mut c, &req.absolute).await;
            if reused && outcome == Err(OpError::Closed) && c.rb.pending() == 0 {
                // The server closed the idle kept-alive connection before this request
                // got any answer: what any client does, once, on a fresh connection.
                c = dial(addr).await?;
                outcome = exchange(&mut c, &req.absolute).await;
            }
            let (status, keep_alive) = outcome?;
            if keep_alive {
                *conn = Some(c);
            }
            check_status(status)
        }
        Mode::Connect | Mode::Socks5 => {
            let mut c = open_tunnel(mode, addr, req).await?;
            check_status(exchange(&mut c, &req.inner).await?.0)
        }
    }
}

/// Opens a tunnel and makes one request inside it, leaving the tunnel open (idle).
pub(crate) async fn open_idle_tunnel(
    mode: Mode,
    addr: SocketAddr,
    req: &Requests,
) -> Result<Conn, OpError> {
    let mut c = open_tunnel(mode, addr, req).await?;
    let (status, keep_alive) = exchange(&mut c, &req.inner).await?;
    check_status(status)?;
    if !keep_alive {
        return Err(OpError::Closed);
    }
    Ok(c)
}
