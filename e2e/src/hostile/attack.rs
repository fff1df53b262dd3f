//! Hostile clients over real loopback sockets: a half-open flood, slowloris, huge
//! headers, trickled bodies and malformed protocol bytes. Each one reports what the
//! server did (closed, answered, still open) and how long it took; the caller judges.
//!
//! Floods come from many loopback source addresses (`127.0.5.10…`) so that per-source
//! caps and the ephemeral port range are exercised the way many attackers would;
//! legitimate requests come from [`LEGIT_SOURCE`], an address no attack uses. Every
//! attack socket closes with `SO_LINGER 0` (a reset, no TIME_WAIT left behind).
//! Attacks inside TLS ([`Dial::Tls`]) complete the handshake first, then misbehave.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Where legitimate requests come from during and after an attack (outside the
/// simulator's egress range, `127.0.0.2`–`127.0.3.254`).
pub const LEGIT_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 6, 2);

/// Attack source addresses.
pub const SOURCES: usize = 40;

/// The `i`-th attack source address ([`SOURCES`] of them, `127.0.5.10` to `127.0.5.49`).
pub fn source(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 5, 10 + (i % SOURCES) as u8)
}

/// A TCP connection from `src` to `addr` (3 s to connect), closing with a reset.
pub async fn connect_from(src: Ipv4Addr, addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((src, 0)))?;
    socket.set_zero_linger()?;
    tokio::time::timeout(Duration::from_secs(3), socket.connect(addr))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// A byte stream to a listener (TCP, or TLS over TCP).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An attack connection.
pub type Conn = Box<dyn Io>;

/// How attack connections are opened.
#[derive(Clone)]
pub enum Dial {
    /// Plain TCP.
    Plain,
    /// TLS over TCP (handshake within 10 s), verifying the server as `name`.
    Tls {
        /// Client settings (trust roots).
        config: Arc<rustls::ClientConfig>,
        /// Name the server's certificate must carry.
        name: ServerName<'static>,
    },
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain => f.write_str("Plain"),
            Self::Tls { name, .. } => write!(f, "Tls({name:?})"),
        }
    }
}

impl Dial {
    /// A connection from `src` to `addr`.
    pub async fn open(&self, src: Ipv4Addr, addr: SocketAddr) -> io::Result<Conn> {
        let tcp = connect_from(src, addr).await?;
        match self {
            Self::Plain => Ok(Box::new(tcp)),
            Self::Tls { config, name } => {
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let tls = tokio::time::timeout(
                    Duration::from_secs(10),
                    connector.connect(name.clone(), tcp),
                )
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
                Ok(Box::new(tls))
            }
        }
    }
}

/// Reads until the server closes (EOF or reset) or `within` passes; returns when it
/// closed (`None`: still open) and the bytes it sent (at most 64 KiB kept).
pub async fn until_closed<S: AsyncRead + Unpin + ?Sized>(
    s: &mut S,
    within: Duration,
) -> (Option<Duration>, Vec<u8>) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (Some(started.elapsed()), got),
            Ok(Ok(n)) => {
                if got.len() < 64 * 1024 {
                    got.extend_from_slice(&buf[..n]);
                }
            }
            Err(_) => return (None, got),
        }
    }
}

/// What a group of attack connections saw.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Connections attempted.
    pub attempted: u64,
    /// Connections established.
    pub connected: u64,
    /// Connections the server closed (or refused) within the bound.
    pub closed: u64,
    /// Connections the client still saw open at the bound (see [`Held`]: whether the
    /// server holds them is for the server's descriptors to say).
    pub held: u64,
    /// The longest a connection stayed open before the server closed it, ms.
    pub longest_ms: u64,
    /// Answers that started with an HTTP status line, by status code.
    pub statuses: Vec<u16>,
}

#[derive(Default)]
struct Tally {
    attempted: AtomicU64,
    connected: AtomicU64,
    closed: AtomicU64,
    held: AtomicU64,
    longest_ms: AtomicU64,
    statuses: parking_lot::Mutex<Vec<u16>>,
}

