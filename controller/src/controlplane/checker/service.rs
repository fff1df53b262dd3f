//! The `CheckerControlPlane` gRPC service over a [`CheckerBackend`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use proxy_pool_api::controlplane::convert::{check_id, tier_from_wire};
use proxy_pool_api::controlplane::limits::{self as sizes, span_id};
use proxy_pool_api::controlplane::model::Observation;
use proxy_pool_api::controlplane::negotiate_version;
use proxy_pool_api::controlplane::pb::{self, checker_control_plane_server::CheckerControlPlane};
use proxy_pool_api::controlplane::spiffe::WorkloadKind;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{CheckerRegistration, CheckerSession};
use crate::controlplane::error::{ControlPlaneError, CpResult};
use crate::controlplane::identity::Authenticator;
use crate::controlplane::rpc::serve;
use crate::controlplane::{ClientKind, Shared};

/// The checker gRPC service.
#[derive(Debug, Clone)]
pub struct CheckerService {
    shared: Arc<Shared>,
    auth: Authenticator,
}

type TaskStream = Pin<Box<dyn Stream<Item = Result<pb::CheckTask, Status>> + Send>>;

impl CheckerService {
    /// A service over the shared control-plane state.
    pub fn new(shared: Arc<Shared>, auth: Authenticator) -> Self {
        Self { shared, auth }
    }

    async fn current(&self, checker_id: &str, session_id: &str) -> CpResult<CheckerSession> {
        match self.shared.checker.session(checker_id).await {
            Some(s) if s.session_id == session_id => Ok(s),
            _ => Err(ControlPlaneError::StaleSession),
        }
    }

    async fn register(
        &self,
        req: Request<pb::RegisterCheckerRequest>,
    ) -> CpResult<pb::RegisterCheckerResponse> {
        check_id("checker_id", &req.get_ref().checker_id)?;
        self.auth
            .authorize(&req, WorkloadKind::Checker, &req.get_ref().checker_id)?;
        let m = req.into_inner();
        check_id("instance_id", &m.instance_id)?;
        let version = negotiate_version(&m.supported_protocol_versions)
            .ok_or(ControlPlaneError::IncompatibleVersion)?;
        let mut tiers = Vec::new();
        for t in m.tiers {
            let t = tier_from_wire("tiers[]", t)?;
            if !tiers.contains(&t) {
                tiers.push(t);
            }
        }
        if tiers.is_empty() {
            return Err(ControlPlaneError::TooLarge("tiers (empty)"));
        }
        let session = self
            .shared
            .checker
            .register(CheckerRegistration {
                checker_id: m.checker_id,
                instance_id: m.instance_id,
                max_concurrency: m.max_concurrency.clamp(1, 10_000),
                tiers,
            })
            .await?;
        Ok(pb::RegisterCheckerResponse {
            session_id: session.session_id,
            protocol_version: version,
            max_observation_batch: u32::try_from(self.shared.config.limits.max_observation_batch)
                .unwrap_or(u32::MAX),
        })
    }

    async fn stream(&self, req: Request<pb::StreamTasksRequest>) -> CpResult<TaskStream> {
        self.auth
            .authorize(&req, WorkloadKind::Checker, &req.get_ref().checker_id)?;
        let m = req.into_inner();
        let session = self.current(&m.checker_id, &m.session_id).await?;
        let permit = self.shared.open_stream()?;
        let (tx, rx) = mpsc::channel(session.max_concurrency.min(1_024) as usize);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _connected = shared
                .metrics
                .stream_opened(ClientKind::Checker, &session.checker_id);
            let until = tokio::time::Instant::now() + shared.config.limits.max_stream_duration;
            let mut shutdown = shared.shutdown.clone();
            while tokio::time::Instant::now() < until && !*shutdown.borrow() {
                let next = tokio::select! {
                    r = shared.checker.next_tasks(&session, session.max_concurrency as usize, Duration::from_secs(1)) => r,
                    _ = shutdown.changed() => return,
                    () = tx.closed() => return,
                };
                match next {
                    Ok(tasks) => {
                        for t in &tasks {
                            if tx.send(Ok(pb::CheckTask::from(t))).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(ControlPlaneError::from(e).into())).await;
                        return;
                    }
                }
            }
        });
        Ok(Box::pin(ReceiverStream::new(rx)))
    }

    async fn report(
        &self,
        req: Request<pb::ReportObservationsRequest>,
    ) -> CpResult<pb::ReportObservationsResponse> {
        self.auth
            .authorize(&req, WorkloadKind::Checker, &req.get_ref().checker_id)?;
        let m = req.into_inner();
        if m.observations.len() > self.shared.config.limits.max_observation_batch {
            return Err(ControlPlaneError::TooLarge("observations"));
        }
        let session = self.current(&m.checker_id, &m.session_id).await?;
        let observations = m
            .observations
            .into_iter()
            .map(Observation::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let s = self.shared.checker.report(&session, observations).await?;
        Ok(pb::ReportObservationsResponse {
            accepted: s.accepted,
            discarded: s.discarded,
        })
    }
}

#[tonic::async_trait]
impl CheckerControlPlane for CheckerService {
    type StreamTasksStream = TaskStream;

    #[tracing::instrument(skip_all, fields(checker = %span_id(&request.get_ref().checker_id)))]
    async fn register_checker(
        &self,
        request: Request<pb::RegisterCheckerRequest>,
    ) -> Result<Response<pb::RegisterCheckerResponse>, Status> {
        serve(request, "RegisterChecker", sizes::REGISTER_CHECKER, |r| {
            self.register(r)
        })
        .await
    }

    #[tracing::instrument(skip_all, fields(checker = %span_id(&request.get_ref().checker_id)))]
    async fn stream_tasks(
        &self,
        request: Request<pb::StreamTasksRequest>,
    ) -> Result<Response<Self::StreamTasksStream>, Status> {
        serve(request, "StreamTasks", sizes::STREAM_TASKS, |r| {
            self.stream(r)
        })
        .await
    }

    #[tracing::instrument(skip_all, fields(checker = %span_id(&request.get_ref().checker_id)))]
    async fn report_observations(
        &self,
        request: Request<pb::ReportObservationsRequest>,
    ) -> Result<Response<pb::ReportObservationsResponse>, Status> {
        serve(
            request,
            "ReportObservations",
            sizes::REPORT_OBSERVATIONS,
            |r| self.report(r),
        )
        .await
    }
}
