//! Per-client metering against real sockets: the bytes and requests the gateway meters
//! for a client on a Routing (what its runtime reports carry) equal exactly what the
//! client's socket wrote and read — kept-alive HTTP with bodies, an HTTP CONNECT tunnel,
//! a SOCKS5 tunnel — and two clients on two Routings are kept apart.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_e2e::sim::Protocol;
use proxy_pool_gateway::snapshot::ClientCredential;
use proxy_pool_gateway::usage::{Counts, UsageReport};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// A client socket that counts what it writes (up) and reads (down).
struct Counted {
    inner: TcpStream,
    up: u64,
    down: u64,
}

impl Counted {
    async fn connect(addr: std::net::SocketAddr) -> Self {
        Self {
            inner: TcpStream::connect(addr).await.unwrap(),
            up: 0,
            down: 0,
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.down += (buf.filled().len() - before) as u64;
        res
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &res {
            this.up += *n as u64;
        }
        res
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Once the gateway has closed every client connection (all bytes moved and metered),
/// the usage it reports next.
async fn usage_when_idle(h: &Harness) -> UsageReport {
    for _ in 0..500 {
        if h.gateway.metrics().open_connections.get() == 0 {
            return h.gateway.usage().take();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("client connections still open");
}

fn counts(report: &UsageReport, routing: &str, client: &str) -> (Counts, Counts) {
    let r = &report.routings[routing];
    (r.totals, r.clients[client])
}

fn want(requests: u64, c: &Counted) -> Counts {
    Counts {
        requests,
        bytes_up: c.up,
        bytes_down: c.down,
    }
}

/// Through `c`, a tunnel to the echo server: a GET of `n` bytes, read until the server
/// closes; then the gateway's next report, once idle, meters exactly the bytes `c`
/// wrote and read (the handshake included) as one request of `team-a`, the Routing's
/// whole traffic.
async fn tunnel_get_is_metered_exactly(h: &Harness, mut c: Counted, n: usize) {
    let echo = h.echo();
    let get = format!("GET /bytes/{n} HTTP/1.1\r\nHost: {echo}\r\nConnection: close\r\n\r\n");
    c.write_all(get.as_bytes()).await.unwrap();
    let mut down = Vec::new();
    c.read_to_end(&mut down).await.unwrap();
    assert!(down.len() > n);
    drop(c.inner.shutdown().await);
    let report = usage_when_idle(h).await;
    let (total, alice) = counts(&report, "all", "team-a");
    assert_eq!(alice, want(1, &c));
    assert_eq!(total, alice);
}

async fn harness() -> Harness {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&p, 10)], vec![any_port(all())]);
    h
}

#[tokio::test]
async fn keep_alive_http_requests_with_bodies_are_metered_exactly() {
    let h = harness().await;
    let echo = h.echo();
    let mut c = Counted::connect(h.http).await;
    let auth = basic(USER, PASS);
    for (i, body) in [0usize, 700, 3_000].into_iter().enumerate() {
        let head = format!(
            "POST http://{echo}/post{i} HTTP/1.1\r\nHost: {echo}\r\n\
             Proxy-Authorization: Basic {auth}\r\nContent-Length: {body}\r\n\r\n"
        );
        c.write_all(head.as_bytes()).await.unwrap();
        c.write_all(&vec![b'x'; body]).await.unwrap();
        let r = read_response(&mut c).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.head);
    }
    // A larger response body, relayed in several writes.
    let head = format!(
        "GET http://{echo}/bytes/200000 HTTP/1.1\r\nHost: {echo}\r\n\
         Proxy-Authorization: Basic {auth}\r\n\r\n"
    );
    c.write_all(head.as_bytes()).await.unwrap();
    let r = read_response(&mut c).await.unwrap();
    assert_eq!(r.body.len(), 200_000);
    c.shutdown().await.unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    let report = usage_when_idle(&h).await;
    let (total, alice) = counts(&report, "all", "team-a");
    assert_eq!(alice, want(4, &c), "the client's bytes, both directions");
    assert_eq!(total, alice);
    assert!(c.down > 200_000);
}

#[tokio::test]
async fn connect_tunnel_is_metered_exactly_handshake_and_payload() {
    let h = harness().await;
    let echo = h.echo();
    let mut c = Counted::connect(h.http).await;
    let req = format!(
        "CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic(USER, PASS)
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut c).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Payload both ways: a request up, a 100,000-byte body down.
    tunnel_get_is_metered_exactly(&h, c, 100_000).await;
}

#[tokio::test]
async fn socks5_tunnel_is_metered_exactly() {
    let h = harness().await;
    let echo = h.echo();
    let mut c = Counted::connect(h.socks).await;
    c.write_all(&[5, 1, 2]).await.unwrap();
    let mut m = [0u8; 2];
    c.read_exact(&mut m).await.unwrap();
    let mut auth = vec![1, USER.len() as u8];
    auth.extend_from_slice(USER.as_bytes());
    auth.push(PASS.len() as u8);
    auth.extend_from_slice(PASS.as_bytes());
    c.write_all(&auth).await.unwrap();
    c.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [1, 0]);
    let std::net::SocketAddr::V4(v4) = echo else {
        panic!("IPv4 echo")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    c.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    c.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 0);
    tunnel_get_is_metered_exactly(&h, c, 50_000).await;
}

#[tokio::test]
async fn two_clients_on_two_routings_are_kept_apart() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Http).await;
    let only = |name: &str, client: &str| {
        let mut r = any_port(catch_all(name));
        r.matcher.clients = vec![client.into()];
        r
    };
    h.install_clients(
        vec![upstream(&p, 10)],
        vec![only("ra", "team-a"), only("rb", "team-b")],
        vec![
            ClientCredential::from_password("team-a", USER, PASS),
            ClientCredential::from_password("team-b", "bob", "bob-secret"),
        ],
    );
    let echo = h.echo();
    let mut sent = Vec::new();
    for (user, pass, n) in [(USER, PASS, 2), ("bob", "bob-secret", 3)] {
        let mut c = Counted::connect(h.http).await;
        for i in 0..n {
            let head = format!(
                "GET http://{echo}/{user}{i} HTTP/1.1\r\nHost: {echo}\r\n\
                 Proxy-Authorization: Basic {}\r\n\r\n",
                basic(user, pass)
            );
            c.write_all(head.as_bytes()).await.unwrap();
            assert_eq!(read_response(&mut c).await.unwrap().status, 200);
        }
        drop(c.inner.shutdown().await);
        sent.push((n, c));
    }
    let report = usage_when_idle(&h).await;
    assert_eq!(report.routings.len(), 2);
    let (ra, a) = counts(&report, "ra", "team-a");
    let (rb, b) = counts(&report, "rb", "team-b");
    assert_eq!((ra, a), (want(2, &sent[0].1), want(2, &sent[0].1)));
    assert_eq!((rb, b), (want(3, &sent[1].1), want(3, &sent[1].1)));
    assert_eq!(report.routings["ra"].clients.len(), 1);
    assert_eq!(report.routings["rb"].clients.len(), 1);
}
