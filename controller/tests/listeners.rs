//! The Distribution listener against connections that never send a request: one source
//! cannot hold more than its cap, a full listener still takes a connection from a source
//! holding little (the largest holder's oldest connection makes room), and idle
//! connections are closed at the head deadline. Real sockets from several loopback
//! source addresses.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::{Harness, KEY_FULL, Kind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const TOTAL: usize = 24;
const PER_SOURCE: usize = 8;
const HEAD_DEADLINE: Duration = Duration::from_secs(4);

async fn connect_from(src: Ipv4Addr, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::from((src, 0))).expect("bind");
    socket.connect(addr).await.expect("connect")
}

/// Whether the server closed `s` within `within` (EOF or reset).
async fn closed(s: &mut TcpStream, within: Duration) -> bool {
    let mut b = [0u8; 256];
    loop {
        match tokio::time::timeout(within, s.read(&mut b)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

async fn extract_from(src: Ipv4Addr, addr: SocketAddr) -> String {
    let mut s = connect_from(src, addr).await;
    let body = r#"{"count":1,"fulfillment":"partial"}"#;
    s.write_all(
        format!(
            "POST /api/v1/proxies/extract HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY_FULL}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut answer)).await;
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_floods_cannot_lock_another_source_out() {
    let yaml = common::config_yaml(&common::store_yaml(Kind::Memory, None), "").replace(
        "limits: {maxBodyBytes: 1024, requestTimeout: 5s}",
        &format!(
            "limits: {{maxBodyBytes: 1024, requestTimeout: 4s, maxConnections: {TOTAL}, maxConnectionsPerSource: {PER_SOURCE}}}"
        ),
    );
    let h = Harness::start_yaml(&yaml, None, |p| p).await;
    let source = |i: u8| Ipv4Addr::new(127, 0, 5, 10 + i);

    // One source takes its share; one more from it is closed at once.
    let mut idle = Vec::new();
    for _ in 0..PER_SOURCE {
        idle.push(connect_from(source(0), h.api).await);
    }
    let mut over = connect_from(source(0), h.api).await;
    assert!(
        closed(&mut over, Duration::from_millis(500)).await,
        "a connection over the per-source cap is closed at accept"
    );
    // Two more sources fill the listener.
    for i in 1..3 {
        for _ in 0..PER_SOURCE {
            idle.push(connect_from(source(i), h.api).await);
        }
    }
    // A source holding nothing is still served...
    let answer = extract_from(Ipv4Addr::new(127, 0, 6, 2), h.api).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // ...and its connection displaced one of the largest holders' oldest.
    let mut displaced = 0;
    for s in idle.iter_mut().step_by(PER_SOURCE) {
        displaced += usize::from(closed(s, Duration::from_millis(300)).await);
    }
    assert_eq!(displaced, 1, "one oldest connection made room");
    // The idle connections do not stay: closed at the head deadline.
    for s in &mut idle {
        assert!(
            closed(s, HEAD_DEADLINE * 3).await,
            "an idle connection outlived the head deadline"
        );
    }
    // And the flooding source is served again once they are gone.
    let answer = extract_from(source(0), h.api).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    h.stop().await;
}
