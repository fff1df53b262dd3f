//! Plain-HTTP (absolute-URI) forwarding when things go wrong: a vendor proxy that
//! closes a fresh connection or rejects our credentials is a PROXY_HANDSHAKE failure
//! retried on another proxy within the routing's budget; a request whose body already
//! went upstream is never replayed; `Expect: 100-continue` waits for the upstream's
//! go-ahead instead of stalling the client.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_e2e::sim::{FailureMode, Protocol, SimProxy};
use proxy_pool_gateway::outcome::{Outcome, Stage};
use proxy_pool_gateway::snapshot::ProxyId;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// Bound on a whole client exchange: generous, only there so a stall fails the test.
const EXCHANGE_LIMIT: Duration = Duration::from_secs(20);

/// What a hand-written vendor proxy does with each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Honours `Expect: 100-continue` (answers `100 Continue` first), reads the body,
    /// answers 200 with the body echoed.
    Continue,
    /// Ignores `Expect`: waits for the body, then answers 200 with it echoed.
    Ignore,
    /// Answers `417` at once, never reading a body.
    Final,
    /// Reads the head and one body byte (or, with `whole_body`, all of it), then
    /// closes without answering.
    Cut { whole_body: bool },
}

/// One request as the vendor saw it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

/// A plain-HTTP vendor proxy written out by hand, recording what it receives.
struct RawVendor {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl RawVendor {
    async fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_vendor(stream, mode, log.clone()));
            }
        });
        Self { addr, seen }
    }

    async fn seen(&self) -> Vec<Seen> {
        self.seen.lock().await.clone()
    }

    fn upstream(&self, id: &str) -> SnapshotProxy {
        raw_upstream(id, self.addr, 10)
    }

    /// A harness whose only proxy is a raw vendor in `mode` (`id`).
    async fn serving(mode: Mode, id: &str) -> (Harness, Self) {
        let h = Harness::start().await;
        let vendor = Self::start(mode).await;
        h.install(vec![vendor.upstream(id)], vec![all()]);
        (h, vendor)
    }
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

fn expects_continue(head: &str) -> bool {
    head.to_ascii_lowercase()
        .contains("\r\nexpect: 100-continue\r\n")
}

async fn serve_vendor(mut s: TcpStream, mode: Mode, log: Arc<Mutex<Vec<Seen>>>) {
    while let Ok(head) = read_head(&mut s).await {
        let len = content_length(&head);
        let mut body = vec![0; len];
        match mode {
            Mode::Continue | Mode::Ignore => {
                if mode == Mode::Continue && expects_continue(&head) {
                    s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.unwrap();
                }
                if tokio::time::timeout(IO_LIMIT, s.read_exact(&mut body))
                    .await
                    .is_err()
                {
                    return;
                }
                let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.write_all(&body).await;
                log.lock().await.push(Seen { head, body });
            }
            Mode::Final => {
                let resp = "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n";
                let _ = s.write_all(resp.as_bytes()).await;
                // Whatever arrives until the gateway lets the connection go.
                let mut rest = Vec::new();
                let _ = tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut rest)).await;
                log.lock().await.push(Seen { head, body: rest });
                return;
            }
            Mode::Cut { whole_body } => {
                if !whole_body {
                    body.truncate(1);
                }
                let got = tokio::time::timeout(IO_LIMIT, s.read_exact(&mut body)).await;
                if !matches!(got, Ok(Ok(_))) {
                    body.clear();
                }
                log.lock().await.push(Seen { head, body });
                return;
            }
        }
    }
}

fn drain_outcomes(h: &mut Harness) -> Vec<Outcome> {
    let mut all = Vec::new();
    while let Ok(o) = h.outcomes.rx.try_recv() {
        all.push(o);
    }
    all
}

fn handshake_failures(outcomes: &[Outcome]) -> Vec<ProxyId> {
    outcomes
        .iter()
        .filter(|o| o.stage == Stage::ProxyHandshake && o.error.is_some())
        .map(|o| {
            assert_eq!(o.error, Some("upstream-handshake-failed"), "{o:?}");
            o.proxy.clone()
        })
        .collect()
}

/// `failing` was tried first at least once, and its handshake failures are the only
/// ones in `outcomes`.
fn assert_failed_only(outcomes: &[Outcome], failing: &SimProxy, what: &str) {
    let failed = handshake_failures(outcomes);
    assert!(!failed.is_empty(), "{what} was tried first at least once");
    assert!(failed.iter().all(|p| *p == id_of(failing)), "{failed:?}");
}

