//! Plain-HTTP forwarding of one absolute-URI request: pick a proxy per request
//! (rotation on kept-alive client connections unless sticky), reuse an idle pooled
//! upstream connection when there is one, rewrite hop-by-hop headers, relay the body
//! both ways with its own framing, and return the upstream connection to the pool.

use std::time::Duration;
use tokio::time::Instant;
use tracing::debug;

use super::Shared;
use super::reply::{Failure, Next, moved_header, proxy_credentials};
use super::tunnel::{Attempts, dial, observe_latency};
use crate::capacity::ActiveLease;
use crate::clock::now_ms;
use crate::error::GatewayError;
use crate::io::{
    self as gio, BufConn, ClientConn, CopyError, HeadReadError, Waits, copy_body_counted,
};
use crate::metrics::Direction;
use crate::outcome::Stage;
use crate::parse::authority::parse_absolute_uri;
use crate::parse::http_head::{
    BodyFraming, HeadLimits, HeaderRange, Version, is_hop_by_hop, parse_request, parse_response,
    request_framing, response_framing, trim, wants_keep_alive,
};
use crate::route::{Pick, Request, Ticket};
use crate::session::MoveReason;
use crate::snapshot::ProxyEntry;
use crate::upstream::pool::PoolKey;
use crate::upstream::{self, Target};
use proxy_pool_api::controlplane::model::Protocol;

/// How long an `Expect: 100-continue` request waits for the upstream's first answer
/// (interim or final) before its body is sent anyway (RFC 9110 §10.1.1).
const CONTINUE_WAIT: Duration = Duration::from_secs(1);

/// Most body bytes sent in the same write as the response head (the rest is relayed
/// as it comes); bounds what the reused head buffer can grow to.
const MERGE_BODY_MAX: usize = 8 * 1024;

/// Per-connection buffers, reused across requests.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub(crate) ranges: Vec<HeaderRange>,
    pub(crate) creds: Vec<u8>,
    /// End-to-end request header lines, CRLF-terminated.
    headers: Vec<u8>,
    /// Method, then the absolute URI.
    line: Vec<u8>,
    /// Outgoing head.
    out: Vec<u8>,
    /// Response header ranges and the rewritten response head.
    resp_ranges: Vec<HeaderRange>,
    resp_out: Vec<u8>,
    /// Bytes written for the request in progress, counted when it ends.
    traffic: Traffic,
}

/// Bytes one forwarded request wrote to each side (heads as rewritten, bodies with
/// their framing; a request sent again after a failed attempt counts again).
#[derive(Debug, Default, Clone, Copy)]
struct Traffic {
    /// To the vendor proxy.
    up: u64,
    /// To the client.
    down: u64,
}

/// What the request head said, copied out of the client buffer.
struct RequestInfo {
    method_len: usize,
    /// Offset of the path in `Scratch::line`.
    path_at: usize,
    framing: BodyFraming,
    keep_alive: bool,
    is_head: bool,
    /// HTTP/1.1 `Expect: 100-continue`: the body waits for the upstream's go-ahead.
    expect_continue: bool,
    /// An idempotent method (RFC 9110 §9.2.2): only these are sent again after an
    /// upstream connection closed without answering, since the vendor may already have
    /// passed the request on. A vendor's `407` proves it did not, so that is retried for
    /// every method.
    idempotent: bool,
}

/// Forwards the request whose head (`len` bytes) is buffered in `conn`.
///
/// A failure before the request's body started going upstream (a fresh connection to
/// an HTTP vendor closed or reset before any response byte, or the vendor's `407`) is a
/// PROXY_HANDSHAKE failure: recorded, the proxy excluded, and the request sent through
/// another proxy within the routing's budget. A pooled connection found dead that way
/// is replaced without blaming the proxy. A connection closed without an answer is
/// retried only for idempotent methods (the vendor may have passed the request on);
/// a `407` for every method. Once body bytes went upstream nothing is replayed.
pub(crate) async fn forward(
    shared: &Shared,
    conn: &mut ClientConn,
    len: usize,
    scratch: &mut Scratch,
    peer: std::net::IpAddr,
) -> Result<Next, Failure> {
    let started = Instant::now();
    let (info, mut ticket, pick, target) = prepare(shared, conn, scratch, peer)?;
    conn.stream.attach(ticket.meter.clone());
    conn.stream.hold(ticket.hold.take());
    conn.consume(len);
    scratch.traffic = Traffic::default();
    let res = forward_admitted(shared, conn, scratch, &info, &ticket, pick, &target).await;
    let metrics = &shared.metrics;
    metrics.relayed(Direction::ClientToUpstream, scratch.traffic.up);
    metrics.relayed(Direction::UpstreamToClient, scratch.traffic.down);
    match &res {
        Ok(_) => metrics.request_duration.observe_duration(started.elapsed()),
        Err(_) => {
            ticket.stats.errors.inc();
        }
    }
    res
}

