//! The `CheckerControlPlane` binding of the checker's ports: register, keep one
//! `StreamTasks` stream open (reconnecting with jittered, bounded backoff), buffer the
//! pushed tasks in a bounded channel for [`TaskSource::next_tasks`], and send
//! observations with `ReportObservations`. Protobuf is converted to the checker's
//! domain types here and nowhere else. Credentials pass through, never logged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use proxy_pool_api::controlplane::client::{
    Backoff, ClientOptions, ClientTransport, Endpoints, connect,
};
use proxy_pool_api::controlplane::limits;
use proxy_pool_api::controlplane::model as wire;
use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::checker_control_plane_client::CheckerControlPlaneClient;
use proxy_pool_identity_client::WorkerTls;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use crate::model::{Check, Observation, ProbeTask, Tier, now_ms};
use crate::ports::{BindingError, ObservationSink, TaskSource};

/// Protocol versions this checker speaks.
pub const SUPPORTED_PROTOCOL_VERSIONS: [u32; 1] = [1];

/// Settings of the binding.
#[derive(Clone, Debug)]
pub struct GrpcOptions {
    /// `https://controller:port` (or `http://127.0.0.1:port` for the loopback fixture).
    pub endpoint: String,
    /// mTLS or loopback plaintext.
    pub transport: ClientTransport,
    /// Connection limits.
    pub client: ClientOptions,
    /// This checker's ID (must match its certificate).
    pub checker_id: String,
    /// This process.
    pub instance_id: String,
    /// Tasks outstanding at once (the runner's concurrency).
    pub max_concurrency: u32,
    /// Tiers it runs.
    pub tiers: Vec<Tier>,
    /// Wait for a first task in `next_tasks` before answering "none".
    pub idle_wait: Duration,
}

type Client = CheckerControlPlaneClient<Channel>;

#[derive(Debug)]
struct Shared {
    options: GrpcOptions,
    /// `options.endpoint` split: the controller replicas, tried in turn.
    endpoints: Endpoints,
    /// When set, replaces `options.transport` with material read per connection.
    tls: Option<(WorkerTls, String)>,
    session: Mutex<Option<(Client, String)>>,
    tasks: tokio::sync::Mutex<mpsc::Receiver<ProbeTask>>,
}

/// The binding; clone it to use it as both ports.
#[derive(Clone, Debug)]
pub struct GrpcBinding {
    shared: Arc<Shared>,
}

fn wire_tier(t: Tier) -> pb::CheckTier {
    match t {
        Tier::Basic => pb::CheckTier::Basic,
        Tier::Egress => pb::CheckTier::Egress,
        Tier::Target => pb::CheckTier::Target,
    }
}

/// `host:port` or `scheme://host[:port][/…]` of a TARGET check.
pub fn target_host_port(url: &str) -> Option<(String, u16)> {
    let (default_port, rest) = match url.split_once("://") {
        Some(("https", rest)) => (Some(443), rest),
        Some(("http", rest)) => (Some(80), rest),
        Some(_) => return None,
        None => (None, url),
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, p) = v6.split_once(']')?;
            (h, p.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port?,
    };
    (!host.is_empty() && port != 0).then(|| (host.to_owned(), port))
}

/// A wire task as a probe task (one check); `None` when it cannot be run.
pub fn task_from_wire(t: wire::CheckTask) -> Option<ProbeTask> {
    let check = match t.tier {
        wire::CheckTier::Basic => Check::Basic,
        wire::CheckTier::Egress => Check::Egress,
        wire::CheckTier::Target => {
            let (host, port) = target_host_port(&t.target?.url)?;
            Check::Target {
                routing: t.routing.unwrap_or_default(),
                host,
                port,
            }
        }
    };
    let left = u64::try_from(t.deadline_ms.saturating_sub(now_ms())).unwrap_or(0);
    Some(ProbeTask {
        task_id: t.task_id,
        proxy_id: t.proxy.id,
        dial: t.proxy.dial,
        checks: vec![check],
        deadline: Instant::now() + Duration::from_millis(left),
    })
}

impl GrpcBinding {
    /// Starts the stream loop (until `shutdown`) and returns the binding.
    pub fn start(options: GrpcOptions, shutdown: CancellationToken) -> Self {
        Self::start_with_tls(options, None, shutdown)
    }

