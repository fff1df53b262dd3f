//! The checker against live vendor-simulator proxies over real loopback sockets.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_checker::{
    Check, FailureCode, MemorySink, MemorySource, NetProber, Observation, ProbeTask, Prober,
    ProberOptions, RunnerOptions, Tier, run,
};
use proxy_pool_e2e::logs::LogCapture;
use proxy_pool_e2e::sim::{FailureMode, Protocol, SimConfig, SimProxy, Simulator};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn prober(sim: &Simulator) -> NetProber {
    let mut o = ProberOptions::new(sim.echo_http_addr());
    o.check_timeout = Duration::from_secs(3);
    // The simulator's proxies are on loopback: opted in explicitly.
    o.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    NetProber::new(o)
}

fn task(id: usize, p: &SimProxy, checks: Vec<Check>) -> ProbeTask {
    ProbeTask {
        task_id: format!("t{id}"),
        proxy_id: p.id.clone(),
        dial: p.dial(),
        checks,
        deadline: Instant::now() + Duration::from_secs(10),
    }
}

fn egress_of(sim: &Simulator, p: &SimProxy) -> IpAddr {
    let status = sim
        .live_proxies()
        .into_iter()
        .find(|s| s.proxy.id == p.id)
        .expect("live proxy");
    IpAddr::V4(status.egress_ip)
}

/// A simulator with one proxy of `protocol` living `ttl` and failing by `mode`.
async fn sim_with(protocol: Protocol, ttl: Duration, mode: FailureMode) -> (Simulator, SimProxy) {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let p = sim.spawn_proxy(protocol, ttl, mode).await.unwrap();
    (sim, p)
}

/// A simulator with one proxy of `protocol` failing by `mode`, alive for the whole
/// test (a minute).
async fn live_proxy(protocol: Protocol, mode: FailureMode) -> (Simulator, SimProxy) {
    sim_with(protocol, Duration::from_secs(60), mode).await
}

async fn probe(sim: &Simulator, p: &SimProxy, checks: Vec<Check>) -> Vec<Observation> {
    prober(sim).probe(&task(1, p, checks)).await
}

#[tokio::test]
async fn basic_and_egress_succeed_through_live_proxies_of_both_protocols() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    for protocol in [Protocol::Http, Protocol::Socks5] {
        let p = sim
            .spawn_proxy(protocol, Duration::from_secs(60), FailureMode::None)
            .await
            .unwrap();
        let target = sim.echo_http_addr();
        let obs = probe(
            &sim,
            &p,
            vec![
                Check::Basic,
                Check::Egress,
                Check::Target {
                    routing: "r1".into(),
                    host: target.ip().to_string(),
                    port: target.port(),
                },
            ],
        )
        .await;
        assert_eq!(obs.len(), 3, "{protocol:?}: {obs:?}");
        assert!(obs.iter().all(|o| o.success), "{protocol:?}: {obs:?}");
        assert_eq!(obs[1].tier, Tier::Egress);
        let egress = obs[1].egress.expect("egress seen");
        assert_eq!(egress, egress_of(&sim, &p), "{protocol:?}");
        assert_ne!(egress, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(obs[2].routing.as_deref(), Some("r1"));
        assert!(obs[0].latency.is_some());
    }
}

#[tokio::test]
async fn refuse_and_bad_auth_fail_basic_and_skip_the_rest() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    for (protocol, mode, want) in [
        (
            Protocol::Http,
            FailureMode::Refuse,
            FailureCode::HandshakeFailed,
        ),
        (
            Protocol::Socks5,
            FailureMode::Refuse,
            FailureCode::HandshakeFailed,
        ),
        (
            Protocol::Http,
            FailureMode::BadAuth,
            FailureCode::AuthRejected,
        ),
        (
            Protocol::Socks5,
            FailureMode::BadAuth,
            FailureCode::AuthRejected,
        ),
    ] {
        let p = sim
            .spawn_proxy(protocol, Duration::from_secs(60), mode)
            .await
            .unwrap();
        let obs = probe(&sim, &p, vec![Check::Basic, Check::Egress]).await;
        assert_eq!(obs.len(), 1, "{protocol:?} {mode:?}: {obs:?}");
        assert!(!obs[0].success);
        assert_eq!(obs[0].failure, Some(want), "{protocol:?} {mode:?}");
    }
}

