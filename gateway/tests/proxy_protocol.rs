//! The PROXY protocol behind a load balancer, over real sockets: from a trusted source
//! the header's client address is the one authentication throttling sees (HTTP and
//! SOCKS5, v1 and v2); a trusted source that sends no header is closed unanswered; an
//! untrusted source's header is never parsed (a client cannot forge its address: the
//! line is a bad request).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_e2e::sim::Protocol;
use proxy_pool_gateway::GatewayConfig;
use proxy_pool_gateway::listener::TrustedSources;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The load balancer's address (a second loopback address; the gateway listens on
/// 127.0.0.1 and trusts only this one).
const BALANCER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

async fn harness() -> Harness {
    let config = GatewayConfig {
        proxy_protocol: TrustedSources::new(vec!["127.0.0.2/32".parse().unwrap()]),
        handshake_timeout: Duration::from_secs(2),
        ..local_config()
    };
    let h = Harness::start_with(config).await;
    let p = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&p, 10)], vec![all()]);
    h
}

/// A connection to `gateway` from `from`, having sent `header`.
async fn dial(gateway: SocketAddr, from: Ipv4Addr, header: &[u8]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut s = socket.connect(gateway).await.unwrap();
    s.write_all(header).await.unwrap();
    s
}

fn v1(client: Ipv4Addr) -> Vec<u8> {
    format!("PROXY TCP4 {client} 127.0.0.1 40000 3128\r\n").into_bytes()
}

fn v2(client: Ipv4Addr) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&client.octets());
    h.extend_from_slice(&[127, 0, 0, 1, 0x9c, 0x40, 0x04, 0x38]);
    h
}

#[tokio::test]
async fn the_header_names_the_source_that_authentication_throttles() {
    let h = harness().await;
    let target = h.echo().to_string();
    let guesser = Ipv4Addr::new(198, 51, 100, 1);
    let honest = Ipv4Addr::new(198, 51, 100, 2);
    // Guessing from one client address behind the balancer (a user that does not
    // exist, so only the source is throttled, not the honest user's name).
    let mut statuses = Vec::new();
    for i in 0..12 {
        let s = dial(h.http, BALANCER, &v1(guesser)).await;
        let (resp, _) = connect_on(s, "mallory", &format!("guess-{i}"), &target).await;
        statuses.push(resp.status);
    }
    assert_eq!(&statuses[..11], &[407; 11], "{statuses:?}");
    assert_eq!(statuses[11], 429, "{statuses:?}");
    // The guesser's address is throttled on both listeners and both header versions…
    let s = dial(h.http, BALANCER, &v2(guesser)).await;
    let (resp, _) = connect_on(s, USER, PASS, &target).await;
    resp.assert_refused(429, "auth-throttled");
    let s = dial(h.socks, BALANCER, &v1(guesser)).await;
    assert_eq!(
        socks5_on(s, USER, PASS, h.echo(), 1).await.unwrap_err(),
        ("auth".to_owned(), 0x01)
    );
    // …while another client behind the same balancer is served, through HTTP and SOCKS5.
    let s = dial(h.http, BALANCER, &v1(honest)).await;
    let (resp, tunnel) = connect_on(s, USER, PASS, &target).await;
    assert_eq!(resp.status, 200);
    assert_eq!(echo_over(tunnel, &target, "/pp").await.status, 200);
    let s = dial(h.socks, BALANCER, &v2(honest)).await;
    let tunnel = socks5_on(s, USER, PASS, h.echo(), 1).await.unwrap();
    assert_eq!(echo_over(tunnel, &target, "/pp").await.status, 200);
    // And a client connecting directly (not through the balancer) is not throttled.
    let (resp, _) = connect(h.http, USER, PASS, &target).await;
    assert_eq!(resp.status, 200);
}

#[tokio::test]
async fn a_trusted_source_without_a_header_is_closed_unanswered() {
    let h = harness().await;
    let target = h.echo().to_string();
    let mut s = dial(h.http, BALANCER, b"").await;
    let req = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic(USER, PASS)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "answered: {:?}",
        String::from_utf8_lossy(&buf)
    );
    // Silence past the handshake timeout: closed too.
    let mut s = dial(h.socks, BALANCER, b"").await;
    let read = tokio::time::timeout(IO_LIMIT, s.read(&mut [0u8; 16])).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
}

#[tokio::test]
async fn an_untrusted_source_cannot_forge_its_address() {
    let h = harness().await;
    let target = h.echo().to_string();
    // From 127.0.0.1 (not trusted) a header is just a malformed request line.
    let mut s = dial(
        h.http,
        Ipv4Addr::LOCALHOST,
        &v1(Ipv4Addr::new(203, 0, 113, 5)),
    )
    .await;
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
}
