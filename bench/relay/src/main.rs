//! `bench-relay`: the floor of `bench/gateway/run.sh` — the least work that carries a
//! CONNECT tunnel through an upstream HTTP proxy the way the gateway must.
//!
//! ```text
//! bench-relay --listen 127.0.0.1:19310 --upstream http://user:pass@127.0.0.2:20001 \
//!             [--upstream …] [--threads N]
//! ```
//!
//! Per connection: read the client's `CONNECT host:port` head (≤ 8 KiB, 10 s), dial the
//! next upstream (round-robin), send it `CONNECT host:port` with `Proxy-Authorization:
//! Basic …`, read its head (must be `200`), answer the client `200`, forward the bytes
//! either side had already sent past its head, then relay both ways with plain read /
//! write loops (16 KiB buffer per direction, the gateway's tunnel buffer; an end of
//! stream is passed on as a half-close) until both directions have ended. Any error
//! closes both connections. A request that is not a CONNECT gets `400`, an upstream that
//! does not answer `200` gives the client `502`.
//!
//! Nothing else: no routing, no client authentication, no metrics, no logs per
//! connection, no idle timeout once the tunnel is up, no graceful drain (SIGTERM ends
//! the process).
//!
//! Runtime: one current-thread Tokio runtime per worker thread (default: the available
//! parallelism), each accepting on its own `SO_REUSEPORT` listener with `TCP_NODELAY` —
//! the gateway's data-plane architecture — so the gateway ÷ relay ratio of CPU per tunnel
//! measures the work the gateway does per tunnel, not a difference of runtimes.
//!
//! A benchmark tool, not product code: loopback only, never deployed.

use base64::Engine as _;
use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Largest request or response head read before the tunnel starts.
const MAX_HEAD: usize = 8 * 1024;
/// Read size of each tunnel direction (the gateway's `TUNNEL_BUFFER`).
const TUNNEL_BUFFER: usize = 16 * 1024;
/// Bound of the handshake: the client's head, the dial, the upstream's head.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Listen backlog of each worker's listener (the gateway's).
const BACKLOG: u32 = 1024;
/// Upper bound of `--threads`.
const MAX_THREADS: usize = 256;

const USAGE: &str = "usage: bench-relay --listen IP:PORT --upstream http://user:pass@IP:PORT \
                     [--upstream …] [--threads N]";

/// One upstream HTTP proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Upstream {
    addr: SocketAddr,
    /// The whole `Proxy-Authorization` header line, CRLF included (empty without
    /// credentials).
    authorization: String,
}

#[derive(Debug, PartialEq, Eq)]
struct Args {
    listen: SocketAddr,
    upstreams: Vec<Upstream>,
    threads: Option<usize>,
}

/// Upstreams and the round-robin position of one worker (each worker has its own: no
/// cache line shared between cores).
#[derive(Debug)]
struct Worker {
    upstreams: Arc<[Upstream]>,
    next: AtomicUsize,
}