#[tokio::test]
async fn wrong_credentials_are_rejected() {
    let (sim, p) = live_proxy(Protocol::Http, FailureMode::None).await;
    let mut t = task(1, &p, vec![Check::Basic]);
    t.dial.credentials = Some(proxy_pool_checker::Credentials {
        username: p.username.clone(),
        password: Secret::new("wrong"),
    });
    let obs = prober(&sim).probe(&t).await;
    assert_eq!(obs[0].failure, Some(FailureCode::AuthRejected));
}

#[tokio::test]
async fn a_proxy_past_its_ttl_fails_basic() {
    let (sim, p) = sim_with(
        Protocol::Socks5,
        Duration::from_millis(300),
        FailureMode::None,
    )
    .await;
    assert!(probe(&sim, &p, vec![Check::Basic]).await[0].success);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let obs = probe(&sim, &p, vec![Check::Basic]).await;
    assert_eq!(obs[0].failure, Some(FailureCode::ConnectRefused));
}

#[tokio::test]
async fn wrong_egress_is_reported_as_a_client_leak() {
    let (sim, p) = live_proxy(Protocol::Http, FailureMode::WrongEgress).await;
    let obs = probe(&sim, &p, vec![Check::Basic, Check::Egress]).await;
    assert!(obs[0].success);
    assert_eq!(obs[1].failure, Some(FailureCode::ClientLeaked));
    assert_eq!(obs[1].egress, Some(IpAddr::from([127, 0, 0, 1])));
}

#[tokio::test]
async fn a_slow_proxy_times_out_within_the_deadline() {
    let (sim, p) = live_proxy(Protocol::Http, FailureMode::Slow { delay_ms: 5_000 }).await;
    let mut t = task(1, &p, vec![Check::Basic]);
    t.deadline = Instant::now() + Duration::from_millis(300);
    let started = Instant::now();
    let obs = prober(&sim).probe(&t).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(obs[0].failure, Some(FailureCode::Timeout));
}

/// The controller marks a proxy under check only until the task's deadline (plus a
/// grace): a task whose deadline passed before its turn is never dialled, none of its
/// checks.
#[tokio::test]
async fn a_task_past_its_deadline_is_never_dialled() {
    let (sim, p) = live_proxy(Protocol::Http, FailureMode::None).await;
    let mut t = task(1, &p, vec![Check::Basic, Check::Egress]);
    t.deadline = Instant::now();
    assert!(prober(&sim).probe(&t).await.is_empty());
    assert!(
        sim.audit().uses().iter().all(|u| u.proxy != p.id),
        "a task past its deadline went through the proxy"
    );
}

#[tokio::test]
async fn runner_bounds_concurrency_and_finishes_in_flight_probes_on_shutdown() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let source = Arc::new(MemorySource::new(100));
    let sink = MemorySink::new(1000);
    let mut slow = Vec::new();
    for _ in 0..6 {
        slow.push(
            sim.spawn_proxy(
                Protocol::Http,
                Duration::from_secs(60),
                FailureMode::Slow { delay_ms: 400 },
            )
            .await
            .unwrap(),
        );
    }
    for (i, p) in slow.iter().enumerate() {
        assert!(source.push(task(i, p, vec![Check::Basic])));
    }
    let options = RunnerOptions {
        concurrency: std::num::NonZeroUsize::new(2).unwrap(),
        idle_poll: Duration::from_millis(20),
        flush_interval: Duration::from_millis(20),
        grace: Duration::from_secs(5),
        ..RunnerOptions::default()
    };
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(run(
        source.clone(),
        Arc::new(sink.clone()),
        Arc::new(prober(&sim)),
        options,
        shutdown.clone(),
    ));
    // Two slots: after ~100 ms exactly two tasks are in flight, four still queued.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(source.len(), 4);
    shutdown.cancel();
    let stats = handle.await.unwrap();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(stats.leased.load(Relaxed), 2, "no new work after shutdown");
    assert_eq!(stats.probed.load(Relaxed), 2, "in-flight probes finished");
    assert_eq!(stats.cancelled.load(Relaxed), 0);
    assert_eq!(source.len(), 4);
    let seen = sink.observations();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|o| o.success), "{seen:?}");
}

