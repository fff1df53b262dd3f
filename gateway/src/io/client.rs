//! The client's side of a connection, metered: every byte read from it (up) and
//! written to it (down) after any PROXY protocol header goes to the [`Meter`] of the
//! request it serves — per read or write call, never per byte.
//!
//! Bytes read before a request is admitted (its head, a SOCKS5 handshake) are held on
//! the connection and given to the request's meter when it is admitted
//! ([`ClientStream::attach`]); a request's end ([`ClientStream::detach`]) starts the next
//! one. Bytes of a connection whose request was never admitted are not metered (they
//! served no request). The connection also holds the client's connection-limit slot
//! ([`crate::limits::ConnHold`]) for as long as it serves that client.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

use super::BufConn;
use crate::limits::{ClientState, ConnHold};
use crate::usage::Meter;

/// A client connection with its read buffer.
pub type ClientConn = BufConn<ClientStream>;

/// A client's TCP stream, metered.
#[derive(Debug)]
pub struct ClientStream {
    stream: TcpStream,
    meter: Option<Meter>,
    /// Bytes read and written since the last request ended, not yet metered.
    pending: (u64, u64),
    hold: Option<ConnHold>,
}

impl ClientStream {
    /// Wraps an accepted client stream (any PROXY protocol header already read).
    pub fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            meter: None,
            pending: (0, 0),
            hold: None,
        }
    }

    /// The request in progress was admitted: its bytes (including those read before
    /// the admission) go to `meter` from now on.
    pub fn attach(&mut self, meter: Option<Meter>) {
        if let Some(m) = &meter {
            let (up, down) = std::mem::take(&mut self.pending);
            if up > 0 {
                m.up(up);
            }
            if down > 0 {
                m.down(down);
            }
        }
        self.meter = meter;
    }

    /// The request in progress ended: what follows belongs to the next one.
    pub fn detach(&mut self) {
        self.meter = None;
        self.pending = (0, 0);
    }

    /// The client whose connection slot this connection holds.
    pub fn held(&self) -> Option<&ClientState> {
        self.hold.as_ref().map(ConnHold::client)
    }

    /// Holds `hold` for the connection's life (or until another client's request
    /// replaces it); `None` keeps the current one.
    pub fn hold(&mut self, hold: Option<ConnHold>) {
        if hold.is_some() {
            self.hold = hold;
        }
    }

    /// The local address of the connection.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The two directions, for a tunnel (attached: counted straight into the meter).
    pub fn split(&mut self) -> (ClientRead<'_>, ClientWrite<'_>) {
        let (r, w) = self.stream.split();
        let meter = self.meter.as_ref();
        (
            ClientRead { inner: r, meter },
            ClientWrite { inner: w, meter },
        )
    }
}

/// Polls a read of `inner` into `buf`; the bytes it added go to `count`. One
/// definition for the whole stream and its split read half.
fn counted_read<R: AsyncRead + Unpin>(
    inner: &mut R,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
    count: impl FnOnce(u64),
) -> Poll<io::Result<()>> {
    let before = buf.filled().len();
    let res = Pin::new(inner).poll_read(cx, buf);
    if let Poll::Ready(Ok(())) = res {
        count((buf.filled().len() - before) as u64);
    }
    res
}

/// A write's result, its bytes given to `count` when it wrote any.
fn counted_write(res: Poll<io::Result<usize>>, count: impl FnOnce(u64)) -> Poll<io::Result<usize>> {
    if let Poll::Ready(Ok(n)) = res {
        count(n as u64);
    }
    res
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let (stream, meter, pending) = (&mut this.stream, &this.meter, &mut this.pending.0);
        counted_read(stream, cx, buf, |n| match meter {
            Some(m) => m.up(n),
            None => *pending += n,
        })
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let (stream, meter, pending) = (&mut this.stream, &this.meter, &mut this.pending.1);
        counted_write(Pin::new(stream).poll_write(cx, buf), |n| match meter {
            Some(m) => m.down(n),
            None => *pending += n,
        })
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let (stream, meter, pending) = (&mut this.stream, &this.meter, &mut this.pending.1);
        counted_write(
            Pin::new(stream).poll_write_vectored(cx, bufs),
            |n| match meter {
                Some(m) => m.down(n),
                None => *pending += n,
            },
        )
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The read direction of a split [`ClientStream`].
#[derive(Debug)]
pub struct ClientRead<'a> {
    inner: ReadHalf<'a>,
    meter: Option<&'a Meter>,
}

/// The write direction of a split [`ClientStream`].
#[derive(Debug)]
pub struct ClientWrite<'a> {
    inner: WriteHalf<'a>,
    meter: Option<&'a Meter>,
}

impl AsyncRead for ClientRead<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let meter = this.meter;
        counted_read(&mut this.inner, cx, buf, |n| {
            if let Some(m) = meter {
                m.up(n);
            }
        })
    }
}

impl AsyncWrite for ClientWrite<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let meter = this.meter;
        counted_write(Pin::new(&mut this.inner).poll_write(cx, buf), |n| {
            if let Some(m) = meter {
                m.down(n);
            }
        })
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl super::TunnelSide for ClientRead<'_> {
    fn socket(&self) -> &TcpStream {
        self.inner.as_ref()
    }

    /// Bytes read from the client past `poll_read`: metered like a read.
    fn moved(&self, n: u64) {
        if let Some(m) = self.meter {
            m.up(n);
        }
    }
}

impl super::TunnelSide for ClientWrite<'_> {
    fn socket(&self) -> &TcpStream {
        self.inner.as_ref()
    }

    /// Bytes written to the client past `poll_write`: metered like a write.
    fn moved(&self, n: u64) {
        if let Some(m) = self.meter {
            m.down(n);
        }
    }
}
