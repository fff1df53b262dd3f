//! The thread-per-core runtime model (`Gateway::run_workers`): several data-plane
//! workers, each with its own single-threaded runtime and its own `SO_REUSEPORT`
//! listener on the same address, serve one gateway — sticky sessions and capacity
//! are shared between them, each keeps its own idle upstream pool, and shutdown
//! drains tunnels in flight on any worker.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_api::controlplane::model::Sticky;
use proxy_pool_e2e::sim::Protocol;
use proxy_pool_gateway::{Gateway, GatewayConfig, WorkerListeners, bind_reuseport};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::oneshot;

const WORKERS: usize = 3;

struct Workers {
    gateway: Gateway,
    http: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<std::io::Result<proxy_pool_gateway::ServeReport>>,
}

fn start_workers(h: &Harness) -> Workers {
    let http = bind_reuseport("127.0.0.1:0".parse().unwrap(), WORKERS).unwrap();
    let socks = bind_reuseport("127.0.0.1:0".parse().unwrap(), WORKERS).unwrap();
    assert_eq!(http.len(), WORKERS);
    let addr = http[0].local_addr().unwrap();
    assert!(
        http.iter().all(|l| l.local_addr().unwrap() == addr),
        "every worker listens on the port the first one picked"
    );
    let listeners = http
        .into_iter()
        .zip(socks)
        .map(|(http, socks5)| WorkerListeners {
            http: Some(http),
            socks5: Some(socks5),
        })
        .collect();
    let config = GatewayConfig {
        drain_grace: Duration::from_secs(10),
        ..local_config()
    };
    let (gateway, _outcomes) = Gateway::new(h.handle.clone(), config);
    let (tx, rx) = oneshot::channel::<()>();
    let join = tokio::spawn(gateway.clone().run_workers(listeners, async {
        let _ = rx.await;
    }));
    Workers {
        gateway,
        http: addr,
        stop: Some(tx),
        join,
    }
}

#[tokio::test]
async fn binding_the_same_address_without_reuseport_is_refused() {
    let first = bind_reuseport("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let addr = first[0].local_addr().unwrap();
    assert!(std::net::TcpListener::bind(addr).is_err());
    // …while another reuseport listener joins it.
    let joined = bind_reuseport(addr, 2).unwrap();
    assert_eq!(joined.len(), 2);
}

#[tokio::test]
async fn accepted_connections_inherit_nodelay_from_reuseport_listeners() {
    let listener = bind_reuseport("127.0.0.1:0".parse().unwrap(), 1)
        .unwrap()
        .remove(0);
    let addr = listener.local_addr().unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    assert!(
        accepted.nodelay().unwrap(),
        "the gateway relies on this to skip a setsockopt per connection"
    );
}

#[tokio::test]
async fn workers_share_sessions_and_capacity_and_drain_on_shutdown() {
    let h = Harness::start().await;
    let a = h.proxy(Protocol::Http).await;
    let b = h.proxy(Protocol::Http).await;
    let c = h.proxy(Protocol::Http).await;
    let mut sticky = any_port(catch_all("sticky"));
    sticky.sticky = Some(Sticky {
        param: "session".into(),
        session_ttl: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(300),
        ..Sticky::default()
    });
    h.install(
        vec![upstream(&a, 50), upstream(&b, 50), upstream(&c, 50)],
        vec![sticky],
    );
    let mut w = start_workers(&h);

    // Many client connections (spread over the workers by the kernel), one sticky
    // session: every request leaves through the same proxy.
    let mut egress = Vec::new();
    for i in 0..24 {
        let r = get_once(w.http, "alice-session-shared", h.echo(), &format!("/s/{i}")).await;
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.echo().path, format!("/s/{i}"));
        egress.push(r.remote_ip());
    }
    assert!(
        egress.iter().all(|ip| *ip == egress[0]),
        "one session, one proxy, whichever worker served the connection: {egress:?}"
    );

    // Kept-alive client connections on every worker: pooled upstream connections are
    // reused within a worker.
    let mut clients = Vec::new();
    for _ in 0..12 {
        clients.push(ProxyClient::connect(w.http, USER, PASS).await);
    }
    for round in 0..3 {
        for (i, client) in clients.iter_mut().enumerate() {
            let r = client.get(h.echo(), &format!("/k/{round}/{i}")).await;
            assert_eq!(r.status, 200, "{}", r.head);
        }
    }
    drop(clients);
    let text = w.gateway.render_metrics();
    // 36 connections so far, spread by the kernel's hash over the three listeners:
    // more than one worker took a share (all on one has odds of 3^-35).
    let per_worker: Vec<u64> = (0..WORKERS)
        .map(|i| {
            let line = format!("proxy_pool_gateway_worker_connections_total{{worker=\"{i}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(line.as_str()))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no counter for worker {i}:\n{text}"))
        })
        .collect();
    assert_eq!(per_worker.iter().sum::<u64>(), 36, "{per_worker:?}");
    assert!(
        per_worker.iter().filter(|n| **n > 0).count() > 1,
        "connections spread over the workers: {per_worker:?}"
    );
    assert!(
        !text.contains("proxy_pool_gateway_upstream_pool_reused_total 0"),
        "kept-alive requests reuse pooled upstream connections:\n{text}"
    );
    assert!(w.gateway.pooled_connections() > 0);

    // Capacity is one set of counters for all workers: a proxy with one slot takes
    // one tunnel; the next is refused whichever worker accepts it.
    let solo = h.proxy(Protocol::Http).await;
    h.install(vec![upstream(&solo, 1)], vec![all()]);
    let (first, tunnel) = connect(w.http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(first.status, 200, "{}", first.head);
    for _ in 0..6 {
        let (refused, _s) = connect(w.http, USER, PASS, &h.echo().to_string()).await;
        assert_eq!(refused.status, 503, "{}", refused.head);
    }

    // Shutdown: no new connections on any worker; the tunnel in flight completes.
    if let Some(tx) = w.stop.take() {
        let _ = tx.send(());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..WORKERS * 4 {
        assert!(
            tokio::net::TcpStream::connect(w.http).await.is_err(),
            "no worker accepts after shutdown"
        );
    }
    let reply = echo_over(tunnel, "x", "/in-flight").await;
    assert_eq!(reply.echo().path, "/in-flight");
    let report = tokio::time::timeout(Duration::from_secs(30), w.join)
        .await
        .expect("drains in time")
        .expect("serve task")
        .expect("workers started");
    assert!(report.drained);
    assert_eq!(
        w.gateway.pooled_connections(),
        0,
        "each worker closed its pooled connections"
    );
}