/// The attempts of an admitted request (see [`forward`]).
async fn forward_admitted(
    shared: &Shared,
    conn: &mut ClientConn,
    scratch: &mut Scratch,
    info: &RequestInfo,
    ticket: &Ticket,
    pick: Pick,
    target: &Target,
) -> Result<Next, Failure> {
    let mut attempts = Attempts::new(ticket);
    let mut first = Some(pick);
    let mut moved = None;
    loop {
        let pick = attempts.next_pick(shared, ticket, &mut first, moved)?;
        moved = pick.moved;
        let entry = pick.entry().clone();
        // `obtain` consumes the pick: on error its reservation is already released.
        let (err, replayable) = match obtain(shared, pick, target, &attempts).await {
            Ok((mut upstream, lease, reused)) => {
                let started = Instant::now();
                write_head(scratch, info, &entry);
                let via_http = entry.protocol == Protocol::Http;
                let res = exchange(shared, conn, &mut upstream, scratch, info, moved, via_http);
                let (err, replayable) = match res.await {
                    Ok(outcome) => {
                        let took = started.elapsed();
                        attempts.record(shared, &entry, Stage::ResponseHeaders, None, took);
                        shared.metrics.forwarded.inc();
                        ticket.stats.requests.inc();
                        if let Some(upstream) = &entry.upstream {
                            upstream.requests.inc();
                        }
                        if outcome.upstream_reusable {
                            // The lease is still held: `load` counts this request too.
                            let in_use = usize::try_from(entry.state.load()).unwrap_or(usize::MAX);
                            shared
                                .pool
                                .checkin(pool_key(&entry, target), upstream, in_use);
                        }
                        drop(lease);
                        let keep = info.keep_alive && outcome.client_reusable;
                        return Ok(if keep { Next::KeepAlive } else { Next::Close });
                    }
                    Err(Exchange::Closed { replayable: true }) if reused && info.idempotent => {
                        // A pooled connection the proxy had closed: not the proxy's
                        // failure, and nothing was sent; try a fresh connection.
                        drop(lease);
                        if attempts.made >= attempts.max {
                            return Err(GatewayError::UpstreamIo(
                                std::io::ErrorKind::BrokenPipe.into(),
                            )
                            .into());
                        }
                        continue;
                    }
                    Err(Exchange::Closed { replayable: true }) if via_http && info.idempotent => (
                        GatewayError::ProxyHandshake(
                            "proxy closed the connection before answering",
                        ),
                        true,
                    ),
                    Err(Exchange::ProxyAuth { replayable }) => (
                        GatewayError::ProxyHandshake("proxy rejected credentials"),
                        replayable,
                    ),
                    Err(Exchange::Closed { .. }) => {
                        let err = GatewayError::UpstreamIo(std::io::ErrorKind::BrokenPipe.into());
                        if !reused {
                            let took = started.elapsed();
                            attempts.record(
                                shared,
                                &entry,
                                Stage::ResponseHeaders,
                                Some(&err),
                                took,
                            );
                        }
                        return Err(err.into());
                    }
                    Err(Exchange::Failed(failure)) => {
                        let (err, took) = (Some(&failure.err), started.elapsed());
                        attempts.record(shared, &entry, Stage::ResponseHeaders, err, took);
                        return Err(failure);
                    }
                };
                let took = started.elapsed();
                attempts.record(shared, &entry, Stage::ProxyHandshake, Some(&err), took);
                // The failed proxy's slot is free before another one is reserved.
                drop(lease);
                (err, replayable)
            }
            // Dial and SOCKS5 handshake failures (recorded by `obtain`).
            Err(err) => (err, true),
        };
        debug!(proxy = %entry.id, reason = err.reason(), "forward attempt failed");
        if !replayable || !attempts.may_retry(&err) {
            return Err(err.into());
        }
        moved = attempts.failed(ticket, &entry, err).or(moved);
    }
}

