//! A fake controller for the gateway's control-plane agent tests: a
//! `WorkerControlPlane` on a loopback port that records every call and lets the test
//! feed each watch stream. Reports carrying usage are answered from a script of status
//! codes (then OK); every other call succeeds.
#![allow(dead_code)]

use parking_lot::Mutex;
use proxy_pool_api::controlplane::model;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::worker_control_plane_server::{
    WorkerControlPlane, WorkerControlPlaneServer,
};
use proxy_pool_e2e::sim::SimProxy;
use proxy_pool_gateway::clock;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Code, Request, Response, Status};

/// Feeds one watch stream.
pub type Updates = mpsc::Sender<Result<pb::SnapshotUpdate, Status>>;

/// Everything the fake controller saw, and a way to feed each watch stream.
pub struct Seen {
    pub streams: mpsc::UnboundedReceiver<(pb::WatchSnapshotsRequest, Updates)>,
    pub acks: mpsc::UnboundedReceiver<pb::AcknowledgeSnapshotRequest>,
    /// Each runtime report with the code it was answered with.
    pub reports: mpsc::UnboundedReceiver<(pb::ReportRuntimeRequest, Code)>,
    pub outcomes: mpsc::UnboundedReceiver<pb::ReportOutcomesRequest>,
}

/// Behaviour the test can change while the fake runs.
#[derive(Debug)]
pub struct Knobs {
    /// `max_stale_age_ms` answered at registration.
    pub max_stale_age_ms: u64,
    /// Proxy IDs put in the next runtime report's answer (then cleared).
    pub revoke_next: Vec<String>,
    /// The `report_sequence` of the report answered with `revoke_next`.
    pub revoked_in_report: Option<u64>,
    /// Runtime reports are received but never answered (a controller gone silent).
    pub silent: bool,
    /// `report_interval_ms` answered at registration.
    pub report_interval_ms: u64,
    /// How long a runtime report is held before it is judged and answered.
    pub report_delay: std::time::Duration,
    /// Refuse a runtime report whose (version, epoch) is not the last positive ACK's
    /// when it is judged (`FAILED_PRECONDITION bound_mismatch`), as the pool does.
    pub check_bound: bool,
    /// `client_budgets` put in every answered runtime report.
    pub budgets: Option<pb::ClientBudgets>,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            max_stale_age_ms: 60_000,
            revoke_next: Vec::new(),
            revoked_in_report: None,
            silent: false,
            report_interval_ms: 100,
            report_delay: std::time::Duration::ZERO,
            check_bound: false,
            budgets: None,
        }
    }
}

struct Fake {
    knobs: Arc<Mutex<Knobs>>,
    streams: mpsc::UnboundedSender<(pb::WatchSnapshotsRequest, Updates)>,
    acks: mpsc::UnboundedSender<pb::AcknowledgeSnapshotRequest>,
    reports: mpsc::UnboundedSender<(pb::ReportRuntimeRequest, Code)>,
    outcomes: mpsc::UnboundedSender<pb::ReportOutcomesRequest>,
    script: Arc<Mutex<VecDeque<Code>>>,
    /// The (version, epoch) of the last positive ACK.
    acked: Mutex<Option<(u64, u64)>>,
}

#[tonic::async_trait]
impl WorkerControlPlane for Fake {
    type WatchSnapshotsStream =
        Pin<Box<dyn Stream<Item = Result<pb::SnapshotUpdate, Status>> + Send>>;

    async fn register_worker(
        &self,
        request: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        assert_eq!(request.get_ref().supported_protocol_versions, vec![1]);
        let (max_stale_age_ms, report_interval_ms) = {
            let k = self.knobs.lock();
            (k.max_stale_age_ms, k.report_interval_ms)
        };
        Ok(Response::new(pb::RegisterWorkerResponse {
            session_id: "s1".into(),
            protocol_version: 1,
            ownership_epoch: 1,
            max_stale_age_ms,
            session_ttl_ms: 30_000,
            report_interval_ms,
            max_outcome_batch: 50,
        }))
    }

