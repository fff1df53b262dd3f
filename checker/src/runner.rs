//! The task loop: lease tasks while probe slots are free (a semaphore bounds the
//! concurrency), probe each, batch observations to the sink. Shutdown: stop leasing,
//! let in-flight probes finish within the grace period, cancel the rest, flush.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::metrics::ProbeDurations;
use crate::model::{Observation, Tier};
use crate::ports::{ObservationSink, Prober, TaskSource};

/// Settings of the task loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerOptions {
    /// Most probes at once.
    pub concurrency: NonZeroUsize,
    /// Tiers this checker runs.
    pub tiers: Vec<Tier>,
    /// Wait before asking again when no task was due.
    pub idle_poll: Duration,
    /// Most observations per submit.
    pub max_batch: usize,
    /// Longest an observation waits for its batch.
    pub flush_interval: Duration,
    /// Time in-flight probes get to finish after shutdown.
    pub grace: Duration,
    /// Submit attempts per batch before it is dropped (and counted).
    pub submit_tries: u32,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        Self {
            concurrency: NonZeroUsize::MIN.saturating_add(31),
            tiers: vec![Tier::Basic, Tier::Egress, Tier::Target],
            idle_poll: Duration::from_millis(500),
            max_batch: 256,
            flush_interval: Duration::from_millis(200),
            grace: Duration::from_secs(10),
            submit_tries: 3,
        }
    }
}

/// Counters of a run.
#[derive(Debug, Default)]
pub struct RunStats {
    /// Tasks leased.
    pub leased: AtomicU64,
    /// Tasks whose probes completed.
    pub probed: AtomicU64,
    /// Probes cancelled at the end of the grace period.
    pub cancelled: AtomicU64,
    /// Observations submitted.
    pub submitted: AtomicU64,
    /// Observations dropped after failed submits.
    pub dropped: AtomicU64,
    /// Durations of the checks, by tier and result.
    pub probes: ProbeDurations,
}

/// Runs until `shutdown`; returns the run's counters. New tasks are never leased
/// after `shutdown` fires.
pub async fn run(
    source: Arc<dyn TaskSource>,
    sink: Arc<dyn ObservationSink>,
    prober: Arc<dyn Prober>,
    options: RunnerOptions,
    shutdown: CancellationToken,
) -> Arc<RunStats> {
    let stats = Arc::new(RunStats::default());
    run_counting(source, sink, prober, options, stats.clone(), shutdown).await;
    stats
}

/// [`run`], counting into `stats` (which the ops listener reads while it runs).
pub async fn run_counting(
    source: Arc<dyn TaskSource>,
    sink: Arc<dyn ObservationSink>,
    prober: Arc<dyn Prober>,
    options: RunnerOptions,
    stats: Arc<RunStats>,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(options.concurrency.get()));
    let (tx, rx) = mpsc::channel::<Vec<Observation>>(options.concurrency.get() * 2);
    let reporter = tokio::spawn(report(rx, sink, options.clone(), stats.clone()));
    let probes = TaskTracker::new();
    let cancel_probes = CancellationToken::new();
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        // Wait for at least one free slot.
        let first = tokio::select! {
            () = shutdown.cancelled() => break,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let want = slots.available_permits() + 1;
        let tasks = tokio::select! {
            () = shutdown.cancelled() => break,
            t = source.next_tasks(want, &options.tiers) => t,
        };
        let tasks = match tasks {
            Ok(t) => {
                failures = 0;
                t
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                let delay = backoff(failures);
                warn!(error = %err, failures, "task source failed");
                drop(first);
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(delay) => continue,
                }
            }
        };
        if tasks.is_empty() {
            drop(first);
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(options.idle_poll) => continue,
            }
        }
        let mut first = Some(first);
        for task in tasks {
            let permit = match first.take() {
                Some(p) => p,
                None => match slots.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            stats.leased.fetch_add(1, Ordering::Relaxed);
            let (prober, tx, stats, cancel) = (
                prober.clone(),
                tx.clone(),
                stats.clone(),
                cancel_probes.clone(),
            );
            probes.spawn(async move {
                let _permit = permit;
                tokio::select! {
                    obs = prober.probe(&task) => {
                        stats.probed.fetch_add(1, Ordering::Relaxed);
                        for o in &obs {
                            stats.probes.observe(o);
                        }
                        // Bounded channel: a slow sink slows probing, it never grows memory.
                        let _ = tx.send(obs).await;
                    }
                    () = cancel.cancelled() => {
                        stats.cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }
    probes.close();
    if tokio::time::timeout(options.grace, probes.wait())
        .await
        .is_err()
    {
        debug!(
            in_flight = probes.len(),
            "grace period over; cancelling probes"
        );
        cancel_probes.cancel();
        probes.wait().await;
    }
    drop(tx);
    let _ = reporter.await;
}

/// 100 ms · 2^failures up to 5 s, uniformly in the upper half.
fn backoff(failures: u32) -> Duration {
    proxy_pool_runtime::Backoff::equal_jitter(Duration::from_millis(100), Duration::from_secs(5))
        .jittered(failures)
}

async fn report(
    mut rx: mpsc::Receiver<Vec<Observation>>,
    sink: Arc<dyn ObservationSink>,
    options: RunnerOptions,
    stats: Arc<RunStats>,
) {
    let mut batch: Vec<Observation> = Vec::new();
    loop {
        let next = if batch.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(options.flush_interval, rx.recv()).await {
                Ok(n) => n,
                Err(_) => {
                    submit(&sink, &mut batch, &options, &stats).await;
                    continue;
                }
            }
        };
        match next {
            Some(obs) => {
                batch.extend(obs);
                if batch.len() >= options.max_batch {
                    submit(&sink, &mut batch, &options, &stats).await;
                }
            }
            None => {
                if !batch.is_empty() {
                    submit(&sink, &mut batch, &options, &stats).await;
                }
                return;
            }
        }
    }
}

async fn submit(
    sink: &Arc<dyn ObservationSink>,
    batch: &mut Vec<Observation>,
    options: &RunnerOptions,
    stats: &RunStats,
) {
    let obs = std::mem::take(batch);
    let n = obs.len() as u64;
    for attempt in 1..=options.submit_tries.max(1) {
        match sink.submit(obs.clone()).await {
            Ok(()) => {
                stats.submitted.fetch_add(n, Ordering::Relaxed);
                return;
            }
            Err(err) => {
                debug!(error = %err, attempt, "submit failed");
                tokio::time::sleep(backoff(attempt)).await;
            }
        }
    }
    warn!(
        observations = n,
        "observations dropped after failed submits"
    );
    stats.dropped.fetch_add(n, Ordering::Relaxed);
}
