//! One upstream's reconcile loop: fetch → candidates → chunked upsert with an
//! operation ID per fetch → counters; backoff with jitter after failures.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use activity_pool::model::{FetchedBatch, HealthVerdict, OperationId, ProxyId, UpsertReport};
use activity_pool::options::MAX_UPDATE_BATCH;
use activity_pool::ports::{HealthStore, Upserter};
use activity_pool::{PoolError, Timestamp};
use proxy_pool_api::inventory::FetchFailure;
use tokio_util::sync::CancellationToken;
use tracing::{debug, instrument, warn};

use super::candidate::candidates;
use super::error::ProviderError;
use super::metrics::ProviderMetrics;
use super::options::ProviderOptions;
use super::source::VendorSource;

/// Told about the proxies a fetch wrote, so health checks can be planned for them.
/// Must not block: implementations queue (bounded) and return.
pub trait ProxyAnnouncer: Send + Sync + std::fmt::Debug {
    /// `ids` of `upstream` were just inserted or refreshed (or refused by the pool:
    /// the announcer learns that when it looks them up). `not_before`: the upstream is
    /// held back after a new pool generation until then; no check goes through its
    /// proxies before (one of them may be a proxy a client holds from before a loss).
    fn announce(
        &self,
        upstream: &activity_pool::model::UpstreamId,
        ids: &[ProxyId],
        not_before: Option<activity_pool::Timestamp>,
    );
}

/// What one successful reconcile pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchOutcome {
    /// Entries the vendor offered.
    pub offered: u32,
    /// The pool's report, summed over chunks.
    pub report: UpsertReport,
    /// Entries refused before the pool (parser / label), by reason code.
    pub parse_dropped: u32,
}

/// Tries of one chunk when the pool is unavailable (same operation ID each time).
const UPSERT_TRIES: u32 = 3;

/// The provider reconciler of one upstream.
pub struct ProviderReconciler {
    options: ProviderOptions,
    source: Arc<dyn VendorSource>,
    upserter: Arc<dyn Upserter>,
    health: Option<Arc<dyn HealthStore>>,
    announcer: Option<Arc<dyn ProxyAnnouncer>>,
    metrics: ProviderMetrics,
    status: super::FetchStatus,
    run_id: String,
    seq: AtomicU64,
}

