//! Refusals that must tell the client the truth and be counted: SOCKS5 without a
//! snapshot (a server failure, not a wrong password, and never an unauthenticated
//! tunnel), SOCKS5 with a stale snapshot, HTTP clients that never send a whole first
//! head, and SOCKS5 commands other than CONNECT.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_e2e::sim::Protocol;
use proxy_pool_gateway::GatewayConfig;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The value of `proxy_pool_gateway_request_errors_total{reason=…}` in the gateway's metrics.
fn errors(h: &Harness, reason: &str) -> u64 {
    let text = h.gateway.render_metrics();
    let prefix = format!("proxy_pool_gateway_request_errors_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
}

/// A SOCKS5 handshake that the gateway refuses: the RFC 1929 status, then (if it was 0)
/// the reply code to command `cmd`. Asserts that the gateway then closes the
/// connection without sending anything else (so its counters are updated).
async fn raw_socks5(
    gateway: SocketAddr,
    user: &str,
    pass: &str,
    target: SocketAddr,
    cmd: u8,
) -> Vec<u8> {
    let mut s = TcpStream::connect(gateway).await.unwrap();
    s.write_all(&[5, 1, 2]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 2], "username/password chosen");
    let mut auth = vec![1, user.len() as u8];
    auth.extend_from_slice(user.as_bytes());
    auth.push(pass.len() as u8);
    auth.extend_from_slice(pass.as_bytes());
    s.write_all(&auth).await.unwrap();
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m[0], 1, "RFC 1929 version");
    let mut seen = vec![m[1]];
    if m[1] == 0 {
        s.write_all(&socks5_request(cmd, target)).await.unwrap();
        let mut reply = [0u8; 10];
        tokio::time::timeout(IO_LIMIT, s.read_exact(&mut reply))
            .await
            .expect("reply in time")
            .unwrap();
        assert_eq!(reply[0], 5);
        seen.push(reply[1]);
    }
    let mut rest = Vec::new();
    tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .unwrap();
    assert!(rest.is_empty(), "nothing after the refusal: {rest:?}");
    seen
}

#[tokio::test]
async fn socks5_without_snapshot_is_a_server_failure_not_bad_credentials() {
    let h = Harness::start().await;
    let target = h.echo();
    // No snapshot: the credentials cannot be judged, so the sub-negotiation succeeds
    // and the request gets 0x01 "general SOCKS server failure", then the connection
    // closes. Right or wrong password alike: nothing is let through.
    assert_eq!(raw_socks5(h.socks, USER, PASS, target, 1).await, vec![0, 1]);
    assert_eq!(
        raw_socks5(h.socks, USER, "wrong", target, 1).await,
        vec![0, 1]
    );
    assert_eq!(
        raw_socks5(h.socks, "mallory", "x", target, 1).await,
        vec![0, 1]
    );
    assert_eq!(errors(&h, "no-snapshot"), 3);
    assert_eq!(errors(&h, "auth-failed"), 0);

    // Once a snapshot is in service the same wrong credentials are refused as such,
    // and the right ones get a tunnel.
    let p = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&p, 4)], vec![all()]);
    assert_eq!(raw_socks5(h.socks, USER, "wrong", target, 1).await, vec![1]);
    assert_eq!(errors(&h, "auth-failed"), 1);
    let tunnel = socks5(h.socks, USER, PASS, target, 1)
        .await
        .expect("tunnel with a snapshot");
    let r = echo_over(tunnel, &target.to_string(), "/after").await;
    assert_eq!((r.status, r.remote_ip()), (200, h.egress(&p)));
}

#[tokio::test]
async fn socks5_with_a_stale_snapshot_judges_credentials_then_refuses() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Http).await;
    h.install_valid_until(
        vec![upstream(&p, 4)],
        vec![all()],
        SystemTime::now() - Duration::from_secs(1),
    );
    let target = h.echo();
    // The stale snapshot still has the client list: wrong credentials are wrong.
    assert_eq!(raw_socks5(h.socks, USER, "wrong", target, 1).await, vec![1]);
    // Right ones pass authentication; the request is refused (general failure).
    assert_eq!(raw_socks5(h.socks, USER, PASS, target, 1).await, vec![0, 1]);
    assert_eq!(errors(&h, "snapshot-stale"), 1);
    assert_eq!(errors(&h, "auth-failed"), 1);
}

#[tokio::test]
async fn http_first_head_timeouts_are_counted() {
    let h = Harness::start_with(GatewayConfig {
        handshake_timeout: Duration::from_millis(300),
        ..common::local_config()
    })
    .await;
    assert_eq!(errors(&h, "client-timeout"), 0);
    // Silent client, and one that stops half-way through its first head.
    let mut silent = TcpStream::connect(h.http).await.unwrap();
    let mut partial = TcpStream::connect(h.http).await.unwrap();
    partial
        .write_all(b"GET http://example.test/ HTTP/1.1\r\nHost: exa")
        .await
        .unwrap();
    for s in [&mut silent, &mut partial] {
        let mut rest = Vec::new();
        tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut rest))
            .await
            .expect("closed after the handshake timeout")
            .unwrap();
    }
    assert_eq!(errors(&h, "client-timeout"), 2);
}

#[tokio::test]
async fn refused_socks5_commands_are_counted() {
    let h = Harness::start().await;
    h.install(vec![], vec![all()]);
    let target = h.echo();
    assert_eq!(errors(&h, "unsupported"), 0);
    // BIND (2) and UDP ASSOCIATE (3): 0x07 command not supported, counted.
    for cmd in [2, 3] {
        assert_eq!(
            raw_socks5(h.socks, USER, PASS, target, cmd).await,
            vec![0, 7]
        );
    }
    assert_eq!(errors(&h, "unsupported"), 2);
}

#[tokio::test]
async fn a_session_lifetime_beyond_the_routing_maximum_is_refused_with_its_reason() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Http).await;
    let mut r = all();
    // Sessions with the defaults: clients may choose up to 30 minutes.
    r.sticky = Some(proxy_pool_api::controlplane::model::Sticky::default());
    h.install(vec![upstream(&p, 10)], vec![r]);
    let target = h.echo().to_string();
    // Within the maximum: served.
    let (resp, _) = connect(
        h.http,
        &format!("{USER}-session-a-sesstime-30"),
        PASS,
        &target,
    )
    .await;
    assert_eq!(resp.status, 200);
    // Beyond it, or not a number of minutes: 400 with the reason, nothing dialled.
    for user in ["session-b-sesstime-31", "sesstime-x"] {
        let (resp, _) = connect(h.http, &format!("{USER}-{user}"), PASS, &target).await;
        resp.assert_refused(400, "bad-parameter");
    }
    // SOCKS5: credentials accepted, the request refused as not allowed (0x02).
    assert_eq!(
        raw_socks5(
            h.socks,
            &format!("{USER}-session-c-sesstime-31"),
            PASS,
            h.echo(),
            1
        )
        .await,
        vec![0, 2]
    );
    assert_eq!(errors(&h, "bad-parameter"), 3);
}
