//! The checker side: the [`CheckerBackend`] port (task queue + observation sink), a
//! bounded in-memory implementation, and the `CheckerControlPlane` gRPC service.
//!
//! The backend decides nothing about health: observations go to the single reducer
//! through a bounded queue that drops (and counts) when full.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use activity_pool::Clock;
use async_trait::async_trait;
use parking_lot::Mutex;
use proxy_pool_api::controlplane::convert::{check_id, tier_from_wire};
use proxy_pool_api::controlplane::model::{CheckTask, CheckTier, Observation};
use proxy_pool_api::controlplane::negotiate_version;
use proxy_pool_api::controlplane::pb::{self, checker_control_plane_server::CheckerControlPlane};
use proxy_pool_api::controlplane::spiffe::WorkloadKind;
use tokio::sync::{Notify, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::Shared;
use super::error::{ControlPlaneError, CpResult};
use super::identity::Authenticator;

/// A checker's registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckerRegistration {
    /// Checker ID (from its certificate).
    pub checker_id: String,
    /// Process.
    pub instance_id: String,
    /// Most tasks outstanding at once (≥ 1).
    pub max_concurrency: u32,
    /// Tiers it can run (non-empty).
    pub tiers: Vec<CheckTier>,
}

/// A registered checker session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckerSession {
    /// Checker ID.
    pub checker_id: String,
    /// Session (a newer registration replaces it).
    pub session_id: String,
    /// Most tasks outstanding.
    pub max_concurrency: u32,
    /// Tiers.
    pub tiers: Vec<CheckTier>,
}

/// What a report did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportSummary {
    /// Forwarded to the reducer.
    pub accepted: u32,
    /// Unknown, late, duplicate or not this checker's tasks; or dropped on a full queue.
    pub discarded: u32,
}

/// Why a checker call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckerError {
    /// The session is not the checker's current one.
    #[error("stale checker session")]
    StaleSession,
    /// The backend is unavailable.
    #[error("checker backend unavailable")]
    Unavailable,
}

impl From<CheckerError> for ControlPlaneError {
    fn from(e: CheckerError) -> Self {
        match e {
            CheckerError::StaleSession => ControlPlaneError::StaleSession,
            CheckerError::Unavailable => {
                ControlPlaneError::Exhausted("checker backend unavailable")
            }
        }
    }
}

/// The checker-side service logic behind the gRPC edge: the task queue and the
/// observation sink. Replace or wrap it to schedule checks differently.
#[async_trait]
pub trait CheckerBackend: Send + Sync + fmt::Debug {
    /// Registers a checker, replacing any earlier session of the same ID.
    async fn register(
        &self,
        registration: CheckerRegistration,
    ) -> Result<CheckerSession, CheckerError>;
    /// Up to `max` tasks for the session, waiting at most `wait` for the first; never
    /// more than the session's free concurrency; tasks past their deadline are dropped.
    async fn next_tasks(
        &self,
        session: &CheckerSession,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<CheckTask>, CheckerError>;
    /// Accepts results of tasks this session holds; late or unknown ones are discarded.
    async fn report(
        &self,
        session: &CheckerSession,
        observations: Vec<Observation>,
    ) -> Result<ReportSummary, CheckerError>;
    /// The checker's current session, if any.
    async fn session(&self, checker_id: &str) -> Option<CheckerSession>;
}

/// One observation with the checker that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckerObservation {
    /// Checker ID.
    pub checker_id: String,
    /// The observation.
    pub observation: Observation,
}

#[derive(Debug)]
struct InFlight {
    checker_id: String,
    proxy_id: String,
    deadline_ms: i64,
}

#[derive(Debug, Default)]
struct QueueState {
    queue: VecDeque<CheckTask>,
    sessions: HashMap<String, CheckerSession>,
    in_flight: HashMap<String, InFlight>,
    outstanding: HashMap<String, u32>,
}