    /// Like [`GrpcBinding::start`], but every (re)connection uses mTLS with material
    /// read from `tls` at that moment (a renewed certificate or rewritten files),
    /// verifying the controller as the given server name.
    pub fn start_with_tls(
        options: GrpcOptions,
        tls: Option<(WorkerTls, String)>,
        shutdown: CancellationToken,
    ) -> Self {
        let buffer = usize::try_from(options.max_concurrency)
            .unwrap_or(1)
            .clamp(1, 4_096);
        let (tx, rx) = mpsc::channel(buffer);
        let shared = Arc::new(Shared {
            endpoints: Endpoints::parse_lenient(&options.endpoint),
            options,
            tls,
            session: Mutex::new(None),
            tasks: tokio::sync::Mutex::new(rx),
        });
        tokio::spawn(stream_loop(shared.clone(), tx, shutdown));
        Self { shared }
    }

    /// Whether a session is registered right now.
    pub fn registered(&self) -> bool {
        self.shared.session.lock().is_some()
    }
}

async fn register(shared: &Shared) -> Result<(Client, String), String> {
    let o = &shared.options;
    let transport = match &shared.tls {
        None => o.transport.clone(),
        Some((tls, server_name)) => {
            let m = tls.material().map_err(|e| format!("TLS material: {e}"))?;
            ClientTransport::Mtls {
                ca_pem: m.ca_pem,
                cert_pem: m.cert_pem,
                key_pem: Secret::new(m.key_pem),
                server_name: server_name.clone(),
            }
        }
    };
    let channel = connect(shared.endpoints.current(), &transport, &o.client)
        .await
        .map_err(|e| e.to_string())?;
    // Tasks in, observations out: each direction sized to its largest message.
    let mut client = Client::new(channel)
        .max_decoding_message_size(limits::CHECK_TASK)
        .max_encoding_message_size(limits::REPORT_OBSERVATIONS);
    let reg = client
        .register_checker(pb::RegisterCheckerRequest {
            checker_id: o.checker_id.clone(),
            instance_id: o.instance_id.clone(),
            max_concurrency: o.max_concurrency.max(1),
            tiers: o.tiers.iter().map(|t| wire_tier(*t) as i32).collect(),
            supported_protocol_versions: SUPPORTED_PROTOCOL_VERSIONS.to_vec(),
        })
        .await
        .map_err(|s| format!("register: {} {}", s.code(), s.message()))?
        .into_inner();
    info!(checker = %o.checker_id, session = %reg.session_id, "registered with the control plane");
    Ok((client, reg.session_id))
}

async fn stream_loop(
    shared: Arc<Shared>,
    tx: mpsc::Sender<ProbeTask>,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::reconnect();
    while !shutdown.is_cancelled() {
        let served = tokio::select! {
            () = shutdown.cancelled() => break,
            r = stream_once(&shared, &tx) => r,
        };
        *shared.session.lock() = None;
        match served {
            Ok(()) => backoff.reset(),
            Err(e) => {
                warn!(error = %e, endpoint = shared.endpoints.current(), "checker control-plane stream failed");
                // Unreachable, or another replica leads: try the next endpoint.
                shared.endpoints.rotate();
                if e.ends_with(proxy_pool_api::controlplane::NOT_LEADER) {
                    backoff.reset();
                }
            }
        }
        let delay = backoff.next_delay();
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(delay) => {}
        }
    }
    *shared.session.lock() = None;
}

async fn stream_once(shared: &Shared, tx: &mpsc::Sender<ProbeTask>) -> Result<(), String> {
    let (mut client, session) = register(shared).await?;
    let mut stream = client
        .stream_tasks(pb::StreamTasksRequest {
            checker_id: shared.options.checker_id.clone(),
            session_id: session.clone(),
        })
        .await
        .map_err(|s| format!("stream: {}", s.code()))?
        .into_inner();
    *shared.session.lock() = Some((client, session));
    loop {
        let msg = stream
            .message()
            .await
            .map_err(|s| format!("stream: {}", s.code()))?;
        let Some(task) = msg else { return Ok(()) };
        let task = match wire::CheckTask::try_from(task) {
            Ok(t) => t,
            Err(e) => {
                debug!(error = %e, "undecodable check task skipped");
                continue;
            }
        };
        let Some(task) = task_from_wire(task) else {
            debug!("check task without a usable target skipped");
            continue;
        };
        if tx.send(task).await.is_err() {
            return Ok(());
        }
    }
}

