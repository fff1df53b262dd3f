//! The worker side of the control plane: register, watch snapshots (full, then
//! deltas applied only onto their base and verified by checksum), build each one off
//! the hot path and publish it with one atomic swap, ACK (or NACK) exactly what was
//! issued, report runtime counts on an interval (draining proxies included), and ship
//! outcome observations in bounded batches. Reconnects with jittered, bounded backoff.
//!
//! Never logs credentials; never blocks a request.

use proxy_pool_api::controlplane::client::{self, Backoff, ClientOptions, ClientTransport};
use proxy_pool_api::controlplane::limits;
use proxy_pool_api::controlplane::model;
use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_api::controlplane::state::SnapshotState;
use proxy_pool_identity_client::{MaterialError, WorkerTls};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use crate::clock::{now_ms, to_model_ms, unix_ms};
use crate::outcome::{Outcome, OutcomeReceiver, Stage};
use crate::snapshot::{ClientCredential, ProxyId, SnapshotHandle, SnapshotInput};
use crate::usage::{UsageRecorder, UsageReport};

/// Most outcomes per batch when the controller does not say.
const DEFAULT_OUTCOME_BATCH: usize = 500;
/// How often outcomes are flushed when the batch is not full.
const OUTCOME_FLUSH: Duration = Duration::from_secs(1);
/// Once the first observation of a batch is in, how long the shipper lets more queue up
/// before sending a batch that is not full. While it waits, connection tasks queue
/// observations without waking it, so under steady traffic the shipper wakes (and sends
/// an RPC) about 1 / `OUTCOME_LINGER` times a second instead of once per few requests.
/// 20 ms at 100,000 observations/s is 2,000 queued, under the default queue of 4,096;
/// a full batch is sent without waiting.
const OUTCOME_LINGER: Duration = Duration::from_millis(20);

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

/// Watches snapshots until the stream fails or ends; applies, publishes and ACKs.
async fn watch_snapshots(
    rpc: &mut WorkerControlPlaneClient<Channel>,
    ids: &Ids,
    handle: &SnapshotHandle,
    clients: &[ClientCredential],
    state: &mut Option<SnapshotState>,
    bound: &Bound,
    backoff: &mut Backoff,
) -> Result<(), AgentError> {
    let (last_version, last_checksum) = state
        .as_ref()
        .map_or((0, Vec::new()), |s| (s.version(), s.checksum().0.to_vec()));
    let mut stream = answered(
        ids.call_timeout,
        rpc.watch_snapshots(pb::WatchSnapshotsRequest {
            worker_id: ids.worker_id.clone(),
            session_id: ids.session_id.clone(),
            last_version,
            last_checksum,
        }),
    )
    .await?
    .into_inner();
    while let Some(update) = stream.message().await? {
        let applied = apply(state, update);
        let (version, epoch, checksum) = match &applied {
            Ok(st) => header(st),
            Err(Rejected {
                version,
                epoch,
                checksum,
                ..
            }) => (*version, *epoch, checksum.clone()),
        };
        let verdict = match applied {
            Ok(st) => publish(handle, st, clients).await,
            Err(rejected) => Err(rejected.reason),
        };
        let accepted = verdict.is_ok();
        let _bound = bound.lock.lock().await;
        answered(
            ids.call_timeout,
            rpc.acknowledge_snapshot(pb::AcknowledgeSnapshotRequest {
                worker_id: ids.worker_id.clone(),
                session_id: ids.session_id.clone(),
                version,
                ownership_epoch: epoch,
                checksum,
                accepted,
                reason: verdict.err().unwrap_or_default(),
            }),
        )
        .await?;
        if accepted {
            backoff.reset();
            bound.acked.send_replace(Some((version, epoch)));
        } else {
            // Re-open without a base: the controller answers with a full snapshot.
            *state = None;
            return Err(AgentError::StreamEnded);
        }
    }
    Err(AgentError::StreamEnded)
}

struct Rejected {
    version: u64,
    epoch: u64,
    checksum: Vec<u8>,
    reason: String,
}

fn header(st: &SnapshotState) -> (u64, u64, Vec<u8>) {
    let epoch = st.header().map_or(0, |h| h.ownership_epoch);
    (st.version(), epoch, st.checksum().0.to_vec())
}

