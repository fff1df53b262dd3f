//! Vendor simulator end to end, with real sockets and real clients: raw HTTP and
//! SOCKS5 handshakes written here, hyper, rustls, and curl.
//! Everything stays on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use proxy_pool_e2e::http::{read_head, status_of};
use proxy_pool_e2e::procs::{succeeded, terminate_async};
use proxy_pool_e2e::sim::{
    EchoReply, FailureMode, Protocol, ProxySpec, SimConfig, SimProxy, Simulator, VendorFault,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const LONG_TTL: Duration = Duration::from_secs(300);
const IO_LIMIT: Duration = Duration::from_secs(5);

// ---------- fixtures and clients ----------

async fn sim() -> Simulator {
    sim_with(SimConfig::default()).await
}

async fn sim_with(config: SimConfig) -> Simulator {
    Simulator::start(config).await.expect("simulator starts")
}

async fn proxy(sim: &Simulator, protocol: Protocol, failure: FailureMode) -> SimProxy {
    sim.spawn_proxy(protocol, LONG_TTL, failure)
        .await
        .expect("proxy spawns")
}

fn egress_of(sim: &Simulator, proxy: &SimProxy) -> Ipv4Addr {
    sim.live_proxies()
        .into_iter()
        .find(|p| p.proxy.id == proxy.id)
        .expect("proxy is live")
        .egress_ip
}

fn basic(user: &str, pass: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

/// Sends `CONNECT target` and returns the status code and the stream after the head.
async fn http_connect(
    proxy: SocketAddr,
    target: &str,
    creds: Option<(&str, &str)>,
) -> std::io::Result<(u16, TcpStream)> {
    let mut stream = TcpStream::connect(proxy).await?;
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some((user, pass)) = creds {
        req.push_str(&format!(
            "Proxy-Authorization: Basic {}\r\n",
            basic(user, pass)
        ));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await?;
    let head = read_head(&mut stream).await?;
    Ok((status_of(&head), stream))
}

/// A CONNECT tunnel through `p` (with its credentials) to `echo`; asserts the 200.
async fn tunnel_to(p: &SimProxy, echo: &str) -> TcpStream {
    let (status, tunnel) = http_connect(p.addr(), echo, Some((&p.username, &p.password)))
        .await
        .unwrap();
    assert_eq!(status, 200);
    tunnel
}

/// `GET path` with `Connection: close` over an established stream; returns the echo.
async fn echo_over<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    host: &str,
    path: &str,
) -> EchoReply {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let (raw, read) = request_until_closed(&mut stream, &req).await;
    read.expect("echo read");
    echo_reply(raw)
}

/// Writes `request` and reads until the peer closes (within [`IO_LIMIT`]): the bytes
/// that came back, and how the read ended (a cut connection may end in an error).
async fn request_until_closed<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &str,
) -> (Vec<u8>, std::io::Result<usize>) {
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let read = tokio::time::timeout(IO_LIMIT, stream.read_to_end(&mut raw))
        .await
        .expect("the peer closes the connection in time");
    (raw, read)
}

/// The echo server's reply in a whole `200` HTTP response.
fn echo_reply(raw: Vec<u8>) -> EchoReply {
    let text = String::from_utf8(raw).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "unexpected response: {text}"
    );
    let body = text.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap()
}

#[derive(Debug, PartialEq, Eq)]
enum SocksFail {
    Method(u8),
    Auth(u8),
    Reply(u8),
}

/// A SOCKS5 CONNECT with username/password; `target` is `(host, port)`.
async fn socks_connect(
    proxy: SocketAddr,
    user: &str,
    pass: &str,
    host: &str,
    port: u16,
    command: u8,
) -> std::io::Result<Result<(TcpStream, SocketAddr), SocksFail>> {
    let mut s = TcpStream::connect(proxy).await?;
    s.write_all(&[5, 1, 2]).await?;
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await?;
    if sel != [5, 2] {
        return Ok(Err(SocksFail::Method(sel[1])));
    }
    let mut auth = vec![1, user.len() as u8];
    auth.extend_from_slice(user.as_bytes());
    auth.push(pass.len() as u8);
    auth.extend_from_slice(pass.as_bytes());
    s.write_all(&auth).await?;
    let mut status = [0u8; 2];
    s.read_exact(&mut status).await?;
    if status[1] != 0 {
        return Ok(Err(SocksFail::Auth(status[1])));
    }
    let mut req = vec![5, command, 0];
    match host.parse::<Ipv4Addr>() {
        Ok(ip) => {
            req.push(1);
            req.extend_from_slice(&ip.octets());
        }
        Err(_) => {
            req.push(3);
            req.push(host.len() as u8);
            req.extend_from_slice(host.as_bytes());
        }
    }
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await?;
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await?;
    assert_eq!(reply[0], 5);
    if reply[1] != 0 {
        return Ok(Err(SocksFail::Reply(reply[1])));
    }
    let bound = SocketAddr::from((
        Ipv4Addr::new(reply[4], reply[5], reply[6], reply[7]),
        u16::from_be_bytes([reply[8], reply[9]]),
    ));
    Ok(Ok((s, bound)))
}

