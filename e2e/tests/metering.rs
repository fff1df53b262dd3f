//! Per-client metering end to end: the real binaries (vendor simulator, controller on a
//! private Redis, checker, gateway). One client identity, `meter`, sends known traffic
//! through the gateway — several plain-HTTP keep-alive requests with bodies on one
//! connection, a CONNECT tunnel and a SOCKS5 tunnel, each carrying payload both ways —
//! and counts exactly the bytes its own sockets wrote and read. Once the gateway's
//! runtime reports reached the controller, the controller's `/metrics` show
//! `gateway_bytes_total{client="meter",routing,direction}` equal to those counts (up:
//! what the client wrote; down: what it read) and `gateway_requests_total` equal to the
//! requests made (a tunnel is one request). Readiness probes use another identity,
//! which the controller's config does not list (counted under `(other)`).
//!
//! Then the daily quota: client `capped` has `gatewayLimits.dailyBytes` 4,000 in the
//! controller's config; it sends requests until the gateway refuses one with 429
//! `quota-exceeded` (the controller lists it in a report's answer once its metered
//! bytes reach the quota), and the bytes metered for it at that point are at least the
//! quota.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use activity_pool::testkit::RedisServer;
use common::{basic, block, connect};
use proxy_pool_e2e::http::get;
use proxy_pool_e2e::procs::sha256_hex;
use proxy_pool_e2e::stack::{Listeners, SingleStack};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ROUTING: &str = "e2e-meter";
const REPORTED_WITHIN: Duration = Duration::from_secs(60);
const IO_WITHIN: Duration = Duration::from_secs(20);
const METER: (&str, &str) = ("meter", "meter-e2e-pw");
const CAPPED: (&str, &str) = ("capped", "capped-e2e-pw");
const PROBE: (&str, &str) = ("probe", "probe-e2e-pw");
const DAILY_BYTES: u64 = 4_000;
/// Plain-HTTP requests on the keep-alive connection.
const KEEP_ALIVE_REQUESTS: usize = 5;

/// A client socket that counts every byte it wrote (up) and read (down).
struct Counted {
    s: TcpStream,
    up: u64,
    down: u64,
}

impl Counted {
    async fn open(addr: SocketAddr) -> Counted {
        Counted {
            s: connect(addr).await.expect("connect to the gateway"),
            up: 0,
            down: 0,
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        tokio::time::timeout(IO_WITHIN, self.s.write_all(bytes))
            .await
            .expect("write in time")
            .expect("write");
        self.up += bytes.len() as u64;
    }

    async fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        tokio::time::timeout(IO_WITHIN, self.s.read_exact(&mut buf))
            .await
            .expect("read in time")
            .expect("read");
        self.down += n as u64;
        buf
    }

    /// Reads an HTTP head (through the blank line), byte by byte.
    async fn read_head(&mut self) -> String {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            assert!(head.len() < 16 * 1024, "head too long");
            head.extend(self.read_exact(1).await);
        }
        String::from_utf8_lossy(&head).into_owned()
    }

    /// Reads until the peer closes.
    async fn read_to_end(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        tokio::time::timeout(IO_WITHIN, self.s.read_to_end(&mut out))
            .await
            .expect("read to the end in time")
            .expect("read to the end");
        self.down += out.len() as u64;
        out
    }

    /// Reads one response (head, then a `Content-Length` body); its status and body.
    async fn read_response(&mut self) -> (u16, Vec<u8>) {
        let head = self.read_head().await;
        let status = status_of(&head);
        let len = header(&head, "content-length").map_or(0, |v| v.parse().expect("length"));
        let body = self.read_exact(len).await;
        (status, body)
    }
}

fn status_of(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a response head: {head:?}"))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A body of `n` bytes (distinct per request).
fn body(n: usize, tag: u8) -> Vec<u8> {
    (0..n)
        .map(|i| b'a' + ((i as u8).wrapping_add(tag) % 26))
        .collect()
}

/// A request with `payload` as its body, head and body in one write.
fn post(target: &str, host: &str, extra: &str, payload: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "POST {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        payload.len()
    )
    .into_bytes();
    req.extend_from_slice(payload);
    req
}

/// What one client sent and received, as its sockets counted it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Sent {
    requests: u64,
    up: u64,
    down: u64,
}