/// Applies one update to the local state (unchanged on error).
fn apply(
    state: &mut Option<SnapshotState>,
    update: pb::SnapshotUpdate,
) -> Result<&SnapshotState, Rejected> {
    let reject = |version, epoch, checksum: &[u8], reason: String| Rejected {
        version,
        epoch,
        checksum: checksum.to_vec(),
        reason,
    };
    match update.update {
        Some(pb::snapshot_update::Update::Full(msg)) => {
            let (v, e, c) = (msg.version, msg.ownership_epoch, msg.checksum.clone());
            let snap = model::Snapshot::try_from(msg)
                .map_err(|err| reject(v, e, &c, format!("invalid: {err}")))?;
            let st = SnapshotState::from_snapshot(snap)
                .map_err(|err| reject(v, e, &c, err.to_string()))?;
            Ok(state.insert(st))
        }
        Some(pb::snapshot_update::Update::Delta(msg)) => {
            let (v, e, c) = (msg.version, msg.ownership_epoch, msg.checksum.clone());
            let delta = model::Delta::try_from(msg)
                .map_err(|err| reject(v, e, &c, format!("invalid: {err}")))?;
            let Some(st) = state.as_mut() else {
                return Err(reject(v, e, &c, "delta without a base".into()));
            };
            st.apply_delta(delta)
                .map_err(|err| reject(v, e, &c, err.to_string()))?;
            Ok(st)
        }
        None => Err(reject(0, 0, &[], "empty update".into())),
    }
}

/// Builds the snapshot on a blocking thread, then swaps it in.
async fn publish(
    handle: &SnapshotHandle,
    st: &SnapshotState,
    clients: &[ClientCredential],
) -> Result<(), String> {
    let input = SnapshotInput::new(st.to_snapshot(), clients.to_vec());
    let handle = handle.clone();
    let version = input.snapshot.version;
    let built = tokio::task::spawn_blocking(move || handle.install(input).map(|_| ()))
        .await
        .map_err(|_| "build task failed".to_owned())?;
    built.map_err(|err| {
        warn!(version, error = %err, "snapshot refused");
        "invalid snapshot".to_owned()
    })
}

/// While a draining proxy is still in use, how often the reporter looks whether it
/// became idle (a report is sent only when one did).
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// Sends runtime counts (and the interval's per-Routing usage) every `interval`,
/// bound to the last ACKed snapshot; also right after each accepted snapshot and as
/// soon as a draining proxy becomes idle, so a drain completes within a pass of the
/// controller rather than a report interval. Usage waits in the recorder until a report can
/// be sent; a report the controller refuses with FAILED_PRECONDITION (it counted
/// nothing) has its usage resent with the next report, possibly in the next session;
/// any other failure may or may not have been counted, so its usage is dropped and
/// counted as lost rather than risk counting it twice.
async fn report_runtime(
    channel: Channel,
    ids: Ids,
    handle: SnapshotHandle,
    bound: &Bound,
    interval: Duration,
    recorder: Option<&UsageRecorder>,
    pending: &mut UsageReport,
) -> Result<(), AgentError> {
    let mut rpc = WorkerControlPlaneClient::new(channel);
    let mut acked = bound.acked.subscribe();
    let mut sequence = 0u64;
    let mut tick = tokio::time::interval(interval);
    let mut acked_open = true;
    // Draining proxies in use at the last report.
    let mut draining: Vec<ProxyId> = Vec::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = acked.changed(), if acked_open => {
                acked_open = changed.is_ok();
            }
            () = drained(&handle, &draining), if !draining.is_empty() => {}
        }
        // Until this report is answered, no ACK moves the session's bound.
        let _bound = bound.lock.lock().await;
        let Some((version, epoch)) = *acked.borrow_and_update() else {
            continue;
        };
        draining = handle.busy_draining();
        let counts = handle
            .runtime_report()
            .into_iter()
            .filter(|c| c.active > 0 || c.reserved > 0)
            .map(|c| pb::RuntimeCount {
                proxy_id: c.id.to_string(),
                assignment_epoch: c.assignment_epoch,
                active: c.active,
                reserved: c.reserved,
                draining: c.draining,
            })
            .collect();
        let mut usage = std::mem::take(pending);
        if let Some(recorder) = recorder {
            recorder.count_dropped(usage.merge(recorder.take()));
        }
        sequence += 1;
        let sent = answered(
            ids.call_timeout,
            rpc.report_runtime(pb::ReportRuntimeRequest {
                worker_id: ids.worker_id.clone(),
                session_id: ids.session_id.clone(),
                report_sequence: sequence,
                snapshot_version: version,
                ownership_epoch: epoch,
                counts,
                observed_at_ms: to_model_ms(now_ms()),
                usage: usage.to_wire(),
            }),
        )
        .await;
        let resp = match sent {
            Ok(resp) => resp.into_inner(),
            Err(status) => {
                if status.code() == tonic::Code::FailedPrecondition {
                    *pending = usage;
                } else if let Some(recorder) = recorder.filter(|_| !usage.is_empty()) {
                    recorder.lost(&usage);
                }
                return Err(status.into());
            }
        };
        // The controller accepted a report bound to our snapshot: it is still current.
        handle.confirm_fresh();
        if !resp.revoke_proxy_ids.is_empty() {
            let ids: Vec<ProxyId> = resp
                .revoke_proxy_ids
                .iter()
                .map(|s| ProxyId::from(s.as_str()))
                .collect();
            handle.revoke(&ids);
        }
    }
}

