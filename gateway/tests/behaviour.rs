//! Selection behaviour end to end: sticky sessions, exact capacity (Reserved during
//! the vendor handshake, Active for a tunnel, fallback to a proxy with room), retries
//! on DIAL and PROXY_HANDSHAKE failures within the routing's attempt budget and
//! deadline, `usable_until`, stale snapshots, and graceful drain on shutdown. Raw
//! loopback listeners written here stand in for vendors that refuse, close or hang.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_api::controlplane::model::{RetryBudget, Sticky};
use proxy_pool_e2e::sim::{FailureMode, Protocol};
use proxy_pool_gateway::outcome::Stage;
use proxy_pool_gateway::snapshot::ProxyId;
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

fn sticky(ttl: Duration, idle_timeout: Duration) -> Routing {
    let mut r = common::any_port(catch_all("sticky"));
    r.sticky = Some(Sticky {
        param: "session".into(),
        session_ttl: ttl,
        idle_timeout,
        ..Sticky::default()
    });
    r
}

#[tokio::test]
async fn sticky_session_is_kept_then_moved_when_its_proxy_expires() {
    let h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Http).await;
    let routing = sticky(Duration::from_secs(60), Duration::from_secs(30));
    h.install(
        vec![upstream(&a, 10), upstream(&b, 10)],
        vec![routing.clone()],
    );
    let user = "alice-session-abc123";
    let mut client = ProxyClient::connect(h.http, user, PASS).await;
    let first = client.get(h.echo(), "/1").await.remote_ip();
    for i in 0..5 {
        let r = client.get(h.echo(), &format!("/k{i}")).await;
        assert_eq!(r.remote_ip(), first, "sticky on a kept-alive connection");
        assert_eq!(r.header("x-proxy-pool-session-moved"), None);
        let r = get_once(h.http, user, h.echo(), "/fresh").await;
        assert_eq!(r.remote_ip(), first, "sticky across connections");
    }
    let mut ips = HashSet::new();
    for i in 0..4 {
        let r = get_once(h.http, "alice-session-other", h.echo(), &format!("/{i}")).await;
        ips.insert(r.remote_ip());
    }
    assert_eq!(ips.len(), 1, "another session is sticky too");
    // The bound proxy reaches its usable_until in a new snapshot.
    let (bound, other) = if first == h.egress(&a) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let mut expiring = upstream(bound, 10);
    expiring.usable_until_ms = unix_ms(SystemTime::now() - Duration::from_secs(1));
    h.install(vec![expiring, upstream(other, 10)], vec![routing]);
    let r = client.get(h.echo(), "/moved").await;
    assert_eq!(r.remote_ip(), h.egress(other));
    assert_eq!(
        r.header("x-proxy-pool-session-moved").as_deref(),
        Some("proxy-unavailable")
    );
    let r = client.get(h.echo(), "/after").await;
    assert_eq!(r.remote_ip(), h.egress(other), "stays on the new proxy");
    assert_eq!(r.header("x-proxy-pool-session-moved"), None);
}

#[tokio::test]
async fn sticky_session_moves_at_its_ttl() {
    let h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Http).await;
    h.install(
        vec![upstream(&a, 10), upstream(&b, 10)],
        vec![sticky(
            Duration::from_millis(1500),
            Duration::from_millis(1000),
        )],
    );
    let user = "alice-session-ttl";
    let r = get_once(h.http, user, h.echo(), "/").await;
    let first = r.remote_ip();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let r = get_once(h.http, user, h.echo(), "/").await;
        assert_eq!(r.remote_ip(), first, "used within the idle timeout: kept");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let r = get_once(h.http, user, h.echo(), "/").await;
    assert_eq!(
        r.header("x-proxy-pool-session-moved").as_deref(),
        Some("session-expired")
    );
    // An idle-forgotten session starts afresh without a move notice.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = get_once(h.http, user, h.echo(), "/").await;
    assert_eq!(r.header("x-proxy-pool-session-moved"), None);
}

