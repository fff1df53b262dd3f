//! `WorkerControlPlane`: sessions, snapshot watch, ACKs, runtime and outcome reports.
//!
//! Every handler first checks that the caller's certificate names the worker of the
//! message, then converts the message to domain values, then calls one port.

use std::pin::Pin;
use std::sync::Arc;

use activity_pool::model::{
    InstanceId, ProxyId, ReportAck, ReportHeader, RuntimeEntry, RuntimeReport, SessionId,
    SessionRegistration, SnapshotAck, SnapshotReject, WorkerId,
};
use proxy_pool_api::controlplane::convert::{check_id, checksum_from_wire};
use proxy_pool_api::controlplane::limits::{self as sizes, log_text, span_id};
use proxy_pool_api::controlplane::model::{Checksum, Outcome};
use proxy_pool_api::controlplane::pb::{self, worker_control_plane_server::WorkerControlPlane};
use proxy_pool_api::controlplane::spiffe::WorkloadKind;
use proxy_pool_api::controlplane::{ConvertError, negotiate_version};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::error::{ControlPlaneError, CpResult};
use super::identity::Authenticator;
use super::outcomes::{WorkerOutcome, usage_from_wire};
use super::publisher::Issued;
use super::registry::{SequenceVerdict, WorkerInfo};
use super::rpc::serve;
use super::{ClientKind, Shared};

/// The worker service.
#[derive(Debug, Clone)]
pub struct WorkerService {
    shared: Arc<Shared>,
    auth: Authenticator,
}

impl WorkerService {
    /// A service over the shared control-plane state.
    pub fn new(shared: Arc<Shared>, auth: Authenticator) -> Self {
        Self { shared, auth }
    }
}

fn wire_err(field: &str, e: activity_pool::model::IdError) -> ControlPlaneError {
    let _ = e;
    ControlPlaneError::Invalid(ConvertError {
        field: field.to_owned(),
        reason: "not a valid identifier",
    })
}

fn worker_id(s: &str) -> CpResult<WorkerId> {
    WorkerId::new(s).map_err(|e| wire_err("worker_id", e))
}

