//! Running the prepared loops: the control plane on every replica, the rest on the
//! leader only, all stopped within the shutdown deadline.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Prepared, UsageWorker};
use crate::controlplane::checker::CheckerObservation;
use crate::controlplane::{ControlPlane, WorkerOutcome};
use crate::health::{CheckerBridge, HealthService};
use crate::leadership::Leadership;
use crate::provider::ProviderReconciler;
use crate::shutdown::{Phase, Shutdown};

/// The running loops.
#[derive(Debug)]
pub struct Running {
    stop: CancellationToken,
    tracker: TaskTracker,
    usage: Option<UsageWorker>,
}

/// Spawns every prepared loop; they stop when `shutdown` reaches
/// [`Phase::Stopping`] (or [`Running::stop`]). The control plane is served at once on
/// every replica; the leader-only loops (ownership and publishing, the outcome
/// reducer, the health bridge, the provider reconcilers) start once `leadership`
/// elects this replica and stop when it is deposed.
pub fn start(
    prepared: Prepared,
    listener: Option<TcpListener>,
    shutdown: Shutdown,
    leadership: Leadership,
    relay: Option<activity_pool::RedisPool>,
) -> Running {
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    {
        let stop = stop.clone();
        tracker.spawn(async move {
            tokio::select! {
                () = shutdown.reached(Phase::Stopping) => stop.cancel(),
                () = stop.cancelled() => {}
            }
        });
    }
    let Prepared {
        control_plane,
        mut usage,
        leader,
    } = prepared;
    let usage = usage.start(&leadership);
    let mut plane_loop = None;
    match (control_plane, listener) {
        (Some((plane, transport)), Some(listener)) => {
            let addr = listener.local_addr().ok();
            plane_loop = Some(plane.clone());
            let s = stop.clone();
            tracker.spawn(async move {
                if let Err(e) = crate::controlplane::serve(
                    listener,
                    transport,
                    plane.clone(),
                    s.clone().cancelled_owned(),
                )
                .await
                {
                    tracing::error!(error = %e, "control plane stopped");
                }
                plane.close_streams();
            });
            tracing::info!(listen = ?addr, "control plane serving");
        }
        (Some(_), None) => {
            tracing::error!("control plane configured but no listener given: not serving it");
        }
        _ => {}
    }
    let t = tracker.clone();
    let s = stop.clone();
    tracker.spawn(async move {
        let elected = tokio::select! {
            () = s.cancelled() => return,
            e = leadership.elected() => e,
        };
        if elected {
            // Deposed: the loops stop at once (a deposed leader's writes are fenced
            // anyway; the process then shuts down, see `Controller::run`).
            let lead = s.child_token();
            let l = lead.clone();
            t.spawn(async move {
                tokio::select! {
                    () = leadership.deposed() => l.cancel(),
                    () = l.cancelled() => {}
                }
            });
            leader.spawn(plane_loop, relay, &lead, &t);
        }
    });
    Running {
        stop,
        tracker,
        usage,
    }
}

/// The loops only the leader runs, besides the control plane's ownership loop.
#[derive(Debug)]
pub(super) struct LeaderLoops {
    pub(super) outcomes: Option<mpsc::Receiver<WorkerOutcome>>,
    pub(super) bridge: CheckerBridge,
    pub(super) observations: mpsc::Receiver<CheckerObservation>,
    pub(super) reconcilers: Vec<ProviderReconciler>,
    pub(super) health: Arc<HealthService>,
}

impl LeaderLoops {
    /// Spawns them with the ownership loop of `plane` and, with Redis, the relay of
    /// extraction demand over `relay`.
    fn spawn(
        self,
        plane: Option<Arc<ControlPlane>>,
        relay: Option<activity_pool::RedisPool>,
        stop: &CancellationToken,
        tracker: &TaskTracker,
    ) {
        tracing::info!("leader loops starting");
        if let Some(p) = plane {
            if let Some(pool) = relay {
                // Extraction demand the other replicas relay.
                let local = p.ownership_handle() as Arc<dyn crate::demand::DrainDemand>;
                tracker.spawn(crate::demand::relay::take(pool, local, stop.clone()));
            }
            let s = stop.clone();
            tracker.spawn(async move { p.run(s.cancelled_owned()).await });
        }
        if let Some(rx) = self.outcomes {
            tracker.spawn(reduce_outcomes(rx, self.health.clone(), stop.clone()));
        }
        tracker.spawn(self.bridge.run(self.observations, stop.clone()));
        crate::provider::spawn_all(self.reconcilers, stop, tracker);
    }
}

/// Most gateway outcomes reduced in one step.
const OUTCOME_BATCH: usize = 1_024;

/// Feeds gateway outcomes from the control plane's queue to the health reducer, in
/// batches, until `stop`. A failed write is logged and the batch dropped (outcomes are
/// observations; the next ones count again).
async fn reduce_outcomes(
    mut rx: mpsc::Receiver<WorkerOutcome>,
    health: Arc<HealthService>,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(OUTCOME_BATCH);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            n = rx.recv_many(&mut batch, OUTCOME_BATCH) => if n == 0 { return },
        }
        if let Err(e) = health.outcomes(&batch).await {
            tracing::warn!(error = %e, outcomes = batch.len(), "gateway outcomes not applied");
        }
        batch.clear();
    }
}

impl Running {
    /// The part of the grace period the final analytics flush needs at its end
    /// ([`crate::shutdown::reserve`]); zero when analytics is off.
    pub fn reserved(&self) -> std::time::Duration {
        self.usage
            .as_ref()
            .map_or(std::time::Duration::ZERO, UsageWorker::flush_timeout)
    }

    /// Stops every loop and waits for them until `deadline`, then stops analytics
    /// collection and makes its final flush (after the listeners drained, so every
    /// answered extraction is in it).
    pub async fn stop(self, deadline: Instant) {
        self.stop.cancel();
        self.tracker.close();
        let loops_deadline = crate::shutdown::reserve(deadline, self.reserved());
        if tokio::time::timeout_at(loops_deadline, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("grace period over before every background loop stopped");
        }
        if let Some(u) = self.usage {
            u.stop(deadline).await;
        }
    }
}