/// Sends a kept-alive request over an open tunnel to the echo server and returns
/// the egress address it saw; the tunnel stays open.
async fn tunnel_egress(s: &mut TcpStream) -> Ipv4Addr {
    s.write_all(b"GET /egress HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    read_response(s).await.expect("echo response").remote_ip()
}

#[tokio::test]
async fn a_full_proxy_is_skipped_for_one_with_room_and_both_full_is_refused() {
    let h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Socks5).await;
    h.install(vec![upstream(&a, 1), upstream(&b, 1)], vec![all()]);
    let target = h.echo().to_string();
    let (resp, mut first) = connect(h.http, USER, PASS, &target).await;
    assert_eq!(resp.status, 200, "{}", resp.head);
    let first_ip = tunnel_egress(&mut first).await;
    let (full, free) = if first_ip == h.egress(&a) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert_eq!(first_ip, h.egress(full));
    assert_eq!(counts_of(&h, &id_of(full)), (1, 0));
    // Round robin over two proxies starts at the full one for at least two of these
    // four picks: each of those must fall back to the proxy with room.
    for i in 0..4 {
        let (resp, s) = connect(h.http, USER, PASS, &target).await;
        assert_eq!(resp.status, 200, "request {i}: {}", resp.head);
        let r = echo_over(s, "x", &format!("/fallback/{i}")).await;
        assert_eq!(r.remote_ip(), h.egress(free), "request {i}");
        wait_counts(&h, &id_of(free), (0, 0)).await;
        assert_eq!(counts_of(&h, &id_of(full)), (1, 0), "never over its limit");
    }
    // Both full: a clear refusal on every protocol, nothing dialled.
    let (resp, mut second) = connect(h.http, USER, PASS, &target).await;
    assert_eq!(resp.status, 200, "{}", resp.head);
    assert_eq!(tunnel_egress(&mut second).await, h.egress(free));
    let (resp, _) = connect(h.http, USER, PASS, &target).await;
    resp.assert_refused(503, "no-capacity");
    let err = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(err, ("reply".to_owned(), 0x01), "SOCKS5 general failure");
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    assert_eq!(client.get(h.echo(), "/").await.status, 503);
    assert_eq!(counts_of(&h, &id_of(&a)), (1, 0));
    assert_eq!(counts_of(&h, &id_of(&b)), (1, 0));
    // The first tunnel ends: its slot is free again, and the next tunnel takes it.
    drop(first);
    wait_counts(&h, &id_of(full), (0, 0)).await;
    let (resp, mut third) = connect(h.http, USER, PASS, &target).await;
    assert_eq!(resp.status, 200, "{}", resp.head);
    assert_eq!(tunnel_egress(&mut third).await, h.egress(full));
    drop((second, third));
    wait_counts(&h, &id_of(&a), (0, 0)).await;
    wait_counts(&h, &id_of(&b), (0, 0)).await;
}

#[tokio::test]
async fn a_proxy_past_usable_until_is_never_selected() {
    let h = Harness::start().await;
    let old = h.proxy(Protocol::Http).await;
    let good = h.proxy(Protocol::Http).await;
    let mut expired = upstream(&old, 100);
    expired.usable_until_ms = unix_ms(SystemTime::now() - Duration::from_millis(1));
    h.install(vec![expired, upstream(&good, 100)], vec![all()]);
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    for _ in 0..10 {
        assert_eq!(client.get(h.echo(), "/").await.remote_ip(), h.egress(&good));
    }
    let (resp, stream) = h.connect_echo().await;
    assert_eq!(resp.status, 200);
    assert_eq!(
        echo_over(stream, "x", "/").await.remote_ip(),
        h.egress(&good)
    );
}

