//! Static upstreams: a fixed list of proxies from the config, upserted into the pool
//! every `fetchInterval` with a fresh TTL (and, when `assumeHealthy`, marked AVAILABLE,
//! since no checker vouches for them) — so the API can be tried without any vendor.
//!
//! Uses only the `Upserter` and `HealthStore` ports; logs counts, never addresses or
//! passwords.

use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{
    Candidate, Credentials, Dial, FetchedBatch, HealthUpdate, HealthVerdict, Label, Labels,
    OperationId, ProxyId, Secret, UpstreamId,
};
use activity_pool::options::MAX_UPDATE_BATCH;
use activity_pool::ports::{HealthStore, Upserter};
use activity_pool::{PoolError, Timestamp};
use proxy_pool_api::config::{StaticSourceConfig, UpstreamConfig};
use sha2::{Digest, Sha256};

use crate::metrics::{Metrics, UpsertLabels};
use crate::shutdown::{Phase, Shutdown};

/// `candidates` marked AVAILABLE by a successful check, as when nothing but the
/// configuration vouches for them (`assumeHealthy`; test and benchmark seeding).
pub fn available(candidates: &[Candidate]) -> Vec<HealthUpdate> {
    crate::health::verdict_updates(candidates.iter().map(|c| &c.id), HealthVerdict::Available)
}

/// One static upstream, ready to upsert.
#[derive(Clone, Debug)]
pub struct StaticUpstream {
    upstream: UpstreamId,
    candidates: Vec<Candidate>,
    safety_margin: Duration,
    quarantine: Duration,
    max_size: std::num::NonZeroU32,
    interval: Duration,
    assume_healthy: bool,
}

/// A static upstream's config is inconsistent with the pool's rules.
#[derive(Debug, thiserror::Error)]
#[error("upstream {upstream}: {reason}")]
pub struct StaticError {
    upstream: String,
    reason: String,
}

impl StaticUpstream {
    /// Builds the candidates; `password` is the resolved credential password.
    pub fn new(
        cfg: &UpstreamConfig,
        source: &StaticSourceConfig,
        password: Option<String>,
    ) -> Result<Self, StaticError> {
        let fail = |reason: String| StaticError {
            upstream: cfg.name.clone(),
            reason,
        };
        let upstream = UpstreamId::new(&cfg.name).map_err(|e| fail(e.to_string()))?;
        let label = |v: &Option<String>| -> Result<Option<Label>, StaticError> {
            v.as_ref()
                .map(|s| Label::new(s).map_err(|e| fail(e.to_string())))
                .transpose()
        };
        let labels = Labels {
            region: label(&cfg.region)?,
            carrier: label(&cfg.carrier)?,
            city: label(&cfg.city)?,
        };
        let credentials = match (&source.credentials, password) {
            (Some(c), Some(p)) => Some(Credentials {
                username: c.username.clone(),
                password: Secret::new(p),
            }),
            _ => None,
        };
        let protocol = cfg.protocol;
        let candidates = source
            .proxies
            .iter()
            .map(|p| {
                let digest = Sha256::digest(format!("{}:{}", p.host.to_ascii_lowercase(), p.port));
                let id = ProxyId::new(format!("{}.{}", cfg.name, hex::encode(&digest[..6])))
                    .map_err(|e| fail(e.to_string()))?;
                Ok(Candidate {
                    id,
                    dial: Dial {
                        protocol,
                        host: p.host.clone(),
                        port: p.port,
                        credentials: credentials.clone(),
                    },
                    labels: labels.clone(),
                    ttl: cfg.ttl,
                    max_concurrency: cfg.max_concurrency_per_proxy,
                })
            })
            .collect::<Result<Vec<_>, StaticError>>()?;
        Ok(Self {
            upstream,
            candidates,
            safety_margin: cfg.safety_margin,
            max_size: cfg.max_size,
            quarantine: cfg.quarantine,
            interval: cfg.fetch_interval,
            assume_healthy: source.assume_healthy,
        })
    }

    /// The upstream's ID.
    pub fn upstream(&self) -> &UpstreamId {
        &self.upstream
    }

    /// One upsert (and health mark) of the whole list.
    pub async fn tick(
        &self,
        tick: u64,
        upserter: &dyn Upserter,
        health: &dyn HealthStore,
        metrics: &Metrics,
    ) -> Result<(), PoolError> {
        let op = OperationId::new(format!(
            "static:{}:{}:{tick}",
            self.upstream,
            Timestamp::now().millis()
        ))?;
        let batch = FetchedBatch {
            upstream: self.upstream.clone(),
            operation_id: op,
            safety_margin: self.safety_margin,
            max_size: self.max_size,
            quarantine: self.quarantine,
            candidates: self.candidates.clone(),
        };
        let report = upserter.upsert(batch).await?;
        if let Some(start) = report.generation_started {
            crate::generation::began(self.upstream.as_str(), start, self.quarantine);
        }
        for (result, n) in [
            ("inserted", report.inserted),
            ("refreshed", report.refreshed),
            ("dropped", report.dropped_total()),
        ] {
            metrics
                .upserts
                .get_or_create(&UpsertLabels {
                    upstream: self.upstream.to_string(),
                    result,
                })
                .inc_by(u64::from(n));
        }
        tracing::debug!(
            upstream = %self.upstream,
            inserted = report.inserted,
            refreshed = report.refreshed,
            dropped = report.dropped_total(),
            "static upstream upserted"
        );
        if self.assume_healthy {
            let updates = available(&self.candidates);
            for chunk in updates.chunks(MAX_UPDATE_BATCH) {
                health.apply_health(chunk).await?;
            }
        }
        Ok(())
    }

    /// Upserts every interval until the controller starts draining.
    pub async fn run(
        self,
        upserter: Arc<dyn Upserter>,
        health: Arc<dyn HealthStore>,
        metrics: Arc<Metrics>,
        status: crate::provider::FetchStatus,
        shutdown: Shutdown,
    ) {
        let mut interval = tokio::time::interval(self.interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut tick = 0u64;
        loop {
            tokio::select! {
                _ = shutdown.reached(Phase::Draining) => return,
                _ = interval.tick() => {}
            }
            tick += 1;
            let result = self
                .tick(tick, upserter.as_ref(), health.as_ref(), &metrics)
                .await;
            match &result {
                Ok(()) => status.succeeded(self.upstream.as_str(), Timestamp::now()),
                Err(_) => status.failed(
                    self.upstream.as_str(),
                    proxy_pool_api::inventory::FetchFailure::PoolError,
                    Timestamp::now(),
                ),
            }
            if let Err(e) = result {
                metrics
                    .upserts
                    .get_or_create(&UpsertLabels {
                        upstream: self.upstream.to_string(),
                        result: "failed",
                    })
                    .inc();
                tracing::warn!(upstream = %self.upstream, error = %e, "static upstream upsert failed");
            }
        }
    }
}