/// A SOCKS5 CONNECT through `p` (with its credentials) to the simulator's HTTP echo
/// server by IP; panics unless it succeeds.
async fn socks_to_echo(sim: &Simulator, p: &SimProxy) -> (TcpStream, SocketAddr) {
    socks_connect(
        p.addr(),
        &p.username,
        &p.password,
        "127.0.0.1",
        sim.echo_http_addr().port(),
        1,
    )
    .await
    .unwrap()
    .unwrap()
}

fn tls_connector(ca_pem: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Asserts the peer closes `stream` within `IO_LIMIT` (EOF or reset).
async fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(IO_LIMIT, stream.read(&mut buf)).await {
            Err(_) => panic!("connection still open"),
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => continue,
        }
    }
}

/// `GET url` against the vendor API with the given extra headers.
async fn vendor_get(
    sim: &Simulator,
    path: &str,
    headers: &[(&str, String)],
) -> (u16, http::HeaderMap, String) {
    let stream = TcpStream::connect(sim.vendor_addr()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::get(path).header("host", sim.vendor_addr().to_string());
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let resp = sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

async fn vendor_send(sim: &Simulator, method: &str, path: &str, body: &str) -> u16 {
    let stream = TcpStream::connect(sim.vendor_addr()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", sim.vendor_addr().to_string())
        .header("x-api-key", sim.credentials().api_key.expose())
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    sender.send_request(req).await.unwrap().status().as_u16()
}

fn api_key(sim: &Simulator) -> Vec<(&'static str, String)> {
    vec![("x-api-key", sim.credentials().api_key.expose().to_owned())]
}

fn remote_ip(reply: &EchoReply) -> IpAddr {
    reply.remote.parse::<SocketAddr>().unwrap().ip()
}

// ---------- proxies ----------

#[tokio::test]
async fn http_connect_leaves_through_each_proxys_own_address() {
    let sim = sim().await;
    let a = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let b = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let echo = sim.echo_http_addr().to_string();
    let mut seen = Vec::new();
    for p in [&a, &b] {
        let stream = tunnel_to(p, &echo).await;
        let reply = echo_over(stream, &echo, "/who").await;
        assert_eq!(reply.path, "/who");
        assert_eq!(remote_ip(&reply), IpAddr::V4(egress_of(&sim, p)));
        seen.push(remote_ip(&reply));
    }
    assert_ne!(seen[0], seen[1]);
    assert!(!seen.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
    assert!(sim.shutdown().await);
}

#[tokio::test]
async fn https_through_a_connect_tunnel_trusts_the_exposed_ca() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let target = format!("localhost:{}", sim.echo_https_addr().port());
    let (status, stream) = http_connect(p.addr(), &target, Some((&p.username, &p.password)))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let tls = tls_connector(sim.echo_ca_pem())
        .connect(ServerName::try_from("localhost").unwrap(), stream)
        .await
        .unwrap();
    let reply = echo_over(tls, &target, "/secure").await;
    assert!(reply.tls);
    assert_eq!(remote_ip(&reply), IpAddr::V4(egress_of(&sim, &p)));
}

#[tokio::test]
async fn socks5_connect_by_ip_and_by_name_shows_the_proxy_address() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Socks5, FailureMode::None).await;
    let egress = egress_of(&sim, &p);
    let port = sim.echo_http_addr().port();
    for host in ["127.0.0.1", "localhost"] {
        let (stream, bound) = socks_connect(p.addr(), &p.username, &p.password, host, port, 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            bound.ip(),
            IpAddr::V4(egress),
            "BND.ADDR is the egress address"
        );
        let reply = echo_over(stream, &format!("{host}:{port}"), "/socks").await;
        assert_eq!(remote_ip(&reply), IpAddr::V4(egress));
    }
}

#[tokio::test]
async fn socks5_refuses_bad_credentials_and_other_commands() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Socks5, FailureMode::None).await;
    let port = sim.echo_http_addr().port();
    let bad = socks_connect(p.addr(), &p.username, "wrong", "127.0.0.1", port, 1)
        .await
        .unwrap();
    assert_eq!(bad.err(), Some(SocksFail::Auth(1)));
    for command in [2u8, 3] {
        let res = socks_connect(
            p.addr(),
            &p.username,
            &p.password,
            "127.0.0.1",
            port,
            command,
        )
        .await
        .unwrap();
        assert_eq!(res.err(), Some(SocksFail::Reply(7)), "command {command}");
    }
    // A target that is not on loopback is refused by rule set, without dialling.
    let res = socks_connect(p.addr(), &p.username, &p.password, "192.0.2.1", 80, 1)
        .await
        .unwrap();
    assert_eq!(res.err(), Some(SocksFail::Reply(2)));
    // A client that offers no username/password method gets 0xFF.
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await.unwrap();
    assert_eq!(sel, [5, 0xFF]);
}

