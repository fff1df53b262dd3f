//! The listeners end to end, with real sockets: plain HTTP forwarding (keep-alive,
//! rotation, pooled upstream connections), HTTPS through CONNECT, SOCKS5, client
//! authentication, routing by username parameters.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_api::controlplane::model::{RoutingMatch, UsernameParam};
use proxy_pool_e2e::sim::Protocol;
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn plain_http_is_forwarded_and_rotates_per_request_on_one_connection() {
    let (h, [a, b, c]) = Harness::serving([Protocol::Http, Protocol::Http, Protocol::Socks5]).await;
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    let mut seen = Vec::new();
    for i in 0..6 {
        let resp = client.get(h.echo(), &format!("/req/{i}")).await;
        assert_eq!(resp.status, 200, "{}", resp.head);
        assert_eq!(resp.echo().path, format!("/req/{i}"));
        assert_eq!(resp.header("connection").as_deref(), Some("keep-alive"));
        seen.push(resp.remote_ip());
    }
    let expected = [h.egress(&a), h.egress(&b), h.egress(&c)];
    assert_eq!(seen[..3], expected, "round-robin over the three proxies");
    assert_eq!(
        seen[3..],
        expected,
        "and again, on the same client connection"
    );
    let text = h.gateway.render_metrics();
    assert!(
        text.contains("proxy_pool_gateway_upstream_pool_reused_total 3"),
        "second round reuses pooled upstream connections:\n{text}"
    );
    // Idle pooled connections hold no capacity.
    assert!(h.slots_free());
}

#[tokio::test]
async fn large_bodies_stream_through() {
    let (h, _) = Harness::serving([Protocol::Http]).await;
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    let resp = client.get(h.echo(), "/bytes/300000").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), 300_000);
    let again = client.get(h.echo(), "/after").await;
    assert_eq!(again.echo().path, "/after");
}

#[tokio::test]
async fn post_bodies_with_length_and_chunked_framing_are_relayed() {
    let (h, _) = Harness::serving([Protocol::Http]).await;
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    let echo = h.echo();
    let auth = basic(USER, PASS);
    let req = format!(
        "POST http://{echo}/len HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nContent-Length: 5\r\n\r\nhello"
    );
    client.stream.write_all(req.as_bytes()).await.unwrap();
    let resp = read_response(&mut client.stream).await.unwrap();
    assert_eq!((resp.status, resp.echo().method.as_str()), (200, "POST"));
    let req = format!(
        "POST http://{echo}/chunked HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    client.stream.write_all(req.as_bytes()).await.unwrap();
    let resp = read_response(&mut client.stream).await.unwrap();
    assert_eq!((resp.status, resp.echo().path.as_str()), (200, "/chunked"));
}

#[tokio::test]
async fn https_passes_through_connect_untouched() {
    let h = Harness::start().await;
    for protocol in [Protocol::Http, Protocol::Socks5] {
        let p = h.serve_one(protocol).await;
        let target = h.sim.echo_https_addr();
        let (resp, stream) = connect(h.http, USER, PASS, &target.to_string()).await;
        assert_eq!(resp.status, 200, "{}", resp.head);
        let tls = tls_connector(h.sim.echo_ca_pem())
            .connect(ServerName::try_from("localhost").unwrap(), stream)
            .await
            .expect("TLS handshake with the echo server through the tunnel");
        let reply = echo_over(tls, "localhost", "/tls").await;
        let echo = reply.echo();
        assert!(echo.tls);
        assert_eq!(reply.remote_ip(), h.egress(&p), "{protocol:?}");
    }
}

#[tokio::test]
async fn socks5_connect_through_both_upstream_kinds() {
    let h = Harness::start().await;
    for protocol in [Protocol::Socks5, Protocol::Http] {
        let p = h.serve_one(protocol).await;
        let stream = socks5(h.socks, USER, PASS, h.echo(), 1)
            .await
            .expect("socks5 connect");
        let reply = echo_over(stream, "127.0.0.1", "/socks").await;
        assert_eq!(reply.remote_ip(), h.egress(&p), "{protocol:?}");
    }
}

#[tokio::test]
async fn socks5_refuses_bad_credentials_and_other_commands() {
    let (h, _) = Harness::serving([Protocol::Socks5]).await;
    let err = socks5(h.socks, USER, "wrong", h.echo(), 1)
        .await
        .unwrap_err();
    assert_eq!(err, ("auth".to_owned(), 1));
    for cmd in [2, 3] {
        let err = socks5(h.socks, USER, PASS, h.echo(), cmd)
            .await
            .unwrap_err();
        assert_eq!(err, ("reply".to_owned(), 0x07), "command {cmd}");
    }
    let err = socks5(h.socks, "alice-region", PASS, h.echo(), 1)
        .await
        .unwrap_err();
    assert_eq!(
        err.0, "auth",
        "malformed username parameters fail authentication"
    );
}

#[tokio::test]
async fn http_clients_must_authenticate() {
    let (h, _) = Harness::serving([Protocol::Http]).await;
    let mut s = tokio::net::TcpStream::connect(h.http).await.unwrap();
    let echo = h.echo();
    s.write_all(format!("GET http://{echo}/ HTTP/1.1\r\nHost: {echo}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let resp = read_response(&mut s).await.unwrap();
    assert_eq!(resp.status, 407);
    assert!(
        resp.header("proxy-authenticate")
            .unwrap()
            .starts_with("Basic")
    );
    let (resp, _) = connect(h.http, USER, "nope", &echo.to_string()).await;
    resp.assert_refused(407, "auth-failed");
}

#[tokio::test]
async fn malformed_and_oversized_heads_are_refused() {
    let h = Harness::start().await;
    let mut s = tokio::net::TcpStream::connect(h.http).await.unwrap();
    s.write_all(b"GET /origin-form HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut s).await.unwrap().status, 400);
    let mut s = tokio::net::TcpStream::connect(h.http).await.unwrap();
    let big = format!(
        "GET http://a/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let _ = s.write_all(big.as_bytes()).await;
    assert_eq!(read_response(&mut s).await.unwrap().status, 431);
}

#[tokio::test]
async fn username_parameters_select_the_routing() {
    let h = Harness::start().await;
    let sh = h.proxy_in(Protocol::Http, Some("shanghai")).await;
    let bj = h.proxy_in(Protocol::Socks5, Some("beijing")).await;
    let region = |name: &str| {
        let mut r = common::any_port(catch_all(name));
        r.matcher = RoutingMatch {
            username_params: vec![UsernameParam::new("region", [name])],
            ..RoutingMatch::default()
        };
        r.regions = vec![name.into()];
        r
    };
    h.install(
        vec![upstream(&sh, 10), upstream(&bj, 10)],
        vec![region("shanghai"), region("beijing")],
    );
    for _ in 0..3 {
        let r = get_once(h.http, "alice-region-beijing", h.echo(), "/").await;
        assert_eq!(r.remote_ip(), h.egress(&bj));
        let r = get_once(h.http, "alice-region-shanghai", h.echo(), "/").await;
        assert_eq!(r.remote_ip(), h.egress(&sh));
    }
    let r = get_once(h.http, "alice-region-mars", h.echo(), "/").await;
    r.assert_refused(403, "no-routing");
}