#[async_trait]
impl TaskSource for GrpcBinding {
    async fn next_tasks(
        &self,
        max: usize,
        _tiers: &[Tier],
    ) -> Result<Vec<ProbeTask>, BindingError> {
        let mut rx = self.shared.tasks.lock().await;
        let mut out = Vec::new();
        match tokio::time::timeout(self.shared.options.idle_wait, rx.recv()).await {
            Ok(Some(t)) => out.push(t),
            Ok(None) => return Err(BindingError::Unavailable("task stream closed".into())),
            Err(_) => return Ok(out),
        }
        while out.len() < max {
            match rx.try_recv() {
                Ok(t) => out.push(t),
                Err(_) => break,
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl ObservationSink for GrpcBinding {
    async fn submit(&self, observations: Vec<Observation>) -> Result<(), BindingError> {
        let current = self.shared.session.lock().clone();
        let Some((mut client, session)) = current else {
            return Err(BindingError::Unavailable("not registered".into()));
        };
        let req = pb::ReportObservationsRequest {
            checker_id: self.shared.options.checker_id.clone(),
            session_id: session,
            observations: observations.iter().map(pb::Observation::from).collect(),
        };
        match client.report_observations(req).await {
            Ok(r) => {
                let r = r.into_inner();
                debug!(
                    accepted = r.accepted,
                    discarded = r.discarded,
                    "observations reported"
                );
                Ok(())
            }
            Err(s) if s.code() == tonic::Code::Unavailable => {
                Err(BindingError::Unavailable(s.code().to_string()))
            }
            Err(s) => Err(BindingError::Refused(s.code().to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FailureCode;
    use std::net::IpAddr;

    #[test]
    fn target_urls() {
        assert_eq!(
            target_host_port("example.com:8443"),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(
            target_host_port("https://example.com/x"),
            Some(("example.com".into(), 443))
        );
        assert_eq!(
            target_host_port("http://[::1]:81/"),
            Some(("::1".into(), 81))
        );
        assert_eq!(target_host_port("example.com"), None);
        assert_eq!(target_host_port("ftp://x:1"), None);
        assert_eq!(target_host_port("h:0"), None);
    }

    #[test]
    fn tasks_and_observations_convert() {
        let t = wire::CheckTask {
            task_id: "h1-0".into(),
            tier: wire::CheckTier::Target,
            proxy: wire::ProxyEndpoint {
                id: "p".into(),
                upstream: "u".into(),
                dial: wire::Dial {
                    protocol: wire::Protocol::Socks5,
                    host: "127.0.0.2".into(),
                    port: 1080,
                    credentials: Some(wire::Credentials {
                        username: "a".into(),
                        password: wire::Secret::new("b"),
                    }),
                },
            },
            deadline_ms: now_ms() + 5_000,
            routing: Some("r".into()),
            target: Some(wire::CheckTarget {
                url: "127.0.0.1:80".into(),
                expect_status: None,
            }),
        };
        // A wire deadline already past is past here too: the prober never dials it.
        let mut late = t.clone();
        late.deadline_ms = now_ms() - 1_000;
        assert!(task_from_wire(late).unwrap().deadline <= Instant::now());
        let p = task_from_wire(t).unwrap();
        assert_eq!(
            p.checks,
            vec![Check::Target {
                routing: "r".into(),
                host: "127.0.0.1".into(),
                port: 80
            }]
        );
        assert_eq!(p.dial.credentials.unwrap().password.expose(), "b");
        assert!(p.deadline > Instant::now() + Duration::from_secs(4));
        let o = Observation {
            task_id: "h1-0".into(),
            proxy_id: "p".into(),
            tier: Tier::Egress,
            routing: None,
            success: false,
            latency: Some(Duration::from_millis(3)),
            failure: Some(FailureCode::ClientLeaked),
            egress: Some(IpAddr::from([127, 0, 0, 1])),
            observed_at_ms: now_ms(),
        };
        let w = pb::Observation::from(&o);
        assert!(w.anonymity_leak);
        assert_eq!(w.failure_code, "client_leaked");
        assert_eq!(w.egress_address, "127.0.0.1");
    }
}