#[tokio::test]
async fn http_proxy_answers_407_without_the_right_credentials() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let echo = sim.echo_http_addr().to_string();
    for creds in [
        None,
        Some((p.username.as_str(), "nope")),
        Some(("other", p.password.as_str())),
    ] {
        let (status, _) = http_connect(p.addr(), &echo, creds).await.unwrap();
        assert_eq!(status, 407);
    }
    let (status, _) = http_connect(p.addr(), "192.0.2.1:80", Some((&p.username, &p.password)))
        .await
        .unwrap();
    assert_eq!(status, 403, "non-loopback targets are refused");
}

#[tokio::test]
async fn plain_http_forwarding_keeps_the_client_connection_alive() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let stream = TcpStream::connect(p.addr()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let auth = format!("Basic {}", basic(&p.username, &p.password));
    let mut remotes = Vec::new();
    for path in ["/one", "/two?x=1"] {
        let uri = format!("{}{path}", sim.echo_http_url());
        let req = Request::get(uri)
            .header("host", sim.echo_http_addr().to_string())
            .header("proxy-authorization", &auth)
            .body(Empty::<Bytes>::new())
            .unwrap();
        sender.ready().await.unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let reply: EchoReply = serde_json::from_slice(&body).unwrap();
        assert_eq!(reply.path, path);
        assert!(
            reply.proxy_headers.is_empty(),
            "no credential or client leak"
        );
        remotes.push(reply.remote);
    }
    let egress = egress_of(&sim, &p);
    assert!(remotes.iter().all(|r| r.starts_with(&format!("{egress}:"))));
    assert_eq!(
        remotes[0], remotes[1],
        "the upstream connection is reused too"
    );
}

#[tokio::test]
async fn a_proxy_past_its_ttl_refuses_new_connections_and_closes_its_tunnels() {
    let sim = sim().await;
    let p = sim
        .spawn_proxy(
            Protocol::Http,
            Duration::from_millis(1500),
            FailureMode::None,
        )
        .await
        .unwrap();
    let echo = sim.echo_http_addr().to_string();
    let mut tunnel = tunnel_to(&p, &echo).await;
    // The tunnel works before expiry (a kept-alive request through it).
    tunnel
        .write_all(format!("GET /before HTTP/1.1\r\nHost: {echo}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut tunnel).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 200"));
    assert_closed(&mut tunnel).await;
    let err = TcpStream::connect(p.addr()).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(sim.live_proxies().iter().all(|s| s.proxy.id != p.id));
}

#[tokio::test]
async fn socks5_tunnel_is_closed_when_the_proxy_is_expired_early() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Socks5, FailureMode::None).await;
    let port = sim.echo_http_addr().port();
    let (mut tunnel, _) = socks_connect(p.addr(), &p.username, &p.password, "127.0.0.1", port, 1)
        .await
        .unwrap()
        .unwrap();
    sim.expire(&p.id).unwrap();
    assert_closed(&mut tunnel).await;
    assert!(TcpStream::connect(p.addr()).await.is_err());
    assert!(sim.expire(&p.id).is_err(), "an expired proxy is unknown");
}

// ---------- failure modes ----------

