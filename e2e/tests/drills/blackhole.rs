//! A gateway cut off from every controller replica by a black hole: its control-plane
//! connections stay open but nothing gets through (no FIN, no RST), the way a dead
//! node or a dropped route looks from a worker.
//!
//! Gateway 0 reaches the replicas only through [`Relay`]s of the test's own. Under
//! load, the relays stop forwarding for [`HOLE`]: the gateway must keep serving from its
//! snapshot until `maxStaleAge` after its last accepted report, then refuse new work
//! with 503 `snapshot-stale`, notice the dead path (its unanswered call deadline, not
//! the 30 s HTTP/2 keepalive), and serve again once the relays forward again. Cut off
//! past a proxy's lease, it closes the tunnels through that proxy: the load may see as
//! many tunnels fail inside as the gateway counts lease cuts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proxy_pool_api::controlplane::client::ClientOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::common::*;
use crate::*;

/// `controlPlane.maxStaleAge` of this drill (above the failover bound of 3.5 s).
const MAX_STALE: Duration = Duration::from_secs(10);
/// How long the path is black-holed.
const HOLE: Duration = Duration::from_secs(20);
/// The gateway's deadline on one control-plane call (it runs with the default
/// [`ClientOptions`]).
fn call_deadline() -> Duration {
    ClientOptions::default().call_timeout
}
/// The drill's `controlPlane.reportInterval`.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Chunks a relay holds per direction while black-holed (then it stops reading).
const HELD_CHUNKS: usize = 64;

/// A TCP relay that can stop forwarding while keeping both sides open: bytes read
/// meanwhile are held (bounded, then it stops reading) and delivered, in order, when it
/// forwards again — as TCP retransmits them once a path returns. A connection accepted
/// while black-holed is connected upstream only when forwarding resumes.
struct Relay {
    addr: SocketAddr,
    forwarding: watch::Sender<bool>,
    /// When the client side of a connection ended (EOF or error), since the relay began.
    client_closed: Arc<Mutex<Vec<Instant>>>,
    accepted: Arc<Mutex<Vec<Instant>>>,
}

impl Relay {
    fn start(rt: &tokio::runtime::Runtime, upstream: SocketAddr) -> Self {
        let listener = rt
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("relay listener");
        let addr = listener.local_addr().expect("relay addr");
        let (forwarding, rx) = watch::channel(true);
        let client_closed = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let (closed, acc) = (client_closed.clone(), accepted.clone());
        rt.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                acc.lock().unwrap().push(Instant::now());
                tokio::spawn(relay_one(client, upstream, rx.clone(), closed.clone()));
            }
        });
        Self {
            addr,
            forwarding,
            client_closed,
            accepted,
        }
    }

    fn set_forwarding(&self, on: bool) {
        self.forwarding.send_replace(on);
    }
}

async fn until_forwarding(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|on| *on).await;
}

async fn relay_one(
    client: TcpStream,
    upstream: SocketAddr,
    mut rx: watch::Receiver<bool>,
    closed: Arc<Mutex<Vec<Instant>>>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (to_up, mut from_client) = mpsc::channel::<Vec<u8>>(HELD_CHUNKS);
    // The client side is read at all times (its close is seen at once); what it sends
    // waits in the bounded channel while the relay is black-holed.
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_up.send(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
        closed.lock().unwrap().push(Instant::now());
    });
    until_forwarding(&mut rx).await;
    let Ok(up) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut ur, mut uw) = up.into_split();
    let mut rx_up = rx.clone();
    let c2u = tokio::spawn(async move {
        while let Some(chunk) = from_client.recv().await {
            until_forwarding(&mut rx_up).await;
            if uw.write_all(&chunk).await.is_err() {
                return;
            }
        }
        until_forwarding(&mut rx_up).await;
        let _ = uw.shutdown().await;
    });
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match ur.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Read, then held until forwarding (the upstream's further bytes wait
                // in the kernel meanwhile).
                until_forwarding(&mut rx).await;
                if cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    until_forwarding(&mut rx).await;
    let _ = cw.shutdown().await;
    let _ = c2u.await;
}

/// A probe's answer: the status and the `X-Proxy-Pool-Error` reason, or what failed.
type Probed = Result<(u16, String), String>;

/// One request through `gw`.
async fn probe(gw: SocketAddr, echo: SocketAddr, n: u64) -> Probed {
    let s = connect(gw).await.map_err(|e| format!("connect: {e}"))?;
    let answer = exchange_answer(s, &forward_request(echo, &format!("/blackhole/{n}")))
        .await
        .map_err(|e| format!("io: {e}"))?;
    let reason = answer.header("x-proxy-pool-error").unwrap_or_default();
    Ok((answer.status, reason.to_owned()))
}

