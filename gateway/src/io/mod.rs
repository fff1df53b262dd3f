//! Byte plumbing shared by listeners and upstream code: a connection with one fixed,
//! bounded read buffer ([`BufConn`]), body relays for each HTTP framing, and the
//! tunnel relay with an idle timeout. Every wait is bounded by a timeout: reads by an
//! idle timeout (and, for request bodies, an overall deadline), writes by a write
//! timeout ([`write_all`]) so a peer that stops reading cannot hold a connection.
//!
//! Heads are searched incrementally: each read scans only the new bytes (and the three
//! before them), so a head trickled byte by byte costs linear work.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::parse::chunked::{
    MAX_CHUNK_LINE, MAX_TRAILER_BYTES, check_trailer_line, parse_chunk_size,
};
use crate::parse::http_head::{BodyFraming, HeadError, head_len_from};

mod client;
#[cfg(target_os = "linux")]
mod splice;

#[cfg(target_os = "linux")]
pub use splice::SPLICE_AFTER;

pub use client::{ClientConn, ClientStream};

/// A TCP stream (by default; a client's is a metered [`ClientStream`]) with a
/// fixed-capacity read buffer. The buffer is allocated once and never zeroed (reads go
/// into its spare capacity); bytes `start..buf.len()` are read but not consumed.
#[derive(Debug)]
pub struct BufConn<S = TcpStream> {
    /// The stream.
    pub stream: S,
    buf: Vec<u8>,
    cap: usize,
    start: usize,
    /// Bytes of `buffered()` already searched for the end of a head.
    scanned: usize,
    /// Bytes examined by head searches in total (the linear-work guarantee's witness).
    head_scan: u64,
}

/// Which side of a body copy failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Reading the source.
    #[error("read: {0}")]
    Read(io::Error),
    /// Writing the destination.
    #[error("write: {0}")]
    Write(io::Error),
    /// Malformed chunked encoding.
    #[error("malformed chunked body")]
    Malformed,
}

impl<S: AsyncRead + Unpin> BufConn<S> {
    /// Wraps `stream` with a buffer of `capacity` bytes.
    pub fn new(stream: S, capacity: usize) -> Self {
        let cap = capacity.max(1024);
        Self {
            stream,
            buf: Vec::with_capacity(cap),
            cap,
            start: 0,
            scanned: 0,
            head_scan: 0,
        }
    }

    /// Bytes examined by head searches on this connection so far.
    pub fn head_bytes_scanned(&self) -> u64 {
        self.head_scan
    }

    /// Size of the read buffer.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes read but not consumed.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Marks `n` buffered bytes as used.
    pub fn consume(&mut self, n: usize) {
        self.scanned = 0;
        self.start = (self.start + n).min(self.buf.len());
        if self.start == self.buf.len() {
            self.start = 0;
            self.buf.clear();
        }
    }

    /// Reads more, waiting at most `timeout`. Returns 0 at EOF; fails when the buffer
    /// is full of unconsumed bytes.
    pub async fn fill(&mut self, timeout: Duration) -> io::Result<usize> {
        if self.buf.len() >= self.cap {
            if self.start == 0 {
                return Err(io::Error::new(io::ErrorKind::OutOfMemory, "buffer full"));
            }
            self.buf.drain(..self.start);
            self.start = 0;
        }
        // At most the room left below `cap` (the Vec never grows past it here).
        let room = self.cap - self.buf.len();
        let mut limited = (&mut self.stream).take(room as u64);
        let read = limited.read_buf(&mut self.buf);
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
    }

