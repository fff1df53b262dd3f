//! Accepting connections until shutdown: the accept step every listener loop shares.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The next connection accepted on `listener`, or `None` once `stop` resolves. A
/// failed accept (out of file descriptors, a connection reset before it was taken) is
/// handed to `on_error` and tried again after `pause`, so a burst of failures cannot
/// spin the loop.
pub async fn accept_or_stop(
    listener: &TcpListener,
    stop: impl Future<Output = ()>,
    pause: Duration,
    on_error: impl Fn(&io::Error),
) -> Option<(TcpStream, SocketAddr)> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => return Some(accepted),
                Err(err) => {
                    on_error(&err);
                    tokio::time::sleep(pause).await;
                }
            },
            () = &mut stop => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepts_until_stopped() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let never = std::future::pending::<()>();
        let (_, peer) = accept_or_stop(&listener, never, Duration::ZERO, |_| {})
            .await
            .expect("accepted");
        assert_eq!(peer, client.local_addr().expect("local"));
        let stopped = accept_or_stop(&listener, async {}, Duration::ZERO, |_| {}).await;
        assert!(stopped.is_none());
    }
}