/// Resolves once one of `draining` (busy at the last report) is no longer busy.
async fn drained(handle: &SnapshotHandle, draining: &[ProxyId]) {
    loop {
        tokio::time::sleep(DRAIN_POLL).await;
        let busy = handle.busy_draining();
        if draining.iter().any(|id| !busy.contains(id)) {
            return;
        }
    }
}

/// Ships outcome observations in batches; a failed batch is dropped (observations
/// are hints) rather than held.
async fn ship_outcomes(
    channel: Channel,
    ids: Ids,
    outcomes: &mut OutcomeReceiver,
    batch: usize,
) -> Result<(), AgentError> {
    let mut rpc = WorkerControlPlaneClient::new(channel);
    let mut sequence = 0u64;
    let mut buf: Vec<Outcome> = Vec::with_capacity(batch);
    loop {
        let got = tokio::time::timeout(OUTCOME_FLUSH, outcomes.rx.recv_many(&mut buf, batch)).await;
        if matches!(got, Ok(0)) {
            // The gateway dropped its sink: nothing more will come.
            std::future::pending::<()>().await;
        }
        if buf.is_empty() {
            continue;
        }
        if buf.len() < batch {
            tokio::time::sleep(OUTCOME_LINGER).await;
            while buf.len() < batch {
                match outcomes.rx.try_recv() {
                    Ok(outcome) => buf.push(outcome),
                    Err(_) => break,
                }
            }
        }
        sequence += 1;
        let items = buf.drain(..).map(outcome_to_wire).collect();
        let resp = answered(
            ids.call_timeout,
            rpc.report_outcomes(pb::ReportOutcomesRequest {
                worker_id: ids.worker_id.clone(),
                session_id: ids.session_id.clone(),
                batch_sequence: sequence,
                outcomes: items,
            }),
        )
        .await?
        .into_inner();
        debug!(
            sequence,
            accepted = resp.highest_accepted_sequence,
            dropped = resp.dropped,
            "outcomes shipped"
        );
    }
}

fn outcome_to_wire(o: Outcome) -> pb::Outcome {
    let stage = match o.stage {
        Stage::Dial => pb::OutcomeStage::Dial,
        Stage::ProxyHandshake => pb::OutcomeStage::ProxyHandshake,
        Stage::ResponseHeaders => pb::OutcomeStage::ResponseHeaders,
        Stage::Tunnel => pb::OutcomeStage::Tunnel,
    };
    pb::Outcome {
        proxy_id: o.proxy.to_string(),
        routing: o.routing.as_deref().unwrap_or_default().to_owned(),
        stage: stage as i32,
        success: o.error.is_none(),
        latency_ms: u64::try_from(o.latency.as_millis()).unwrap_or(u64::MAX),
        failure_code: o.error.unwrap_or_default().to_owned(),
        observed_at_ms: to_model_ms(unix_ms(o.at)),
    }
}
