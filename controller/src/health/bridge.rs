//! Binds the health service to the control plane's checker queue
//! ([`MemoryCheckerBackend`]): leased planner tasks become one wire task per check
//! (ID `h<task>-<check>`), and observations coming back from checkers are converted
//! and submitted to the reducer in batches. Bounded on both sides: the queue is only
//! topped up to its capacity (what does not fit is handed back to the planner) and
//! the observation channel is the control plane's bounded one.
//!
//! Queued tasks are not yet marked in the pool (a queue waiting for a checker must not
//! keep proxies from extraction): the bridge puts a gate on the backend, and a task
//! goes to a checker only once [`HealthService::admit`] has marked its proxy under
//! check; a task whose proxy was taken meanwhile is withdrawn, never probed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::ProxyId;
use async_trait::async_trait;
use proxy_pool_api::controlplane::model as wire;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::model::{Check, CheckTask, CheckerId, Observation, Tier};
use super::service::{HealthService, ObservationSink, TaskStart};
use crate::controlplane::MemoryCheckerBackend;
use crate::controlplane::checker::{CheckerError, CheckerObservation, TaskGate};

/// Settings of the bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeOptions {
    /// Wire tasks kept queued for checkers (≤ the backend's capacity).
    pub queue_target: usize,
    /// How often the queue is topped up.
    pub feed_interval: Duration,
    /// Tiers handed out (those the deployed checkers run).
    pub tiers: Vec<Tier>,
    /// Most observations per reducer submit.
    pub max_batch: usize,
    /// Longest an observation waits for its batch.
    pub flush_interval: Duration,
}

impl Default for BridgeOptions {
    fn default() -> Self {
        Self {
            queue_target: 256,
            feed_interval: Duration::from_millis(200),
            tiers: vec![Tier::Basic, Tier::Egress, Tier::Target],
            max_batch: 512,
            flush_interval: Duration::from_millis(100),
        }
    }
}

/// The bridge.
#[derive(Debug)]
pub struct CheckerBridge {
    svc: Arc<HealthService>,
    backend: Arc<MemoryCheckerBackend>,
    options: BridgeOptions,
}

/// One wire task per check of a planner task.
pub fn to_wire(task: &CheckTask) -> Vec<wire::CheckTask> {
    let proxy = wire::ProxyEndpoint {
        id: task.proxy_id.to_string(),
        upstream: task.upstream.to_string(),
        dial: task.dial.clone(),
    };
    task.checks
        .iter()
        .enumerate()
        .map(|(i, check)| {
            let (routing, target) = match check {
                Check::Target {
                    routing,
                    host,
                    port,
                } => (
                    Some(routing.clone()),
                    Some(wire::CheckTarget {
                        url: format!("{host}:{port}"),
                        expect_status: None,
                    }),
                ),
                _ => (None, None),
            };
            wire::CheckTask {
                task_id: format!("h{}-{i}", task.task_id),
                tier: check.tier(),
                proxy: proxy.clone(),
                deadline_ms: task.deadline.millis(),
                routing,
                target,
            }
        })
        .collect()
}

/// The planner task of a wire task ID (`h<task>-<check>`); `None` when it is not ours.
fn planner_task(wire_id: &str) -> Option<u64> {
    wire_id.strip_prefix('h')?.split_once('-')?.0.parse().ok()
}

/// A wire observation as the reducer sees it (the planner's task, a pool proxy ID);
/// `None` when it names no task of ours.
pub fn from_wire(o: &wire::Observation) -> Option<Observation> {
    Some(Observation {
        task_id: planner_task(&o.task_id)?,
        proxy_id: ProxyId::new(o.proxy_id.clone()).ok()?,
        tier: o.tier,
        routing: o.routing.clone(),
        success: o.success,
        latency: o.latency,
        failure: o.failure,
        egress: o.egress,
    })
}

/// The gate the bridge puts on its backend: a task goes to a checker only once its
/// proxy is marked under check in the pool ([`HealthService::admit`]).
#[derive(Debug)]
struct MarkGate {
    svc: Arc<HealthService>,
}

#[async_trait]
impl TaskGate for MarkGate {
    async fn admit(&self, tasks: &[wire::CheckTask]) -> Result<Vec<bool>, CheckerError> {
        // One mark per planner task (its checks are separate wire tasks, possibly taken
        // at different times: the same check ID then extends the same mark).
        let mut starts: Vec<TaskStart> = Vec::new();
        let mut index: HashMap<u64, usize> = HashMap::new();
        for t in tasks {
            let Some(task_id) = planner_task(&t.task_id) else {
                continue;
            };
            let Ok(proxy_id) = ProxyId::new(t.proxy.id.clone()) else {
                continue;
            };
            index.entry(task_id).or_insert_with(|| {
                starts.push(TaskStart {
                    task_id,
                    proxy_id,
                    deadline: Timestamp(t.deadline_ms),
                });
                starts.len() - 1
            });
        }
        let admitted = self.svc.admit(&starts).await.map_err(|e| {
            debug!(error = %e, "marking proxies under check failed: tasks given back");
            CheckerError::Unavailable
        })?;
        Ok(tasks
            .iter()
            .map(|t| match planner_task(&t.task_id) {
                // Not a planner task: nothing to mark.
                None => true,
                Some(id) => index.get(&id).is_some_and(|&i| admitted[i]),
            })
            .collect())
    }
}

impl CheckerBridge {
    /// A bridge between `svc` and the control plane's checker queue; it gates the
    /// backend (a task goes to a checker only once its proxy is marked under check).
    pub fn new(
        svc: Arc<HealthService>,
        backend: Arc<MemoryCheckerBackend>,
        options: BridgeOptions,
    ) -> Self {
        if !backend.set_gate(Arc::new(MarkGate { svc: svc.clone() })) {
            tracing::warn!("the checker backend already has a gate: not gated by this bridge");
        }
        Self {
            svc,
            backend,
            options,
        }
    }