#[tokio::test]
async fn handshake_failures_are_retried_on_another_proxy() {
    // `Refuse` accepts the TCP connection and closes it: a PROXY_HANDSHAKE failure
    // (a refused TCP dial is covered by the test below).
    let mut h = Harness::start().await;
    let refusing = h.proxy(Protocol::Http).await;
    let bad_auth = h.proxy(Protocol::Socks5).await;
    let good = h.proxy(Protocol::Http).await;
    h.set_failure(&refusing, FailureMode::Refuse);
    h.set_failure(&bad_auth, FailureMode::BadAuth);
    h.install(
        vec![
            upstream(&refusing, 10),
            upstream(&bad_auth, 10),
            upstream(&good, 10),
        ],
        vec![all()],
    );
    for _ in 0..4 {
        let tunnel = h.tunnel().await;
        assert_eq!(h.echo_over(tunnel, "/").await.remote_ip(), h.egress(&good));
        let s = socks5(h.socks, USER, PASS, h.echo(), 1)
            .await
            .expect("socks5");
        assert_eq!(echo_over(s, "x", "/").await.remote_ip(), h.egress(&good));
    }
    let mut failed = HashSet::new();
    while let Ok(o) = h.outcomes.rx.try_recv() {
        if o.stage == Stage::ProxyHandshake && o.error.is_some() {
            failed.insert(o.proxy);
        }
    }
    assert_eq!(failed, HashSet::from([id_of(&refusing), id_of(&bad_auth)]));
    assert!(
        h.gateway
            .render_metrics()
            .contains("proxy_pool_gateway_retries_total")
    );
    h.shutdown().await;
}

#[tokio::test]
async fn an_upstream_dying_with_pooled_connections_is_retried_elsewhere() {
    let (h, [a, b]) = Harness::serving([Protocol::Http, Protocol::Http]).await;
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    for _ in 0..4 {
        assert_eq!(client.get(h.echo(), "/warm").await.status, 200);
    }
    assert!(h.gateway.pooled_connections() >= 1);
    h.sim.expire(&a.id).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..6 {
        let r = client.get(h.echo(), &format!("/after/{i}")).await;
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.remote_ip(), h.egress(&b));
    }
}

#[tokio::test]
async fn all_attempts_failing_is_a_bad_gateway() {
    let (h, [a]) = Harness::serving([Protocol::Http]).await;
    h.sim.expire(&a.id).unwrap();
    let (resp, _) = h.connect_echo().await;
    resp.assert_refused(502, "upstream-dial-failed");
    assert!(h.slots_free());
}

#[tokio::test]
async fn a_stale_snapshot_refuses_new_traffic() {
    let h = Harness::start().await;
    let (resp, _) = h.connect_echo().await;
    resp.assert_refused(503, "no-snapshot");
    let a = h.proxy(Protocol::Http).await;
    h.install_valid_until(
        vec![upstream(&a, 10)],
        vec![all()],
        SystemTime::now() - Duration::from_secs(1),
    );
    let (resp, _) = h.connect_echo().await;
    resp.assert_refused(503, "snapshot-stale");
    let err = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(err.1, 0x01);
    h.install(vec![upstream(&a, 10)], vec![all()]);
    let (resp, _) = h.connect_echo().await;
    assert_eq!(resp.status, 200);
}

#[tokio::test]
async fn shutdown_drains_in_flight_tunnels_and_refuses_new_work() {
    let mut h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&a, 10)], vec![all()]);
    let (resp, mut tunnel) = h.connect_echo().await;
    assert_eq!(resp.status, 200);
    let mut idle = ProxyClient::connect(h.http, USER, PASS).await;
    assert_eq!(idle.get(h.echo(), "/").await.status, 200);
    h.signal_shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // New connections are no longer accepted.
    let refused = match tokio::net::TcpStream::connect(h.http).await {
        Err(_) => true,
        Ok(mut s) => {
            let _ = s.write_all(b"GET http://x/ HTTP/1.1\r\n\r\n").await;
            let mut buf = [0u8; 1];
            matches!(
                tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await,
                Ok(Ok(0) | Err(_)) | Err(_)
            )
        }
    };
    assert!(refused, "new connections refused while draining");
    // The idle kept-alive connection was closed.
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(2), idle.stream.read(&mut buf))
        .await
        .expect("idle connection closed promptly")
        .unwrap_or(0);
    assert_eq!(n, 0);
    // The in-flight tunnel still works.
    let req = "GET /during-drain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    tunnel.write_all(req.as_bytes()).await.unwrap();
    let resp = read_response(&mut tunnel).await.unwrap();
    assert_eq!(resp.echo().path, "/during-drain");
    drop(tunnel);
    let report = h.join().await;
    assert!(report.drained, "every in-flight connection finished");
}

