//! Worker request outcomes on their way to the health reducer: a bounded queue that
//! drops (and counts) rather than back-pressuring workers. Outcomes are observations
//! only; nothing here changes the activity pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use activity_pool::model::WorkerId;
use proxy_pool_api::controlplane::model::Outcome;
use tokio::sync::mpsc;

/// One outcome with the worker that reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerOutcome {
    /// Reporting worker.
    pub worker_id: WorkerId,
    /// The outcome.
    pub outcome: Outcome,
}

/// Producer side of the outcome queue. Cheap to clone.
#[derive(Clone, Debug)]
pub struct OutcomeQueue {
    tx: mpsc::Sender<WorkerOutcome>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    dropped: AtomicU64,
}

impl OutcomeQueue {
    /// A queue of `capacity` outcomes and its consumer (give it to the reducer).
    pub fn bounded(capacity: usize) -> (Self, mpsc::Receiver<WorkerOutcome>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                tx,
                counters: Arc::default(),
            },
            rx,
        )
    }

    /// Enqueues without waiting; `false` (and counted) when full or closed.
    pub fn offer(&self, item: WorkerOutcome) -> bool {
        match self.tx.try_send(item) {
            Ok(()) => {
                self.counters.accepted.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Outcomes enqueued so far.
    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::Relaxed)
    }

    /// Outcomes dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }
}
