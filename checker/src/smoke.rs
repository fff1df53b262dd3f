//! `proxy-pool-checker smoke-test`, the chart's `helm test` hook: one extract call to
//! the Distribution API with a client's API key (at least one proxy must come back),
//! then one plain-HTTP request through a gateway with the client's proxy credentials
//! (a 2xx must come back). Every step has a deadline; errors name the step and the
//! status, never a credential or a returned proxy.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::handshake::basic_auth;
use crate::model::Credentials;
use proxy_pool_api::controlplane::model::Secret;

/// Largest response body read (the extract answer for one proxy is far smaller).
const MAX_BODY: usize = 1 << 20;

/// Why the smoke test failed.
#[derive(Debug, thiserror::Error)]
pub enum SmokeError {
    /// A URL or address argument is unusable.
    #[error("{0}")]
    Argument(&'static str),
    /// A step did not finish in time.
    #[error("{0}: no answer within the deadline")]
    Timeout(&'static str),
    /// Connecting or talking HTTP failed.
    #[error("{step}: {message}")]
    Transport {
        /// The step.
        step: &'static str,
        /// What failed (no credentials in it).
        message: String,
    },
    /// The answer was not the expected one.
    #[error("{step}: {message}")]
    Unexpected {
        /// The step.
        step: &'static str,
        /// What came back.
        message: String,
    },
}

/// One HTTP/1.1 exchange with `addr` (`host:port`), the request as given.
async fn exchange(
    step: &'static str,
    addr: &str,
    req: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), SmokeError> {
    let transport = |e: &dyn std::fmt::Display| SmokeError::Transport {
        step,
        message: e.to_string(),
    };
    let run = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| transport(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| transport(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let res = sender.send_request(req).await.map_err(|e| transport(&e))?;
        let status = res.status();
        let body = Limited::new(res.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| transport(&*e))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| SmokeError::Timeout(step))?
}

fn authority(uri: &Uri) -> Result<String, SmokeError> {
    let host = uri
        .host()
        .ok_or(SmokeError::Argument("a URL has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    Ok(format!("{host}:{port}"))
}

/// `POST <url>` with `{"count": 1}` and `X-API-Key`; the number of proxies returned.
pub async fn extract(url: &Uri, api_key: &str, timeout: Duration) -> Result<usize, SmokeError> {
    const STEP: &str = "extract";
    if url.scheme_str() != Some("http") {
        return Err(SmokeError::Argument(
            "--extract-url must be http://host:port/path",
        ));
    }
    let addr = authority(url)?;
    let path = url.path_and_query().map_or("/", |p| p.as_str());
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, addr.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-api-key", api_key)
        .header("x-request-id", format!("helm-test-{}", std::process::id()))
        .body(Full::new(Bytes::from_static(b"{\"count\":1}")))
        .map_err(|_| SmokeError::Argument("the API key is not a valid header value"))?;
    let (status, body) = exchange(STEP, &addr, req, timeout).await?;
    if !status.is_success() {
        return Err(SmokeError::Unexpected {
            step: STEP,
            message: format!("HTTP {status}"),
        });
    }
    let json: serde_json::Value =
        serde_json::from_slice(&body).map_err(|_| SmokeError::Unexpected {
            step: STEP,
            message: "the answer is not JSON".into(),
        })?;
    let returned = json["proxies"].as_array().map_or(0, Vec::len);
    if returned == 0 {
        return Err(SmokeError::Unexpected {
            step: STEP,
            message: "no proxy returned".into(),
        });
    }
    Ok(returned)
}

/// `GET <target>` (absolute URI) through the HTTP proxy at `gateway` (`host:port`)
/// with `Proxy-Authorization: Basic`; the status.
pub async fn through_gateway(
    gateway: &str,
    username: &str,
    password: &str,
    target: &Uri,
    timeout: Duration,
) -> Result<StatusCode, SmokeError> {
    const STEP: &str = "request through the gateway";
    if target.scheme_str() != Some("http") {
        return Err(SmokeError::Argument("--target must be an http:// URL"));
    }
    let credentials = Credentials {
        username: username.to_owned(),
        password: Secret::new(password),
    };
    let req = Request::builder()
        .method(Method::GET)
        .uri(target.clone())
        .header(header::HOST, authority(target)?)
        .header(header::PROXY_AUTHORIZATION, basic_auth(&credentials))
        .body(Full::new(Bytes::new()))
        .map_err(|_| SmokeError::Argument("the proxy credentials are not a valid header value"))?;
    let (status, _) = exchange(STEP, gateway, req, timeout).await?;
    if !status.is_success() {
        return Err(SmokeError::Unexpected {
            step: STEP,
            message: format!("HTTP {status}"),
        });
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Accepts one connection, returns the request head it read and answers `reply`.
    async fn one_shot(reply: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut buf = vec![0u8; 4096];
            let mut len = 0;
            while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                len += s.read(&mut buf[len..]).await.expect("read");
            }
            s.write_all(reply.as_bytes()).await.expect("write");
            String::from_utf8_lossy(&buf[..len]).into_owned()
        });
        (addr, task)
    }

    #[tokio::test]
    async fn extract_posts_with_the_api_key_and_needs_a_proxy() {
        let body = r#"{"proxies":[{"id":"p1"}]}"#;
        let reply = Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_boxed_str(),
        );
        let (addr, seen) = one_shot(reply).await;
        let url: Uri = format!("http://{addr}/api/v1/proxies/extract")
            .parse()
            .expect("url");
        let n = extract(&url, "k-123", Duration::from_secs(5))
            .await
            .expect("extract");
        assert_eq!(n, 1);
        let head = seen.await.expect("server");
        assert!(
            head.starts_with("POST /api/v1/proxies/extract HTTP/1.1"),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase().contains("x-api-key: k-123"),
            "{head}"
        );

        let (addr, _) =
            one_shot("HTTP/1.1 200 OK\r\ncontent-length: 14\r\n\r\n{\"proxies\":[]}").await;
        let url: Uri = format!("http://{addr}/x").parse().expect("url");
        let err = extract(&url, "k", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no proxy returned"), "{err}");

        let (addr, _) = one_shot("HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n").await;
        let url: Uri = format!("http://{addr}/x").parse().expect("url");
        let err = extract(&url, "secret-key", Duration::from_secs(5))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("401") && !text.contains("secret-key"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_gateway_request_is_absolute_form_with_basic_credentials() {
        let (addr, seen) = one_shot("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
        let target: Uri = "http://localhost:8901/helm-test".parse().expect("target");
        let status = through_gateway(
            &addr,
            "crawlerbot-region-shanghai",
            "pw",
            &target,
            Duration::from_secs(5),
        )
        .await
        .expect("through the gateway");
        assert_eq!(status, StatusCode::OK);
        let head = seen.await.expect("server");
        assert!(
            head.starts_with("GET http://localhost:8901/helm-test HTTP/1.1"),
            "{head}"
        );
        let basic =
            base64::engine::general_purpose::STANDARD.encode("crawlerbot-region-shanghai:pw");
        assert!(head.contains(&format!("Basic {basic}")), "{head}");

        let (addr, _) =
            one_shot("HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
                .await;
        let err = through_gateway(&addr, "u", "wrong", &target, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("407"), "{err}");
    }
}
