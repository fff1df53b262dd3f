//! The real prober: every check goes *through* the proxy under test, over real
//! sockets, bounded by the task deadline and a per-check timeout. Logs at DEBUG at
//! most, and never a credential.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::collections::BTreeMap;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};
use tracing::debug;

use proxy_pool_api::egress::EgressPolicy;

use crate::handshake::{self, ConnectTo, basic_auth, dial};
use crate::model::{Check, FailureCode, Observation, ProbeTask, Protocol};
use crate::ports::Prober;

/// Settings of the real prober.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProberOptions {
    /// Echo server (plain HTTP) that reports the source address it saw.
    pub echo: SocketAddr,
    /// Path requested from the echo server.
    pub echo_path: String,
    /// Target of BASIC's tunnel (default: the echo server).
    pub basic_target: Option<(String, u16)>,
    /// Bound on one check (the task deadline bounds it too).
    pub check_timeout: Duration,
    /// Largest echo response body read.
    pub max_echo_bytes: usize,
    /// Proxies on addresses this refuses are never dialled (`egress_denied`).
    pub egress: EgressPolicy,
}

impl ProberOptions {
    /// Defaults around an echo server.
    pub fn new(echo: SocketAddr) -> Self {
        Self {
            echo,
            echo_path: "/proxy-pool-checker".into(),
            basic_target: None,
            check_timeout: Duration::from_secs(5),
            max_echo_bytes: 64 * 1024,
            egress: EgressPolicy::default(),
        }
    }
}

/// Probes over real sockets.
#[derive(Clone, Debug)]
pub struct NetProber {
    options: ProberOptions,
}

#[derive(Debug, Default)]
struct Outcome {
    failure: Option<FailureCode>,
    egress: Option<IpAddr>,
}

impl From<Result<(), FailureCode>> for Outcome {
    fn from(r: Result<(), FailureCode>) -> Self {
        Self {
            failure: r.err(),
            egress: None,
        }
    }
}

/// Aborts the spawned HTTP connection driver when the check ends, however it ends.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Deserialize)]
struct Echo {
    remote: String,
    #[serde(default, alias = "proxyHeaders")]
    proxy_headers: BTreeMap<String, String>,
}

impl NetProber {
    /// A prober.
    pub fn new(options: ProberOptions) -> Self {
        Self { options }
    }

    async fn tunnel(
        &self,
        task: &ProbeTask,
        host: &str,
        port: u16,
    ) -> Result<TcpStream, FailureCode> {
        let mut stream = dial(&task.dial.host, task.dial.port, &self.options.egress).await?;
        let creds = task.dial.credentials.as_ref();
        let to = ConnectTo { host, port, creds };
        handshake::connect(task.dial.protocol, &mut stream, to).await?;
        Ok(stream)
    }

    async fn run_check(&self, task: &ProbeTask, check: &Check) -> Outcome {
        match check {
            Check::Basic => {
                let (host, port) = match &self.options.basic_target {
                    Some((h, p)) => (h.clone(), *p),
                    None => (self.options.echo.ip().to_string(), self.options.echo.port()),
                };
                self.tunnel(task, &host, port).await.map(drop).into()
            }
            Check::Target { host, port, .. } => {
                self.tunnel(task, host, *port).await.map(drop).into()
            }
            Check::Egress => self.egress(task).await,
        }
    }

