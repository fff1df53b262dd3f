//! The HTTP proxy kind: `CONNECT` tunnels and absolute-URI forwarding with
//! keep-alive, both behind `Proxy-Authorization: Basic`. Never forwards beyond
//! loopback and never logs credentials.

use base64::Engine as _;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::debug;

use super::ConnCtx;
use super::upstream::{Budgeted, Target, connect};
use crate::sim::audit::{UseGuard, UseKind};
use crate::sim::echo;

type Body = BoxBody<Bytes, hyper::Error>;

/// The kept-alive upstream connection of one client connection and its authority.
/// A plain mutex: it is only taken and put back, never held across `.await`.
type UpstreamSlot = Arc<Mutex<Option<(String, SendRequest<Incoming>)>>>;

/// Largest request head the proxy buffers.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Serves one client connection until it closes.
pub(super) async fn serve(ctx: Arc<ConnCtx>, stream: TcpStream) {
    let slot = UpstreamSlot::default();
    let svc_ctx = ctx.clone();
    let service = service_fn(move |req| handle(svc_ctx.clone(), slot.clone(), req));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.core.settings.handshake_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(err) = conn.await {
        debug!(error = %err, "http proxy connection ended with an error");
    }
}

async fn handle(
    ctx: Arc<ConnCtx>,
    slot: UpstreamSlot,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if !authorized(&ctx, req.headers()) {
        debug!("proxy authentication failed");
        let mut resp = text(
            StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            "proxy authentication required\n",
        );
        resp.headers_mut().insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"vendor-sim\""),
        );
        return Ok(resp);
    }
    // The auditor's record of this use: until the tunnel ends, or the response body
    // was sent.
    let info = &ctx.proxy.info;
    if req.method() == Method::CONNECT {
        let used = ctx
            .core
            .audit
            .begin(&info.id, info.port, ctx.peer, UseKind::Connect);
        if let Some(a) = req.uri().authority() {
            used.target(a.as_str());
        }
        Ok(tunnel(ctx, req, used).await)
    } else {
        let used = ctx
            .core
            .audit
            .begin(&info.id, info.port, ctx.peer, UseKind::Forward);
        let uri = req.uri();
        used.target(format!(
            "{}{}",
            uri.authority().map_or("", |a| a.as_str()),
            uri.path()
        ));
        Ok(forward(ctx, slot, req)
            .await
            .map(|body| Guarded { body, _used: used }.boxed()))
    }
}

/// A response body that ends its use (for the auditor) when it is done or dropped.
struct Guarded {
    body: Body,
    _used: UseGuard,
}

impl hyper::body::Body for Guarded {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

fn authorized(ctx: &ConnCtx, headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::PROXY_AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, encoded)) = value.trim().split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let Some(colon) = decoded.iter().position(|&b| b == b':') else {
        return false;
    };
    ctx.credentials_ok(&decoded[..colon], &decoded[colon + 1..])
}