    async fn watch_snapshots(
        &self,
        request: Request<pb::WatchSnapshotsRequest>,
    ) -> Result<Response<Self::WatchSnapshotsStream>, Status> {
        let (tx, rx) = mpsc::channel(8);
        let _ = self.streams.send((request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn acknowledge_snapshot(
        &self,
        request: Request<pb::AcknowledgeSnapshotRequest>,
    ) -> Result<Response<pb::AcknowledgeSnapshotResponse>, Status> {
        let ack = request.into_inner();
        if ack.accepted {
            *self.acked.lock() = Some((ack.version, ack.ownership_epoch));
        }
        let _ = self.acks.send(ack);
        Ok(Response::new(pb::AcknowledgeSnapshotResponse {
            session_expires_at_ms: 0,
            runtime_fence_open: true,
        }))
    }

    async fn report_runtime(
        &self,
        request: Request<pb::ReportRuntimeRequest>,
    ) -> Result<Response<pb::ReportRuntimeResponse>, Status> {
        let req = request.into_inner();
        // Scripted: reports carrying requests (not those with only the bytes of requests
        // reported before).
        let code = if req.usage.iter().all(|u| u.requests == 0) {
            Code::Ok
        } else {
            self.script.lock().pop_front().unwrap_or(Code::Ok)
        };
        let (delay, check_bound) = {
            let k = self.knobs.lock();
            (k.report_delay, k.check_bound)
        };
        tokio::time::sleep(delay).await;
        if check_bound && *self.acked.lock() != Some((req.snapshot_version, req.ownership_epoch)) {
            let _ = self.reports.send((req, Code::FailedPrecondition));
            return Err(Status::failed_precondition("bound_mismatch"));
        }
        let (silent, revoke_proxy_ids, client_budgets) = {
            let mut knobs = self.knobs.lock();
            let revoke = std::mem::take(&mut knobs.revoke_next);
            if !revoke.is_empty() {
                knobs.revoked_in_report = Some(req.report_sequence);
            }
            (knobs.silent, revoke, knobs.budgets.clone())
        };
        if silent {
            return std::future::pending().await;
        }
        let _ = self.reports.send((req, code));
        if code == Code::Ok {
            Ok(Response::new(pb::ReportRuntimeResponse {
                revoke_proxy_ids,
                client_budgets,
                ..Default::default()
            }))
        } else {
            Err(Status::new(code, "scripted"))
        }
    }

    async fn report_outcomes(
        &self,
        request: Request<pb::ReportOutcomesRequest>,
    ) -> Result<Response<pb::ReportOutcomesResponse>, Status> {
        let req = request.into_inner();
        let seq = req.batch_sequence;
        let _ = self.outcomes.send(req);
        Ok(Response::new(pb::ReportOutcomesResponse {
            highest_accepted_sequence: seq,
            dropped: 0,
        }))
    }
}

/// Starts the fake on a loopback port: its endpoint and what it sees. `script` holds
/// the codes for runtime reports that carry usage, in order.
/// The agent config both control-plane tests run against the fake controller at
/// `endpoint`: worker `gw-0`, loopback plaintext, client `team-a` with the harness's
/// proxy credentials.
pub fn agent_config(endpoint: String) -> proxy_pool_gateway::controlplane::AgentConfig {
    use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport};
    proxy_pool_gateway::controlplane::AgentConfig {
        endpoint,
        transport: ClientTransport::LoopbackPlaintext,
        options: ClientOptions::default(),
        worker_id: "gw-0".into(),
        instance_id: "i-1".into(),
        zone: "z".into(),
        gateway_group: "all".into(),
        clients: vec![
            proxy_pool_gateway::snapshot::ClientCredential::from_password(
                "team-a",
                crate::common::USER,
                crate::common::PASS,
            ),
        ],
    }
}

pub async fn fake_controller(script: Arc<Mutex<VecDeque<Code>>>) -> (String, Seen) {
    fake_controller_with(script, Arc::default()).await
}

/// Like [`fake_controller`], with `knobs` the test can turn while it runs.
pub async fn fake_controller_with(
    script: Arc<Mutex<VecDeque<Code>>>,
    knobs: Arc<Mutex<Knobs>>,
) -> (String, Seen) {
    let (streams_tx, streams) = mpsc::unbounded_channel();
    let (acks_tx, acks) = mpsc::unbounded_channel();
    let (reports_tx, reports) = mpsc::unbounded_channel();
    let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
    let fake = Fake {
        knobs,
        streams: streams_tx,
        acks: acks_tx,
        reports: reports_tx,
        outcomes: outcomes_tx,
        script,
        acked: Mutex::new(None),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerControlPlaneServer::new(fake))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    (
        format!("http://{addr}"),
        Seen {
            streams,
            acks,
            reports,
            outcomes,
        },
    )
}

/// A simulated proxy as the controller assigns it to `gw-0`: 4 slots, assignment
/// epoch 1, expiring in ten minutes and usable for 590 seconds.
pub fn wire_proxy(p: &SimProxy) -> model::SnapshotProxy {
    let now = clock::to_model_ms(clock::now_ms());
    model::SnapshotProxy {
        max_concurrency: 4,
        expires_at_ms: now + 600_000,
        usable_until_ms: now + 590_000,
        assignment_epoch: 1,
        ..crate::common::upstream(p, 4)
    }
}