#[tokio::test]
async fn refuse_mode_closes_on_accept_and_can_be_set_at_run_time() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Http, FailureMode::Refuse).await;
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    assert_closed(&mut s).await;
    sim.set_failure(&p.id, FailureMode::None).unwrap();
    let echo = sim.echo_http_addr().to_string();
    tunnel_to(&p, &echo).await;
    sim.set_failure(&p.id, FailureMode::Refuse).unwrap();
    let res = socks_connect(p.addr(), "a", "b", "127.0.0.1", 1, 1).await;
    assert!(res.is_err(), "closed before the method selection");
}

#[tokio::test]
async fn slow_mode_delays_the_handshake() {
    let sim = sim().await;
    let delay = Duration::from_millis(400);
    let p = proxy(&sim, Protocol::Socks5, FailureMode::Slow { delay_ms: 400 }).await;
    let started = Instant::now();
    socks_to_echo(&sim, &p).await;
    assert!(started.elapsed() >= delay);
}

#[tokio::test]
async fn bad_auth_mode_rejects_the_right_credentials() {
    let sim = sim().await;
    let h = proxy(&sim, Protocol::Http, FailureMode::BadAuth).await;
    let echo = sim.echo_http_addr().to_string();
    let (status, _) = http_connect(h.addr(), &echo, Some((&h.username, &h.password)))
        .await
        .unwrap();
    assert_eq!(status, 407);
    let s = proxy(&sim, Protocol::Socks5, FailureMode::BadAuth).await;
    let res = socks_connect(s.addr(), &s.username, &s.password, "127.0.0.1", 1, 1)
        .await
        .unwrap();
    assert_eq!(res.err(), Some(SocksFail::Auth(1)));
}

/// A simulator and an HTTP proxy of it that cuts a connection after `bytes` bytes
/// from the target.
async fn dropping_proxy(bytes: u64) -> (Simulator, SimProxy) {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Http, FailureMode::DropAfter { bytes }).await;
    (sim, p)
}

#[tokio::test]
async fn drop_after_mode_cuts_the_tunnel_mid_transfer() {
    let (sim, p) = dropping_proxy(5_000).await;
    let echo = sim.echo_http_addr().to_string();
    let mut tunnel = tunnel_to(&p, &echo).await;
    let req = format!("GET /bytes/100000 HTTP/1.1\r\nHost: {echo}\r\n\r\n");
    let (got, _) = request_until_closed(&mut tunnel, &req).await;
    assert_eq!(got.len(), 5_000, "exactly the budget is relayed");
}

#[tokio::test]
async fn drop_after_mode_cuts_plain_forwarding_too() {
    let (sim, p) = dropping_proxy(2_000).await;
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    let req = format!(
        "GET {}/bytes/50000 HTTP/1.1\r\nHost: {}\r\nProxy-Authorization: Basic {}\r\n\r\n",
        sim.echo_http_url(),
        sim.echo_http_addr(),
        basic(&p.username, &p.password)
    );
    let (got, _) = request_until_closed(&mut s, &req).await;
    assert!(got.starts_with(b"HTTP/1.1 200"));
    assert!(
        got.len() < 50_000,
        "the response was cut short ({} bytes)",
        got.len()
    );
}