/// Waits until no proxy holds an Active or Reserved slot.
async fn assert_slots_released(h: &Harness) {
    for _ in 0..250 {
        if h.slots_free() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("slots not released: {:?}", h.handle.runtime_report());
}

/// GETs on fresh connections all succeed through `good` although `failing` comes
/// first in rotation for some of them; returns the outcomes recorded meanwhile.
async fn gets_succeed_via(h: &mut Harness, good: &SimProxy) -> Vec<Outcome> {
    for i in 0..6 {
        let r = tokio::time::timeout(EXCHANGE_LIMIT, h.get(&format!("/get/{i}")))
            .await
            .expect("answered in time");
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.remote_ip(), h.egress(good));
        assert_eq!(r.echo().path, format!("/get/{i}"));
    }
    drain_outcomes(h)
}

/// A gateway over two HTTP vendor proxies in rotation: the first in `mode`, the
/// second healthy.
async fn failing_and_good(mode: FailureMode) -> (Harness, SimProxy, SimProxy) {
    let h = Harness::start().await;
    let failing = h.proxy(Protocol::Http).await;
    let good = h.proxy(Protocol::Http).await;
    h.set_failure(&failing, mode);
    h.install(
        vec![upstream(&failing, 10), upstream(&good, 10)],
        vec![all()],
    );
    (h, failing, good)
}

/// GETs through [`failing_and_good`] all succeed via the good proxy, and the failing
/// one's handshake failures (at least one) are the only ones recorded.
async fn gets_retried_past(mode: FailureMode) -> Harness {
    let (mut h, failing, good) = failing_and_good(mode).await;
    let outcomes = gets_succeed_via(&mut h, &good).await;
    assert_failed_only(&outcomes, &failing, &format!("the {mode:?} proxy"));
    h
}

#[tokio::test]
async fn a_vendor_closing_a_fresh_connection_is_retried_on_another_proxy() {
    let mut h = gets_retried_past(FailureMode::Refuse).await;
    let metrics = h.gateway.render_metrics();
    assert!(metrics.contains("proxy_pool_gateway_retries_total"));
    for gauge in [
        "proxy_pool_gateway_snapshot_version ",
        "proxy_pool_gateway_snapshot_age_seconds ",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(gauge)),
            "{gauge}missing from /metrics"
        );
    }
    assert_slots_released(&h).await;
    h.shutdown().await;
}

#[tokio::test]
async fn a_vendor_rejecting_our_credentials_is_retried_on_another_proxy() {
    let mut h = gets_retried_past(FailureMode::BadAuth).await;
    assert_slots_released(&h).await;
    h.shutdown().await;
}

#[tokio::test]
async fn when_every_proxy_fails_attempts_stop_at_max_attempts_with_a_bad_gateway() {
    let mut h = Harness::start().await;
    let mut proxies = Vec::new();
    for mode in [
        FailureMode::Refuse,
        FailureMode::BadAuth,
        FailureMode::Refuse,
        FailureMode::BadAuth,
    ] {
        let p = h.proxy(Protocol::Http).await;
        h.set_failure(&p, mode);
        proxies.push(p);
    }
    let routing = all();
    assert_eq!(routing.retry.max_attempts, 3, "the default budget");
    h.install(
        proxies.iter().map(|p| upstream(p, 10)).collect(),
        vec![routing],
    );
    let r = tokio::time::timeout(EXCHANGE_LIMIT, h.get("/"))
        .await
        .expect("answered in time");
    r.assert_refused(502, "upstream-handshake-failed");
    let failed = handshake_failures(&drain_outcomes(&mut h));
    assert_eq!(failed.len(), 3, "one attempt per allowed try: {failed:?}");
    assert_eq!(
        failed.iter().collect::<HashSet<_>>().len(),
        3,
        "each on another proxy"
    );
    assert_slots_released(&h).await;
    h.shutdown().await;
}

/// A POST head with `Expect: 100-continue` and a body of `len` bytes.
fn expect_post(target: &str, len: usize) -> String {
    format!(
        "POST http://{target}/upload HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\nExpect: 100-continue\r\n\r\n",
        basic(USER, PASS)
    )
}

