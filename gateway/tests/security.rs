//! The gateway against hostile or careless clients, over real sockets: targets and
//! vendor proxies on refused addresses (403 / SOCKS5 `0x02`, never dialled), CONNECT
//! ports outside the routing's allow-list, a client that stops reading (its slot and
//! the proxy's capacity come back after the write timeout), a trickled request body
//! (cut at its deadline), request smuggling through `Host` and chunked trailers
//! (checked with a recording vendor proxy), and password guessing (throttled).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_api::egress::{EgressDenied, EgressPolicy};
use proxy_pool_e2e::sim::Protocol;
use proxy_pool_gateway::GatewayConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// A hand-written HTTP vendor proxy that records every byte it receives, answers each
/// connection once with `200 ok` when the gateway goes quiet, then closes.
struct Recorder {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    async fn start() -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let rec = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let rec = rec.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    loop {
                        let read =
                            tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf))
                                .await;
                        match read {
                            Ok(Ok(0) | Err(_)) => return,
                            Ok(Ok(n)) => rec.lock().await.extend_from_slice(&buf[..n]),
                            Err(_) => break,
                        }
                    }
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        Self { addr, seen }
    }

    async fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().await).into_owned()
    }
}

/// Sends raw bytes as one client connection and reads what comes back until the
/// gateway closes (or [`IO_LIMIT`]).
async fn exchange(gateway: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(gateway).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn auth() -> String {
    format!("Proxy-Authorization: Basic {}\r\n", basic(USER, PASS))
}

/// `GET url` with `Host: host` through the gateway as [`USER`]; the whole answer.
async fn get_through(gateway: SocketAddr, url: &str, host: &str) -> String {
    let head = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n{}\r\n", auth());
    exchange(gateway, head.as_bytes()).await
}

#[tokio::test]
async fn targets_on_refused_addresses_are_403_and_socks5_0x02() {
    let (h, _) = Harness::serving([Protocol::Http]).await;
    // Opted in to 127.0.0.0/8 (the harness's proxies), nothing else.
    for (target, why) in [
        ("169.254.169.254:80", EgressDenied::LinkLocal),
        ("[fe80::1]:443", EgressDenied::LinkLocal),
        ("0.0.0.0:80", EgressDenied::Reserved),
    ] {
        let (resp, _) = connect(h.http, USER, PASS, target).await;
        assert_eq!(resp.status, 403, "{target}: {}", resp.head);
        assert_eq!(
            resp.header("x-proxy-pool-error").as_deref(),
            Some("egress-denied"),
            "{target}"
        );
        assert!(h.gateway.metrics().egress_denied_for(why) >= 1, "{target}");
    }
    let fwd = get_through(h.http, "http://169.254.169.254/latest/meta-data/", "x").await;
    assert!(fwd.starts_with("HTTP/1.1 403"), "{fwd}");
    let metadata: SocketAddr = "169.254.169.254:80".parse().unwrap();
    let refused = socks5(h.socks, USER, PASS, metadata, 1).await.unwrap_err();
    assert_eq!(refused, ("reply".to_owned(), 0x02), "SOCKS5: not allowed");
    assert!(h.gateway.metrics().errors_for("egress-denied") >= 5);
    assert!(h.slots_free(), "no slot was taken for a refused target");
}

#[tokio::test]
async fn configured_internal_ranges_are_refused_too() {
    let h = Harness::start_with(GatewayConfig {
        egress: EgressPolicy::parse(&["10.96.0.0/12".into()], &["127.0.0.0/8".into()]).unwrap(),
        ..local_config()
    })
    .await;
    h.serve_one(Protocol::Http).await;
    let (resp, _) = connect(h.http, USER, PASS, "10.96.0.1:443").await;
    assert_eq!(resp.status, 403);
    assert_eq!(
        h.gateway
            .metrics()
            .egress_denied_for(EgressDenied::Internal),
        1
    );
    let (ok, _) = h.connect_echo().await;
    assert_eq!(ok.status, 200, "{}", ok.head);
}

#[tokio::test]
async fn vendor_proxies_on_refused_addresses_are_never_dialled() {
    // No opt-in: the default policy refuses loopback, where this "vendor" listens.
    let h = Harness::start_with(GatewayConfig::default()).await;
    let vendor = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = vendor.local_addr().unwrap();
    h.install(
        vec![raw_upstream("vendor-on-loopback", addr, 10)],
        vec![all()],
    );
    let fwd = get_through(h.http, "http://example.com/", "example.com").await;
    assert!(fwd.starts_with("HTTP/1.1 502"), "{fwd}");
    assert!(fwd.contains("upstream-dial-failed"), "{fwd}");
    let accepted = tokio::time::timeout(Duration::from_millis(300), vendor.accept()).await;
    assert!(
        accepted.is_err(),
        "the gateway connected to a refused address"
    );
    assert_eq!(
        h.gateway
            .metrics()
            .egress_denied_for(EgressDenied::Loopback),
        1
    );
    // Without the opt-in, names that always mean this machine are refused as targets.
    let (resp, _) = connect(h.http, USER, PASS, "localhost:443").await;
    assert_eq!(resp.status, 403, "{}", resp.head);
    assert_eq!(
        h.gateway
            .metrics()
            .egress_denied_for(EgressDenied::LocalName),
        1
    );
}

#[tokio::test]
async fn connect_ports_outside_the_routing_allow_list_are_refused() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Http).await;
    // The catch-all routing as users get it: CONNECT to 443 and 80 only.
    h.install(vec![upstream(&p, 10)], vec![catch_all("default")]);
    for target in ["example.com:22", "example.com:25", "example.com:6379"] {
        let (resp, _) = connect(h.http, USER, PASS, target).await;
        assert_eq!(resp.status, 403, "{target}");
        assert_eq!(
            resp.header("x-proxy-pool-error").as_deref(),
            Some("egress-denied")
        );
    }
    assert_eq!(h.gateway.metrics().egress_denied_for(EgressDenied::Port), 3);
    // The echo listens on a random port: refused too, on SOCKS5 with 0x02.
    let refused = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(refused, ("reply".to_owned(), 0x02));
    assert!(h.slots_free());
}

