//! The worker side of the control plane: register, watch snapshots (full, then
//! deltas applied only onto their base and verified by checksum), build each one off
//! the hot path and publish it with one atomic swap, ACK (or NACK) exactly what was
//! issued, report runtime counts on an interval (draining proxies included), and ship
//! outcome observations in bounded batches. Reconnects with jittered, bounded backoff.
//!
//! Never logs credentials; never blocks a request.

mod reports;
mod snapshots;

use proxy_pool_api::controlplane::client::{self, Backoff, ClientOptions, ClientTransport};
use proxy_pool_api::controlplane::limits;
use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_api::controlplane::state::SnapshotState;
use proxy_pool_identity_client::{MaterialError, WorkerTls};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::outcome::OutcomeReceiver;
use crate::snapshot::{ClientCredential, SnapshotHandle};
use crate::usage::{UsageRecorder, UsageReport};

use reports::{DEFAULT_OUTCOME_BATCH, report_runtime, ship_outcomes};
use snapshots::watch_snapshots;

/// Who this worker is and where its controller is.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// `http://127.0.0.1:PORT` (loopback plaintext) or `https://…` (mTLS).
    pub endpoint: String,
    /// Transport security.
    pub transport: ClientTransport,
    /// Channel options.
    pub options: ClientOptions,
    /// Logical worker (pod) name; must match the SPIFFE ID in mTLS.
    pub worker_id: String,
    /// This process.
    pub instance_id: String,
    /// Zone, for the controller's placement.
    pub zone: String,
    /// The Routing / gateway group served.
    pub gateway_group: String,
    /// Clients allowed to authenticate (not carried by the control plane).
    pub clients: Vec<ClientCredential>,
}