/// Parses the head, admits the request and copies what later steps need.
fn prepare(
    shared: &Shared,
    conn: &ClientConn,
    scratch: &mut Scratch,
    peer: std::net::IpAddr,
) -> Result<(RequestInfo, Ticket, Pick, Target), GatewayError> {
    let Scratch {
        ranges,
        creds,
        headers,
        line,
        ..
    } = scratch;
    let head = parse_request(conn.buffered(), shared.config.head, ranges)?
        .ok_or(GatewayError::Unsupported("incomplete head"))?;
    let uri = parse_absolute_uri(head.target).map_err(|e| match e {
        crate::parse::authority::AuthorityError::NotAbsoluteHttp => {
            GatewayError::Unsupported("only absolute http:// URIs and CONNECT")
        }
        other => GatewayError::Target(other),
    })?;
    let framing = request_framing(&head.headers)?;
    let credentials = proxy_credentials(&head.headers, creds)?;
    let snap = shared.snapshots.load();
    let req = Request {
        creds: credentials,
        target: &uri.authority.host,
        connect_port: None,
        source: Some(peer),
        held: conn.stream.held(),
    };
    let (ticket, pick) = shared
        .router
        .admit_request(snap.as_deref(), &req, now_ms())?;
    line.clear();
    line.extend_from_slice(head.method.as_bytes());
    line.extend_from_slice(b" http://");
    line.extend_from_slice(uri.authority_raw);
    let path_at = line.len();
    line.extend_from_slice(uri.path_and_query);
    headers.clear();
    // RFC 9112 §3.2.2: the target URI's authority is the host; whatever `Host` the
    // client sent (none, another one, several) is replaced by it, so the vendor proxy
    // and the origin see the host this request was admitted and routed for.
    push_header(headers, b"Host", uri.authority_raw);
    for (name, value) in head.headers.iter() {
        let keep_te = name.eq_ignore_ascii_case(b"transfer-encoding");
        if name.eq_ignore_ascii_case(b"host") || (!keep_te && is_hop_by_hop(&head.headers, name)) {
            continue;
        }
        push_header(headers, name, value);
    }
    let info = RequestInfo {
        method_len: head.method.len(),
        path_at,
        framing,
        keep_alive: wants_keep_alive(head.version, &head.headers),
        is_head: head.method == "HEAD",
        idempotent: matches!(
            head.method,
            "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
        ),
        expect_continue: head.version == Version::Http11
            && head
                .headers
                .get_all(b"expect")
                .any(|v| trim(v).eq_ignore_ascii_case(b"100-continue")),
    };
    Ok((info, ticket, pick, Target::from_authority(&uri.authority)))
}

fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn pool_key(entry: &ProxyEntry, target: &Target) -> PoolKey {
    match entry.protocol {
        Protocol::Http => PoolKey::http(entry.id.clone()),
        Protocol::Socks5 => PoolKey::tunnel(entry.id.clone(), target.clone()),
    }
}

/// An upstream connection with an Active slot: pooled if possible, else dialed
/// (and, for SOCKS5 proxies, tunnelled to the target).
async fn obtain(
    shared: &Shared,
    pick: Pick,
    target: &Target,
    attempts: &Attempts,
) -> Result<(BufConn, ActiveLease<ProxyEntry>, bool), GatewayError> {
    let entry = pick.entry();
    if let Some(conn) = shared.pool.checkout(&pool_key(entry, target)) {
        shared.metrics.pool_reused.inc();
        return Ok((conn, pick.reservation.activate(), true));
    }
    let started = Instant::now();
    let mut conn = dial(shared, entry, attempts, usize::MAX).await?;
    if entry.protocol == Protocol::Socks5 {
        let at = Instant::now();
        let timeout = attempts.left(shared.config.upstream.handshake_timeout);
        let res = upstream::socks5_connect(&mut conn, entry, target, timeout).await;
        attempts.record(
            shared,
            entry,
            Stage::ProxyHandshake,
            res.as_ref().err(),
            at.elapsed(),
        );
        res?;
        shared
            .metrics
            .handshake_duration
            .observe_duration(at.elapsed());
    }
    observe_latency(entry, started.elapsed());
    Ok((conn, pick.reservation.activate(), false))
}

