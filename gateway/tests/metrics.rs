//! Traffic metrics against real sockets: the byte counters equal the bytes that went
//! through a tunnel and through plain HTTP forwards, both ways, as the client and a
//! vendor proxy the test runs itself saw them; the duration histograms count one
//! observation per request / tunnel / dial / handshake; the per-Routing and
//! per-upstream breakdowns carry the configured names.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_gateway::metrics::Direction;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Bytes a fake vendor proxy received on one connection (everything it read).
type Received = mpsc::UnboundedReceiver<u64>;

/// Reads up to and including the blank line ending a head, one byte at a time (so
/// nothing after the head is consumed).
async fn read_head_bytes(s: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).await.unwrap();
        assert_eq!(
            n,
            1,
            "head ended early: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    head
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or(0)
}

/// The answer of the fake proxy to a plain request: fixed, closing the connection.
const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world";
/// What the fake proxy sends back through a tunnel.
const TUNNEL_DOWN: usize = 3000;
/// What the client sends through a tunnel.
const TUNNEL_UP: usize = 1000;

/// A plain-HTTP vendor proxy on loopback: a request with a body is answered with
/// [`RESPONSE`]; a `CONNECT` with `200`, then it reads [`TUNNEL_UP`] bytes and writes
/// [`TUNNEL_DOWN`] bytes and closes. Per connection it reports the bytes it read after
/// the `CONNECT` head (tunnels) or in all (requests).
async fn fake_vendor() -> (SocketAddr, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let head = read_head_bytes(&mut s).await;
                if head.starts_with(b"CONNECT ") {
                    s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .unwrap();
                    let mut up = vec![0u8; TUNNEL_UP];
                    s.read_exact(&mut up).await.unwrap();
                    s.write_all(&vec![b'd'; TUNNEL_DOWN]).await.unwrap();
                    let _ = tx.send(TUNNEL_UP as u64);
                } else {
                    let mut body = vec![0u8; content_length(&head)];
                    s.read_exact(&mut body).await.unwrap();
                    s.write_all(RESPONSE).await.unwrap();
                    let _ = tx.send((head.len() + body.len()) as u64);
                }
                s.shutdown().await.unwrap();
            });
        }
    });
    (addr, rx)
}

/// A harness whose only proxy is the fake vendor (upstream `raw`) under Routing `all`.
async fn through_fake() -> (Harness, Received) {
    let h = Harness::start().await;
    let (addr, rx) = fake_vendor().await;
    h.install(vec![raw_upstream("fake", addr, 4)], vec![all()]);
    (h, rx)
}