/// `inlineEcho` (the gateway benchmark's setting): requests for the plain-HTTP echo
/// server are answered inside the proxy, reporting its egress address with port 0; a
/// dialled connection always has an ephemeral port. Budgeted proxies, SOCKS5 proxies
/// and simulators without the setting still dial.
#[tokio::test]
async fn inline_echo_answers_in_process_with_the_proxys_address() {
    let port_of = |reply: &EchoReply| reply.remote.parse::<SocketAddr>().unwrap().port();
    let sim = sim_with(SimConfig {
        inline_echo: true,
        ..SimConfig::default()
    })
    .await;
    let echo = sim.echo_http_addr().to_string();
    let p = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let egress = egress_of(&sim, &p);

    let stream = tunnel_to(&p, &echo).await;
    let reply = echo_over(stream, &echo, "/tunnel").await;
    assert_eq!(
        (reply.path.as_str(), reply.remote.clone()),
        ("/tunnel", format!("{egress}:0"))
    );

    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    let req = format!(
        "GET {}/forward?q=1 HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
        sim.echo_http_url(),
        basic(&p.username, &p.password)
    );
    let (raw, read) = request_until_closed(&mut s, &req).await;
    read.unwrap();
    let reply = echo_reply(raw);
    assert_eq!(
        (reply.path.as_str(), reply.remote),
        ("/forward?q=1", format!("{egress}:0"))
    );
    assert!(
        reply.proxy_headers.is_empty(),
        "credentials are not passed on: {:?}",
        reply.proxy_headers
    );

    let budgeted = proxy(
        &sim,
        Protocol::Http,
        FailureMode::DropAfter { bytes: 1 << 20 },
    )
    .await;
    let (status, stream) = http_connect(
        budgeted.addr(),
        &echo,
        Some((&budgeted.username, &budgeted.password)),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_ne!(
        port_of(&echo_over(stream, &echo, "/").await),
        0,
        "a byte budget dials"
    );

    let socks = proxy(&sim, Protocol::Socks5, FailureMode::None).await;
    let port = sim.echo_http_addr().port();
    let (stream, _) = socks_connect(
        socks.addr(),
        &socks.username,
        &socks.password,
        "127.0.0.1",
        port,
        1,
    )
    .await
    .unwrap()
    .unwrap();
    assert_ne!(
        port_of(&echo_over(stream, "x", "/").await),
        0,
        "SOCKS5 dials"
    );
    assert!(sim.shutdown().await);

    let plain = sim_with(SimConfig::default()).await;
    let echo = plain.echo_http_addr().to_string();
    let p = proxy(&plain, Protocol::Http, FailureMode::None).await;
    let (_, stream) = http_connect(p.addr(), &echo, Some((&p.username, &p.password)))
        .await
        .unwrap();
    assert_ne!(
        port_of(&echo_over(stream, &echo, "/").await),
        0,
        "off by default"
    );
    assert!(plain.shutdown().await);
}

#[tokio::test]
async fn wrong_egress_mode_uses_the_shared_address() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Socks5, FailureMode::WrongEgress).await;
    let port = sim.echo_http_addr().port();
    let (stream, _) = socks_connect(p.addr(), &p.username, &p.password, "127.0.0.1", port, 1)
        .await
        .unwrap()
        .unwrap();
    let reply = echo_over(stream, "x", "/").await;
    assert_eq!(remote_ip(&reply), IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_ne!(remote_ip(&reply), IpAddr::V4(egress_of(&sim, &p)));
}

#[tokio::test]
async fn connections_beyond_the_per_proxy_cap_are_closed() {
    let sim = sim_with(SimConfig {
        max_connections_per_proxy: 2,
        ..SimConfig::default()
    })
    .await;
    let p = proxy(&sim, Protocol::Socks5, FailureMode::None).await;
    let port = sim.echo_http_addr().port();
    let mut open = Vec::new();
    for _ in 0..2 {
        let (s, _) = socks_connect(p.addr(), &p.username, &p.password, "127.0.0.1", port, 1)
            .await
            .unwrap()
            .unwrap();
        open.push(s);
    }
    let mut third = TcpStream::connect(p.addr()).await.unwrap();
    assert_closed(&mut third).await;
    let status = sim
        .live_proxies()
        .into_iter()
        .find(|s| s.proxy.id == p.id)
        .unwrap();
    assert_eq!(status.active_connections, 2);
    drop(open);
    // Permits come back once the proxy has seen both tunnels close.
    let deadline = Instant::now() + IO_LIMIT;
    loop {
        let active = sim.live_proxies()[0].active_connections;
        if active == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{active} connections still counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        socks_connect(p.addr(), &p.username, &p.password, "127.0.0.1", port, 1)
            .await
            .unwrap()
            .is_ok()
    );
}

// ---------- vendor API ----------

/// With `cities` configured, the vendor API gives every proxy one (the one asked for,
/// else a random one) and refuses an unknown one; without, proxies have none.
#[tokio::test]
async fn vendor_api_gives_cities_when_configured() {
    let with = sim_with(SimConfig {
        cities: vec!["pudong".into(), "minhang".into()],
        ..SimConfig::default()
    })
    .await;
    let key = api_key(&with);
    let (status, _, body) = vendor_get(&with, "/v1/proxies?count=2&city=minhang", &key).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    for item in json["proxies"].as_array().unwrap() {
        assert_eq!(item["city"], "minhang");
    }
    let (status, _, body) = vendor_get(&with, "/v1/proxies?count=3", &key).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    for item in json["proxies"].as_array().unwrap() {
        let city = item["city"].as_str().unwrap();
        assert!(["pudong", "minhang"].contains(&city), "{city}");
    }
    let (status, _, body) = vendor_get(&with, "/v1/proxies?city=paris", &key).await;
    assert_eq!(status, 400, "{body}");
    let plain = sim().await;
    let (status, _, body) = vendor_get(&plain, "/v1/proxies?count=1", &api_key(&plain)).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(json["proxies"][0].get("city").is_none(), "{body}");
}

