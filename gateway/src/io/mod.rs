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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::parse::chunked::{
    MAX_CHUNK_LINE, MAX_TRAILER_BYTES, check_trailer_line, parse_chunk_size,
};
use crate::parse::http_head::{BodyFraming, HeadError, head_len_from};

mod client;

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
    /// Cancelled (shutdown grace expired).
    Cancelled,
    /// The worker's lease on the proxy ended (`stop` resolved).
    LeaseEnded,
    /// An I/O error on either side.
    Error,
}

/// Read size of each tunnel direction (a side whose handshake buffer is smaller gets
/// its buffer grown to this once).
pub const TUNNEL_BUFFER: usize = 16 * 1024;

/// Relays bytes both ways until both sides close, the tunnel idles out, a write makes
/// no progress for `write` (a side stopped reading), or `cancel` fires. Each direction reads into the read buffer its connection already
/// has (which must hold no unconsumed bytes), so a tunnel allocates nothing more.
/// Returns bytes client→upstream, upstream→client and how it ended.
pub async fn tunnel(
    client: &mut ClientConn,
    upstream: &mut BufConn,
    idle: Duration,
    write: Duration,
    cancel: &CancellationToken,
    stop: impl std::future::Future<Output = ()>,
) -> (u64, u64, TunnelEnd) {
    let base = Instant::now();
    let last = AtomicU64::new(0);
    let ended = AtomicBool::new(false);
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
    for buf in [&mut *client_buf, &mut *upstream_buf] {
        buf.clear();
        if buf.capacity() < TUNNEL_BUFFER {
            // A fresh allocation: growing the (empty) buffer in place would copy its
            // whole old capacity (`realloc`), 8 KiB per side per tunnel for nothing.
            *buf = Vec::with_capacity(TUNNEL_BUFFER);
        }
    }
    let (mut client_read, mut client_write) = client_stream.split();
    let (mut upstream_read, mut upstream_write) = upstream_stream.split();
    let relay = async {
        tokio::try_join!(
            pump(
                &mut client_read,
                &mut upstream_write,
                client_buf,
                &last,
                &up,
                &ended,
                base,
                write
            ),
            pump(
                &mut upstream_read,
                &mut client_write,
                upstream_buf,
                &last,
                &down,
                &ended,
                base,
                write
            ),
        )
    };
    let watchdog = async {
        loop {
            let seen = Duration::from_millis(last.load(Ordering::Relaxed));
            let deadline = base + seen + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    let end = tokio::select! {
        res = relay => if res.is_ok() { TunnelEnd::Closed } else { TunnelEnd::Error },
        () = watchdog => TunnelEnd::Idle,
        () = cancel.cancelled() => TunnelEnd::Cancelled,
        () = stop => TunnelEnd::LeaseEnded,
    };
    (
        up.load(Ordering::Relaxed),
        down.load(Ordering::Relaxed),
        end,
    )
}

/// One direction of a tunnel: read into `buf` (its spare capacity, at most
/// [`TUNNEL_BUFFER`] at a time), write everything out; at EOF, half-close the writer —
/// unless the other direction has already ended (`ended`): then both sockets are
/// about to be closed, and the close sends the FIN (one `shutdown` call less).
#[allow(clippy::too_many_arguments)]
async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    buf: &mut Vec<u8>,
    last: &AtomicU64,
    count: &AtomicU64,
    ended: &AtomicBool,
    base: Instant,
    write: Duration,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        buf.clear();
        let n = (&mut *reader)
            .take(TUNNEL_BUFFER as u64)
            .read_buf(buf)
            .await?;
        if n == 0 {
            if ended.swap(true, Ordering::Relaxed) {
                return Ok(());
            }
            return tokio::time::timeout(write, writer.shutdown())
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?;
        }
        let ms = u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX);
        last.store(ms, Ordering::Relaxed);
        count.fetch_add(n as u64, Ordering::Relaxed);
        write_all(writer, &buf[..n], write).await?;
    }
}

#[cfg(test)]
mod tests;
