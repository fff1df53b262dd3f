//! Opening a tunnel through a vendor proxy with bounded retries (DIAL and
//! PROXY_HANDSHAKE failures move to another proxy within the routing's budget and
//! deadline), and relaying it. Shared by HTTP CONNECT and SOCKS5 CONNECT. A tunnel
//! keeps its proxy for its whole life; its Active slot is released when it ends.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::debug;

use super::Shared;
use crate::capacity::ActiveLease;
use crate::clock::now_ms;
use crate::error::{ErrorSource, GatewayError};
use crate::io::{self, BufConn, ClientConn, TunnelEnd};
use crate::metrics::{Direction, ListenerKind, NamedCounters};
use crate::outcome::Stage;
use crate::route::{Pick, Ticket};
use crate::session::MoveReason;
use crate::snapshot::{ProxyEntry, ProxyId};
use crate::upstream::{self, Target};
use proxy_pool_api::controlplane::model::Protocol;

/// Read buffer of a tunnel's upstream side: a CONNECT response head (or SOCKS5 reply)
/// and whatever arrived with it; the relay uses its own buffers afterwards.
const HANDSHAKE_BUFFER: usize = 8 * 1024;

/// A tunnel through a vendor proxy, ready for bytes.
#[derive(Debug)]
pub(crate) struct Established {
    pub(crate) upstream: BufConn,
    pub(crate) entry: Arc<ProxyEntry>,
    pub(crate) lease: ActiveLease<ProxyEntry>,
    pub(crate) moved: Option<MoveReason>,
    pub(crate) routing: Arc<str>,
    /// The routing's counters.
    pub(crate) stats: &'static NamedCounters,
}

/// Budget of one request's attempts.
pub(crate) struct Attempts {
    /// The routing, for outcome observations.
    pub(crate) routing: std::sync::Arc<str>,
    pub(crate) deadline: Instant,
    pub(crate) max: u32,
    pub(crate) made: u32,
    pub(crate) exclude: Vec<ProxyId>,
    /// The last retryable failure, reported if no other proxy can be tried.
    pub(crate) last_err: Option<GatewayError>,
}

impl Attempts {
    pub(crate) fn new(ticket: &Ticket) -> Self {
        Self {
            routing: ticket.routing.clone(),
            deadline: Instant::now() + ticket.retry.deadline,
            max: ticket.retry.max_attempts,
            made: 0,
            exclude: Vec::new(),
            last_err: None,
        }
    }

    /// Whether a failure of `err` may be retried on another proxy.
    pub(crate) fn may_retry(&self, err: &GatewayError) -> bool {
        err.retryable() && self.made < self.max && Instant::now() < self.deadline
    }

    /// Time left, capped at `cap`.
    pub(crate) fn left(&self, cap: Duration) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .min(cap)
    }

    /// Records one stage of an attempt on `entry` (an outcome observation for the
    /// controller), failed with `err` or not; an upstream-side failure also counts
    /// against the proxy's upstream.
    pub(crate) fn record(
        &self,
        shared: &Shared,
        entry: &ProxyEntry,
        stage: Stage,
        err: Option<&GatewayError>,
        took: Duration,
    ) {
        if let Some(e) = err
            && e.source_side() == ErrorSource::Upstream
            && let Some(upstream) = &entry.upstream
        {
            upstream.errors.inc();
        }
        let reason = err.map(GatewayError::reason);
        shared
            .outcomes
            .record(&entry.id, Some(&self.routing), stage, reason, took);
    }

    /// Notes a failure of `entry` that is retried: it is excluded from the next picks
    /// and `err` kept in case no other proxy can be tried. A sticky session moves off
    /// the proxy (the reason returned).
    pub(crate) fn failed(
        &mut self,
        ticket: &Ticket,
        entry: &ProxyEntry,
        err: GatewayError,
    ) -> Option<MoveReason> {
        self.exclude.push(entry.id.clone());
        self.last_err = Some(err);
        ticket.is_sticky().then_some(MoveReason::ProxyFailed)
    }

    /// The next pick: `first` for the first attempt, a fresh one afterwards.
    pub(crate) fn next_pick(
        &mut self,
        shared: &Shared,
        ticket: &Ticket,
        first: &mut Option<Pick>,
        moved_before: Option<MoveReason>,
    ) -> Result<Pick, GatewayError> {
        self.made += 1;
        if let Some(pick) = first.take() {
            return Ok(pick);
        }
        shared.metrics.retries.inc();
        let snap = shared.snapshots.load();
        match shared
            .router
            .reselect(snap.as_deref(), ticket, now_ms(), &self.exclude)
        {
            Ok(mut pick) => {
                pick.moved = pick.moved.or(moved_before);
                Ok(pick)
            }
            // Nothing else to try: the failure that started the retry says more.
            Err(GatewayError::NoCapacity) => {
                Err(self.last_err.take().unwrap_or(GatewayError::NoCapacity))
            }
            Err(err) => Err(err),
        }
    }
}

/// Dials and handshakes through proxies until one works or the budget is spent; a
/// failure counts against the routing.
pub(crate) async fn establish(
    shared: &Shared,
    ticket: &Ticket,
    first: Pick,
    target: &Target,
) -> Result<Established, GatewayError> {
    let established = establish_on(shared, ticket, first, target).await;
    if established.is_err() {
        ticket.stats.errors.inc();
    }
    established
}