impl Tally {
    fn close(&self, after: Option<Duration>, answer: &[u8]) {
        match after {
            Some(d) => {
                self.closed.fetch_add(1, Ordering::Relaxed);
                let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                self.longest_ms.fetch_max(ms, Ordering::Relaxed);
            }
            None => {
                self.held.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(code) = status_of(answer) {
            self.statuses.lock().push(code);
        }
    }

    fn outcome(&self) -> Outcome {
        let mut statuses = self.statuses.lock().clone();
        statuses.sort_unstable();
        statuses.dedup();
        Outcome {
            attempted: self.attempted.load(Ordering::Relaxed),
            connected: self.connected.load(Ordering::Relaxed),
            closed: self.closed.load(Ordering::Relaxed),
            held: self.held.load(Ordering::Relaxed),
            longest_ms: self.longest_ms.load(Ordering::Relaxed),
            statuses,
        }
    }
}

fn status_of(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.split_whitespace();
    parts
        .next()
        .filter(|v| v.starts_with("HTTP/"))
        .and_then(|_| parts.next())
        .and_then(|c| c.parse().ok())
}

/// Attack connections the server had not closed at the bound, still open: the caller
/// looks at the server while they are (what does it hold for them?), then drops them.
pub struct Held(parking_lot::Mutex<Vec<(tokio::sync::OwnedSemaphorePermit, Conn)>>);

impl Held {
    /// How many.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({})", self.len())
    }
}

/// What one attack connection saw: when the server closed it (`None`: not within the
/// bound), what it answered, and the connection back.
type Seen = (Option<Duration>, Vec<u8>, Conn);

/// Runs `per_connection` on `total` connections opened by `dial`, at most `concurrent`
/// at once, each from the next attack source; every connection is given `bound` to be
/// closed by the server. Connections still open then are kept (with their concurrency
/// slot) and returned.
async fn run<F, Fut>(
    dial: &Dial,
    addr: SocketAddr,
    total: usize,
    concurrent: usize,
    bound: Duration,
    per_connection: F,
) -> (Outcome, Held)
where
    F: Fn(Conn) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Seen> + Send,
{
    let tally = Arc::new(Tally::default());
    let held = Arc::new(Held(parking_lot::Mutex::new(Vec::new())));
    let gate = Arc::new(Semaphore::new(concurrent.max(1)));
    let mut tasks = JoinSet::new();
    for i in 0..total {
        // The gate is never closed.
        let Ok(permit) = gate.clone().acquire_owned().await else {
            break;
        };
        let (tally, held, f, dial) = (
            tally.clone(),
            held.clone(),
            per_connection.clone(),
            dial.clone(),
        );
        tasks.spawn(async move {
            tally.attempted.fetch_add(1, Ordering::Relaxed);
            let Ok(s) = dial.open(source(i), addr).await else {
                // Refused or dropped at the backlog: the server did not keep it.
                tally.close(Some(Duration::ZERO), &[]);
                return;
            };
            tally.connected.fetch_add(1, Ordering::Relaxed);
            match tokio::time::timeout(bound + Duration::from_secs(5), f(s)).await {
                Ok((None, answer, conn)) => {
                    tally.close(None, &answer);
                    held.0.lock().push((permit, conn));
                }
                Ok((after, answer, _conn)) => tally.close(after, &answer),
                Err(_) => tally.close(None, &[]),
            }
        });
        // Keep the JoinSet from growing without bound.
        while tasks.len() > concurrent * 2 {
            let _ = tasks.join_next().await;
        }
    }
    while tasks.join_next().await.is_some() {}
    let held = Arc::try_unwrap(held).unwrap_or_else(|shared| {
        Held(parking_lot::Mutex::new(std::mem::take(
            &mut *shared.0.lock(),
        )))
    });
    (tally.outcome(), held)
}

/// Opens `total` TCP connections (at most `concurrent` held at once) that send nothing.
pub async fn half_open(
    addr: SocketAddr,
    total: usize,
    concurrent: usize,
    bound: Duration,
) -> (Outcome, Held) {
    run(
        &Dial::Plain,
        addr,
        total,
        concurrent,
        bound,
        move |mut s| async move {
            let (closed, answer) = until_closed(&mut s, bound).await;
            (closed, answer, s)
        },
    )
    .await
}

/// What each connection of [`misbehave`] sends, from the moment it is open.
#[derive(Clone, Debug)]
pub enum Misbehaviour {
    /// Sends `prefix` at once, then `drip` one byte every `every` (round and round),
    /// never finishing: slowloris (an empty prefix, a request head as the drip) or a
    /// trickled body (a complete head as the prefix).
    Trickle {
        /// Sent at once (may be empty).
        prefix: Vec<u8>,
        /// Dripped a byte at a time, over and over.
        drip: Vec<u8>,
        /// Time between two dripped bytes.
        every: Duration,
    },
    /// Sends `prefix`, then `filler` over and over (up to `bytes` in all) as fast as the
    /// server takes them, then waits for the server to close.
    Flood {
        /// Sent first.
        prefix: Vec<u8>,
        /// Repeated after the prefix.
        filler: Vec<u8>,
        /// Bytes to send in all, the prefix included.
        bytes: usize,
    },
    /// Sends `payload` once and waits for the server's reaction.
    Once {
        /// The bytes sent.
        payload: Vec<u8>,
    },
}

/// `n` connections (all at once) that each misbehave as `how` says; every connection
/// is given `bound` to be closed by the server.
pub async fn misbehave(
    dial: &Dial,
    addr: SocketAddr,
    n: usize,
    how: Misbehaviour,
    bound: Duration,
) -> (Outcome, Held) {
    let how = Arc::new(how);
    run(dial, addr, n, n, bound, move |s| {
        let how = how.clone();
        async move { how.on(s, bound).await }
    })
    .await
}

impl Misbehaviour {
    /// Misbehaves on `s` and reports what the server did within `bound`.
    async fn on(&self, mut s: Conn, bound: Duration) -> Seen {
        let started = Instant::now();
        match self {
            Self::Trickle {
                prefix,
                drip,
                every,
            } => {
                if !prefix.is_empty() && s.write_all(prefix).await.is_err() {
                    return (Some(started.elapsed()), Vec::new(), s);
                }
                for &b in drip.iter().cycle() {
                    if s.write_all(&[b]).await.is_err() || s.flush().await.is_err() {
                        return (Some(started.elapsed()), Vec::new(), s);
                    }
                    let (closed, answer) = until_closed(&mut s, *every).await;
                    if closed.is_some() {
                        return (Some(started.elapsed()), answer, s);
                    }
                    if started.elapsed() > bound {
                        return (None, answer, s);
                    }
                }
                // Nothing to drip: wait for the server as a silent client would.
                sent_then_wait(s, started, bound).await
            }
            Self::Flood {
                prefix,
                filler,
                bytes,
            } => {
                let _ = s.write_all(prefix).await;
                let mut sent = prefix.len();
                while sent < *bytes {
                    match tokio::time::timeout(Duration::from_secs(2), s.write_all(filler)).await {
                        Ok(Ok(())) => sent += filler.len(),
                        _ => break,
                    }
                }
                sent_then_wait(s, started, bound).await
            }
            Self::Once { payload } => {
                let _ = s.write_all(payload).await;
                sent_then_wait(s, started, bound).await
            }
        }
    }
}

/// Flushes what an attack connection (opened at `started`) sent, then gives the server
/// `bound` to close it: when it did (since `started`), what it answered.
async fn sent_then_wait(mut s: Conn, started: Instant, bound: Duration) -> Seen {
    let _ = s.flush().await;
    let (closed, answer) = until_closed(&mut s, bound).await;
    (closed.map(|_| started.elapsed()), answer, s)
}

/// Deterministic pseudo-random bytes (xorshift), `len` of them from `seed`.
pub fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A TLS 1.2/1.3 ClientHello record header and the start of a hello (for plaintext
/// listeners: bytes of the wrong protocol).
pub const TLS_HELLO: &[u8] = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
/// The HTTP/2 connection preface (for HTTP/1 listeners).
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_garbage() {
        assert_eq!(status_of(b"HTTP/1.1 431 Too Large\r\n"), Some(431));
        assert_eq!(status_of(b"\x05\x01"), None);
        assert_eq!(garbage(7, 16), garbage(7, 16));
        assert_ne!(garbage(7, 16), garbage(8, 16));
        assert_eq!(source(0), Ipv4Addr::new(127, 0, 5, 10));
        assert_eq!(source(41), Ipv4Addr::new(127, 0, 5, 11));
    }
}
