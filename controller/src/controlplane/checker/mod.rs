//! The checker side: the [`CheckerBackend`] port (task queue + observation sink), a
//! bounded in-memory implementation, and the `CheckerControlPlane` gRPC service.
//!
//! The backend decides nothing about health: observations go to the single reducer
//! through a bounded queue that drops (and counts) when full.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use proxy_pool_api::controlplane::model::{CheckTask, CheckTier, Observation};

use super::error::ControlPlaneError;

mod memory;
mod service;

pub use memory::MemoryCheckerBackend;
pub use service::CheckerService;

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

/// Decides, as a checker takes tasks from the queue, which of them may go to it: the
/// health side marks their proxies under check in the pool first, so that no extraction
/// takes a proxy a checker may go through (`HealthService::admit`). Without a gate every
/// task goes.
#[async_trait]
pub trait TaskGate: Send + Sync + fmt::Debug {
    /// Of `tasks`, just taken for a checker, whether each may go to it (in order); the
    /// others are withdrawn. An error withholds them all.
    async fn admit(&self, tasks: &[CheckTask]) -> Result<Vec<bool>, CheckerError>;
}

/// One observation with the checker that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckerObservation {
    /// Checker ID.
    pub checker_id: String,
    /// The observation.
    pub observation: Observation,
}