fn body_of(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Sends an expect-continue POST like a strict client: the body only after `100`.
/// Returns the final response.
/// Bounded by [`EXCHANGE_LIMIT`]: a client left waiting for `100 Continue` fails.
async fn strict_expect_post(gateway: SocketAddr, target: &str, body: &[u8]) -> Response {
    tokio::time::timeout(
        EXCHANGE_LIMIT,
        strict_expect_post_unbounded(gateway, target, body),
    )
    .await
    .expect("answered in time: the client is never left waiting for 100 Continue")
}

async fn strict_expect_post_unbounded(gateway: SocketAddr, target: &str, body: &[u8]) -> Response {
    let mut s = TcpStream::connect(gateway).await.unwrap();
    s.write_all(expect_post(target, body.len()).as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut s).await.expect("an answer to the head");
    if head.starts_with("HTTP/1.1 100 ") {
        s.write_all(body).await.unwrap();
        return read_response(&mut s).await.expect("final response");
    }
    assert!(
        !head.starts_with("HTTP/1.1 1"),
        "unexpected interim: {head}"
    );
    // A final answer without the go-ahead: read its body, if any.
    let mut rest = head.into_bytes();
    let mut tail = Vec::new();
    let _ = tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut tail)).await;
    rest.extend_from_slice(&tail);
    read_response(&mut rest.as_slice()).await.unwrap()
}

#[tokio::test]
async fn expect_continue_relays_the_upstream_go_ahead_then_the_body() {
    let (h, vendor) = RawVendor::serving(Mode::Continue, "raw-continue").await;
    let body = body_of(4096);
    let r = strict_expect_post(h.http, "origin.test:8080", &body).await;
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.body, body);
    let seen = vendor.seen().await;
    assert_eq!(seen.len(), 1);
    assert!(expects_continue(&seen[0].head), "{}", seen[0].head);
    assert_eq!(seen[0].body, body, "the upstream got the whole body");
    assert_slots_released(&h).await;
}

#[tokio::test]
async fn expect_continue_through_the_vendor_simulator_completes() {
    let (h, _) = Harness::serving([Protocol::Http]).await;
    let body = body_of(2048);
    let r = strict_expect_post(h.http, &h.echo().to_string(), &body).await;
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.echo().method, "POST");
    assert_eq!(r.echo().path, "/upload");
}

#[tokio::test]
async fn expect_continue_sends_the_body_anyway_when_the_upstream_stays_silent() {
    let (h, vendor) = RawVendor::serving(Mode::Ignore, "raw-ignore").await;
    let body = body_of(3000);
    let exchange = async {
        let mut s = TcpStream::connect(h.http).await.unwrap();
        s.write_all(expect_post("origin.test", body.len()).as_bytes())
            .await
            .unwrap();
        // Like curl: no go-ahead within a short while, so the body goes anyway.
        tokio::time::sleep(Duration::from_millis(200)).await;
        s.write_all(&body).await.unwrap();
        read_response(&mut s).await.expect("final response")
    };
    let r = tokio::time::timeout(EXCHANGE_LIMIT, exchange)
        .await
        .expect("answered in time");
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.body, body);
    assert_eq!(vendor.seen().await[0].body, body);
}

#[tokio::test]
async fn a_final_answer_to_expect_continue_is_relayed_without_the_body() {
    let (h, vendor) = RawVendor::serving(Mode::Final, "raw-final").await;
    let r = strict_expect_post(h.http, "origin.test", &body_of(5000)).await;
    assert_eq!(r.status, 417, "{}", r.head);
    assert_eq!(r.header("connection").as_deref(), Some("close"));
    // The gateway drops the upstream connection without ever sending the body.
    for _ in 0..250 {
        if let Some(seen) = vendor.seen().await.first() {
            assert!(seen.body.is_empty(), "body sent: {} bytes", seen.body.len());
            assert_slots_released(&h).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the upstream connection was kept open");
}

#[tokio::test]
async fn an_expect_continue_request_rejected_with_407_is_retried_before_its_body() {
    let mut h = Harness::start().await;
    let bad_auth = h.proxy(Protocol::Http).await;
    h.set_failure(&bad_auth, FailureMode::BadAuth);
    let vendor = RawVendor::start(Mode::Continue).await;
    h.install(
        vec![upstream(&bad_auth, 10), vendor.upstream("raw-continue")],
        vec![all()],
    );
    let body = body_of(1500);
    for _ in 0..4 {
        let r = strict_expect_post(h.http, "origin.test", &body).await;
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.body, body);
    }
    assert_failed_only(&drain_outcomes(&mut h), &bad_auth, "the 407 proxy");
    let seen = vendor.seen().await;
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|s| s.body == body));
    assert_slots_released(&h).await;
}