fn session_id(s: &str) -> CpResult<SessionId> {
    SessionId::new(s).map_err(|e| wire_err("session_id", e))
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl WorkerService {
    async fn current_session(&self, worker: &WorkerId, session: &SessionId) -> CpResult<()> {
        if !self.shared.registry.is_current(worker, session) {
            return Err(ControlPlaneError::StaleSession);
        }
        match self.shared.ports.manager.sessions.session(worker).await? {
            Some(s) if s.session_id == *session => Ok(()),
            _ => Err(ControlPlaneError::StaleSession),
        }
    }

    async fn register(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> CpResult<pb::RegisterWorkerResponse> {
        let worker = worker_id(&req.get_ref().worker_id)?;
        self.auth
            .authorize(&req, WorkloadKind::Worker, worker.as_str())?;
        let m = req.into_inner();
        let instance = InstanceId::new(m.instance_id).map_err(|e| wire_err("instance_id", e))?;
        let version = negotiate_version(&m.supported_protocol_versions)
            .ok_or(ControlPlaneError::IncompatibleVersion)?;
        if m.gateway_group.len() > 63 {
            return Err(ControlPlaneError::TooLarge("gateway_group"));
        }
        if !m.gateway_group.is_empty() {
            check_id("gateway_group", &m.gateway_group).map_err(ControlPlaneError::Invalid)?;
        }
        for (field, v) in [("zone", &m.zone), ("build_version", &m.build_version)] {
            if v.len() > 64 || v.chars().any(|c| !(c.is_ascii_graphic() || c == ' ')) {
                return Err(ControlPlaneError::Invalid(ConvertError {
                    field: field.to_owned(),
                    reason: "at most 64 printable characters",
                }));
            }
        }
        let session = SessionId::new(format!("s-{}", uuid::Uuid::new_v4().simple()))
            .map_err(|e| wire_err("session_id", e))?;
        let cfg = &self.shared.config;
        self.shared
            .ports
            .manager
            .sessions
            .register(&SessionRegistration {
                worker_id: worker.clone(),
                instance_id: instance.clone(),
                session_id: session.clone(),
                ttl: cfg.session_ttl,
            })
            .await?;
        self.shared.registry.register(
            &worker,
            WorkerInfo {
                session_id: session.clone(),
                instance_id: instance,
                group: m.gateway_group,
                last_ack_version: 0,
                outcome_sequence: 0,
            },
        );
        tracing::info!(worker = %worker, session = %session, "worker registered");
        // Give the new session a snapshot promptly rather than at the next pass.
        self.shared.ownership.wake();
        Ok(pb::RegisterWorkerResponse {
            session_id: session.to_string(),
            protocol_version: version,
            ownership_epoch: self.shared.publisher.epoch(&worker),
            max_stale_age_ms: millis(cfg.max_stale_age),
            session_ttl_ms: millis(cfg.session_ttl),
            report_interval_ms: millis(cfg.report_interval),
            max_outcome_batch: u32::try_from(cfg.limits.max_outcome_batch).unwrap_or(u32::MAX),
        })
    }

    async fn acknowledge(
        &self,
        req: Request<pb::AcknowledgeSnapshotRequest>,
    ) -> CpResult<pb::AcknowledgeSnapshotResponse> {
        let worker = worker_id(&req.get_ref().worker_id)?;
        self.auth
            .authorize(&req, WorkloadKind::Worker, worker.as_str())?;
        let m = req.into_inner();
        let session = session_id(&m.session_id)?;
        let issued = Issued {
            version: m.version,
            epoch: m.ownership_epoch,
            checksum: checksum_from_wire("checksum", &m.checksum)?,
        };
        if !self.shared.publisher.was_issued(&worker, &issued) {
            return Err(ControlPlaneError::NotIssued);
        }
        self.current_session(&worker, &session).await?;
        if !self.shared.registry.note_ack(&worker, &session, m.version) {
            return Err(ControlPlaneError::AckRegression);
        }
        let ttl = self.shared.config.session_ttl;
        let s = if m.accepted {
            self.shared
                .ports
                .manager
                .sessions
                .acknowledge(&SnapshotAck {
                    worker_id: worker.clone(),
                    session_id: session.clone(),
                    version: m.version,
                    epoch: m.ownership_epoch,
                    ttl,
                })
                .await?
        } else {
            tracing::warn!(worker = %worker, version = m.version, reason = %log_text(&m.reason, 64), "negative snapshot ACK; runtime fence closed");
            self.shared.metrics.nacked();
            self.shared
                .ports
                .manager
                .sessions
                .reject_snapshot(&SnapshotReject {
                    worker_id: worker.clone(),
                    session_id: session.clone(),
                    ttl,
                })
                .await?
        };
        if m.accepted
            && let Some(took) = self
                .shared
                .registry
                .note_accepted(&worker, &session, m.version)
        {
            self.shared.metrics.acked(took);
        }
        Ok(pb::AcknowledgeSnapshotResponse {
            session_expires_at_ms: s.expires_at.millis(),
            runtime_fence_open: s.fence_open,
        })
    }

    async fn report_runtime(
        &self,
        req: Request<pb::ReportRuntimeRequest>,
    ) -> CpResult<pb::ReportRuntimeResponse> {
        let worker = worker_id(&req.get_ref().worker_id)?;
        self.auth
            .authorize(&req, WorkloadKind::Worker, worker.as_str())?;
        let m = req.into_inner();
        if m.counts.len() > self.shared.config.limits.max_runtime_entries {
            return Err(ControlPlaneError::TooLarge("counts"));
        }
        let session = session_id(&m.session_id)?;
        // Validated before anything is written: a malformed report is refused whole.
        let usage = usage_from_wire(m.usage).map_err(|field| {
            ControlPlaneError::Invalid(ConvertError {
                field: field.to_owned(),
                reason: "invalid usage",
            })
        })?;
        let entries = m
            .counts
            .into_iter()
            .map(|c| {
                Ok(RuntimeEntry {
                    proxy_id: ProxyId::new(c.proxy_id)
                        .map_err(|e| wire_err("counts[].proxy_id", e))?,
                    epoch: c.assignment_epoch,
                    active: c.active,
                    reserved: c.reserved,
                    draining: c.draining,
                })
            })
            .collect::<CpResult<Vec<_>>>()?;
        let ack = self
            .shared
            .ports
            .reports
            .write_report(&RuntimeReport {
                header: ReportHeader {
                    worker_id: worker.clone(),
                    session_id: session.clone(),
                    sequence: m.report_sequence,
                    snapshot_version: m.snapshot_version,
                    epoch: m.ownership_epoch,
                },
                entries,
                ttl: self.shared.config.runtime_report_ttl,
            })
            .await?;
        // A report of a worker with draining proxies may complete their drains: do not
        // make extraction wait for the next interval.
        if ack == ReportAck::Accepted && self.shared.ownership.has_draining(&worker) {
            self.shared.ownership.wake();
        }
        // Counted once per (session, sequence): a replayed report was counted when it
        // was first accepted.
        if ack == ReportAck::Accepted && !usage.is_empty() {
            let names = &self.shared.traffic;
            self.shared
                .usage
                .feed(&usage, |r| names.is_routing(r), |c| names.is_client(c));
            self.shared.traffic.record(&usage);
        }
        Ok(pb::ReportRuntimeResponse {
            replayed: ack == ReportAck::Replayed,
            revoke_proxy_ids: self.shared.ownership.revoked(&worker),
            client_budgets: Some(
                self.budgets(&worker, &session, m.report_sequence, &usage)
                    .await,
            ),
        })
    }

    /// The answer's client budgets: the live gateways of the worker's group (this
    /// replica leads and serves every session), and the clients over their daily byte
    /// quota after this report's bytes (metered once per (session, sequence), so a
    /// replay adds nothing).
    async fn budgets(
        &self,
        worker: &WorkerId,
        session: &SessionId,
        sequence: u64,
        usage: &[super::outcomes::RoutingUsage],
    ) -> pb::ClientBudgets {
        let group = self
            .shared
            .registry
            .get(worker)
            .map(|w| w.group)
            .unwrap_or_default();
        let day = super::quota::utc_day(self.shared.ports.manager.clock.now().millis());
        let report = super::quota::ReportKey {
            session: session.as_str(),
            sequence,
        };
        pb::ClientBudgets {
            group_gateways: self.shared.registry.group_size(&group),
            quota_exhausted_clients: self
                .shared
                .quotas
                .judge(self.shared.meter(), day, report, usage)
                .await,
        }
    }

    async fn report_outcomes(
        &self,
        req: Request<pb::ReportOutcomesRequest>,
    ) -> CpResult<pb::ReportOutcomesResponse> {
        let worker = worker_id(&req.get_ref().worker_id)?;
        self.auth
            .authorize(&req, WorkloadKind::Worker, worker.as_str())?;
        let m = req.into_inner();
        if m.outcomes.len() > self.shared.config.limits.max_outcome_batch {
            return Err(ControlPlaneError::TooLarge("outcomes"));
        }
        let session = session_id(&m.session_id)?;
        // Convert first: a malformed batch is refused whole and does not move the sequence.
        let outcomes = m
            .outcomes
            .into_iter()
            .map(Outcome::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let (verdict, highest) = self
            .shared
            .registry
            .offer_outcomes(&worker, &session, m.batch_sequence)
            .ok_or(ControlPlaneError::StaleSession)?;
        let mut dropped = 0u32;
        if verdict == SequenceVerdict::Accept {
            for outcome in outcomes {
                let item = WorkerOutcome {
                    worker_id: worker.clone(),
                    outcome,
                };
                if !self.shared.outcomes.offer(item) {
                    dropped += 1;
                }
            }
        }
        Ok(pb::ReportOutcomesResponse {
            highest_accepted_sequence: highest,
            dropped,
        })
    }

    async fn watch(&self, req: Request<pb::WatchSnapshotsRequest>) -> CpResult<WatchStream> {
        let worker = worker_id(&req.get_ref().worker_id)?;
        self.auth
            .authorize(&req, WorkloadKind::Worker, worker.as_str())?;
        let m = req.into_inner();
        let session = session_id(&m.session_id)?;
        self.current_session(&worker, &session).await?;
        let permit = self.shared.open_stream()?;
        let have = (m.last_version > 0)
            .then(|| checksum_from_wire("last_checksum", &m.last_checksum).ok())
            .flatten()
            .map(|c| (m.last_version, c));
        let (tx, rx) = mpsc::channel(4);
        let shared = self.shared.clone();
        tokio::spawn(watch_loop(shared, worker, session, have, tx, permit));
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotUpdate, Status>> + Send>>;

/// Sends updates to one worker until it goes away, its session is replaced, the stream
/// reaches its maximum duration, or the server shuts down.
async fn watch_loop(
    shared: Arc<Shared>,
    worker: WorkerId,
    session: SessionId,
    mut have: Option<(u64, Checksum)>,
    tx: mpsc::Sender<Result<pb::SnapshotUpdate, Status>>,
    _permit: OwnedSemaphorePermit,
) {
    let mut versions = shared.publisher.subscribe(&worker);
    let Some(mut sessions) = shared.registry.session_changes(&worker) else {
        return;
    };
    let _connected = shared
        .metrics
        .stream_opened(ClientKind::Gateway, worker.as_str());
    let deadline = tokio::time::sleep(shared.config.limits.max_stream_duration);
    tokio::pin!(deadline);
    let mut shutdown = shared.shutdown.clone();
    loop {
        while let Some(update) = shared.publisher.next_update(&worker, have) {
            let msg = pb::SnapshotUpdate::pre_encoded(update.bytes.clone());
            if tx.send(Ok(msg)).await.is_err() {
                return;
            }
            shared
                .registry
                .note_pushed(&worker, &session, update.version);
            have = Some((update.version, update.checksum));
        }
        tokio::select! {
            changed = versions.changed() => if changed.is_err() { return },
            changed = sessions.changed() => {
                if changed.is_err() || *sessions.borrow() != session {
                    let _ = tx.send(Err(ControlPlaneError::StaleSession.into())).await;
                    return;
                }
            }
            () = &mut deadline => return,
            _ = shutdown.changed() => {
                let _ = tx.send(Err(ControlPlaneError::ShuttingDown.into())).await;
                return;
            }
        }
    }
}

#[tonic::async_trait]
impl WorkerControlPlane for WorkerService {
    type WatchSnapshotsStream = WatchStream;

    #[tracing::instrument(skip_all, fields(worker = %span_id(&request.get_ref().worker_id)))]
    async fn register_worker(
        &self,
        request: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        serve(request, "RegisterWorker", sizes::REGISTER_WORKER, |r| {
            self.register(r)
        })
        .await
    }

    #[tracing::instrument(skip_all, fields(worker = %span_id(&request.get_ref().worker_id)))]
    async fn watch_snapshots(
        &self,
        request: Request<pb::WatchSnapshotsRequest>,
    ) -> Result<Response<Self::WatchSnapshotsStream>, Status> {
        serve(request, "WatchSnapshots", sizes::WATCH_SNAPSHOTS, |r| {
            self.watch(r)
        })
        .await
    }

    #[tracing::instrument(skip_all, fields(worker = %span_id(&request.get_ref().worker_id), version = request.get_ref().version))]
    async fn acknowledge_snapshot(
        &self,
        request: Request<pb::AcknowledgeSnapshotRequest>,
    ) -> Result<Response<pb::AcknowledgeSnapshotResponse>, Status> {
        serve(request, "AcknowledgeSnapshot", sizes::ACKNOWLEDGE, |r| {
            self.acknowledge(r)
        })
        .await
    }

    #[tracing::instrument(skip_all, fields(worker = %span_id(&request.get_ref().worker_id), sequence = request.get_ref().report_sequence))]
    async fn report_runtime(
        &self,
        request: Request<pb::ReportRuntimeRequest>,
    ) -> Result<Response<pb::ReportRuntimeResponse>, Status> {
        serve(request, "ReportRuntime", sizes::REPORT_RUNTIME, |r| {
            WorkerService::report_runtime(self, r)
        })
        .await
    }

    #[tracing::instrument(skip_all, fields(worker = %span_id(&request.get_ref().worker_id), sequence = request.get_ref().batch_sequence))]
    async fn report_outcomes(
        &self,
        request: Request<pb::ReportOutcomesRequest>,
    ) -> Result<Response<pb::ReportOutcomesResponse>, Status> {
        serve(request, "ReportOutcomes", sizes::REPORT_OUTCOMES, |r| {
            WorkerService::report_outcomes(self, r)
        })
        .await
    }
}
