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

    fn read_bytes(&mut self, n: usize) {
        match &self.meter {
            Some(m) => m.up(n as u64),
            None => self.pending.0 += n as u64,
        }
    }

    fn wrote_bytes(&mut self, n: usize) {
        match &self.meter {
            Some(m) => m.down(n as u64),
            None => self.pending.1 += n as u64,
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = res {
            this.read_bytes(buf.filled().len() - before);
        }
        res
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = res {
            this.wrote_bytes(n);
        }
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = res {
            this.wrote_bytes(n);
        }
        res
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
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(m)) = (&res, this.meter) {
            m.up((buf.filled().len() - before) as u64);
        }
        res
    }
}

impl AsyncWrite for ClientWrite<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let (Poll::Ready(Ok(n)), Some(m)) = (&res, this.meter) {
            m.down(*n as u64);
        }
        res
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