impl Worker {
    fn pick(&self) -> &Upstream {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        &self.upstreams[i % self.upstreams.len()]
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("bench-relay: {err}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench-relay: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> io::Result<()> {
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let upstreams: Arc<[Upstream]> = args.upstreams.into();
    // Bound on a throw-away runtime (tokio sockets need one), handed over deregistered.
    let listeners = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?
        .block_on(async { bind_reuseport(args.listen, threads) })?;
    let mut handles = Vec::with_capacity(threads);
    for (i, listener) in listeners.into_iter().enumerate() {
        let worker = Worker {
            upstreams: upstreams.clone(),
            next: AtomicUsize::new(i),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = std::thread::Builder::new()
            .name(format!("relay-worker-{i}"))
            .spawn(move || runtime.block_on(accept_loop(listener, Arc::new(worker))))?;
        handles.push(handle);
    }
    for handle in handles {
        match handle.join() {
            Ok(result) => result?,
            Err(_) => return Err(io::Error::other("a worker thread panicked")),
        }
    }
    Ok(())
}

fn bind_reuseport(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.set_nodelay(true)?;
        socket.bind(addr)?;
        out.push(socket.listen(BACKLOG)?.into_std()?);
    }
    Ok(out)
}

async fn accept_loop(listener: std::net::TcpListener, worker: Arc<Worker>) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                let worker = worker.clone();
                tokio::spawn(async move {
                    // Errors end the tunnel; dropping both streams closes them.
                    let _ = serve(client, &worker).await;
                });
            }
            // Out of descriptors and the like: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn serve(mut client: TcpStream, worker: &Worker) -> io::Result<()> {
    let mut client_buf = Vec::with_capacity(TUNNEL_BUFFER);
    let head = within(read_head(&mut client, &mut client_buf)).await?;
    let Some(target) = connect_target(&client_buf[..head]) else {
        client
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
        return Ok(());
    };
    let upstream_addr = worker.pick();
    let mut request = Vec::with_capacity(64 + 2 * target.len() + upstream_addr.authorization.len());
    for part in [
        b"CONNECT ".as_slice(),
        target,
        b" HTTP/1.1\r\nHost: ",
        target,
        b"\r\n",
        upstream_addr.authorization.as_bytes(),
        b"\r\n",
    ] {
        request.extend_from_slice(part);
    }
    let mut upstream = within(TcpStream::connect(upstream_addr.addr)).await?;
    upstream.set_nodelay(true)?;
    upstream.write_all(&request).await?;
    let mut upstream_buf = Vec::with_capacity(TUNNEL_BUFFER);
    let upstream_head = within(read_head(&mut upstream, &mut upstream_buf)).await?;
    if !status_is_200(&upstream_buf[..upstream_head]) {
        client
            .write_all(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
        return Ok(());
    }
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    // Bytes either side sent right behind its head belong to the tunnel.
    if client_buf.len() > head {
        upstream.write_all(&client_buf[head..]).await?;
    }
    if upstream_buf.len() > upstream_head {
        client.write_all(&upstream_buf[upstream_head..]).await?;
    }
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.split();
    tokio::try_join!(
        pump(&mut client_read, &mut upstream_write, &mut client_buf),
        pump(&mut upstream_read, &mut client_write, &mut upstream_buf),
    )?;
    Ok(())
}

async fn within<T>(work: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, work)
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// Reads until `buf` holds a whole head within its first `MAX_HEAD` bytes; returns the
/// head's length (through the blank line). `buf` may hold more: the first bytes after it.
async fn read_head(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.clear();
    let mut scanned = 0usize;
    loop {
        if stream.read_buf(buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        // The blank line may straddle the previous read.
        let from = scanned.saturating_sub(3);
        let window = &buf[from..buf.len().min(MAX_HEAD)];
        if let Some(at) = window.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(from + at + 4);
        }
        if buf.len() >= MAX_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
        }
        scanned = buf.len();
    }
}

/// The target of `CONNECT target HTTP/1.x`, or `None` for any other request line. The
/// target is visible ASCII (it is copied into the upstream's request).
fn connect_target(head: &[u8]) -> Option<&[u8]> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let mut parts = head[..line_end].split(|&b| b == b' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let valid = method == b"CONNECT"
        && parts.next().is_none()
        && !target.is_empty()
        && target.iter().all(|b| (0x21..=0x7e).contains(b))
        && (version == b"HTTP/1.1" || version == b"HTTP/1.0");
    valid.then_some(target)
}

/// Whether a response head's status line is `HTTP/1.x 200`.
fn status_is_200(head: &[u8]) -> bool {
    head.len() >= 12
        && head.starts_with(b"HTTP/1.")
        && &head[9..12] == b"200"
        && matches!(head.get(12), Some(b' ' | b'\r'))
}

/// One tunnel direction: read, write, until the end of stream, which is passed on as a
/// half-close.
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    loop {
        buf.clear();
        if from.read_buf(buf).await? == 0 {
            return to.shutdown().await;
        }
        to.write_all(buf).await?;
    }
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut listen, mut upstreams, mut threads) = (None, Vec::new(), None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => {
                listen = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--listen {value}: not IP:PORT"))?,
                );
            }
            "--upstream" => upstreams.push(parse_upstream(&value)?),
            "--threads" => {
                let n: usize = value
                    .parse()
                    .map_err(|_| format!("--threads {value}: not a number"))?;
                if n == 0 || n > MAX_THREADS {
                    return Err(format!("--threads {value}: 1 to {MAX_THREADS}"));
                }
                threads = Some(n);
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    let listen = listen.ok_or("--listen is required")?;
    if upstreams.is_empty() {
        return Err("at least one --upstream is required".into());
    }
    Ok(Args {
        listen,
        upstreams,
        threads,
    })
}

/// `http://[user:pass@]IP:PORT` (credentials as the upstream expects them, not
/// percent-decoded).
fn parse_upstream(url: &str) -> Result<Upstream, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("--upstream: {url:?} is not http://…"))?
        .trim_end_matches('/');
    let (credentials, host) = match rest.rsplit_once('@') {
        Some((credentials, host)) => (Some(credentials), host),
        None => (None, rest),
    };
    let addr = host
        .parse()
        .map_err(|_| format!("--upstream: {host:?} is not IP:PORT"))?;
    let authorization = match credentials {
        Some(credentials) if credentials.contains(':') => format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        ),
        Some(_) => return Err("--upstream: credentials are user:password".into()),
        None => String::new(),
    };
    Ok(Upstream {
        addr,
        authorization,
    })
}

#[cfg(test)]
mod tests;