impl Sent {
    fn add(&mut self, c: &Counted, requests: u64) {
        self.requests += requests;
        self.up += c.up;
        self.down += c.down;
    }
}

/// Plain-HTTP requests with bodies on one keep-alive connection; the response bodies
/// are the simulator's `/bytes/N`.
async fn keep_alive(gw: SocketAddr, echo: SocketAddr, (user, pw): (&str, &str)) -> Counted {
    let mut c = Counted::open(gw).await;
    let auth = format!("Proxy-Authorization: Basic {}\r\n", basic(user, pw));
    for i in 0..KEEP_ALIVE_REQUESTS {
        let n_up = 700 + 301 * i;
        let n_down = 1_500 + 977 * i;
        let req = post(
            &format!("http://{echo}/bytes/{n_down}"),
            &echo.to_string(),
            &auth,
            &body(n_up, i as u8),
        );
        c.write(&req).await;
        let (status, got) = c.read_response().await;
        assert_eq!(status, 200, "keep-alive request {i}");
        assert_eq!(got.len(), n_down);
    }
    c
}

/// A CONNECT tunnel to the echo server; inside it, one request with a body and a
/// `/bytes/N` answer, read until the server closes.
async fn connect_tunnel(gw: SocketAddr, echo: SocketAddr, (user, pw): (&str, &str)) -> Counted {
    let mut c = Counted::open(gw).await;
    c.write(
        format!(
            "CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic(user, pw)
        )
        .as_bytes(),
    )
    .await;
    let head = c.read_head().await;
    assert_eq!(status_of(&head), 200, "CONNECT: {head}");
    inside(&mut c, echo, 3_333, 12_345).await;
    c
}

/// A SOCKS5 tunnel (username/password) to the echo server, used as the CONNECT one.
async fn socks_tunnel(socks: SocketAddr, echo: SocketAddr, (user, pw): (&str, &str)) -> Counted {
    let mut c = Counted::open(socks).await;
    c.write(&[5, 1, 2]).await;
    assert_eq!(c.read_exact(2).await, [5, 2], "method: username/password");
    let mut auth = vec![1, user.len() as u8];
    auth.extend_from_slice(user.as_bytes());
    auth.push(pw.len() as u8);
    auth.extend_from_slice(pw.as_bytes());
    c.write(&auth).await;
    assert_eq!(c.read_exact(2).await, [1, 0], "SOCKS5 authentication");
    let std::net::IpAddr::V4(ip) = echo.ip() else {
        panic!("echo on IPv4 loopback")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&ip.octets());
    req.extend_from_slice(&echo.port().to_be_bytes());
    c.write(&req).await;
    let reply = c.read_exact(4).await;
    assert_eq!(reply[..2], [5, 0], "SOCKS5 CONNECT reply {reply:?}");
    let rest = match reply[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => usize::from(c.read_exact(1).await[0]) + 2,
        other => panic!("SOCKS5 address type {other}"),
    };
    c.read_exact(rest).await;
    inside(&mut c, echo, 2_222, 23_456).await;
    c
}

/// One request through an established tunnel: `up` body bytes, `down` answer bytes,
/// then the server closes.
async fn inside(c: &mut Counted, echo: SocketAddr, up: usize, down: usize) {
    c.write(&post(
        &format!("/bytes/{down}"),
        &echo.to_string(),
        "Connection: close\r\n",
        &body(up, 7),
    ))
    .await;
    let answer = c.read_to_end().await;
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "inside the tunnel: {text:.200}"
    );
    assert!(
        text.contains(&format!("content-length: {down}"))
            || text.contains(&format!("Content-Length: {down}")),
        "a /bytes answer: {text:.200}"
    );
    assert!(answer.len() > down, "the whole answer came back");
}

/// One sample of the controller's `/metrics`: the series of `name` carrying every label
/// pair of `labels` (0 when absent).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// (requests, up, down) of `client` on the Routing, from the controller's `/metrics`.
fn metered(admin: SocketAddr, client: &str) -> Sent {
    let (status, text) = get(admin, "/metrics");
    assert_eq!(status, 200, "controller /metrics");
    let pair = [("client", client), ("routing", ROUTING)];
    let bytes = |direction| {
        sample(
            &text,
            "proxy_pool_controller_gateway_bytes_total",
            &[pair[0], pair[1], ("direction", direction)],
        )
    };
    Sent {
        requests: sample(&text, "proxy_pool_controller_gateway_requests_total", &pair),
        up: bytes("up"),
        down: bytes("down"),
    }
}

