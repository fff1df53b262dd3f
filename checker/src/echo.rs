//! The echo endpoint EGRESS checks need: a plain-HTTP server that answers every GET
//! with the source address it saw and the proxy-revealing headers it received
//! (`{"remote": "ip:port", "proxyHeaders": {...}}`). It must be reachable from the
//! vendor proxies' egress (usually a public address), so it runs apart from the
//! cluster's private network: `proxy-pool-checker echo --listen 0.0.0.0:8080`.
//!
//! Bounded: connections at once in total and per source address (more are closed at
//! accept), time to send a request head, one request per connection, no request body
//! read.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use proxy_pool_api::echo::{self, LEAK_HEADERS};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::listen::Limits;

/// The echo server's limits unless told otherwise: 1024 connections at once, shared
/// fairly between sources (more are closed at accept), 64 from one source address, 10 s
/// for a request head.
pub const DEFAULT_LIMITS: Limits = Limits {
    max_connections: 1024,
    max_per_source: 64,
    header_timeout: Duration::from_secs(10),
};

/// Serves until `stop` is cancelled.
pub async fn serve(listener: TcpListener, limits: Limits, stop: CancellationToken) {
    crate::listen::serve("echo", listener, limits, stop, answer).await;
}

fn answer(req: &Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            Bytes::from_static(b"GET only\n"),
        );
    }
    let mut headers = BTreeMap::new();
    for name in LEAK_HEADERS {
        let values: Vec<&str> = req
            .headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("<non-ascii>"))
            .collect();
        if values.is_empty() {
            continue;
        }
        headers.insert(name.to_owned(), echo::shown_value(name, values.join(", ")));
    }
    let body = serde_json::json!({
        "remote": peer.to_string(),
        "proxyHeaders": headers,
    });
    reply(StatusCode::OK, Bytes::from(body.to_string()))
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut res = crate::listen::response(status, "application/json", body);
    res.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, head: &str) -> (String, SocketAddr) {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let local = s.local_addr().expect("local");
        s.write_all(head.as_bytes()).await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        (out, local)
    }

    fn json_body(response: &str) -> serde_json::Value {
        let (_, body) = response.split_once("\r\n\r\n").expect("head and body");
        serde_json::from_str(body).expect("JSON body")
    }

    #[tokio::test]
    async fn reports_the_source_and_the_revealing_headers_never_credentials() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, DEFAULT_LIMITS, stop.clone()));

        let (res, local) = get(
            addr,
            "GET /proxy-pool-checker HTTP/1.1\r\nHost: x\r\nVia: 1.1 vendor\r\n\
             X-Forwarded-For: 10.0.0.7\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n",
        )
        .await;
        assert!(res.starts_with("HTTP/1.1 200"), "{res}");
        let v = json_body(&res);
        assert_eq!(v["remote"], local.to_string());
        assert_eq!(v["proxyHeaders"]["via"], "1.1 vendor");
        assert_eq!(v["proxyHeaders"]["x-forwarded-for"], "10.0.0.7");
        assert_eq!(v["proxyHeaders"]["proxy-authorization"], "<redacted>");
        assert!(!res.contains("c2VjcmV0"), "credentials never echoed: {res}");

        let (res, _) = get(addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(json_body(&res)["proxyHeaders"], serde_json::json!({}));

        let (res, _) = get(
            addr,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(res.starts_with("HTTP/1.1 405"), "{res}");

        stop.cancel();
        server.await.expect("server stops on cancel");
    }

    #[tokio::test]
    async fn a_client_that_sends_no_head_is_cut_off_and_others_are_served() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let options = Limits {
            max_connections: 2,
            max_per_source: 1,
            header_timeout: Duration::from_millis(300),
        };
        let server = tokio::spawn(serve(listener, options, stop.clone()));
        // Holds 127.0.0.1's only slot without sending anything.
        let mut idle = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A second connection from the same source is closed at once...
        let mut excess = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut buf = Vec::new();
        let n = tokio::time::timeout(Duration::from_millis(250), excess.read_to_end(&mut buf))
            .await
            .expect("closed before the header timeout");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        // ...while another source is served.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.2:0".parse().expect("addr"))
            .expect("bind");
        let mut other = socket.connect(addr).await.expect("connect");
        other
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut res = String::new();
        other.read_to_string(&mut res).await.expect("read");
        assert!(res.starts_with("HTTP/1.1 200"), "{res}");
        // The idle client is cut off at the header timeout.
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut buf))
            .await
            .expect("cut off");
        stop.cancel();
        server.await.expect("server stops on cancel");
    }
}