/// `CONNECT host:port`: dial the target first so failures get a real status, then
/// answer 200 and relay the upgraded connection in a task bound to the proxy's life.
async fn tunnel(ctx: Arc<ConnCtx>, mut req: Request<Incoming>, used: UseGuard) -> Response<Body> {
    let Some(target) = req
        .uri()
        .authority()
        .and_then(|a| Target::parse_authority(a.as_str()))
    else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port\n");
    };
    if ctx.echoes_inline(&target) {
        return inline_echo_tunnel(ctx, req, used);
    }
    let settings = &ctx.core.settings;
    let upstream = match connect(&target, ctx.egress_ip(), settings.connect_timeout).await {
        Ok(stream) => stream,
        Err(err) => {
            debug!(error = %err, "CONNECT dial failed");
            return text(err.http_status(), "cannot reach target\n");
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let tunnel_ctx = ctx.clone();
    ctx.core.tracker.spawn(async move {
        let token = tunnel_ctx.proxy.token.clone();
        let relay = async {
            let upgraded = match on_upgrade.await {
                Ok(upgraded) => upgraded,
                Err(err) => return debug!(error = %err, "CONNECT upgrade failed"),
            };
            let mut client = TokioIo::new(upgraded);
            tunnel_ctx
                .relay(&mut client, upstream, &used, "CONNECT")
                .await;
        };
        tokio::select! {
            () = relay => {}
            () = token.cancelled() => debug!("tunnel closed by proxy expiry"),
        }
    });
    Response::new(empty())
}

/// `CONNECT` to the echo server with `inlineEcho`: answer 200 and serve the echo
/// protocol on the upgraded client connection itself, in a task bound to the proxy's
/// life (and holding the connection's permit, like a dialled tunnel).
fn inline_echo_tunnel(
    ctx: Arc<ConnCtx>,
    mut req: Request<Incoming>,
    used: UseGuard,
) -> Response<Body> {
    let on_upgrade = hyper::upgrade::on(&mut req);
    let tunnel_ctx = ctx.clone();
    ctx.core.tracker.spawn(async move {
        let _used = used;
        let token = tunnel_ctx.proxy.token.clone();
        let serve = async {
            match on_upgrade.await {
                Ok(upgraded) => {
                    echo::serve_conn(TokioIo::new(upgraded), tunnel_ctx.inline_peer(), false).await;
                }
                Err(err) => debug!(error = %err, "CONNECT upgrade failed"),
            }
        };
        tokio::select! {
            () = serve => {}
            () = token.cancelled() => debug!("inline echo tunnel closed by proxy expiry"),
        }
    });
    Response::new(empty())
}

/// Absolute-URI forwarding (`GET http://host/path`), reusing one kept-alive upstream
/// connection per client connection while the authority stays the same.
async fn forward(ctx: Arc<ConnCtx>, slot: UpstreamSlot, req: Request<Incoming>) -> Response<Body> {
    let uri = req.uri();
    if uri.scheme() != Some(&http::uri::Scheme::HTTP) {
        return text(
            StatusCode::BAD_REQUEST,
            "expected an absolute http:// URI\n",
        );
    }
    let Some(authority) = uri.authority() else {
        return text(StatusCode::BAD_REQUEST, "missing host\n");
    };
    let key = format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(80)
    );
    let Some(target) = Target::parse_authority(&key) else {
        return text(StatusCode::BAD_REQUEST, "bad host\n");
    };
    if ctx.echoes_inline(&target) {
        // What a dialled echo would have seen: no hop-by-hop headers, no credentials.
        let mut req = req;
        strip_hop_by_hop(req.headers_mut());
        return echo::respond(&req, ctx.inline_peer(), false)
            .map(|body| body.map_err(|never| match never {}).boxed());
    }
    let host_header = HeaderValue::from_str(authority.as_str()).ok();
    let cached = slot.lock().take();
    let mut reused = None;
    if let Some((cached_key, mut sender)) = cached
        && cached_key == key
        && sender.ready().await.is_ok()
    {
        reused = Some(sender);
    }
    let mut sender = match reused {
        Some(sender) => sender,
        None => match open(&ctx, &target).await {
            Ok(sender) => sender,
            Err(resp) => return resp,
        },
    };
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    parts.uri = match path.parse() {
        Ok(uri) => uri,
        Err(_) => return text(StatusCode::BAD_REQUEST, "bad path\n"),
    };
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    if let (false, Some(host)) = (parts.headers.contains_key(header::HOST), host_header) {
        parts.headers.insert(header::HOST, host);
    }
    let resp = match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => resp,
        Err(err) => {
            debug!(error = %err, "forwarded request failed");
            return text(StatusCode::BAD_GATEWAY, "upstream request failed\n");
        }
    };
    *slot.lock() = Some((key, sender));
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, body.boxed())
}

async fn open(ctx: &ConnCtx, target: &Target) -> Result<SendRequest<Incoming>, Response<Body>> {
    let settings = &ctx.core.settings;
    let stream = connect(target, ctx.egress_ip(), settings.connect_timeout)
        .await
        .map_err(|err| {
            debug!(error = %err, "forward dial failed");
            text(err.http_status(), "cannot reach target\n")
        })?;
    let io = TokioIo::new(Budgeted::new(stream, ctx.failure.byte_budget()));
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|_| text(StatusCode::BAD_GATEWAY, "upstream handshake failed\n"))?;
    let token = ctx.proxy.token.clone();
    ctx.core.tracker.spawn(async move {
        tokio::select! {
            res = conn => if let Err(err) = res { debug!(error = %err, "upstream connection ended") },
            () = token.cancelled() => {}
        }
    });
    Ok(sender)
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), including those named in `Connection`.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        HeaderName::from_static("keep-alive"),
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from_static(body.as_bytes()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert(
            header::PROXY_AUTHORIZATION,
            HeaderValue::from_static("Basic eDp5"),
        );
        headers.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key(header::ACCEPT));
    }
}
