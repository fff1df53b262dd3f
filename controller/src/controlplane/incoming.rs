//! The control plane's accepted connections, bounded before tonic sees them: a cap in
//! total and per source address (a connection over either is closed at accept; when
//! the listener is full a source holding few displaces the largest holder's oldest
//! connection, whose reads then fail), and a
//! first-bytes deadline — a connection that has not sent the first
//! [`FIRST_BYTES`] bytes (a TLS ClientHello, or the HTTP/2 preface of the loopback
//! fixture) within [`Limits::first_bytes`] is closed. After that the TLS handshake
//! timeout, the HTTP/2 keepalive and the stream limits take over.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use proxy_pool_api::throttle::{SourceSlot, SourceSlots};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Bytes a client must send within the deadline: the HTTP/2 connection preface is 24
/// bytes, a TLS ClientHello more.
pub const FIRST_BYTES: usize = 24;

/// Connection limits of the control-plane listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open connections in total.
    pub max_connections: usize,
    /// Open connections from one source address.
    pub max_per_source: usize,
    /// Deadline for the first [`FIRST_BYTES`] bytes.
    pub first_bytes: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 4_096,
            max_per_source: 64,
            first_bytes: Duration::from_secs(10),
        }
    }
}

/// An accepted connection holding its slot until it is dropped.
pub struct BoundedIo {
    stream: TcpStream,
    /// Armed until [`FIRST_BYTES`] bytes were read.
    deadline: Option<Pin<Box<Sleep>>>,
    read: usize,
    /// Resolves when a smaller source displaced this connection.
    evicted: Pin<Box<dyn Future<Output = ()> + Send>>,
    _slot: SourceSlot,
}

impl std::fmt::Debug for BoundedIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedIo")
            .field("stream", &self.stream)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl AsyncRead for BoundedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.evicted.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "displaced by a smaller source",
            )));
        }
        if let Some(deadline) = this.deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no handshake bytes in time",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.read += buf.filled().len() - before;
            if this.read >= FIRST_BYTES {
                this.deadline = None;
            }
        }
        polled
    }
}

impl AsyncWrite for BoundedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Connected for BoundedIo {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

struct State {
    listener: TcpListener,
    slots: Arc<SourceSlots>,
    limits: Limits,
}

/// The accepted connections of `listener`, within `limits`.
pub fn bounded(
    listener: TcpListener,
    limits: Limits,
) -> impl Stream<Item = io::Result<BoundedIo>> + Send + 'static {
    let state = State {
        listener,
        slots: Arc::new(SourceSlots::new(
            limits.max_connections,
            limits.max_per_source,
        )),
        limits,
    };
    futures::stream::unfold(state, |state| async move {
        loop {
            let (stream, peer): (TcpStream, SocketAddr) = match state.listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a reset before accept: wait, go on.
                    tracing::debug!(%error, "control-plane accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(slot) = state.slots.acquire(peer.ip()) else {
                tracing::debug!("control-plane connection limit reached; closing a new connection");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let io = BoundedIo {
                stream,
                deadline: Some(Box::pin(tokio::time::sleep(state.limits.first_bytes))),
                read: 0,
                evicted: Box::pin(slot.evicted()),
                _slot: slot,
            };
            return Some((Ok(io), state));
        }
    })
}