/// A bounded in-memory [`CheckerBackend`]: producers [`enqueue`] tasks, the reducer
/// reads observations from the receiver returned by [`MemoryCheckerBackend::new`].
///
/// [`enqueue`]: MemoryCheckerBackend::enqueue
#[derive(Debug)]
pub struct MemoryCheckerBackend {
    state: Mutex<QueueState>,
    capacity: usize,
    notify: Notify,
    sink: mpsc::Sender<CheckerObservation>,
    clock: Arc<dyn Clock>,
    dropped_tasks: AtomicU64,
    dropped_observations: AtomicU64,
    next_session: AtomicU64,
}

impl MemoryCheckerBackend {
    /// A backend holding at most `capacity` queued tasks and `sink_capacity` unread
    /// observations.
    pub fn new(
        capacity: usize,
        sink_capacity: usize,
        clock: Arc<dyn Clock>,
    ) -> (Self, mpsc::Receiver<CheckerObservation>) {
        let (sink, rx) = mpsc::channel(sink_capacity.max(1));
        (
            Self {
                state: Mutex::new(QueueState::default()),
                capacity: capacity.max(1),
                notify: Notify::new(),
                sink,
                clock,
                dropped_tasks: AtomicU64::new(0),
                dropped_observations: AtomicU64::new(0),
                next_session: AtomicU64::new(1),
            },
            rx,
        )
    }

    /// Queues a task; `false` (and counted) when the queue is full or the ID is in use.
    pub fn enqueue(&self, task: CheckTask) -> bool {
        let mut st = self.state.lock();
        if st.queue.len() >= self.capacity
            || st.in_flight.contains_key(&task.task_id)
            || st.queue.iter().any(|t| t.task_id == task.task_id)
        {
            self.dropped_tasks.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        st.queue.push_back(task);
        drop(st);
        self.notify.notify_waiters();
        true
    }

    /// Tasks refused because the queue was full.
    pub fn dropped_tasks(&self) -> u64 {
        self.dropped_tasks.load(Ordering::Relaxed)
    }

    /// Observations dropped because the reducer's queue was full.
    pub fn dropped_observations(&self) -> u64 {
        self.dropped_observations.load(Ordering::Relaxed)
    }

    /// Queued tasks.
    pub fn queued(&self) -> usize {
        self.state.lock().queue.len()
    }

    fn take(&self, session: &CheckerSession, max: usize) -> Result<Vec<CheckTask>, CheckerError> {
        let now = self.clock.now().millis();
        let mut st = self.state.lock();
        if st.sessions.get(&session.checker_id) != Some(session) {
            return Err(CheckerError::StaleSession);
        }
        // Tasks whose deadline passed free their slot; their late results are discarded.
        let expired: Vec<(String, String)> = st
            .in_flight
            .iter()
            .filter(|(_, f)| f.deadline_ms <= now)
            .map(|(id, f)| (id.clone(), f.checker_id.clone()))
            .collect();
        for (id, checker) in expired {
            st.in_flight.remove(&id);
            if let Some(n) = st.outstanding.get_mut(&checker) {
                *n = n.saturating_sub(1);
            }
        }
        st.queue.retain(|t| t.deadline_ms > now);
        let busy = st
            .outstanding
            .get(&session.checker_id)
            .copied()
            .unwrap_or(0);
        let free = session.max_concurrency.saturating_sub(busy) as usize;
        let want = max.min(free);
        let mut out = Vec::new();
        let mut i = 0;
        while out.len() < want && i < st.queue.len() {
            if session.tiers.contains(&st.queue[i].tier) {
                if let Some(t) = st.queue.remove(i) {
                    out.push(t);
                }
            } else {
                i += 1;
            }
        }
        for t in &out {
            st.in_flight.insert(
                t.task_id.clone(),
                InFlight {
                    checker_id: session.checker_id.clone(),
                    proxy_id: t.proxy.id.clone(),
                    deadline_ms: t.deadline_ms,
                },
            );
        }
        *st.outstanding
            .entry(session.checker_id.clone())
            .or_default() += out.len() as u32;
        Ok(out)
    }
}

#[async_trait]
impl CheckerBackend for MemoryCheckerBackend {
    async fn register(&self, r: CheckerRegistration) -> Result<CheckerSession, CheckerError> {
        let n = self.next_session.fetch_add(1, Ordering::Relaxed);
        let session = CheckerSession {
            session_id: format!("c-{n}-{}", uuid::Uuid::new_v4().simple()),
            checker_id: r.checker_id.clone(),
            max_concurrency: r.max_concurrency.max(1),
            tiers: r.tiers,
        };
        let mut st = self.state.lock();
        st.sessions.insert(r.checker_id.clone(), session.clone());
        // The old instance's tasks are lost with it; free their slots.
        st.in_flight.retain(|_, f| f.checker_id != r.checker_id);
        st.outstanding.remove(&r.checker_id);
        Ok(session)
    }

