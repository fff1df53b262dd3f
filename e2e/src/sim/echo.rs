//! The echo/target server, over HTTP and HTTPS: answers every request with the
//! source address it saw, so a test (or the checker's EGRESS probe) can tell which
//! proxy carried it. `GET /bytes/N` streams N bytes for transfer tests. Never
//! buffers more than one chunk per response.

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use proxy_pool_api::echo::{self, LEAK_HEADERS};
use proxy_pool_runtime::net::accept_or_stop;
use serde::Serialize;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::debug;

use super::core::SimCore;
use super::tls::EchoTls;

/// Largest body `GET /bytes/N` serves.
pub const MAX_ECHO_BYTES: u64 = 64 * 1024 * 1024;
const CHUNK: usize = 16 * 1024;
static FILLER: [u8; CHUNK] = [b'x'; CHUNK];
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the echo server answers (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EchoReply {
    /// `ip:port` the server saw the connection come from.
    pub remote: String,
    /// The `Host` header, if any.
    pub host: Option<String>,
    /// Path and query.
    pub path: String,
    /// Request method.
    pub method: String,
    /// Whether the request came over TLS.
    pub tls: bool,
    /// Headers that reveal a proxy or its client (`via`, `forwarded`,
    /// `x-forwarded-for`, `x-real-ip`; `proxy-authorization` shown as `<redacted>`),
    /// for anonymity probes. Absent when none was sent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub proxy_headers: BTreeMap<String, String>,
}

/// Accepts until shutdown; `tls` turns this into the HTTPS echo server.
pub(crate) async fn run(core: Arc<SimCore>, listener: TcpListener, tls: Option<EchoTls>) {
    let limit = Arc::new(Semaphore::new(core.settings.max_echo_connections));
    let on_error = |err: &std::io::Error| debug!(error = %err, "echo accept failed");
    let pause = Duration::from_millis(50);
    while let Some((stream, peer)) =
        accept_or_stop(&listener, core.token.cancelled(), pause, on_error).await
    {
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            debug!(%peer, "echo connection cap reached");
            continue;
        };
        let token = core.token.clone();
        let tls = tls.clone();
        core.tracker.spawn(async move {
            let _permit = permit;
            let serve = async {
                match tls {
                    None => serve_conn(stream, peer, false).await,
                    Some(tls) => {
                        let accept = tls.acceptor.accept(stream);
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
                            Ok(Ok(stream)) => serve_conn(stream, peer, true).await,
                            Ok(Err(err)) => debug!(error = %err, "echo TLS handshake failed"),
                            Err(_) => debug!("echo TLS handshake timed out"),
                        }
                    }
                }
            };
            tokio::select! {
                () = serve => {}
                () = token.cancelled() => {}
            }
        });
    }
}

pub(crate) async fn serve_conn<S>(stream: S, peer: SocketAddr, tls: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service =
        service_fn(move |req| async move { Ok::<_, Infallible>(respond(&req, peer, tls)) });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT);
    if let Err(err) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        debug!(error = %err, "echo connection ended with an error");
    }
}

pub(crate) type EchoBody = BoxBody<Bytes, Infallible>;

pub(crate) fn respond(req: &Request<Incoming>, peer: SocketAddr, tls: bool) -> Response<EchoBody> {
    let path = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    if let Some(n) = req.uri().path().strip_prefix("/bytes/") {
        return match n.parse::<u64>() {
            Ok(n) if n <= MAX_ECHO_BYTES => {
                let mut resp = Response::new(Repeat { remaining: n }.boxed());
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                resp
            }
            _ => status(StatusCode::BAD_REQUEST),
        };
    }
    let reply = EchoReply {
        remote: peer.to_string(),
        host: req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned),
        path: path.to_owned(),
        method: req.method().to_string(),
        tls,
        proxy_headers: leaks(req.headers()),
    };
    let body = serde_json::to_vec(&reply).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn leaks(headers: &http::HeaderMap) -> BTreeMap<String, String> {
    LEAK_HEADERS
        .iter()
        .filter_map(|name| {
            let value = String::from_utf8_lossy(headers.get(*name)?.as_bytes()).into_owned();
            Some(((*name).to_owned(), echo::shown_value(name, value)))
        })
        .collect()
}

fn status(code: StatusCode) -> Response<EchoBody> {
    let mut resp = Response::new(Full::new(Bytes::new()).boxed());
    *resp.status_mut() = code;
    resp
}

/// A body of `remaining` filler bytes, served from one static chunk.
#[derive(Debug)]
struct Repeat {
    remaining: u64,
}

impl Body for Repeat {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = usize::try_from(self.remaining).unwrap_or(CHUNK).min(CHUNK);
        self.remaining -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&FILLER[..n])))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leak_headers_are_reported_and_credentials_redacted() {
        let mut headers = http::HeaderMap::new();
        headers.insert("via", HeaderValue::from_static("1.1 some-proxy"));
        headers.insert(
            "proxy-authorization",
            HeaderValue::from_static("Basic c2VjcmV0"),
        );
        headers.insert("accept", HeaderValue::from_static("*/*"));
        let leaks = leaks(&headers);
        assert_eq!(leaks.len(), 2);
        assert_eq!(leaks["via"], "1.1 some-proxy");
        assert_eq!(leaks["proxy-authorization"], "<redacted>");
        assert!(super::leaks(&http::HeaderMap::new()).is_empty());
    }

    #[test]
    fn repeat_body_reports_its_exact_size() {
        let body = Repeat { remaining: 40_000 };
        assert_eq!(body.size_hint().exact(), Some(40_000));
        assert!(Repeat { remaining: 0 }.is_end_stream());
    }
}