    /// Reads until a complete HTTP head (≤ `max` bytes) is buffered; returns its length,
    /// or `None` on a clean EOF before any byte.
    pub async fn read_head(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<Option<usize>, HeadReadError> {
        let deadline = Instant::now() + timeout;
        loop {
            let (found, scanned) = head_len_from(self.buffered(), self.scanned, max);
            self.head_scan += scanned as u64;
            if let Some(len) = found? {
                self.scanned = 0;
                return Ok(Some(len));
            }
            // The next search resumes where this one stopped (a `\r\n\r\n` may
            // straddle the boundary: three bytes are looked at again).
            self.scanned = self.buffered().len().saturating_sub(3);
            let left = deadline.saturating_duration_since(Instant::now());
            match self.fill(left).await {
                Ok(0) if self.buffered().is_empty() => return Ok(None),
                Ok(0) => return Err(HeadReadError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::OutOfMemory => {
                    return Err(HeadReadError::Head(HeadError::TooLarge));
                }
                Err(e) => return Err(HeadReadError::Io(e)),
            }
        }
    }
}

impl BufConn {
    /// Whether the peer has closed or sent unexpected bytes (for pooled connections):
    /// a non-blocking probe.
    pub fn is_dead(&self) -> bool {
        if !self.buffered().is_empty() {
            return true;
        }
        let mut probe = [0u8; 1];
        !matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Reading a head failed.
#[derive(Debug, thiserror::Error)]
pub enum HeadReadError {
    /// Malformed or too large.
    #[error(transparent)]
    Head(#[from] HeadError),
    /// I/O (including timeouts).
    #[error(transparent)]
    Io(io::Error),
}

/// The waits of one body copy.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// Longest wait for the next bytes from the source.
    pub read_idle: Duration,
    /// Longest time one write may make no progress.
    pub write: Duration,
    /// When the whole body must be through (`None`: no overall deadline).
    pub deadline: Option<Instant>,
}

impl Waits {
    /// The wait for the next read: the idle timeout, cut at the deadline.
    fn next_read(&self) -> io::Result<Duration> {
        match self.deadline {
            None => Ok(self.read_idle),
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    Err(io::ErrorKind::TimedOut.into())
                } else {
                    Ok(left.min(self.read_idle))
                }
            }
        }
    }
}

/// Writes all of `buf`, failing when one write makes no progress for `timeout` (the
/// peer stopped reading). A write that completes at once costs no timer.
pub async fn write_all<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut buf: &[u8],
    timeout: Duration,
) -> io::Result<()> {
    while !buf.is_empty() {
        let n = {
            let mut write = pin!(w.write(buf));
            let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
            match first {
                Poll::Ready(r) => r?,
                Poll::Pending => tokio::time::timeout(timeout, write)
                    .await
                    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??,
            }
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}

/// Copies one body of `framing` from `src` to `dst`. Chunked bodies go through with
/// their chunk framing; trailer fields are checked like header lines and dropped.
pub async fn copy_body<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    src: &mut BufConn<R>,
    dst: &mut W,
    framing: BodyFraming,
    waits: Waits,
) -> Result<u64, CopyError> {
    copy_body_counted(src, dst, framing, waits, &mut 0).await
}

/// [`copy_body`], adding to `sent` every byte written to `dst` (chunk framing
/// included) as it goes, so a copy that fails part-way still counts what went out.
pub async fn copy_body_counted<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    src: &mut BufConn<R>,
    dst: &mut W,
    framing: BodyFraming,
    waits: Waits,
    sent: &mut u64,
) -> Result<u64, CopyError> {
    let mut copy = BodyCopy {
        src,
        dst,
        waits,
        sent,
    };
    match framing {
        BodyFraming::None => Ok(0),
        BodyFraming::Length(n) => copy.exact(n).await.map(|()| n),
        BodyFraming::Chunked => copy.chunked().await,
        BodyFraming::UntilClose => copy.until_close().await,
    }
}

/// One body copy in progress: from `src`'s buffer to `dst`, within `waits`.
struct BodyCopy<'a, R, W> {
    src: &'a mut BufConn<R>,
    dst: &'a mut W,
    waits: Waits,
    /// Bytes written to `dst` so far.
    sent: &'a mut u64,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> BodyCopy<'_, R, W> {
    /// Reads more into `src`'s buffer; 0 at the end of the stream.
    async fn fill(&mut self) -> Result<usize, CopyError> {
        let wait = self.waits.next_read().map_err(CopyError::Read)?;
        self.src.fill(wait).await.map_err(CopyError::Read)
    }

    /// Whether `src` has bytes buffered, reading more when it has none: `false` at the
    /// end of the stream.
    async fn has_bytes(&mut self) -> Result<bool, CopyError> {
        Ok(!self.src.buffered().is_empty() || self.fill().await? > 0)
    }

    /// Sends `bytes` to `dst`.
    async fn send(&mut self, bytes: &[u8]) -> Result<(), CopyError> {
        write_all(self.dst, bytes, self.waits.write)
            .await
            .map_err(CopyError::Write)?;
        *self.sent += bytes.len() as u64;
        Ok(())
    }

    /// Sends the first `n` buffered bytes of `src` to `dst` and consumes them.
    async fn pass(&mut self, n: usize) -> Result<(), CopyError> {
        write_all(self.dst, &self.src.buffered()[..n], self.waits.write)
            .await
            .map_err(CopyError::Write)?;
        *self.sent += n as u64;
        self.src.consume(n);
        Ok(())
    }

    async fn exact(&mut self, mut left: u64) -> Result<(), CopyError> {
        while left > 0 {
            if !self.has_bytes().await? {
                return Err(CopyError::Read(io::ErrorKind::UnexpectedEof.into()));
            }
            let avail = self.src.buffered().len();
            let n = avail.min(usize::try_from(left).unwrap_or(usize::MAX));
            self.pass(n).await?;
            left -= n as u64;
        }
        Ok(())
    }

    async fn until_close(&mut self) -> Result<u64, CopyError> {
        let mut total = 0u64;
        while self.has_bytes().await? {
            let n = self.src.buffered().len();
            self.pass(n).await?;
            total += n as u64;
        }
        Ok(total)
    }

    /// Reads one CRLF-terminated line (≤ [`MAX_CHUNK_LINE`]); returns its length
    /// without CRLF, the line staying buffered.
    async fn buffer_line(&mut self) -> Result<usize, CopyError> {
        let mut from = 0;
        loop {
            let buffered = self.src.buffered();
            if let Some(pos) = buffered[from..].windows(2).position(|w| w == b"\r\n") {
                return Ok(from + pos);
            }
            if buffered.len() > MAX_CHUNK_LINE {
                return Err(CopyError::Malformed);
            }
            from = buffered.len().saturating_sub(1);
            if self.fill().await? == 0 {
                return Err(CopyError::Read(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    async fn chunked(&mut self) -> Result<u64, CopyError> {
        let mut total = 0u64;
        loop {
            let len = self.buffer_line().await?;
            let line = &self.src.buffered()[..len];
            let size = parse_chunk_size(line).map_err(|_| CopyError::Malformed)?;
            if size == 0 {
                // The last chunk goes out bare: its extensions stay behind with the
                // trailers.
                self.src.consume(len + 2);
                break;
            }
            self.pass(len + 2).await?;
            self.exact(size).await?;
            if self.buffer_line().await? != 0 {
                return Err(CopyError::Malformed);
            }
            // The chunk data's CRLF.
            self.pass(2).await?;
            total += size;
        }
        // Trailer fields: each checked like a header line, all dropped (RFC 9112
        // §7.1.2); the body ends with the last chunk and an empty trailer section.
        let mut trailer_bytes = 0usize;
        loop {
            let len = self.buffer_line().await?;
            if len == 0 {
                self.src.consume(2);
                break;
            }
            trailer_bytes += len + 2;
            if trailer_bytes > MAX_TRAILER_BYTES {
                return Err(CopyError::Malformed);
            }
            check_trailer_line(&self.src.buffered()[..len]).map_err(|_| CopyError::Malformed)?;
            self.src.consume(len + 2);
        }
        self.send(b"0\r\n\r\n").await?;
        Ok(total)
    }
}

/// Why a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelEnd {
    /// Both sides closed (or one side closed and the other followed).
    Closed,
    /// No bytes either way for the idle timeout.
    Idle,
    /// The worker's lease on the proxy ended (`stop` resolved).
    LeaseEnded,
    /// An I/O error on either side.
    Error,
}

/// Most bytes one read of a tunnel direction takes (less when the connection's read
/// buffer is smaller: a tunnel reads into the buffers its connections already have).
pub const TUNNEL_BUFFER: usize = 16 * 1024;

/// How a tunnel went: bytes each way and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relayed {
    /// Bytes read from the client (client → upstream).
    pub up: u64,
    /// Bytes read from the upstream (upstream → client).
    pub down: u64,
    /// How it ended.
    pub end: TunnelEnd,
    /// Directions (0–2) that moved to `splice(2)` (Linux, after
    /// [`SPLICE_AFTER`] bytes each).
    pub spliced: u8,
}

/// What both directions of a tunnel share.
#[derive(Debug)]
struct Both {
    /// When the tunnel started.
    base: Instant,
    /// Milliseconds since `base` of the last bytes read either way (the idle watchdog's).
    last: AtomicU64,
    /// One direction has ended.
    ended: AtomicBool,
    /// Directions that moved to `splice`.
    spliced: AtomicU8,
    /// Longest time one write may make no progress.
    write: Duration,
}

impl Both {
    /// `n` bytes were read into one direction, counted in its `count`.
    fn read(&self, count: &AtomicU64, n: usize) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Relays bytes both ways until both sides close, the tunnel idles out, a write makes
/// no progress for `write` (a side stopped reading) or `stop` resolves. (At the end of
/// a shutdown's grace period the listener drops the connection's task, tunnel and all.)
/// Each direction reads into the read buffer its connection already has (which must
/// hold no unconsumed bytes), so a tunnel allocates no buffer of its own; on Linux a
/// direction that has carried [`SPLICE_AFTER`] bytes moves to
/// `splice(2)` (a pipe, no copy through user space) and frees its buffer.
pub async fn tunnel(
    client: &mut ClientConn,
    upstream: &mut BufConn,
    idle: Duration,
    write: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Relayed {
    let both = Both {
        base: Instant::now(),
        last: AtomicU64::new(0),
        ended: AtomicBool::new(false),
        spliced: AtomicU8::new(0),
        write,
    };
    let up = AtomicU64::new(0);
    let down = AtomicU64::new(0);
    let BufConn {
        stream: client_stream,
        buf: client_buf,
        ..
    } = client;
    let BufConn {
        stream: upstream_stream,
        buf: upstream_buf,
        ..
    } = upstream;
    client_buf.clear();
    upstream_buf.clear();
    let (mut client_read, mut client_write) = client_stream.split();
    let (mut upstream_read, mut upstream_write) = upstream_stream.split();
    let relay = async {
        tokio::try_join!(
            pump(
                &mut client_read,
                &mut upstream_write,
                client_buf,
                &up,
                &both
            ),
            pump(
                &mut upstream_read,
                &mut client_write,
                upstream_buf,
                &down,
                &both
            ),
        )
    };
    let watchdog = async {
        loop {
            let seen = Duration::from_millis(both.last.load(Ordering::Relaxed));
            let deadline = both.base + seen + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    // Biased: the bytes first (no random draw per wake-up).
    let end = tokio::select! {
        biased;
        res = relay => if res.is_ok() { TunnelEnd::Closed } else { TunnelEnd::Error },
        () = watchdog => TunnelEnd::Idle,
        () = stop => TunnelEnd::LeaseEnded,
    };
    Relayed {
        up: up.load(Ordering::Relaxed),
        down: down.load(Ordering::Relaxed),
        end,
        spliced: both.spliced.load(Ordering::Relaxed),
    }
}

/// One side of a tunnel direction: the TCP socket it reads from or writes to, and the
/// counting its `AsyncRead` / `AsyncWrite` does (a client's meter), for bytes moved
/// past those (by `splice`).
pub trait TunnelSide {
    /// The socket.
    fn socket(&self) -> &TcpStream;
    /// `n` bytes were moved through this side without its `AsyncRead` / `AsyncWrite`.
    fn moved(&self, n: u64);
}

impl TunnelSide for tokio::net::tcp::ReadHalf<'_> {
    fn socket(&self) -> &TcpStream {
        self.as_ref()
    }

    fn moved(&self, _: u64) {}
}

impl TunnelSide for tokio::net::tcp::WriteHalf<'_> {
    fn socket(&self) -> &TcpStream {
        self.as_ref()
    }

    fn moved(&self, _: u64) {}
}

/// One direction of a tunnel: read into `buf` (its spare capacity, at most
/// [`TUNNEL_BUFFER`] at a time), write everything out; at EOF, half-close the writer
/// (see [`end_of_stream`]). On Linux, a direction that has carried
/// [`SPLICE_AFTER`] bytes moves to `splice(2)` for the rest of the tunnel and
/// gives its buffer back (a pipe that cannot be had leaves it copying).
async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    buf: &mut Vec<u8>,
    count: &AtomicU64,
    both: &Both,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + TunnelSide,
    W: AsyncWrite + Unpin + TunnelSide,
{
    #[cfg(target_os = "linux")]
    let mut carried = 0u64;
    loop {
        buf.clear();
        let n = (&mut *reader)
            .take(TUNNEL_BUFFER as u64)
            .read_buf(buf)
            .await?;
        if n == 0 {
            return end_of_stream(writer, &both.ended, both.write).await;
        }
        both.read(count, n);
        write_all(writer, &buf[..n], both.write).await?;
        #[cfg(target_os = "linux")]
        {
            carried += n as u64;
            if carried >= splice::SPLICE_AFTER
                && let Some(pipe) = splice::Pipe::new()
            {
                *buf = Vec::new();
                both.spliced.fetch_add(1, Ordering::Relaxed);
                return splice::pump(reader, writer, pipe, count, both).await;
            }
        }
    }
}

/// A tunnel direction's source ended: half-close the writer — unless the other
/// direction has already ended (`ended`): then both sockets are about to be closed,
/// and the close sends the FIN (one `shutdown` call less).
async fn end_of_stream<W: AsyncWrite + Unpin>(
    writer: &mut W,
    ended: &AtomicBool,
    write: Duration,
) -> io::Result<()> {
    if ended.swap(true, Ordering::Relaxed) {
        return Ok(());
    }
    tokio::time::timeout(write, writer.shutdown())
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

#[cfg(test)]
mod tests;
