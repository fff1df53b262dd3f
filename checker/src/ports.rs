//! The checker's ports: where tasks come from, where observations go, and the prober.

use async_trait::async_trait;

use crate::model::{Observation, ProbeTask, Tier};

/// Errors of a binding to the controller. Carries codes, never task contents.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    /// The controller cannot be reached right now; retry with backoff.
    #[error("controller unavailable: {0}")]
    Unavailable(String),
    /// The controller refused the call; retrying the same call will not help.
    #[error("controller refused the call: {0}")]
    Refused(String),
}

/// Where check tasks come from (the controller's `CheckerControlPlane`).
#[async_trait]
pub trait TaskSource: Send + Sync {
    /// Up to `max` tasks for checks of `tiers`; empty when nothing is due.
    async fn next_tasks(&self, max: usize, tiers: &[Tier]) -> Result<Vec<ProbeTask>, BindingError>;
}

/// Where observations go. A task's observations are always submitted together.
#[async_trait]
pub trait ObservationSink: Send + Sync {
    /// Submits a batch.
    async fn submit(&self, observations: Vec<Observation>) -> Result<(), BindingError>;
}

/// Runs a task's checks through the proxy.
#[async_trait]
pub trait Prober: Send + Sync {
    /// One observation per check run (a failed BASIC ends the task early). Must
    /// respect `task.deadline` and never log credentials.
    async fn probe(&self, task: &ProbeTask) -> Vec<Observation>;
}