impl std::fmt::Debug for ProviderReconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderReconciler")
            .field("upstream", &self.options.upstream)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ProviderReconciler {
    /// A reconciler; fails when the options cannot work.
    pub fn new(
        options: ProviderOptions,
        source: Arc<dyn VendorSource>,
        upserter: Arc<dyn Upserter>,
        metrics: ProviderMetrics,
    ) -> Result<Self, ProviderError> {
        options.validate()?;
        metrics.track(options.upstream.as_str());
        let run_id = hex::encode(rand::random::<[u8; 6]>());
        Ok(Self {
            options,
            source,
            upserter,
            health: None,
            announcer: None,
            metrics,
            status: super::FetchStatus::default(),
            run_id,
            seq: AtomicU64::new(0),
        })
    }

    /// Records every fetch's result in `status` (the admin inventory reads it).
    pub fn with_status(mut self, status: super::FetchStatus) -> Self {
        self.status = status;
        self
    }

    /// Needed when `assume_healthy` is set: marks upserted proxies AVAILABLE.
    pub fn with_health_store(mut self, health: Arc<dyn HealthStore>) -> Self {
        self.health = Some(health);
        self
    }

    /// Announces written proxies (to the health planner).
    pub fn with_announcer(mut self, announcer: Arc<dyn ProxyAnnouncer>) -> Self {
        self.announcer = Some(announcer);
        self
    }

    /// The options.
    pub fn options(&self) -> &ProviderOptions {
        &self.options
    }

    /// Runs until `shutdown`: a fetch every `fetch_interval`, backoff after failures.
    /// An in-flight fetch is abandoned on shutdown (each pool chunk is atomic).
    pub async fn run(self, shutdown: CancellationToken) {
        let upstream = self.options.upstream.to_string();
        let mut failures = 0u32;
        loop {
            let pass = tokio::select! {
                () = shutdown.cancelled() => return,
                pass = self.reconcile_once() => pass,
            };
            let delay = match pass {
                Ok(_) => {
                    failures = 0;
                    self.options.fetch_interval
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    let delay = self.options.backoff.delay(failures, &mut rand::rng());
                    warn!(
                        upstream = %upstream,
                        kind = err.kind(),
                        error = %err,
                        failures,
                        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "provider fetch failed"
                    );
                    delay
                }
            };
            self.metrics.set_failures(&upstream, failures);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One pass: fetch, build candidates, upsert in chunks. Counts everything.
    #[instrument(level = "debug", skip(self), fields(upstream = %self.options.upstream))]
    pub async fn reconcile_once(&self) -> Result<FetchOutcome, ProviderError> {
        let upstream = self.options.upstream.as_str();
        let started = std::time::Instant::now();
        let fetched = self.source.fetch(&self.options.budget).await;
        self.metrics.fetch_duration(upstream, started.elapsed());
        let mut batch = match fetched {
            Ok(batch) => batch,
            Err(err) => {
                self.metrics.fetch_result(upstream, err.kind());
                self.status
                    .failed(upstream, err.failure(), Timestamp::now());
                return Err(err.into());
            }
        };
        let offered = batch.offered();
        self.metrics.add_fetched(upstream, offered);
        let cands = candidates(
            &self.options.upstream,
            &mut batch,
            &self.options.defaults,
            Timestamp::now(),
        );
        let parse_dropped: u32 = batch.dropped.values().sum();
        for (reason, n) in &batch.dropped {
            self.metrics.add_dropped(upstream, reason.as_str(), *n);
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut report = UpsertReport::default();
        for (i, chunk) in cands.chunks(self.options.chunk_size).enumerate() {
            let ids: Vec<ProxyId> = chunk.iter().map(|c| c.id.clone()).collect();
            let op = OperationId::new(format!("fetch:{upstream}:{}:{seq}:{i}", self.run_id))
                .map_err(PoolError::from)?;
            let batch = FetchedBatch {
                upstream: self.options.upstream.clone(),
                operation_id: op,
                safety_margin: self.options.safety_margin,
                max_size: self.options.max_size,
                quarantine: self.options.quarantine,
                candidates: chunk.to_vec(),
            };
            let part = match self.upsert_with_retry(batch).await {
                Ok(part) => part,
                Err(err) => {
                    let failure = FetchFailure::PoolError;
                    self.metrics.fetch_result(upstream, failure.as_str());
                    self.status.failed(upstream, failure, Timestamp::now());
                    return Err(err.into());
                }
            };
            self.metrics
                .add_upserted(upstream, part.inserted, part.refreshed);
            for (reason, n) in &part.dropped {
                self.metrics.add_dropped(upstream, reason.as_str(), *n);
            }
            if let Some(start) = part.generation_started {
                crate::generation::began(upstream, start, self.options.quarantine);
            }
            report.merge(&part);
            self.after_upsert(&ids, part.held_until).await;
        }
        self.metrics.fetch_result(upstream, "ok");
        self.status.succeeded(upstream, Timestamp::now());
        debug!(
            offered,
            inserted = report.inserted,
            refreshed = report.refreshed,
            dropped = report.dropped_total() + parse_dropped,
            "provider fetch done"
        );
        Ok(FetchOutcome {
            offered,
            report,
            parse_dropped,
        })
    }

    async fn upsert_with_retry(&self, batch: FetchedBatch) -> Result<UpsertReport, PoolError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.upserter.upsert(batch.clone()).await {
                Err(err) if err.is_retryable() && tries < UPSERT_TRIES => {
                    debug!(tries, "pool upsert retry with the same operation ID");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(tries))).await;
                }
                other => return other,
            }
        }
    }

    async fn after_upsert(&self, ids: &[ProxyId], held_until: Option<activity_pool::Timestamp>) {
        if let Some(announcer) = &self.announcer {
            announcer.announce(&self.options.upstream, ids, held_until);
        }
        if !self.options.assume_healthy {
            return;
        }
        let Some(health) = &self.health else {
            return;
        };
        for part in ids.chunks(MAX_UPDATE_BATCH) {
            let updates = crate::health::verdict_updates(part, HealthVerdict::Available);
            if let Err(err) = health.apply_health(&updates).await {
                debug!(error = %err, "assume-healthy update failed");
            }
        }
    }
}