/// Why a session with the controller ended.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Could not connect.
    #[error(transparent)]
    Connect(#[from] client::ClientError),
    /// An RPC failed.
    #[error("control-plane call failed: {0}")]
    Rpc(#[from] tonic::Status),
    /// The controller closed the watch stream.
    #[error("snapshot stream ended")]
    StreamEnded,
    /// No certificate to present (not issued yet, or unreadable files).
    #[error("control-plane TLS material: {0}")]
    Tls(#[from] MaterialError),
}

/// The control-plane agent of one gateway process.
#[derive(Debug)]
pub struct Agent {
    cfg: AgentConfig,
    /// `cfg.endpoint` split: the controller replicas, tried in turn.
    endpoints: client::Endpoints,
    handle: SnapshotHandle,
    outcomes: OutcomeReceiver,
    tls: Option<(WorkerTls, String)>,
    usage: Option<Arc<UsageRecorder>>,
    /// Usage the controller refused with a definite answer, resent with the next report.
    pending: UsageReport,
}

/// The last positively acknowledged (version, epoch), which runtime reports must name.
type Acked = Option<(u64, u64)>;

impl Agent {
    /// An agent that feeds `handle` and drains `outcomes`.
    pub fn new(cfg: AgentConfig, handle: SnapshotHandle, outcomes: OutcomeReceiver) -> Self {
        Self {
            endpoints: client::Endpoints::parse_lenient(&cfg.endpoint),
            cfg,
            handle,
            outcomes,
            tls: None,
            usage: None,
            pending: UsageReport::default(),
        }
    }

    /// Uses mTLS with material read from `tls` for every new connection (renewed
    /// certificates, rewritten files), verifying the controller as `server_name`;
    /// replaces `AgentConfig::transport`.
    #[must_use]
    pub fn with_tls(mut self, tls: WorkerTls, server_name: String) -> Self {
        self.tls = Some((tls, server_name));
        self
    }

    /// Sends the per-Routing usage `usage` records with every runtime report.
    #[must_use]
    pub fn with_usage(mut self, usage: Arc<UsageRecorder>) -> Self {
        self.usage = Some(usage);
        self
    }

    /// The transport for a new connection: fresh material when a TLS source is set.
    fn transport(&self) -> Result<ClientTransport, AgentError> {
        let Some((tls, server_name)) = &self.tls else {
            return Ok(self.cfg.transport.clone());
        };
        let m = tls.material()?;
        Ok(ClientTransport::Mtls {
            ca_pem: m.ca_pem,
            cert_pem: m.cert_pem,
            key_pem: Secret::new(m.key_pem),
            server_name: server_name.clone(),
        })
    }

    /// Runs sessions until `stop` is cancelled, reconnecting with backoff.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut backoff = Backoff::reconnect();
        let mut state: Option<SnapshotState> = None;
        loop {
            let res = tokio::select! {
                res = self.session(&mut state, &mut backoff) => res,
                () = stop.cancelled() => return,
            };
            if let Err(err) = &res {
                warn!(error = %err, endpoint = self.endpoints.current(), "control-plane session ended");
            }
            let delay = match &res {
                // Another replica leads: try the next endpoint soon.
                Err(AgentError::Rpc(s)) if client::is_not_leader(s) => {
                    self.endpoints.rotate();
                    backoff.reset();
                    backoff.next_delay()
                }
                // Unreachable or going away: the next endpoint may be the leader.
                Err(AgentError::Connect(_) | AgentError::StreamEnded) => {
                    self.endpoints.rotate();
                    backoff.next_delay()
                }
                // Unavailable, or a call left unanswered (a dead path): the next endpoint.
                Err(AgentError::Rpc(s))
                    if matches!(
                        s.code(),
                        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                    ) =>
                {
                    self.endpoints.rotate();
                    backoff.next_delay()
                }
                _ => backoff.next_delay(),
            };
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    async fn session(
        &mut self,
        state: &mut Option<SnapshotState>,
        backoff: &mut Backoff,
    ) -> Result<(), AgentError> {
        let transport = self.transport()?;
        let channel =
            client::connect(self.endpoints.current(), &transport, &self.cfg.options).await?;
        // Snapshots in, reports out: each direction sized to its largest message.
        let mut rpc = WorkerControlPlaneClient::new(channel.clone())
            .max_decoding_message_size(limits::SNAPSHOT)
            .max_encoding_message_size(limits::REPORT_RUNTIME);
        let reg = answered(
            self.cfg.options.call_timeout,
            rpc.register_worker(pb::RegisterWorkerRequest {
                worker_id: self.cfg.worker_id.clone(),
                instance_id: self.cfg.instance_id.clone(),
                zone: self.cfg.zone.clone(),
                gateway_group: self.cfg.gateway_group.clone(),
                supported_protocol_versions: vec![proxy_pool_api::controlplane::PROTOCOL_VERSION],
                build_version: env!("CARGO_PKG_VERSION").to_owned(),
            }),
        )
        .await?
        .into_inner();
        if reg.max_stale_age_ms > 0 {
            self.handle
                .set_max_stale_age(Duration::from_millis(reg.max_stale_age_ms));
        }
        self.handle.new_session();
        info!(session = %reg.session_id, "registered with the control plane");
        let ids = Ids {
            worker_id: self.cfg.worker_id.clone(),
            session_id: reg.session_id.clone(),
            call_timeout: self.cfg.options.call_timeout,
        };
        let bound = Bound::default();
        let interval = Duration::from_millis(reg.report_interval_ms.max(100));
        let batch = usize::try_from(reg.max_outcome_batch)
            .ok()
            .filter(|b| *b > 0)
            .unwrap_or(DEFAULT_OUTCOME_BATCH);
        let reporter = report_runtime(
            channel.clone(),
            ids.clone(),
            self.handle.clone(),
            &bound,
            interval,
            self.usage.as_deref(),
            &mut self.pending,
        );
        let shipper = ship_outcomes(channel, ids.clone(), &mut self.outcomes, batch);
        // The backoff is reset by the first snapshot accepted, not by registration, so a
        // controller that keeps sending snapshots this worker refuses is not hammered.
        let watcher = watch_snapshots(
            &mut rpc,
            &ids,
            &self.handle,
            &self.cfg.clients,
            state,
            &bound,
            backoff,
        );
        tokio::select! {
            res = watcher => res,
            res = reporter => res,
            res = shipper => res,
        }
    }
}

/// A session's bound: the (version, epoch) of its last positive ACK, which every
/// runtime report names. The controller refuses a report whose bound is not the
/// session's last positive ACK (`bound_mismatch`, which ends the session), and it may
/// see a report and an ACK in either order: a report bound to `v` still in flight when
/// the ACK of `v + 1` lands would be refused. So `lock` is held by the snapshot watcher
/// around each ACK and by the reporter from reading `acked` to its report's answer: a
/// report is answered before the next ACK is sent, or is built after that ACK was
/// answered.
struct Bound {
    acked: watch::Sender<Acked>,
    lock: tokio::sync::Mutex<()>,
}

impl Default for Bound {
    fn default() -> Self {
        Self {
            acked: watch::channel(None).0,
            lock: tokio::sync::Mutex::new(()),
        }
    }
}

/// Who this session is, and the deadline of each of its calls.
#[derive(Debug, Clone)]
struct Ids {
    worker_id: String,
    session_id: String,
    /// [`client::ClientOptions::call_timeout`].
    call_timeout: Duration,
}

/// `call`, or `DEADLINE_EXCEEDED` when it is not answered within `deadline`.
async fn answered<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(format!(
                "control-plane call unanswered for {deadline:?}"
            )))
        })
}