    /// GET the echo server through the proxy: absolute-URI forwarding for HTTP
    /// proxies (so forwarding headers show), a SOCKS5 tunnel otherwise.
    async fn egress(&self, task: &ProbeTask) -> Outcome {
        let echo = self.options.echo;
        let authority = echo.to_string();
        let (stream, uri) = match task.dial.protocol {
            Protocol::Http => {
                match dial(&task.dial.host, task.dial.port, &self.options.egress).await {
                    Ok(s) => (s, format!("http://{authority}{}", self.options.echo_path)),
                    Err(f) => return Err(f).into(),
                }
            }
            Protocol::Socks5 => {
                match self.tunnel(task, &echo.ip().to_string(), echo.port()).await {
                    Ok(s) => (s, self.options.echo_path.clone()),
                    Err(f) => return Err(f).into(),
                }
            }
        };
        let Ok(local) = stream.local_addr() else {
            return Err(FailureCode::CheckerError).into();
        };
        let mut req = Request::get(uri)
            .header(header::HOST, &authority)
            .header(header::USER_AGENT, "proxy-pool-checker");
        if let (Protocol::Http, Some(c)) = (task.dial.protocol, &task.dial.credentials) {
            req = req.header(header::PROXY_AUTHORIZATION, basic_auth(c));
        }
        let Ok(req) = req.body(Empty::<Bytes>::new()) else {
            return Err(FailureCode::CheckerError).into();
        };
        let body = match self.fetch(stream, req).await {
            Ok(b) => b,
            Err(f) => return Err(f).into(),
        };
        let Ok(echo) = serde_json::from_slice::<Echo>(&body) else {
            return Err(FailureCode::BadResponse).into();
        };
        let Ok(seen) = echo.remote.parse::<SocketAddr>() else {
            return Err(FailureCode::BadResponse).into();
        };
        let ours = local.ip().to_string();
        let leaked =
            seen.ip() == local.ip() || echo.proxy_headers.values().any(|v| v.contains(&ours));
        Outcome {
            failure: leaked.then_some(FailureCode::ClientLeaked),
            egress: Some(seen.ip()),
        }
    }

    async fn fetch(
        &self,
        stream: TcpStream,
        req: Request<Empty<Bytes>>,
    ) -> Result<Vec<u8>, FailureCode> {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| FailureCode::HandshakeFailed)?;
        let _driver = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let resp = sender
            .send_request(req)
            .await
            .map_err(|_| FailureCode::HandshakeFailed)?;
        match resp.status() {
            s if s.is_success() => {}
            StatusCode::PROXY_AUTHENTICATION_REQUIRED => return Err(FailureCode::AuthRejected),
            StatusCode::BAD_GATEWAY
            | StatusCode::GATEWAY_TIMEOUT
            | StatusCode::SERVICE_UNAVAILABLE => {
                return Err(FailureCode::TargetUnreachable);
            }
            _ => return Err(FailureCode::BadResponse),
        }
        let mut body = resp.into_body();
        let mut buf = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| FailureCode::BadResponse)?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > self.options.max_echo_bytes {
                    return Err(FailureCode::BadResponse);
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(buf)
    }
}

#[async_trait]
impl Prober for NetProber {
    async fn probe(&self, task: &ProbeTask) -> Vec<Observation> {
        let mut out = Vec::with_capacity(task.checks.len());
        for check in &task.checks {
            let started = Instant::now();
            if started >= task.deadline {
                break;
            }
            let limit = task.deadline.min(started + self.options.check_timeout);
            let outcome = timeout_at(limit, self.run_check(task, check))
                .await
                .unwrap_or(Outcome {
                    failure: Some(FailureCode::Timeout),
                    egress: None,
                });
            let success = outcome.failure.is_none();
            debug!(
                task = %task.task_id,
                tier = check.tier().as_str(),
                success,
                failure = outcome.failure.map(FailureCode::as_str),
                "check done"
            );
            out.push(Observation {
                task_id: task.task_id.clone(),
                proxy_id: task.proxy_id.clone(),
                tier: check.tier(),
                routing: match check {
                    Check::Target { routing, .. } => Some(routing.clone()),
                    _ => None,
                },
                success,
                latency: Some(started.elapsed()),
                failure: outcome.failure,
                egress: outcome.egress,
                observed_at_ms: crate::model::now_ms(),
            });
            if *check == Check::Basic && !success {
                break;
            }
        }
        out
    }
}
