//! Byte plumbing shared by listeners and upstream code: a connection with one fixed,
//! bounded read buffer ([`BufConn`]), body relays for each HTTP framing, and the
//! tunnel relay with an idle timeout. Every wait is bounded by a timeout.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::parse::chunked::{MAX_CHUNK_LINE, parse_chunk_size};
use crate::parse::http_head::{BodyFraming, HeadError, head_len};

/// A TCP stream with a fixed-capacity read buffer. The buffer is allocated once and
/// never zeroed (reads go into its spare capacity); bytes `start..buf.len()` are
/// read but not consumed.
#[derive(Debug)]
pub struct BufConn {
    /// The stream.
    pub stream: TcpStream,
    buf: Vec<u8>,
    cap: usize,
    start: usize,
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

impl BufConn {
    /// Wraps `stream` with a buffer of `capacity` bytes.
    pub fn new(stream: TcpStream, capacity: usize) -> Self {
        let cap = capacity.max(1024);
        Self {
            stream,
            buf: Vec::with_capacity(cap),
            cap,
            start: 0,
        }
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
            if let Some(len) = head_len(self.buffered(), max)? {
                return Ok(Some(len));
            }
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

/// Copies one body of `framing` from `src` to `dst` (chunked bodies verbatim).
pub async fn copy_body(
    src: &mut BufConn,
    dst: &mut TcpStream,
    framing: BodyFraming,
    idle: Duration,
) -> Result<u64, CopyError> {
    match framing {
        BodyFraming::None => Ok(0),
        BodyFraming::Length(n) => copy_exact(src, dst, n, idle).await.map(|()| n),
        BodyFraming::Chunked => copy_chunked(src, dst, idle).await,
        BodyFraming::UntilClose => copy_until_close(src, dst, idle).await,
    }
}

async fn copy_exact(
    src: &mut BufConn,
    dst: &mut TcpStream,
    mut left: u64,
    idle: Duration,
) -> Result<(), CopyError> {
    while left > 0 {
        if src.buffered().is_empty() {
            match src.fill(idle).await {
                Ok(0) => return Err(CopyError::Read(io::ErrorKind::UnexpectedEof.into())),
                Ok(_) => {}
                Err(e) => return Err(CopyError::Read(e)),
            }
        }
        let avail = src.buffered();
        let n = avail.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        dst.write_all(&avail[..n]).await.map_err(CopyError::Write)?;
        src.consume(n);
        left -= n as u64;
    }
    Ok(())
}

async fn copy_until_close(
    src: &mut BufConn,
    dst: &mut TcpStream,
    idle: Duration,
) -> Result<u64, CopyError> {
    let mut total = 0u64;
    loop {
        if src.buffered().is_empty() && src.fill(idle).await.map_err(CopyError::Read)? == 0 {
            return Ok(total);
        }
        let n = src.buffered().len();
        dst.write_all(src.buffered())
            .await
            .map_err(CopyError::Write)?;
        src.consume(n);
        total += n as u64;
    }
}

/// Reads one CRLF-terminated line (≤ [`MAX_CHUNK_LINE`]); returns its length
/// without CRLF, the line staying buffered.
async fn buffer_line(src: &mut BufConn, idle: Duration) -> Result<usize, CopyError> {
    loop {
        if let Some(pos) = src.buffered().windows(2).position(|w| w == b"\r\n") {
            return Ok(pos);
        }
        if src.buffered().len() > MAX_CHUNK_LINE {
            return Err(CopyError::Malformed);
        }
        match src.fill(idle).await {
            Ok(0) => return Err(CopyError::Read(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) => return Err(CopyError::Read(e)),
        }
    }
}

async fn copy_chunked(
    src: &mut BufConn,
    dst: &mut TcpStream,
    idle: Duration,
) -> Result<u64, CopyError> {
    let mut total = 0u64;
    loop {
        let len = buffer_line(src, idle).await?;
        let size = parse_chunk_size(&src.buffered()[..len]).map_err(|_| CopyError::Malformed)?;
        dst.write_all(&src.buffered()[..len + 2])
            .await
            .map_err(CopyError::Write)?;
        src.consume(len + 2);
        if size == 0 {
            break;
        }
        copy_exact(src, dst, size, idle).await?;
        let crlf = buffer_line(src, idle).await?;
        if crlf != 0 {
            return Err(CopyError::Malformed);
        }
        dst.write_all(b"\r\n").await.map_err(CopyError::Write)?;
        src.consume(2);
        total += size;
    }
    // Trailer fields, then the blank line.
    for _ in 0..64 {
        let len = buffer_line(src, idle).await?;
        dst.write_all(&src.buffered()[..len + 2])
            .await
            .map_err(CopyError::Write)?;
        src.consume(len + 2);
        if len == 0 {
            return Ok(total);
        }
    }
    Err(CopyError::Malformed)
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

/// Relays bytes both ways until both sides close, the tunnel idles out, or
/// `cancel` fires. Each direction reads into the read buffer its connection already
/// has (which must hold no unconsumed bytes), so a tunnel allocates nothing more.
/// Returns bytes client→upstream, upstream→client and how it ended.
pub async fn tunnel(
    client: &mut BufConn,
    upstream: &mut BufConn,
    idle: Duration,
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
                base
            ),
            pump(
                &mut upstream_read,
                &mut client_write,
                upstream_buf,
                &last,
                &down,
                &ended,
                base
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
async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    buf: &mut Vec<u8>,
    last: &AtomicU64,
    count: &AtomicU64,
    ended: &AtomicBool,
    base: Instant,
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
            return writer.shutdown().await;
        }
        let ms = u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX);
        last.store(ms, Ordering::Relaxed);
        count.fetch_add(n as u64, Ordering::Relaxed);
        writer.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    #[tokio::test]
    async fn chunked_bodies_are_copied_verbatim() {
        let (mut w, r) = pair().await;
        let (mut out_r, mut out_w) = pair().await;
        let body = b"5;x=y\r\nhello\r\n0\r\nTrailer: 1\r\n\r\nNEXT";
        w.write_all(body).await.unwrap();
        let mut src = BufConn::new(r, 1024);
        let n = copy_body(
            &mut src,
            &mut out_w,
            BodyFraming::Chunked,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(n, 5);
        assert_eq!(src.buffered(), b"NEXT");
        drop(out_w);
        let mut got = Vec::new();
        out_r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, &body[..body.len() - 4]);
    }

    #[tokio::test]
    async fn length_bodies_stop_at_the_length() {
        let (mut w, r) = pair().await;
        let (mut out_r, mut out_w) = pair().await;
        w.write_all(b"abcdefXYZ").await.unwrap();
        let mut src = BufConn::new(r, 1024);
        copy_body(
            &mut src,
            &mut out_w,
            BodyFraming::Length(6),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(src.buffered(), b"XYZ");
        drop(out_w);
        let mut got = Vec::new();
        out_r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"abcdef");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_tunnels_end() {
        let (a, _a_peer) = pair().await;
        let (b, _b_peer) = pair().await;
        let (mut a, mut b) = (BufConn::new(a, 1024), BufConn::new(b, 1024));
        let cancel = CancellationToken::new();
        let (_, _, end) = tunnel(
            &mut a,
            &mut b,
            Duration::from_secs(5),
            &cancel,
            std::future::pending(),
        )
        .await;
        assert_eq!(end, TunnelEnd::Idle);
    }
}
