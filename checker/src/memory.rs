//! In-process bindings of the ports: a task queue and an observation collector.
//! For tests and for embedding the checker next to an in-process controller.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::model::{Observation, ProbeTask, Tier};
use crate::ports::{BindingError, ObservationSink, TaskSource};

/// A bounded FIFO of tasks.
#[derive(Debug)]
pub struct MemorySource {
    queue: Mutex<VecDeque<ProbeTask>>,
    capacity: usize,
}

impl MemorySource {
    /// An empty queue holding at most `capacity` tasks.
    pub fn new(capacity: usize) -> Self {
        Self {
            queue: Mutex::new(VecDeque::new()),
            capacity,
        }
    }

    /// Queues a task; `false` (task dropped) when the queue is full.
    pub fn push(&self, task: ProbeTask) -> bool {
        let mut q = self.queue.lock();
        if q.len() >= self.capacity {
            return false;
        }
        q.push_back(task);
        true
    }

    /// Tasks still queued.
    pub fn len(&self) -> usize {
        self.queue.lock().len()
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.queue.lock().is_empty()
    }
}

#[async_trait]
impl TaskSource for MemorySource {
    async fn next_tasks(
        &self,
        max: usize,
        _tiers: &[Tier],
    ) -> Result<Vec<ProbeTask>, BindingError> {
        let mut q = self.queue.lock();
        let n = max.min(q.len());
        Ok(q.drain(..n).collect())
    }
}

/// Collects submitted observations (bounded; the oldest are discarded past capacity).
#[derive(Debug, Clone)]
pub struct MemorySink {
    seen: Arc<Mutex<VecDeque<Observation>>>,
    capacity: usize,
}

impl MemorySink {
    /// A collector keeping the last `capacity` observations.
    pub fn new(capacity: usize) -> Self {
        Self {
            seen: Arc::new(Mutex::new(VecDeque::new())),
            capacity,
        }
    }

    /// Everything collected so far.
    pub fn observations(&self) -> Vec<Observation> {
        self.seen.lock().iter().cloned().collect()
    }
}

#[async_trait]
impl ObservationSink for MemorySink {
    async fn submit(&self, observations: Vec<Observation>) -> Result<(), BindingError> {
        let mut seen = self.seen.lock();
        for o in observations {
            if seen.len() >= self.capacity {
                seen.pop_front();
            }
            seen.push_back(o);
        }
        Ok(())
    }
}