/// A gateway with the deadline under test set by `set` and an idle timeout (120 s) far
/// beyond the tests' bounds: whatever cuts a connection, it is not the idle timeout.
async fn deadline_under_test(set: impl FnOnce(&mut GatewayConfig)) -> Harness {
    let mut config = GatewayConfig {
        io_idle_timeout: Duration::from_secs(120),
        ..local_config()
    };
    set(&mut config);
    Harness::start_with(config).await
}

#[tokio::test]
async fn a_client_that_stops_reading_releases_its_slot_and_the_proxy() {
    let h = deadline_under_test(|c| c.write_timeout = Duration::from_secs(1)).await;
    let p = h.serve_one(Protocol::Http).await;
    // A target that never stops sending.
    let firehose = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = firehose.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = firehose.accept().await {
            tokio::spawn(async move {
                let chunk = vec![b'x'; 64 * 1024];
                while s.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    let (resp, stalled) = connect(h.http, USER, PASS, &target.to_string()).await;
    assert_eq!(resp.status, 200, "{}", resp.head);
    wait_counts(&h, &id_of(&p), (1, 0)).await;
    // The client reads nothing more. Within a few write timeouts (not the 120 s idle
    // timeout) the tunnel ends, the connection slot and the Active slot are free.
    let until = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let open = h.gateway.metrics().open_connections.get();
        if open == 0 && h.slots_free() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "still held: {open} open connections, counts {:?}",
            counts_of(&h, &id_of(&p))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stalled);
}

#[tokio::test]
async fn a_trickled_request_body_is_cut_at_its_deadline() {
    let h = deadline_under_test(|c| c.request_body_timeout = Duration::from_secs(1)).await;
    let rec = Recorder::start().await;
    let id = "recorder";
    h.install(vec![raw_upstream(id, rec.addr, 10)], vec![all()]);
    let mut s = TcpStream::connect(h.http).await.unwrap();
    let head = format!(
        "POST http://example.com/upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 100000\r\n{}\r\n",
        auth()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let started = tokio::time::Instant::now();
    // One byte every 100 ms: never idle, never done.
    let ended = loop {
        if s.write_all(b"x").await.is_err() {
            break started.elapsed();
        }
        let mut b = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), s.read(&mut b)).await
        {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the gateway kept reading a trickled body"
        );
    };
    assert!(ended < Duration::from_secs(10), "{ended:?}");
    wait_counts(&h, &proxy_pool_gateway::snapshot::ProxyId::from(id), (0, 0)).await;
}

#[tokio::test]
async fn absolute_uri_requests_carry_the_uri_authority_as_host() {
    let h = Harness::start().await;
    let rec = Recorder::start().await;
    h.install(vec![raw_upstream("recorder", rec.addr, 10)], vec![all()]);
    let raw = format!(
        "GET http://example.com:8080/a HTTP/1.1\r\nHost: internal.admin\r\nHost: evil\r\nX-Keep: 1\r\n{}\r\n",
        auth()
    );
    let answer = exchange(h.http, raw.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = rec.seen().await;
    let hosts: Vec<&str> = seen
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
        .collect();
    assert_eq!(hosts, ["Host: example.com:8080"], "{seen}");
    assert!(seen.contains("X-Keep: 1"), "{seen}");
    assert!(
        !seen.contains("internal.admin") && !seen.contains("evil"),
        "{seen}"
    );
}

#[tokio::test]
async fn chunked_trailers_are_dropped_and_malformed_ones_end_the_request() {
    let h = Harness::start().await;
    let rec = Recorder::start().await;
    h.install(vec![raw_upstream("recorder", rec.addr, 10)], vec![all()]);
    let head = |extra: &str| {
        format!(
            "POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n{}\r\n5\r\nhello\r\n0\r\n{extra}",
            auth()
        )
    };
    // Well-formed trailers: checked, dropped.
    let answer = exchange(h.http, head("X-Checksum: abc\r\n\r\n").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = rec.seen().await;
    assert!(seen.ends_with("5\r\nhello\r\n0\r\n\r\n"), "{seen:?}");
    assert!(!seen.contains("X-Checksum"), "{seen}");
    // A trailer section hiding a second request: refused, never forwarded.
    rec.seen.lock().await.clear();
    let smuggled = head("GET /admin HTTP/1.1\r\nHost: internal\r\n\r\n");
    let answer = exchange(h.http, smuggled.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let seen = rec.seen().await;
    assert!(
        !seen.contains("/admin") && !seen.contains("internal"),
        "{seen:?}"
    );
    assert!(
        !seen.ends_with("0\r\n\r\n"),
        "the body was never completed: {seen:?}"
    );
}

#[tokio::test]
async fn password_guessing_through_the_gateway_is_throttled() {
    let (h, _) = Harness::serving([Protocol::Http]).await;
    let target = h.echo().to_string();
    let mut statuses = Vec::new();
    for i in 0..12 {
        let (resp, _) = connect(h.http, USER, &format!("guess-{i}"), &target).await;
        statuses.push(resp.status);
    }
    assert_eq!(&statuses[..11], &[407; 11], "{statuses:?}");
    assert_eq!(statuses[11], 429, "{statuses:?}");
    // The right password from the guessing address is not judged now, on either
    // listener.
    let (resp, _) = connect(h.http, USER, PASS, &target).await;
    resp.assert_refused(429, "auth-throttled");
    let refused = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(refused, ("auth".to_owned(), 0x01));
    assert!(h.gateway.metrics().errors_for("auth-throttled") >= 2);
}
