//! Zero-copy tunnel relaying on Linux: `splice(2)` from the source socket into a pipe,
//! then from the pipe into the destination socket, so a tunnel's bytes never enter
//! user space (two system calls per chunk of up to a pipe's capacity, against a
//! `read` and a `write` per [`super::TUNNEL_BUFFER`] with two copies).
//!
//! A direction switches to it only once it has carried [`SPLICE_AFTER`] bytes the
//! ordinary way (see `super::pump`): a pipe costs three system calls to create and
//! close, which a tunnel carrying one small request and response would not win back.
//! Byte counts (the tunnel's totals and the client's meter) come from what each
//! `splice` call moved, as the copying relay counts each `read` and `write`.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;

use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
use tokio::io::{AsyncWrite, Interest};

use super::{Both, TunnelSide};

/// Bytes a direction carries by `read` / `write` before it moves to `splice`.
pub const SPLICE_AFTER: u64 = 64 * 1024;

/// Most bytes asked of one `splice` into the pipe: the default pipe capacity (a pipe
/// limited to less by `pipe-user-pages-soft` takes what it holds).
const CHUNK: usize = 64 * 1024;

/// A pipe, both ends non-blocking and closed on drop.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    /// A new pipe, or `None` when none can be had (out of descriptors): the caller
    /// keeps copying.
    pub fn new() -> Option<Self> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok()?;
        Some(Self { read, write })
    }
}

const FLAGS: SpliceFlags = SpliceFlags::MOVE.union(SpliceFlags::NONBLOCK);

/// One direction of a tunnel by `splice`, until the source's end of stream (passed on
/// like the copying relay does, see [`super::end_of_stream`]) or an error. Each chunk
/// is written out whole before the next is read, so the pipe is empty whenever the
/// source is read: a `splice` from the socket that would block means the socket has
/// nothing, and one into the destination that would block means its send buffer is
/// full (waited for at most the tunnel's write timeout).
pub(super) async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    pipe: Pipe,
    count: &AtomicU64,
    both: &Both,
) -> io::Result<()>
where
    R: TunnelSide,
    W: TunnelSide + AsyncWrite + Unpin,
{
    loop {
        let source = reader.socket();
        let n = source
            .async_io(Interest::READABLE, || {
                splice(source, None, &pipe.write, None, CHUNK, FLAGS).map_err(io::Error::from)
            })
            .await?;
        if n == 0 {
            return super::end_of_stream(writer, &both.ended, both.write).await;
        }
        reader.moved(n as u64);
        both.read(count, n);
        let mut left = n;
        while left > 0 {
            let sink = writer.socket();
            let out = || splice(&pipe.read, None, sink, None, left, FLAGS).map_err(io::Error::from);
            // Like `write_all`: a write that goes through at once costs no timer.
            let k = match sink.try_io(Interest::WRITABLE, out) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tokio::time::timeout(both.write, sink.async_io(Interest::WRITABLE, out))
                        .await
                        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??
                }
                res => res?,
            };
            if k == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            writer.moved(k as u64);
            left -= k;
        }
    }
}