/// A plain GET through the gateway as `client` (`Connection: close`); the status and
/// the `X-Proxy-Pool-Error` reason.
fn plain_get(gw: SocketAddr, echo: SocketAddr, (user, pw): (&str, &str)) -> (u16, String) {
    let req = format!(
        "GET http://{echo}/bytes/500 HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
        basic(user, pw)
    );
    block(async {
        let s = connect(gw).await?;
        common::exchange_answer(s, &req).await
    })
    .map_or((0, String::new()), |a| {
        (
            a.status,
            a.header("x-proxy-pool-error").unwrap_or("").to_owned(),
        )
    })
}

#[test]
fn gateway_bytes_per_client_equal_what_the_client_sent_and_received() {
    let redis = RedisServer::start();
    let mut stack = SingleStack::new("metering");
    stack.write_clients(&[METER, CAPPED, PROBE]);
    stack.write_config(
        &format!(
            r#"{{backend: redis, redis: {{address: "{}"}}}}"#,
            redis.url()
        ),
        "reportInterval: 500ms",
        &format!(
            r#"routings:
  - {{name: {ROUTING}, priority: 1, upstreams: [sim-http], connectPorts: ['{echo_port}']}}
clients:
  - name: meter
    permissions: [distribution:extract]
    apiKeys: [{{sha256: {meter_key}}}]
  - name: capped
    permissions: [distribution:extract]
    apiKeys: [{{sha256: {capped_key}}}]
    gatewayLimits: {{dailyBytes: {DAILY_BYTES}}}
shutdown: {{gracePeriod: 5s}}"#,
            echo_port = stack.at.echo.port(),
            meter_key = sha256_hex("meter-api-key"),
            capped_key = sha256_hex("capped-api-key"),
        ),
    );
    stack.start();
    // Readiness probes by an identity the controller's config does not list.
    stack.wait_proxied(PROBE);
    let Listeners {
        echo,
        admin,
        gw_http,
        gw_socks,
        ..
    } = stack.at;
    assert_eq!(metered(admin, METER.0), Sent::default(), "nothing before");

    // The measured traffic: every byte counted by the client's own sockets.
    let mut sent = Sent::default();
    let c = block(keep_alive(gw_http, echo, METER));
    sent.add(&c, KEEP_ALIVE_REQUESTS as u64);
    drop(c);
    let c = block(connect_tunnel(gw_http, echo, METER));
    sent.add(&c, 1);
    drop(c);
    let c = block(socks_tunnel(gw_socks, echo, METER));
    sent.add(&c, 1);
    drop(c);
    println!("client sockets: {sent:?}");

    // The gateway reports every interval; wait until the requests arrived, then until
    // the bytes match (a connection's bytes are reported once it ends).
    let mut last = Sent::default();
    let arrived = std::time::Instant::now() + REPORTED_WITHIN;
    while std::time::Instant::now() < arrived {
        last = metered(admin, METER.0);
        if last == sent {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    println!("controller metrics: {last:?}");
    assert_eq!(
        last.requests,
        sent.requests,
        "requests metered\n{}",
        stack.procs.logs()
    );
    assert_eq!(
        last.up, sent.up,
        "bytes up metered = bytes the client wrote"
    );
    assert_eq!(
        last.down, sent.down,
        "bytes down metered = bytes the client read"
    );

    // The daily quota: `capped` is refused once its metered bytes reach dailyBytes.
    let mut refused = None;
    for i in 0..400 {
        let (status, reason) = plain_get(gw_http, echo, CAPPED);
        if status == 429 {
            refused = Some((i, reason));
            break;
        }
        assert_eq!(status, 200, "request {i} of the capped client");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (after, reason) = refused.unwrap_or_else(|| {
        panic!(
            "the capped client was never refused (metered {:?})\n{}",
            metered(admin, CAPPED.0),
            stack.procs.logs()
        )
    });
    assert_eq!(reason, "quota-exceeded");
    let used = metered(admin, CAPPED.0);
    println!("capped client refused after {after} requests; metered {used:?}");
    assert!(
        used.up + used.down >= DAILY_BYTES,
        "refused only once the quota was used: {used:?}"
    );

    stack.tear_down();
}