/// Composes the outgoing head for `entry`'s protocol into `scratch.out`.
fn write_head(scratch: &mut Scratch, info: &RequestInfo, entry: &ProxyEntry) {
    let out = &mut scratch.out;
    out.clear();
    match entry.protocol {
        // HTTP proxies take the absolute URI and their own credentials.
        Protocol::Http => {
            out.extend_from_slice(&scratch.line);
            out.extend_from_slice(b" HTTP/1.1\r\n");
            if let Some(auth) = &entry.auth {
                push_header(out, b"Proxy-Authorization", auth.basic.as_bytes());
            }
        }
        // Through a SOCKS5 tunnel we talk to the origin: origin-form.
        Protocol::Socks5 => {
            out.extend_from_slice(&scratch.line[..info.method_len]);
            out.push(b' ');
            out.extend_from_slice(&scratch.line[info.path_at..]);
            out.extend_from_slice(b" HTTP/1.1\r\n");
        }
    }
    out.extend_from_slice(&scratch.headers);
    out.extend_from_slice(b"Connection: keep-alive\r\n\r\n");
}

struct ExchangeOk {
    upstream_reusable: bool,
    client_reusable: bool,
}

enum Exchange {
    /// The upstream connection closed or failed before any response byte.
    /// `replayable`: no body byte went upstream, so the request may go again.
    Closed {
        replayable: bool,
    },
    /// The HTTP vendor proxy answered 407: it rejected our credentials.
    ProxyAuth {
        replayable: bool,
    },
    Failed(Failure),
}

fn up_err(e: std::io::Error) -> Exchange {
    Exchange::Failed(GatewayError::UpstreamIo(e).into())
}

fn client_gone(e: std::io::Error) -> Exchange {
    Exchange::Failed(Failure {
        err: GatewayError::DownstreamIo(e),
        respond: false,
    })
}

/// Copies the client's request body upstream, within the body's overall deadline.
async fn send_body(
    client: &mut ClientConn,
    upstream: &mut BufConn,
    framing: BodyFraming,
    waits: Waits,
    sent: &mut u64,
) -> Result<(), Exchange> {
    copy_body_counted(client, &mut upstream.stream, framing, waits, sent)
        .await
        .map(drop)
        .map_err(|e| match e {
            CopyError::Read(e) => client_gone(e),
            CopyError::Write(e) => up_err(e),
            CopyError::Malformed => {
                Exchange::Failed(GatewayError::Unsupported("bad chunked body").into())
            }
        })
}