/// Failed DIAL / PROXY_HANDSHAKE outcomes recorded so far, by proxy and stage.
fn failures(h: &mut Harness) -> Vec<(ProxyId, Stage, &'static str)> {
    let mut out = Vec::new();
    while let Ok(o) = h.outcomes.rx.try_recv() {
        if let Some(err) = o.error {
            out.push((o.proxy, o.stage, err));
        }
    }
    out
}

#[tokio::test]
async fn a_refused_dial_is_a_dial_failure_retried_on_another_proxy() {
    let mut h = Harness::start().await;
    let good = h.proxy(Protocol::Http).await;
    // Nothing listens there: the TCP connect itself is refused.
    let dead = raw_upstream("dead", closed_addr().await, 10);
    let dead_id = ProxyId::from(dead.id.as_str());
    h.install(vec![dead, upstream(&good, 10)], vec![all()]);
    // Round robin over two proxies: at least two of four requests start at `dead`.
    for _ in 0..4 {
        let tunnel = h.tunnel().await;
        assert_eq!(h.echo_over(tunnel, "/").await.remote_ip(), h.egress(&good));
    }
    let connect_failures = failures(&mut h);
    for i in 0..4 {
        let s = socks5(h.socks, USER, PASS, h.echo(), 1)
            .await
            .unwrap_or_else(|e| panic!("SOCKS5 {i}: {e:?}"));
        assert_eq!(echo_over(s, "x", "/").await.remote_ip(), h.egress(&good));
    }
    let socks_failures = failures(&mut h);
    for (what, failed) in [("CONNECT", connect_failures), ("SOCKS5", socks_failures)] {
        let dial = (dead_id.clone(), Stage::Dial, "upstream-dial-failed");
        assert!(failed.contains(&dial), "{what}: {failed:?}");
        // Only DIAL failures, only on the dead proxy: no handshake was attempted.
        assert!(failed.iter().all(|f| *f == dial), "{what}: {failed:?}");
    }
}

/// Accepts upstream connections, counting them, and closes each at once (after the
/// TCP handshake, so the gateway's attempt fails at PROXY_HANDSHAKE).
async fn closing_proxy(accepted: Arc<AtomicU32>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    addr
}

/// Accepts upstream connections, counting them, and never answers; each socket is
/// held until the gateway gives up on it.
async fn silent_proxy(accepted: Arc<AtomicU32>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink).await;
            });
        }
    });
    addr
}

/// `n` raw upstreams `{prefix}-{i}` (10 slots each), one listener each from `spawn`,
/// all counting accepted connections in `accepted`.
async fn raw_proxies<F, Fut>(
    n: usize,
    prefix: &str,
    accepted: &Arc<AtomicU32>,
    spawn: F,
) -> Vec<SnapshotProxy>
where
    F: Fn(Arc<AtomicU32>) -> Fut,
    Fut: std::future::Future<Output = SocketAddr>,
{
    let mut proxies = Vec::with_capacity(n);
    for i in 0..n {
        let addr = spawn(accepted.clone()).await;
        proxies.push(raw_upstream(&format!("{prefix}-{i}"), addr, 10));
    }
    proxies
}

/// The catch-all routing with its own retry budget.
fn retrying(max_attempts: u32, deadline: Duration) -> Routing {
    let mut routing = all();
    routing.retry = RetryBudget {
        max_attempts,
        deadline,
    };
    routing
}

