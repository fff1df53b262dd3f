//! A bounded in-memory [`CheckerBackend`]: task queue with capacity, per-checker
//! concurrency, deadline expiry, and a bounded observation channel.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use activity_pool::Clock;
use async_trait::async_trait;
use parking_lot::Mutex;
use proxy_pool_api::controlplane::model::{CheckTask, Observation};
use tokio::sync::{Notify, mpsc};

use super::{
    CheckerBackend, CheckerError, CheckerObservation, CheckerRegistration, CheckerSession,
    ReportSummary, TaskGate,
};

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

impl QueueState {
    /// Takes a task out of flight (reported, expired or withdrawn) and frees its
    /// checker's slot; `None` when it was not in flight.
    fn settle(&mut self, task_id: &str) -> Option<InFlight> {
        let f = self.in_flight.remove(task_id)?;
        if let Some(n) = self.outstanding.get_mut(&f.checker_id) {
            *n = n.saturating_sub(1);
        }
        Some(f)
    }
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
    /// Consulted as a checker takes tasks (`set_gate`).
    gate: OnceLock<Arc<dyn TaskGate>>,
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
                gate: OnceLock::new(),
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

    /// Puts `gate` before every task a checker takes: only the tasks it admits go to
    /// the checker. `false` (and unchanged) when a gate is set already.
    pub fn set_gate(&self, gate: Arc<dyn TaskGate>) -> bool {
        self.gate.set(gate).is_ok()
    }

    /// Takes back tasks taken for `session` that will not go to it: they free the
    /// checker's slots and their results would be discarded.
    fn withdraw(&self, session: &CheckerSession, task_ids: &[String]) {
        if task_ids.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        for id in task_ids {
            let ours = st
                .in_flight
                .get(id)
                .is_some_and(|f| f.checker_id == session.checker_id);
            if ours {
                st.settle(id);
            }
        }
        drop(st);
        self.notify.notify_waiters();
    }

    /// The tasks of `taken` the gate admits; the others are withdrawn.
    async fn admit(
        &self,
        session: &CheckerSession,
        taken: Vec<CheckTask>,
    ) -> Result<Vec<CheckTask>, CheckerError> {
        let Some(gate) = self.gate.get() else {
            return Ok(taken);
        };
        match gate.admit(&taken).await {
            Ok(admitted) if admitted.len() == taken.len() => {
                let mut keep = Vec::with_capacity(taken.len());
                let mut refused = Vec::new();
                for (t, ok) in taken.into_iter().zip(admitted) {
                    if ok {
                        keep.push(t);
                    } else {
                        refused.push(t.task_id);
                    }
                }
                self.withdraw(session, &refused);
                Ok(keep)
            }
            _ => {
                let all: Vec<String> = taken.into_iter().map(|t| t.task_id).collect();
                self.withdraw(session, &all);
                Err(CheckerError::Unavailable)
            }
        }
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
        let expired: Vec<String> = st
            .in_flight
            .iter()
            .filter(|(_, f)| f.deadline_ms <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            st.settle(&id);
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
            let taken = self.take(session, max)?;
            if !taken.is_empty() {
                let tasks = self.admit(session, taken).await?;
                if !tasks.is_empty() {
                    return Ok(tasks);
                }
                // All refused: the queue may hold more.
                continue;
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
                let late = st.settle(&o.task_id).is_some_and(|f| f.deadline_ms < now);
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