    async fn next_tasks(
        &self,
        session: &CheckerSession,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<CheckTask>, CheckerError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.notify.notified();
            let tasks = self.take(session, max)?;
            if !tasks.is_empty() {
                return Ok(tasks);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    async fn report(
        &self,
        session: &CheckerSession,
        observations: Vec<Observation>,
    ) -> Result<ReportSummary, CheckerError> {
        let now = self.clock.now().millis();
        let mut summary = ReportSummary::default();
        let mut forward = Vec::new();
        {
            let mut st = self.state.lock();
            if st.sessions.get(&session.checker_id) != Some(session) {
                return Err(CheckerError::StaleSession);
            }
            for o in observations {
                let ours = st.in_flight.get(&o.task_id).is_some_and(|f| {
                    f.checker_id == session.checker_id && f.proxy_id == o.proxy_id
                });
                if !ours {
                    summary.discarded += 1;
                    continue;
                }
                let late = st
                    .in_flight
                    .remove(&o.task_id)
                    .is_some_and(|f| f.deadline_ms < now);
                if let Some(n) = st.outstanding.get_mut(&session.checker_id) {
                    *n = n.saturating_sub(1);
                }
                if late {
                    summary.discarded += 1;
                } else {
                    forward.push(o);
                }
            }
        }
        self.notify.notify_waiters();
        for observation in forward {
            let item = CheckerObservation {
                checker_id: session.checker_id.clone(),
                observation,
            };
            if self.sink.try_send(item).is_ok() {
                summary.accepted += 1;
            } else {
                self.dropped_observations.fetch_add(1, Ordering::Relaxed);
                summary.discarded += 1;
            }
        }
        Ok(summary)
    }

    async fn session(&self, checker_id: &str) -> Option<CheckerSession> {
        self.state.lock().sessions.get(checker_id).cloned()
    }
}

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
        let permit = self
            .shared
            .streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| ControlPlaneError::Exhausted("too many open streams"))?;
        let (tx, rx) = mpsc::channel(session.max_concurrency.min(1_024) as usize);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let _permit = permit;
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

    #[tracing::instrument(skip_all, fields(checker = %request.get_ref().checker_id))]
    async fn register_checker(
        &self,
        request: Request<pb::RegisterCheckerRequest>,
    ) -> Result<Response<pb::RegisterCheckerResponse>, Status> {
        Ok(Response::new(self.register(request).await?))
    }

    #[tracing::instrument(skip_all, fields(checker = %request.get_ref().checker_id))]
    async fn stream_tasks(
        &self,
        request: Request<pb::StreamTasksRequest>,
    ) -> Result<Response<Self::StreamTasksStream>, Status> {
        Ok(Response::new(self.stream(request).await?))
    }

    #[tracing::instrument(skip_all, fields(checker = %request.get_ref().checker_id))]
    async fn report_observations(
        &self,
        request: Request<pb::ReportObservationsRequest>,
    ) -> Result<Response<pb::ReportObservationsResponse>, Status> {
        Ok(Response::new(self.report(request).await?))
    }
}