/// The number of upstream connections accepted for one client request. The gateway
/// has answered the client, so every attempt's TCP connect has completed and sits
/// in (or has left) the accept queue: wait for at least `min`, then let the queue
/// drain before reading the final count.
async fn attempts_made(accepted: &AtomicU32, min: u32) -> u32 {
    let until = tokio::time::Instant::now() + IO_LIMIT;
    while accepted.load(Ordering::SeqCst) < min {
        assert!(
            tokio::time::Instant::now() < until,
            "fewer than {min} attempts"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    accepted.swap(0, Ordering::SeqCst)
}

/// A gateway that waits `handshake_timeout` for a vendor's answer, and a counter for
/// the raw proxies made to count accepted connections in.
async fn with_handshake_timeout(handshake_timeout: Duration) -> (Harness, Arc<AtomicU32>) {
    let mut config = common::local_config();
    config.upstream.handshake_timeout = handshake_timeout;
    let h = Harness::start_with(config).await;
    (h, Arc::new(AtomicU32::new(0)))
}

/// Awaits `answer`, asserting it came within 5 s (at the routing deadline, not at
/// some longer timeout).
async fn in_time<T>(answer: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let out = answer.await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    out
}

fn retries_total(h: &Harness) -> u64 {
    h.gateway
        .render_metrics()
        .lines()
        .find_map(|l| l.strip_prefix("proxy_pool_gateway_retries_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("proxy_pool_gateway_retries_total is exported")
}

#[tokio::test]
async fn retries_stop_at_the_routing_max_attempts() {
    let h = Harness::start().await;
    let accepted = Arc::new(AtomicU32::new(0));
    // More failing proxies than attempts: the budget, not the pool, ends the retries.
    let proxies = raw_proxies(4, "closing", &accepted, closing_proxy).await;
    h.install(proxies, vec![retrying(2, Duration::from_secs(10))]);
    let retries = retries_total(&h);
    let (resp, _) = h.connect_echo().await;
    resp.assert_refused(502, "upstream-handshake-failed");
    assert_eq!(attempts_made(&accepted, 2).await, 2, "CONNECT attempts");
    assert_eq!(
        retries_total(&h) - retries,
        1,
        "one retry after the first try"
    );
    let err = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(err, ("reply".to_owned(), 0x01), "SOCKS5 general failure");
    assert_eq!(attempts_made(&accepted, 2).await, 2, "SOCKS5 attempts");
    assert_eq!(retries_total(&h) - retries, 2);
}

#[tokio::test]
async fn retries_stop_at_the_routing_deadline() {
    // Each attempt may wait 300 ms for the vendor's answer; the routing allows 1 s
    // for all of them, so at most 4 attempts fit (the 4th gets what is left), though
    // the budget (10) and the pool (6) would allow more.
    let (h, accepted) = with_handshake_timeout(Duration::from_millis(300)).await;
    let proxies = raw_proxies(6, "silent", &accepted, silent_proxy).await;
    h.install(proxies, vec![retrying(10, Duration::from_secs(1))]);
    let (resp, _) = in_time(h.connect_echo()).await;
    resp.assert_refused(504, "upstream-timeout");
    let n = attempts_made(&accepted, 1).await;
    assert!((1..=4).contains(&n), "CONNECT attempts: {n}");
    let err = in_time(socks5(h.socks, USER, PASS, h.echo(), 1)).await;
    assert_eq!(
        err.unwrap_err(),
        ("reply".to_owned(), 0x06),
        "SOCKS5 TTL expired"
    );
    let n = attempts_made(&accepted, 1).await;
    assert!((1..=4).contains(&n), "SOCKS5 attempts: {n}");
    assert!(h.slots_free());
}

#[tokio::test]
async fn an_attempt_never_outlives_the_routing_deadline() {
    // The vendor handshake timeout (10 s) is far beyond the routing deadline (1 s):
    // the one attempt must be cut at the deadline, not at its own timeout.
    let (h, accepted) = with_handshake_timeout(Duration::from_secs(10)).await;
    let addr = silent_proxy(accepted.clone()).await;
    h.install(
        vec![raw_upstream("silent", addr, 10)],
        vec![retrying(3, Duration::from_secs(1))],
    );
    let (resp, _) = in_time(h.connect_echo()).await;
    assert_eq!(resp.status, 504, "{}", resp.head);
    assert_eq!(attempts_made(&accepted, 1).await, 1);
    let err = in_time(socks5(h.socks, USER, PASS, h.echo(), 1)).await;
    assert_eq!(
        err.unwrap_err(),
        ("reply".to_owned(), 0x06),
        "SOCKS5 TTL expired"
    );
    assert_eq!(attempts_made(&accepted, 1).await, 1);
}

/// A plain-HTTP vendor proxy that reads each CONNECT request, then holds its answer
/// until `gate` opens; afterwards it dials the target, answers 200 and relays.
async fn gated_proxy(gate: watch::Receiver<bool>, accepted: Arc<AtomicU32>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let mut gate = gate.clone();
            tokio::spawn(async move {
                let Ok(head) = read_head(&mut s).await else {
                    return;
                };
                let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                if gate.wait_for(|open| *open).await.is_err() {
                    return;
                }
                let Ok(mut up) = TcpStream::connect(target.as_str()).await else {
                    return;
                };
                if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_slot_is_reserved_while_the_upstream_handshake_runs() {
    let h = Harness::start().await;
    let (open, gate) = watch::channel(false);
    let accepted = Arc::new(AtomicU32::new(0));
    let addr = gated_proxy(gate, accepted.clone()).await;
    let gated = raw_upstream("gated", addr, 1);
    let gated_id = ProxyId::from(gated.id.as_str());
    h.install(vec![gated.clone()], vec![all()]);
    let target = h.echo().to_string();
    let pending = tokio::spawn({
        let (gw, target) = (h.http, target.clone());
        async move { connect(gw, USER, PASS, &target).await }
    });
    // The handshake is in flight: one Reserved slot, nothing Active yet.
    wait_counts(&h, &gated_id, (0, 1)).await;
    // The reservation fills maxConcurrent = 1: other clients are refused and the
    // gated proxy is not dialled again.
    let (resp, _) = connect(h.http, USER, PASS, &target).await;
    resp.assert_refused(503, "no-capacity");
    let err = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(err, ("reply".to_owned(), 0x01));
    // With another proxy in a new snapshot, the reservation still holds (the state
    // outlives the snapshot) and new tunnels go to the other proxy; round robin
    // starts at the gated one for at least one of these two picks.
    let other = h.proxy(Protocol::Http).await;
    h.install(vec![gated, upstream(&other, 1)], vec![all()]);
    assert_eq!(counts_of(&h, &gated_id), (0, 1));
    for i in 0..2 {
        let (resp, s) = connect(h.http, USER, PASS, &target).await;
        assert_eq!(resp.status, 200, "request {i}: {}", resp.head);
        let r = echo_over(s, "x", "/elsewhere").await;
        assert_eq!(r.remote_ip(), h.egress(&other), "request {i}");
        wait_counts(&h, &id_of(&other), (0, 0)).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "dialled once");
    // The handshake completes: the slot turns Active before the client hears 200.
    open.send(true).unwrap();
    let (resp, mut tunnel) = tokio::time::timeout(IO_LIMIT, pending)
        .await
        .expect("handshake completes")
        .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.head);
    assert_eq!(counts_of(&h, &gated_id), (1, 0));
    tunnel
        .write_all(b"GET /through-gated HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut tunnel).await.unwrap();
    assert_eq!(r.echo().path, "/through-gated");
    assert_eq!(
        counts_of(&h, &gated_id),
        (1, 0),
        "active for the tunnel's life"
    );
    drop(tunnel);
    wait_counts(&h, &gated_id, (0, 0)).await;
}