#[test]
fn gateway_black_holed_from_the_controllers_serves_until_stale_then_recovers() {
    let _one = one_stack();
    let relay_rt = load_runtime();
    let relays: Mutex<Vec<Relay>> = Mutex::new(Vec::new());
    let tune_config = |text: String| {
        text.replace(
            "maxStaleAge: 120s",
            &format!("maxStaleAge: {}s", MAX_STALE.as_secs()),
        )
        .replace(
            "reportInterval: 1s",
            &format!("reportInterval: {}ms", REPORT_INTERVAL.as_millis()),
        )
    };
    let through_relays = |i: usize, replicas: &[Replica]| {
        (i == 0).then(|| {
            let mut relays = relays.lock().unwrap();
            replicas
                .iter()
                .map(|r| {
                    let relay = Relay::start(&relay_rt, r.cp);
                    let endpoint = format!("http://{}", relay.addr);
                    relays.push(relay);
                    endpoint
                })
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let (mut stack, _leader) = ready_with(
        "drill-blackhole",
        &Tuning {
            config: Some(&tune_config),
            gateway_controller: Some(&through_relays),
            ..Tuning::default()
        },
    );
    let relays = relays.into_inner().unwrap();
    assert_eq!(relays.len(), 2);
    let (gw, gw_admin) = stack.gateways[0];
    let echo = stack.echo;
    let load = load(&stack);

    // A probe of gateway 0 every 100 ms: (since the load began, status, reason).
    let began = Instant::now();
    let outcomes: Arc<Mutex<Vec<(Duration, Probed)>>> = Arc::default();
    let stop_probe = Arc::new(AtomicBool::new(false));
    let prober = {
        let (outcomes, stop) = (outcomes.clone(), stop_probe.clone());
        relay_rt.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = probe(gw, echo, n).await;
                outcomes.lock().unwrap().push((began.elapsed(), r));
                n += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    std::thread::sleep(BEFORE);

    for r in &relays {
        r.set_forwarding(false);
    }
    let hole_at = began.elapsed();
    let holed = Instant::now();
    // Readiness goes 503 once the snapshot is stale.
    let mut not_ready_after = None;
    while holed.elapsed() < HOLE {
        if not_ready_after.is_none() && block(get(gw_admin, "/readyz", "")).0 == 503 {
            not_ready_after = Some(holed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for r in &relays {
        r.set_forwarding(true);
    }
    let resumed_at = began.elapsed();
    let resumed = Instant::now();
    let mut ready_again = None;
    while resumed.elapsed() < Duration::from_secs(60) {
        if block(get(gw_admin, "/readyz", "")).0 == 200 {
            ready_again = Some(resumed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(AFTER);
    stop_probe.store(true, Ordering::Relaxed);
    relay_rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(30), prober).await;
    });
    stack.procs.all_alive();

    // The phases, from the probe's point of view.
    let outcomes = outcomes.lock().unwrap().clone();
    let served = |r: &Result<(u16, String), String>| matches!(r, Ok((200, _)));
    let stale = |r: &Result<(u16, String), String>| matches!(r, Ok((503, reason)) if reason == "snapshot-stale");
    let serving_again = outcomes
        .iter()
        .find(|(at, r)| *at >= resumed_at && served(r))
        .map(|(at, _)| *at - resumed_at);
    // Cut off for longer than its ownership lease, the gateway may come back to fewer
    // proxies than it had, and the extraction demand that piled up meanwhile drains some
    // of those it still has: `no-capacity` is an answer while it returns — within the
    // bound it must serve again in (a call deadline + slack after the path returned),
    // not only before its first answer (a CI run saw two refusals 0.3 s after it).
    let returning = |at: Duration| at >= resumed_at && at <= resumed_at + call_deadline() + SLACK;
    let no_capacity = outcomes
        .iter()
        .filter(|(at, r)| {
            returning(*at) && matches!(r, Ok((503, reason)) if reason == "no-capacity")
        })
        .count();
    let wrong: Vec<_> = outcomes
        .iter()
        .filter(|(at, r)| {
            let refused_returning =
                returning(*at) && matches!(r, Ok((503, reason)) if reason == "no-capacity");
            !served(r) && !stale(r) && !refused_returning
        })
        .collect();
    let first_refused = outcomes
        .iter()
        .find(|(at, r)| *at >= hole_at && stale(r))
        .map(|(at, _)| *at - hole_at);
    let refused_before = outcomes
        .iter()
        .filter(|(at, r)| *at < hole_at && !served(r))
        .count();
    let served_in_hole = outcomes
        .iter()
        .filter(|(at, r)| {
            *at >= hole_at && *at < hole_at + MAX_STALE - REPORT_INTERVAL && served(r)
        })
        .count();
    let last_refused = outcomes
        .iter()
        .rev()
        .find(|(_, r)| stale(r))
        .map(|(at, _)| *at);
    // The dead path noticed: the gateway closed a connection it had before the hole.
    let detected = relays
        .iter()
        .flat_map(|r| r.client_closed.lock().unwrap().clone())
        .filter(|t| *t >= holed)
        .map(|t| t - holed)
        .min();
    // Connections gateway 0 opened to either replica's relay within `range`.
    let accepted = |range: std::ops::Range<Instant>| {
        relays
            .iter()
            .flat_map(|r| r.accepted.lock().unwrap().clone())
            .filter(|t| range.contains(t))
            .count()
    };
    let reconnects = accepted(holed..resumed);
    // Sessions gateway 0 opened once the path returned (one connection each).
    let sessions_after = accepted(resumed..Instant::now());
    let ms = |d: Option<Duration>| d.map_or("never".to_owned(), |d| d.as_millis().to_string());
    let figures = format!(
        "black hole {} s (maxStaleAge {} s): gateway 0 served {served_in_hole} probes in the hole, \
         first refusal (503 snapshot-stale) after {} ms, not ready after {} ms, dead path \
         detected after {} ms ({reconnects} connection attempts during the hole), serving again \
         {} ms ({no_capacity} no-capacity refusals before) and ready {} ms after the path \
         returned ({sessions_after} connections opened since); probes {}, other failures {}",
        HOLE.as_secs(),
        MAX_STALE.as_secs(),
        ms(first_refused),
        ms(not_ready_after),
        ms(detected),
        ms(serving_again),
        ms(ready_again),
        outcomes.len(),
        wrong.len(),
    );
    for (at, r) in wrong.iter().take(5) {
        println!("[blackhole] probe at {} ms: {r:?}", at.as_millis());
    }
    let gw0 = format!("{gw} ");
    // Cut off past the lease of a proxy, gateway 0 closes the tunnels open through it
    // (exclusivity); one opened just before the cut fails inside. As many such
    // failures as the gateway counted cuts, no more.
    let lease_cuts: usize = block(metric(
        gw_admin,
        "proxy_pool_gateway_tunnels_lease_cut_total",
    ))
    .and_then(|v| v.parse().ok())
    .expect("gateway 0 reports proxy_pool_gateway_tunnels_lease_cut_total");
    let cut_tunnels = std::cell::Cell::new(0usize);
    let figures = format!("{figures}, tunnels cut at a lease end {lease_cuts}");
    // Load through gateway 0 may be refused snapshot-stale during the hole (503) or have
    // a tunnel cut at a lease end, and nothing else; everything else as every drill.
    finish_allowing("blackhole", &mut stack, load, &figures, &|e| {
        let cut = e.contains(": inside the tunnel: 0") || e.contains(": tunnel io: ");
        if e.starts_with(&gw0) && cut && cut_tunnels.get() < lease_cuts {
            cut_tunnels.set(cut_tunnels.get() + 1);
            return true;
        }
        e.starts_with(&gw0) && e.contains(" 503 ")
    });
    let logs = stack.procs.logs();
    assert!(
        wrong.is_empty(),
        "probes neither served nor refused stale: {wrong:?}\n{logs}"
    );
    assert_eq!(refused_before, 0, "refusals before the hole\n{logs}");
    assert!(
        served_in_hole > 0,
        "gateway 0 stopped serving at once\n{logs}"
    );
    // Stale at maxStaleAge after the last accepted report (at most a report interval and
    // a call before the hole), never before; a 2 s scheduling slack after.
    let first_refused = first_refused.expect("gateway 0 never refused during the hole");
    assert!(
        first_refused + REPORT_INTERVAL + SLACK >= MAX_STALE && first_refused <= MAX_STALE + SLACK,
        "first refusal after {first_refused:?}, maxStaleAge {MAX_STALE:?}\n{logs}"
    );
    assert!(
        not_ready_after.is_some(),
        "/readyz stayed 200 on a stale snapshot"
    );
    // Noticed within a report interval and the call deadline (+ slack), not the keepalive.
    let detected = detected.expect("the gateway never noticed the dead path");
    assert!(
        detected <= REPORT_INTERVAL + call_deadline() + SLACK,
        "dead path noticed after {detected:?}, bound {:?}\n{logs}",
        REPORT_INTERVAL + call_deadline()
    );
    assert!(reconnects >= 1, "no other endpoint tried during the hole");
    // Back within a call deadline of the path's return (+ slack): the connection attempt
    // in flight completes, or the next one after its backoff.
    let serving_again = serving_again.expect("gateway 0 never served again");
    assert!(
        serving_again <= call_deadline() + SLACK,
        "served again {serving_again:?} after the path returned\n{logs}"
    );
    assert!(
        last_refused.is_none_or(|at| at < resumed_at + serving_again + Duration::from_millis(500)),
        "refusals after gateway 0 served again\n{logs}"
    );
    // Back for good: one session (perhaps after the follower's `not_leader` and the
    // connection in flight when the path returned), not a session ended again and
    // again (a report overtaken by the next ACK was refused `bound_mismatch`).
    assert!(
        sessions_after <= relays.len() + 1,
        "gateway 0 opened {sessions_after} connections after the path returned\n{logs}"
    );
    stack.tear_down();
}