async fn establish_on(
    shared: &Shared,
    ticket: &Ticket,
    first: Pick,
    target: &Target,
) -> Result<Established, GatewayError> {
    let up = &shared.config.upstream;
    let mut attempts = Attempts::new(ticket);
    let mut first = Some(first);
    let mut moved = None;
    loop {
        let pick = attempts.next_pick(shared, ticket, &mut first, moved)?;
        let entry = pick.entry().clone();
        match attempt(shared, &entry, target, &attempts, up).await {
            Ok(upstream) => {
                return Ok(Established {
                    upstream,
                    entry,
                    lease: pick.reservation.activate(),
                    moved: pick.moved,
                    routing: ticket.routing.clone(),
                    stats: ticket.stats,
                });
            }
            Err(err) => {
                debug!(proxy = %entry.id, reason = err.reason(), "tunnel attempt failed");
                if !attempts.may_retry(&err) {
                    return Err(err);
                }
                moved = attempts.failed(ticket, &entry, err).or(moved);
            }
        }
    }
}

async fn attempt(
    shared: &Shared,
    entry: &ProxyEntry,
    target: &Target,
    attempts: &Attempts,
    up: &crate::config::UpstreamConfig,
) -> Result<BufConn, GatewayError> {
    let started = Instant::now();
    let mut conn = dial(shared, entry, attempts, HANDSHAKE_BUFFER).await?;
    let dialed = Instant::now();
    let timeout = attempts.left(up.handshake_timeout);
    let res = match entry.protocol {
        Protocol::Http => upstream::http_connect(&mut conn, entry, target, timeout).await,
        Protocol::Socks5 => upstream::socks5_connect(&mut conn, entry, target, timeout).await,
    };
    // One clock read for the three figures.
    let done = Instant::now();
    let took = done.saturating_duration_since(dialed);
    attempts.record(
        shared,
        entry,
        Stage::ProxyHandshake,
        res.as_ref().err(),
        took,
    );
    res?;
    shared.metrics.handshake_duration.observe_duration(took);
    observe_latency(entry, done.saturating_duration_since(started));
    Ok(conn)
}

/// Dials `entry` within the attempts' connect budget and records the DIAL outcome;
/// the connection reads responses of at most `max_head` bytes (capped by the
/// configured response head limit).
pub(crate) async fn dial(
    shared: &Shared,
    entry: &ProxyEntry,
    attempts: &Attempts,
    max_head: usize,
) -> Result<BufConn, GatewayError> {
    let up = &shared.config.upstream;
    let started = Instant::now();
    let stream = upstream::dial(
        entry,
        attempts.left(up.connect_timeout),
        shared.router.egress(),
        |why| shared.metrics.egress_refused(why),
    )
    .await;
    let took = started.elapsed();
    attempts.record(shared, entry, Stage::Dial, stream.as_ref().err(), took);
    let stream = stream?;
    shared.metrics.dial_duration.observe_duration(took);
    Ok(BufConn::new(stream, up.max_response_head.min(max_head)))
}

/// Feeds the time an attempt took to set up its connection into `entry`'s latency
/// estimate.
pub(crate) fn observe_latency(entry: &ProxyEntry, took: Duration) {
    let micros = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
    entry.state.observe_latency(micros);
}

/// Relays an established tunnel (accepted on a `kind` listener) to the end and records
/// its outcome, duration and bytes. `client` may hold bytes the client sent early
/// (e.g. a TLS ClientHello); they go first.
pub(crate) async fn relay(
    shared: &Shared,
    kind: ListenerKind,
    client: &mut ClientConn,
    mut est: Established,
) {
    let metrics = &shared.metrics;
    metrics.tunnel(kind);
    est.stats.tunnels.inc();
    if let Some(upstream) = &est.entry.upstream {
        upstream.tunnels.inc();
    }
    let started = Instant::now();
    // Bytes that went through before the relay proper: what each side sent early.
    let (mut early_up, mut early_down) = (0, 0);
    let write = shared.config.write_timeout;
    let early = async {
        if !client.buffered().is_empty() {
            io::write_all(&mut est.upstream.stream, client.buffered(), write).await?;
            early_up = client.buffered().len() as u64;
        }
        if !est.upstream.buffered().is_empty() {
            io::write_all(&mut client.stream, est.upstream.buffered(), write).await?;
            early_down = est.upstream.buffered().len() as u64;
        }
        Ok::<_, std::io::Error>(())
    };
    let relayed = match early.await {
        Ok(()) => {
            let n = client.buffered().len();
            client.consume(n);
            let m = est.upstream.buffered().len();
            est.upstream.consume(m);
            io::tunnel(
                client,
                &mut est.upstream,
                shared.config.io_idle_timeout,
                write,
                // Exclusivity: nothing goes through the proxy past this worker's lease.
                est.entry.state.lease_ended(),
            )
            .await
        }
        Err(_) => io::Relayed {
            up: 0,
            down: 0,
            end: TunnelEnd::Error,
            spliced: 0,
        },
    };
    let io::Relayed { up, down, end, .. } = relayed;
    let error = match end {
        TunnelEnd::Closed => None,
        TunnelEnd::Idle => Some("idle-timeout"),
        TunnelEnd::Error => Some("tunnel-io"),
        TunnelEnd::LeaseEnded => {
            metrics.tunnels_lease_cut.inc();
            Some("lease-ended")
        }
    };
    metrics.relayed(Direction::ClientToUpstream, early_up + up);
    metrics.relayed(Direction::UpstreamToClient, early_down + down);
    let took = started.elapsed();
    metrics.tunnel_duration.observe_duration(took);
    shared.outcomes.record(
        &est.entry.id,
        Some(&est.routing),
        Stage::Tunnel,
        error,
        took,
    );
    debug!(proxy = %est.entry.id, up, down, ?end, "tunnel closed");
    drop(est.lease);
}