#[tokio::test]
async fn vendor_api_sells_usable_proxies_as_json() {
    let sim = sim_with(SimConfig {
        ttl_min_seconds: 40,
        ttl_max_seconds: 60,
        ..SimConfig::default()
    })
    .await;
    let (status, _, body) = vendor_get(
        &sim,
        "/v1/proxies?count=3&protocol=socks5&region=beijing",
        &api_key(&sim),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = json["proxies"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    for item in list {
        for field in [
            "id",
            "protocol",
            "host",
            "port",
            "username",
            "password",
            "region",
            "carrier",
            "expiresAt",
            "ttlSeconds",
        ] {
            assert!(!item[field].is_null(), "missing {field}");
        }
        assert_eq!(item["protocol"], "socks5");
        assert_eq!(item["region"], "beijing");
        let ttl = item["ttlSeconds"].as_u64().unwrap();
        assert!((40..=60).contains(&ttl));
    }
    let first: SimProxy = serde_json::from_value(list[0].clone()).unwrap();
    let (stream, _) = socks_to_echo(&sim, &first).await;
    let reply = echo_over(stream, "x", "/bought").await;
    assert_eq!(remote_ip(&reply), IpAddr::V4(egress_of(&sim, &first)));
    assert_eq!(sim.live_proxies().len(), 3);
}

#[tokio::test]
async fn vendor_api_line_format_with_basic_auth() {
    let sim = sim().await;
    let creds = sim.credentials().clone();
    let auth = vec![(
        "authorization",
        format!("Basic {}", basic(&creds.username, creds.password.expose())),
    )];
    let (status, headers, body) = vendor_get(&sim, "/v1/proxies?count=2&format=lines", &auth).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let ttl: u64 = headers["x-proxy-ttl-seconds"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((30..=180).contains(&ttl));
    assert!(headers.contains_key("x-proxy-expires-at"));
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 2);
    let live = sim.live_proxies();
    for (line, status) in lines.iter().zip(&live) {
        let p = &status.proxy;
        assert_eq!(
            *line,
            format!("http://{}:{}@127.0.0.1:{}", p.username, p.password, p.port)
        );
    }
}

#[tokio::test]
async fn vendor_api_wants_credentials() {
    let sim = sim().await;
    let wrong_basic = vec![(
        "authorization",
        format!("Basic {}", basic("sim-vendor", "nope")),
    )];
    for headers in [vec![], vec![("x-api-key", "wrong".to_owned())], wrong_basic] {
        let (status, h, body) = vendor_get(&sim, "/v1/proxies?count=1", &headers).await;
        assert_eq!(status, 401, "{body}");
        assert!(h.contains_key("www-authenticate"));
        let (status, _, _) = vendor_get(&sim, "/v1/sim/proxies", &headers).await;
        assert_eq!(status, 401);
    }
    assert!(sim.live_proxies().is_empty(), "nothing was issued");
    let (status, _, _) = vendor_get(&sim, "/healthz", &[]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn vendor_api_validates_requests_and_bounds_the_pool() {
    let sim = sim_with(SimConfig {
        max_live_proxies: 3,
        max_per_request: 5,
        ..SimConfig::default()
    })
    .await;
    let key = api_key(&sim);
    for bad in [
        "/v1/proxies?count=0",
        "/v1/proxies?count=6",
        "/v1/proxies?count=x",
        "/v1/proxies?protocol=ftp",
        "/v1/proxies?region=mars",
        "/v1/proxies?format=xml",
    ] {
        let (status, _, body) = vendor_get(&sim, bad, &key).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, _, body) = vendor_get(&sim, "/v1/proxies?count=5", &key).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        json["proxies"].as_array().unwrap().len(),
        3,
        "partial up to the cap"
    );
    let (status, _, _) = vendor_get(&sim, "/v1/proxies?count=1", &key).await;
    assert_eq!(status, 503);
    let err = sim
        .spawn_proxy(Protocol::Http, LONG_TTL, FailureMode::None)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        proxy_pool_e2e::sim::SimError::PoolFull { max: 3 }
    ));
}

#[tokio::test]
async fn control_api_lists_changes_and_expires_proxies() {
    let sim = sim().await;
    let key = api_key(&sim);
    let created = vendor_send(
        &sim,
        "POST",
        "/v1/sim/proxies",
        r#"{"protocol":"http","ttlMs":60000,"region":"shanghai","failure":{"mode":"badAuth"}}"#,
    )
    .await;
    assert_eq!(created, 201);
    let (status, _, body) = vendor_get(&sim, "/v1/sim/proxies", &key).await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let item = &json["proxies"][0];
    assert_eq!(item["failure"]["mode"], "badAuth");
    assert_eq!(item["region"], "shanghai");
    assert!(item["egressIp"].as_str().unwrap().starts_with("127."));
    let id = item["id"].as_str().unwrap().to_owned();

    let path = format!("/v1/sim/proxies/{id}/failure");
    assert_eq!(
        vendor_send(&sim, "PUT", &path, r#"{"mode":"dropAfter","bytes":10}"#).await,
        204
    );
    assert_eq!(
        sim.live_proxies()[0].failure,
        FailureMode::DropAfter { bytes: 10 }
    );
    assert_eq!(
        vendor_send(&sim, "PUT", &path, r#"{"mode":"explode"}"#).await,
        400
    );
    assert_eq!(
        vendor_send(
            &sim,
            "PUT",
            "/v1/sim/proxies/nope/failure",
            r#"{"mode":"none"}"#
        )
        .await,
        404
    );
    assert_eq!(
        vendor_send(&sim, "DELETE", &format!("/v1/sim/proxies/{id}"), "").await,
        204
    );
    assert!(sim.live_proxies().is_empty());

    let (status, _, body) = vendor_get(&sim, "/v1/sim/info", &key).await;
    assert_eq!(status, 200);
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(info["echoHttp"], sim.echo_http_url());
    assert!(
        info["caPem"]
            .as_str()
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
}

#[tokio::test]
async fn vendor_faults_make_the_vendor_api_fail_slow_or_garbled() {
    let sim = sim().await;
    let key = api_key(&sim);
    let fault = "/v1/sim/vendor/fault";
    for (status, retry_after) in [(503u16, true), (429, true), (500, false)] {
        let body = format!(r#"{{"mode":"status","status":{status}}}"#);
        assert_eq!(vendor_send(&sim, "PUT", fault, &body).await, 204);
        let (got, headers, _) = vendor_get(&sim, "/v1/proxies?count=2", &key).await;
        assert_eq!(got, status);
        assert_eq!(headers.contains_key("retry-after"), retry_after, "{status}");
    }
    assert!(
        sim.live_proxies().is_empty(),
        "a failing vendor issues nothing"
    );

    sim.set_vendor_fault(VendorFault::Garbage).unwrap();
    let (status, _, body) = vendor_get(&sim, "/v1/proxies", &key).await;
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<serde_json::Value>(&body).is_err());

    sim.set_vendor_fault(VendorFault::Slow { delay_ms: 300 })
        .unwrap();
    let started = Instant::now();
    let (status, _, _) = vendor_get(&sim, "/v1/proxies", &key).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));

    let (status, _, body) = vendor_get(&sim, fault, &key).await;
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"mode":"slow","delayMs":300}"#)
    );
    assert_eq!(
        vendor_send(&sim, "PUT", fault, r#"{"mode":"status","status":200}"#).await,
        400
    );
    assert!(
        sim.set_vendor_fault(VendorFault::Status { status: 99 })
            .is_err()
    );
    assert_eq!(
        vendor_send(&sim, "PUT", fault, r#"{"mode":"none"}"#).await,
        204
    );
    let (status, _, _) = vendor_get(&sim, "/v1/proxies", &key).await;
    assert_eq!(status, 200);
}

// ---------- lifecycle ----------

#[tokio::test]
async fn shutdown_closes_tunnels_and_stops_listening() {
    let sim = sim().await;
    let p = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let echo = sim.echo_http_addr().to_string();
    let (_, mut tunnel) = http_connect(p.addr(), &echo, Some((&p.username, &p.password)))
        .await
        .unwrap();
    let (vendor, echo_addr, proxy_addr) = (sim.vendor_addr(), sim.echo_http_addr(), p.addr());
    assert!(
        sim.shutdown().await,
        "every task ends within the grace period"
    );
    assert_closed(&mut tunnel).await;
    for addr in [vendor, echo_addr, proxy_addr] {
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "{addr} still accepts"
        );
    }
}

#[tokio::test]
async fn spawn_proxy_with_sets_labels() {
    let sim = sim().await;
    let mut spec = ProxySpec::new(Protocol::Socks5, LONG_TTL);
    spec.labels.region = Some("guangzhou".into());
    spec.labels.carrier = Some("unicom".into());
    spec.labels.city = Some("tianhe".into());
    let p = sim.spawn_proxy_with(spec).await.unwrap();
    assert_eq!(
        (p.region.as_str(), p.carrier.as_str(), p.city.as_deref()),
        ("guangzhou", "unicom", Some("tianhe"))
    );
    assert_eq!(
        p.url(),
        format!(
            "socks5://{}:{}@127.0.0.1:{}",
            p.username, p.password, p.port
        )
    );
}

// ---------- interop with curl (scripts/test.sh installs it when missing) ----------

async fn curl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("curl")
        .args(args)
        .output()
        .await
        .expect("curl is required for this test: apt-get install curl (scripts/test.sh does)");
    let out = succeeded(out, &format!("curl {args:?}"));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn curl_goes_through_http_and_socks5_proxies() {
    let sim = sim().await;
    let h = proxy(&sim, Protocol::Http, FailureMode::None).await;
    let s = proxy(&sim, Protocol::Socks5, FailureMode::None).await;
    let ca = std::env::temp_dir().join(format!("vendor-sim-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, sim.echo_ca_pem()).unwrap();
    let ca = ca.to_str().unwrap().to_owned();
    let http_url = format!("{}/plain", sim.echo_http_url());
    let https_url = format!("https://localhost:{}/tls", sim.echo_https_addr().port());
    let socks_h = s.url().replace("socks5://", "socks5h://");
    let cases = [
        (h.url(), http_url.clone(), h.clone(), false),
        (h.url(), https_url.clone(), h.clone(), true),
        (socks_h.clone(), http_url.clone(), s.clone(), false),
        (socks_h, https_url, s.clone(), true),
    ];
    for (proxy_url, url, p, tls) in cases {
        let args = [
            "-sS",
            "--max-time",
            "5",
            "--cacert",
            ca.as_str(),
            "-x",
            proxy_url.as_str(),
            url.as_str(),
        ];
        let out = curl(&args).await;
        let reply: EchoReply = serde_json::from_str(&out).unwrap();
        assert_eq!(reply.tls, tls, "{url}");
        assert_eq!(remote_ip(&reply), IpAddr::V4(egress_of(&sim, &p)), "{url}");
    }
    let _ = std::fs::remove_file(&ca);
}

// ---------- the binary ----------

#[tokio::test]
async fn vendor_sim_binary_prints_its_urls_serves_and_stops_on_sigterm() {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_vendor-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--api-key",
            "bin-key",
            "--ttl-min",
            "5",
            "--ttl-max",
            "5",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut urls = std::collections::HashMap::new();
    while urls.len() < 3 {
        let line = tokio::time::timeout(IO_LIMIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("the binary prints its URLs");
        if let Some((name, url)) = line.split_once(char::is_whitespace) {
            urls.insert(name.to_owned(), url.trim().to_owned());
        }
    }
    let vendor: SocketAddr = urls["vendor-api"]
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let stream = TcpStream::connect(vendor).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get("/v1/proxies?count=1&format=lines")
        .header("host", vendor.to_string())
        .header("x-api-key", "bin-key")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-proxy-ttl-seconds"], "5");
    let status = terminate_async(&mut child, Duration::from_secs(10))
        .await
        .expect("exits after SIGTERM");
    assert!(status.success(), "clean exit: {status}");
    assert!(TcpStream::connect(vendor).await.is_err());
}

// ---------- docs ----------

#[test]
fn the_documented_config_example_parses_and_validates() {
    let doc = include_str!("../../docs/vendor-simulator.md");
    let yaml = doc
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/vendor-simulator.md has a yaml example");
    let config: SimConfig = serde_yaml::from_str(yaml).expect("the example parses");
    assert_eq!(config.failure_mix.len(), 1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sim = Simulator::start(config)
            .await
            .expect("the example validates");
        assert!(sim.shutdown().await);
    });
}