/// Sends the request, relays the response. After the first response byte reaches
/// the client, failures can no longer be answered with an error status.
///
/// With `Expect: 100-continue` the body is held back until the upstream answers
/// `100 Continue` (relayed, then the body follows), or for at most [`CONTINUE_WAIT`]
/// (then it is sent anyway). A final answer before that is relayed without the body,
/// and neither connection is reused: the body was announced but never sent.
async fn exchange(
    shared: &Shared,
    client: &mut ClientConn,
    upstream: &mut BufConn,
    scratch: &mut Scratch,
    info: &RequestInfo,
    moved: Option<MoveReason>,
    via_http: bool,
) -> Result<ExchangeOk, Exchange> {
    let cfg = &shared.config;
    let idle = cfg.io_idle_timeout;
    // The request body gets `request_body_timeout` overall, counted from the head.
    let body_waits = Waits {
        read_idle: idle,
        write: cfg.write_timeout,
        deadline: Some(Instant::now() + cfg.request_body_timeout),
    };
    let relay_waits = Waits {
        read_idle: idle,
        write: cfg.write_timeout,
        deadline: None,
    };
    if gio::write_all(&mut upstream.stream, &scratch.out, cfg.write_timeout)
        .await
        .is_err()
    {
        return Err(Exchange::Closed { replayable: true });
    }
    scratch.traffic.up += scratch.out.len() as u64;
    let mut body_pending = info.framing != BodyFraming::None;
    // Whether no body byte has gone upstream yet.
    let mut replayable = true;
    if body_pending && !info.expect_continue {
        body_pending = false;
        replayable = false;
        let sent = &mut scratch.traffic.up;
        send_body(client, upstream, info.framing, body_waits, sent).await?;
    }
    let limits = HeadLimits {
        max_head_bytes: upstream.capacity(),
        max_headers: cfg.head.max_headers.max(100),
    };
    let Scratch {
        resp_ranges: ranges,
        resp_out: out,
        traffic,
        ..
    } = scratch;
    loop {
        let wait = if body_pending {
            CONTINUE_WAIT.min(cfg.upstream.response_timeout)
        } else {
            cfg.upstream.response_timeout
        };
        let len = match upstream.read_head(limits.max_head_bytes, wait).await {
            Ok(Some(len)) => len,
            Ok(None) => return Err(Exchange::Closed { replayable }),
            Err(HeadReadError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                if body_pending {
                    // No answer to the expectation: send the body anyway.
                    body_pending = false;
                    replayable = false;
                    let sent = &mut traffic.up;
                    send_body(client, upstream, info.framing, body_waits, sent).await?;
                    continue;
                }
                return Err(Exchange::Failed(GatewayError::UpstreamTimeout.into()));
            }
            Err(HeadReadError::Io(_)) => return Err(Exchange::Closed { replayable }),
            Err(HeadReadError::Head(e)) => {
                return Err(Exchange::Failed(GatewayError::BadResponse(e).into()));
            }
        };
        let head = parse_response(upstream.buffered(), limits, ranges)
            .map_err(|e| Exchange::Failed(GatewayError::BadResponse(e).into()))?
            .ok_or(Exchange::Closed { replayable })?;
        let status = head.status;
        // Through a SOCKS5 tunnel a 407 comes from the target and is relayed.
        if status == 407 && via_http {
            return Err(Exchange::ProxyAuth { replayable });
        }
        let framing = response_framing(info.is_head, status, &head.headers)
            .map_err(|e| Exchange::Failed(GatewayError::BadResponse(e).into()))?;
        let interim = (100..200).contains(&status) && status != 101;
        // A final answer to a request whose body never went: the upstream may still
        // wait for it and the client may still send it, so neither is reused.
        let body_skipped = body_pending && !interim;
        let upstream_keep = wants_keep_alive(head.version, &head.headers)
            && framing != BodyFraming::UntilClose
            && head.version == Version::Http11
            && !body_skipped;
        let client_keep = info.keep_alive
            && framing != BodyFraming::UntilClose
            && !interim
            && !body_skipped
            && !shared.draining.is_cancelled();
        out.clear();
        out.extend_from_slice(b"HTTP/1.1");
        let line_end = upstream
            .buffered()
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or(8);
        out.extend_from_slice(&upstream.buffered()[8..line_end]);
        out.extend_from_slice(b"\r\n");
        for (name, value) in head.headers.iter() {
            let keep_te = name.eq_ignore_ascii_case(b"transfer-encoding");
            if keep_te || !is_hop_by_hop(&head.headers, name) {
                push_header(out, name, value);
            }
        }
        if !interim {
            moved_header(out, moved, shared);
            out.extend_from_slice(if client_keep {
                b"Connection: keep-alive\r\n"
            } else {
                b"Connection: close\r\n"
            });
        }
        out.extend_from_slice(b"\r\n");
        upstream.consume(len);
        // The body bytes that came with the head go out in the same write: one
        // send per small response instead of two.
        let framing = match framing {
            BodyFraming::Length(n) if !interim && status != 101 => {
                let take = upstream
                    .buffered()
                    .len()
                    .min(MERGE_BODY_MAX)
                    .min(usize::try_from(n).unwrap_or(usize::MAX));
                out.extend_from_slice(&upstream.buffered()[..take]);
                upstream.consume(take);
                BodyFraming::Length(n - take as u64)
            }
            other => other,
        };
        gio::write_all(&mut client.stream, out, cfg.write_timeout)
            .await
            .map_err(client_gone)?;
        traffic.down += out.len() as u64;
        if interim {
            if status == 100 && body_pending {
                // The upstream's go-ahead, relayed: now the body.
                body_pending = false;
                replayable = false;
                let sent = &mut traffic.up;
                send_body(client, upstream, info.framing, body_waits, sent).await?;
            }
            continue;
        }
        if status == 101 {
            return Err(Exchange::Failed(Failure {
                err: GatewayError::Unsupported("protocol upgrade"),
                respond: false,
            }));
        }
        copy_body_counted(
            upstream,
            &mut client.stream,
            framing,
            relay_waits,
            &mut traffic.down,
        )
        .await
        .map_err(|e| match e {
            CopyError::Read(e) => Exchange::Failed(Failure {
                err: GatewayError::UpstreamIo(e),
                respond: false,
            }),
            CopyError::Write(e) => client_gone(e),
            CopyError::Malformed => Exchange::Failed(Failure {
                err: GatewayError::BadResponse(crate::parse::http_head::HeadError::BadFraming),
                respond: false,
            }),
        })?;
        debug!(status, "forwarded");
        return Ok(ExchangeOk {
            upstream_reusable: upstream_keep && upstream.buffered().is_empty(),
            client_reusable: client_keep,
        });
    }
}