#[tokio::test]
async fn a_request_whose_body_went_upstream_is_never_replayed() {
    let h = Harness::start().await;
    // One cuts the body short (the gateway's write fails), one takes all of it and
    // closes without an answer (the gateway reads EOF before any response byte).
    let a = RawVendor::start(Mode::Cut { whole_body: false }).await;
    let b = RawVendor::start(Mode::Cut { whole_body: true }).await;
    h.install(vec![a.upstream("cut-a"), b.upstream("cut-b")], vec![all()]);
    let requests = 6;
    for i in 0..requests {
        let exchange = async {
            let mut s = TcpStream::connect(h.http).await.unwrap();
            let head = format!(
                "POST http://origin.test/once/{i} HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization: Basic {}\r\nContent-Length: 10\r\n\r\n01234",
                basic(USER, PASS)
            );
            s.write_all(head.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = s.write_all(b"56789").await;
            read_response(&mut s).await.expect("an error response")
        };
        let r = tokio::time::timeout(EXCHANGE_LIMIT, exchange)
            .await
            .expect("answered in time");
        r.assert_refused(502, "upstream-io");
    }
    let mut heads: HashMap<String, usize> = HashMap::new();
    for seen in a.seen().await.into_iter().chain(b.seen().await) {
        assert!(!seen.body.is_empty(), "the body had started");
        let line = seen.head.lines().next().unwrap_or_default().to_owned();
        *heads.entry(line).or_default() += 1;
    }
    assert_eq!(heads.len(), requests, "{heads:?}");
    assert!(heads.values().all(|&n| n == 1), "replayed: {heads:?}");
    assert_slots_released(&h).await;
}

/// A bodiless `POST` through the gateway on a fresh client connection.
async fn post_once(gateway: SocketAddr, target: SocketAddr, path: &str) -> Response {
    let mut s = TcpStream::connect(gateway).await.unwrap();
    let req = format!(
        "POST http://{target}{path} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        basic(USER, PASS)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    tokio::time::timeout(EXCHANGE_LIMIT, read_response(&mut s))
        .await
        .expect("answered in time")
        .expect("response")
}

/// RFC 9110 §9.2.2: a proxy must not retry a non-idempotent request on its own. A
/// vendor that closed the connection without answering may already have passed the
/// `POST` on, so the client gets the 502 and decides; a `GET` in the same situation
/// is retried (above), and a vendor's `407` (request certainly not passed on) is
/// retried for a `POST` too.
#[tokio::test]
async fn a_post_is_not_resent_after_the_vendor_closed_without_answering() {
    let (mut h, refusing, good) = failing_and_good(FailureMode::Refuse).await;
    let mut statuses = HashMap::new();
    for i in 0..6 {
        let r = post_once(h.http, h.echo(), &format!("/post/{i}")).await;
        if r.status == 200 {
            assert_eq!(r.remote_ip(), h.egress(&good));
        }
        *statuses.entry(r.status).or_insert(0) += 1;
    }
    assert!(statuses.get(&502).copied().unwrap_or(0) > 0, "{statuses:?}");
    assert!(statuses.get(&200).copied().unwrap_or(0) > 0, "{statuses:?}");
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    let outcomes = drain_outcomes(&mut h);
    assert!(
        handshake_failures(&outcomes).is_empty(),
        "no retry, so no handshake failure to exclude: {outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| o.proxy == id_of(&refusing) && o.error.is_some()),
        "the failure still reaches the controller: {outcomes:?}"
    );
    assert_slots_released(&h).await;

    h.set_failure(&refusing, FailureMode::BadAuth);
    for i in 0..6 {
        let r = post_once(h.http, h.echo(), &format!("/auth/{i}")).await;
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.remote_ip(), h.egress(&good));
    }
    assert!(!handshake_failures(&drain_outcomes(&mut h)).is_empty());
    assert_slots_released(&h).await;
    h.shutdown().await;
}