#[tokio::test]
async fn probes_past_the_grace_period_are_cancelled() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let source = Arc::new(MemorySource::new(10));
    let p = sim
        .spawn_proxy(
            Protocol::Socks5,
            Duration::from_secs(60),
            FailureMode::Slow { delay_ms: 10_000 },
        )
        .await
        .unwrap();
    let mut t = task(1, &p, vec![Check::Basic]);
    t.deadline = Instant::now() + Duration::from_secs(30);
    let mut o = ProberOptions::new(sim.echo_http_addr());
    o.check_timeout = Duration::from_secs(30);
    o.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    assert!(source.push(t));
    let shutdown = CancellationToken::new();
    let options = RunnerOptions {
        grace: Duration::from_millis(200),
        ..RunnerOptions::default()
    };
    let handle = tokio::spawn(run(
        source,
        Arc::new(MemorySink::new(10)),
        Arc::new(NetProber::new(o)),
        options,
        shutdown.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    shutdown.cancel();
    let stats = handle.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        stats.cancelled.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(flavor = "current_thread")]
async fn probes_log_no_credentials_even_at_trace() {
    let (capture, _guard) = LogCapture::set_default(tracing::Level::TRACE);
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let mut secrets = Vec::new();
    for (protocol, mode) in [
        (Protocol::Http, FailureMode::None),
        (Protocol::Socks5, FailureMode::None),
        (Protocol::Http, FailureMode::BadAuth),
        (Protocol::Socks5, FailureMode::BadAuth),
    ] {
        let p = sim
            .spawn_proxy(protocol, Duration::from_secs(60), mode)
            .await
            .unwrap();
        probe(&sim, &p, vec![Check::Basic, Check::Egress]).await;
        secrets.push(p.password.clone());
        // the Proxy-Authorization value too
        let basic = format!("{}:{}", p.username, p.password);
        secrets.push(base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            basic,
        ));
    }
    let text = capture.text();
    assert!(text.contains("check done"), "captured:\n{text}");
    for s in secrets {
        assert!(!text.contains(&s), "a proxy password leaked:\n{text}");
    }
}

/// The checker's own echo endpoint (`proxy-pool-checker echo`) serves EGRESS checks
/// through live proxies of both protocols: the egress address is the proxy's, not ours.
#[tokio::test]
async fn egress_against_the_checkers_own_echo_endpoint() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(proxy_pool_checker::echo::serve(
        listener,
        proxy_pool_checker::echo::DEFAULT_LIMITS,
        stop.clone(),
    ));
    let mut options = ProberOptions::new(echo);
    options.check_timeout = Duration::from_secs(3);
    options.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    let prober = NetProber::new(options);
    for protocol in [Protocol::Http, Protocol::Socks5] {
        let p = sim
            .spawn_proxy(protocol, Duration::from_secs(60), FailureMode::None)
            .await
            .unwrap();
        let obs = prober
            .probe(&task(1, &p, vec![Check::Basic, Check::Egress]))
            .await;
        assert!(obs.iter().all(|o| o.success), "{protocol:?}: {obs:?}");
        assert_eq!(obs[1].tier, Tier::Egress);
        assert_eq!(obs[1].egress, Some(egress_of(&sim, &p)), "{protocol:?}");
    }
    stop.cancel();
    server.await.unwrap();
}