/// Polls `done` (every 10 ms, up to [`IO_LIMIT`]).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let until = tokio::time::Instant::now() + IO_LIMIT;
    while !done() {
        assert!(tokio::time::Instant::now() < until, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn forwarded_bytes_and_durations_match_what_went_through() {
    let (h, mut received) = through_fake().await;
    let m = h.gateway.metrics().clone();
    let (mut up, mut down) = (0, 0);
    for (i, body) in ["", "abcde", &"x".repeat(20_000)].into_iter().enumerate() {
        let mut s = TcpStream::connect(h.http).await.unwrap();
        let request = format!(
            "POST http://origin.test/r{i} HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization: Basic {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            basic(USER, PASS),
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        assert!(answer.ends_with(b"hello world"));
        down += answer.len() as u64;
        up += tokio::time::timeout(IO_LIMIT, received.recv())
            .await
            .unwrap()
            .unwrap();
    }
    // The client saw the end of each response: every count is in.
    assert_eq!(m.bytes(Direction::ClientToUpstream), up);
    assert_eq!(m.bytes(Direction::UpstreamToClient), down);
    assert_eq!(m.forwarded.get(), 3);
    assert_eq!(m.request_duration.count(), 3);
    assert_eq!(
        m.dial_duration.count(),
        3,
        "Connection: close: a dial per request"
    );
    assert_eq!(
        m.handshake_duration.count(),
        0,
        "no handshake before a plain request"
    );
    assert_eq!(m.tunnel_duration.count(), 0);
    let text = h.gateway.render_metrics();
    for line in [
        format!("proxy_pool_gateway_bytes_total{{direction=\"client-to-upstream\"}} {up}"),
        format!("proxy_pool_gateway_bytes_total{{direction=\"upstream-to-client\"}} {down}"),
        "proxy_pool_gateway_request_duration_seconds_count 3".to_owned(),
        "proxy_pool_gateway_routing_requests_total{routing=\"all\"} 3".to_owned(),
        "proxy_pool_gateway_routing_errors_total{routing=\"all\"} 0".to_owned(),
        "proxy_pool_gateway_upstream_requests_total{upstream=\"raw\"} 3".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

#[tokio::test]
async fn tunnel_bytes_and_durations_match_what_went_through() {
    let (h, mut received) = through_fake().await;
    let m = h.gateway.metrics().clone();
    let mut s = TcpStream::connect(h.http).await.unwrap();
    let connect = format!(
        "CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic(USER, PASS)
    );
    s.write_all(connect.as_bytes()).await.unwrap();
    let head = read_head_bytes(&mut s).await;
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    // The payload: a first part at once, the rest in pieces.
    let payload = vec![b'u'; TUNNEL_UP];
    s.write_all(&payload[..100]).await.unwrap();
    for chunk in payload[100..].chunks(300) {
        s.write_all(chunk).await.unwrap();
    }
    let mut back = Vec::new();
    tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.len(), TUNNEL_DOWN);
    let seen_up = received.recv().await.unwrap();
    drop(s);
    // Counted when the tunnel closes, after both sides ended.
    eventually("the tunnel is closed and observed", || {
        m.tunnel_duration.count() == 1
    })
    .await;
    assert_eq!(m.bytes(Direction::ClientToUpstream), seen_up);
    assert_eq!(m.bytes(Direction::UpstreamToClient), TUNNEL_DOWN as u64);
    assert_eq!(m.dial_duration.count(), 1);
    assert_eq!(m.handshake_duration.count(), 1, "one CONNECT handshake");
    assert_eq!(m.request_duration.count(), 0);
    let text = h.gateway.render_metrics();
    for line in [
        "proxy_pool_gateway_tunnels_total{listener=\"http\"} 1",
        "proxy_pool_gateway_tunnels_total{listener=\"socks5\"} 0",
        "proxy_pool_gateway_tunnel_duration_seconds_count 1",
        "proxy_pool_gateway_upstream_dial_duration_seconds_count 1",
        "proxy_pool_gateway_upstream_handshake_duration_seconds_count 1",
        "proxy_pool_gateway_routing_tunnels_total{routing=\"all\"} 1",
        "proxy_pool_gateway_upstream_tunnels_total{upstream=\"raw\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

#[tokio::test]
async fn failures_count_against_the_routing_and_the_upstream() {
    let h = Harness::start().await;
    // Nothing listens there: every dial is refused.
    let dead = closed_addr().await;
    h.install(vec![raw_upstream("dead", dead, 4)], vec![all()]);
    let r = get_once(h.http, USER, h.echo(), "/refused").await;
    r.assert_refused(502, "upstream-dial-failed");
    let m = h.gateway.metrics();
    assert_eq!(m.errors_for("upstream-dial-failed"), 1);
    assert_eq!(
        m.dial_duration.count(),
        0,
        "only successful dials are timed"
    );
    let text = h.gateway.render_metrics();
    for line in [
        "proxy_pool_gateway_routing_errors_total{routing=\"all\"} 1",
        "proxy_pool_gateway_routing_requests_total{routing=\"all\"} 0",
        "proxy_pool_gateway_upstream_errors_total{upstream=\"raw\"} 1",
        "proxy_pool_gateway_request_errors_total{reason=\"upstream-dial-failed\"} 1",
        "proxy_pool_gateway_snapshot_stale 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}