    /// Runs until `shutdown`: feeds the queue and drains `observations`.
    pub async fn run(
        self,
        observations: mpsc::Receiver<CheckerObservation>,
        shutdown: CancellationToken,
    ) {
        let feed = self.feed(shutdown.clone());
        let drain = self.drain(observations, shutdown);
        tokio::join!(feed, drain);
    }

    async fn feed(&self, shutdown: CancellationToken) {
        loop {
            let free = self
                .options
                .queue_target
                .saturating_sub(self.backend.queued());
            if free > 0 {
                // Not marked yet: the gate marks each task as a checker takes it.
                match self.svc.lease_tasks(free, &self.options.tiers).await {
                    Ok(tasks) => self.enqueue(tasks),
                    Err(e) => debug!(error = %e, "leasing check tasks failed"),
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.options.feed_interval) => {}
            }
        }
    }

    fn enqueue(&self, tasks: Vec<CheckTask>) {
        let mut back = Vec::new();
        for task in tasks {
            let wire = to_wire(&task);
            // All checks of a task or none: a partial task would wait for its deadline.
            if self.backend.queued() + wire.len() > self.options.queue_target {
                back.push(task.task_id);
                continue;
            }
            for t in wire {
                if !self.backend.enqueue(t) {
                    debug!(task = task.task_id, "checker queue refused a task");
                }
            }
        }
        if !back.is_empty() {
            self.svc.release_tasks(&back);
        }
    }

    async fn drain(&self, mut rx: mpsc::Receiver<CheckerObservation>, shutdown: CancellationToken) {
        let mut batch: Vec<CheckerObservation> = Vec::new();
        loop {
            let next = if batch.is_empty() {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    n = rx.recv() => n,
                }
            } else {
                match tokio::time::timeout(self.options.flush_interval, rx.recv()).await {
                    Ok(n) => n,
                    Err(_) => {
                        self.submit(std::mem::take(&mut batch)).await;
                        continue;
                    }
                }
            };
            let Some(o) = next else {
                self.submit(batch).await;
                return;
            };
            batch.push(o);
            if batch.len() >= self.options.max_batch {
                self.submit(std::mem::take(&mut batch)).await;
            }
        }
    }

    async fn submit(&self, batch: Vec<CheckerObservation>) {
        let mut by_checker: BTreeMap<String, Vec<Observation>> = BTreeMap::new();
        for o in &batch {
            if let Some(obs) = from_wire(&o.observation) {
                by_checker
                    .entry(o.checker_id.clone())
                    .or_default()
                    .push(obs);
            }
        }
        for (checker, obs) in by_checker {
            if let Err(e) = self.svc.submit(&CheckerId(checker), obs).await {
                debug!(error = %e, "submitting observations failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use activity_pool::Timestamp;
    use activity_pool::model::{Credentials, Dial, Protocol, Secret, UpstreamId};
    use proxy_pool_api::controlplane::pb;
    use std::net::IpAddr;

    use crate::health::model::FailureCode;

    #[test]
    fn wire_round_trip_of_ids_tiers_and_failures() {
        let task = CheckTask {
            task_id: 42,
            proxy_id: ProxyId::new("p-1").unwrap(),
            upstream: UpstreamId::new("u").unwrap(),
            dial: Dial {
                protocol: Protocol::Socks5,
                host: "127.0.0.2".into(),
                port: 1080,
                credentials: Some(Credentials {
                    username: "a".into(),
                    password: Secret::new("b"),
                }),
            },
            checks: vec![
                Check::Basic,
                Check::Egress,
                Check::Target {
                    routing: "r".into(),
                    host: "t".into(),
                    port: 443,
                },
            ],
            deadline: Timestamp(5_000),
        };
        let w = to_wire(&task);
        assert_eq!(
            w.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(),
            ["h42-0", "h42-1", "h42-2"]
        );
        assert_eq!(w[2].target.as_ref().map(|t| t.url.as_str()), Some("t:443"));
        assert_eq!(w[0].deadline_ms, 5_000);
        assert!(!format!("{:?}", w[0]).contains("\"b\""));
        let obs = |success, code: &str, leak| {
            wire::Observation::try_from(pb::Observation {
                task_id: "h42-1".into(),
                proxy_id: "p-1".into(),
                tier: pb::CheckTier::Egress as i32,
                success,
                latency_ms: 7,
                failure_code: code.into(),
                egress_address: "127.0.0.9".into(),
                anonymity_leak: leak,
                routing: String::new(),
                observed_at_ms: 1,
            })
            .unwrap()
        };
        let o = from_wire(&obs(true, "", false)).unwrap();
        assert_eq!((o.task_id, o.tier, o.failure), (42, Tier::Egress, None));
        assert_eq!(o.egress, Some(IpAddr::from([127, 0, 0, 9])));
        assert_eq!(
            from_wire(&obs(false, "", true)).unwrap().failure,
            Some(FailureCode::ClientLeaked)
        );
        assert_eq!(
            from_wire(&obs(false, "auth_rejected", false))
                .unwrap()
                .failure,
            Some(FailureCode::AuthRejected)
        );
        assert_eq!(
            from_wire(&obs(false, "weird", false)).unwrap().failure,
            Some(FailureCode::HandshakeFailed)
        );
        let mut foreign = obs(true, "", false);
        foreign.task_id = "t-1".into();
        assert!(from_wire(&foreign).is_none());
    }
}
