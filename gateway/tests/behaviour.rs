//! Selection behaviour end to end: sticky sessions, exact capacity, retries when an
//! upstream dies, `usable_until`, stale snapshots, and graceful drain on shutdown.

mod common;

use common::*;
use proxy_pool_e2e::sim::{FailureMode, Protocol};
use proxy_pool_gateway::outcome::Stage;
use proxy_pool_gateway::snapshot::{Routing, StickyPolicy};
use std::collections::HashSet;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn sticky(ttl: Duration, idle_timeout: Duration) -> Routing {
    let mut r = Routing::catch_all("sticky");
    r.sticky = Some(StickyPolicy { ttl, idle_timeout });
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
    expiring.usable_until = SystemTime::now() - Duration::from_secs(1);
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

#[tokio::test]
async fn capacity_is_exact_and_the_extra_tunnel_goes_elsewhere_or_is_refused() {
    let h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Socks5).await;
    h.install(vec![upstream(&a, 2), upstream(&b, 1)], vec![all()]);
    let target = h.echo().to_string();
    let mut held = Vec::new();
    for _ in 0..3 {
        let (resp, stream) = connect(h.http, USER, PASS, &target).await;
        assert_eq!(resp.status, 200, "{}", resp.head);
        held.push(stream);
    }
    let report = h.handle.runtime_report();
    let active: u32 = report.iter().map(|r| r.active).sum();
    assert_eq!(active, 3);
    assert!(report.iter().all(|r| r.reserved == 0));
    let by_id = |p| report.iter().find(|r| r.id == id_of(p)).unwrap().active;
    assert_eq!((by_id(&a), by_id(&b)), (2, 1), "each at its own limit");
    // Every slot is taken: the next tunnel and the next SOCKS5 connect are refused.
    let (resp, _) = connect(h.http, USER, PASS, &target).await;
    assert_eq!(resp.status, 503);
    assert_eq!(
        resp.header("x-proxy-pool-error").as_deref(),
        Some("no-capacity")
    );
    let err = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(err, ("reply".to_owned(), 0x01), "SOCKS5 general failure");
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    assert_eq!(client.get(h.echo(), "/").await.status, 503);
    // A tunnel ends: its slot is free again, on that proxy.
    let closed = held.remove(0);
    drop(closed);
    let mut ok = false;
    for _ in 0..50 {
        let (resp, stream) = connect(h.http, USER, PASS, &target).await;
        if resp.status == 200 {
            held.push(stream);
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "slot released when the tunnel closed");
    drop(held);
    for _ in 0..100 {
        if h.handle.runtime_report().iter().all(|r| r.active == 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("slots not released: {:?}", h.handle.runtime_report());
}

#[tokio::test]
async fn a_proxy_past_usable_until_is_never_selected() {
    let h = Harness::start().await;
    let old = h.proxy(Protocol::Http).await;
    let good = h.proxy(Protocol::Http).await;
    let mut expired = upstream(&old, 100);
    expired.usable_until = SystemTime::now() - Duration::from_millis(1);
    h.install(vec![expired, upstream(&good, 100)], vec![all()]);
    let mut client = ProxyClient::connect(h.http, USER, PASS).await;
    for _ in 0..10 {
        assert_eq!(client.get(h.echo(), "/").await.remote_ip(), h.egress(&good));
    }
    let (resp, stream) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 200);
    assert_eq!(
        echo_over(stream, "x", "/").await.remote_ip(),
        h.egress(&good)
    );
}

#[tokio::test]
async fn dial_and_handshake_failures_are_retried_on_another_proxy() {
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
        let (resp, stream) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
        assert_eq!(resp.status, 200, "{}", resp.head);
        assert_eq!(
            echo_over(stream, "x", "/").await.remote_ip(),
            h.egress(&good)
        );
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
    assert!(h.gateway.render_metrics().contains("gateway_retries_total"));
    h.shutdown().await;
}

#[tokio::test]
async fn an_upstream_dying_with_pooled_connections_is_retried_elsewhere() {
    let h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&a, 10), upstream(&b, 10)], vec![all()]);
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
    let h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&a, 10)], vec![all()]);
    h.sim.expire(&a.id).unwrap();
    let (resp, _) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 502);
    assert_eq!(
        resp.header("x-proxy-pool-error").as_deref(),
        Some("upstream-dial-failed")
    );
    assert!(
        h.handle
            .runtime_report()
            .iter()
            .all(|r| r.active == 0 && r.reserved == 0)
    );
}

#[tokio::test]
async fn a_stale_snapshot_refuses_new_traffic() {
    let h = Harness::start().await;
    let (resp, _) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 503);
    assert_eq!(
        resp.header("x-proxy-pool-error").as_deref(),
        Some("no-snapshot")
    );
    let a = h.proxy(Protocol::Http).await;
    h.install_valid_until(
        vec![upstream(&a, 10)],
        vec![all()],
        SystemTime::now() - Duration::from_secs(1),
    );
    let (resp, _) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 503);
    assert_eq!(
        resp.header("x-proxy-pool-error").as_deref(),
        Some("snapshot-stale")
    );
    let err = socks5(h.socks, USER, PASS, h.echo(), 1).await.unwrap_err();
    assert_eq!(err.1, 0x01);
    h.install(vec![upstream(&a, 10)], vec![all()]);
    let (resp, _) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 200);
}

#[tokio::test]
async fn shutdown_drains_in_flight_tunnels_and_refuses_new_work() {
    let mut h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&a, 10)], vec![all()]);
    let (resp, mut tunnel) = connect(h.http, USER, PASS, &h.echo().to_string()).await;
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
