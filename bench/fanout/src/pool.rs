//! The provider side of the benchmark: fills the controller's Redis pool through the
//! same ports (and Lua scripts) a controller's provider reconciler and health reducer
//! write with — `Upserter::upsert`, `Upserter::remove`, `HealthStore::apply_health` —
//! and then changes a share of it every second.
//!
//! Every proxy is a loopback address (`127.a.0.1:port`), distinct per proxy (the pool
//! refuses two IDs for one endpoint); nothing ever dials it.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use activity_pool::RedisPool;
use activity_pool::model::{
    Candidate, Dial, FetchedBatch, HealthUpdate, HealthVerdict, Label, Labels, OperationId,
    Protocol, ProxyId, UpstreamId,
};
use activity_pool::options::MAX_UPDATE_BATCH;
use activity_pool::ports::{HealthStore, Upserter};
use anyhow::{Context, Result, bail};

use crate::track::{Kind, Tracker};

/// Candidates per upsert call (below the pool's `MAX_BATCH`).
const UPSERT_CALL: usize = 5_000;
/// Margin for the pool's clock (Redis `TIME`, ms) against the harness's.
const CLOCK_MARGIN_MS: i64 = 50;

/// How the benchmark's pool looks and changes.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    /// Upstream names (as configured in the controller), proxies spread round robin.
    pub upstreams: Vec<String>,
    /// Proxies kept in the pool.
    pub proxies: usize,
    /// TTL of every upsert.
    pub ttl: Duration,
    /// Share of the pool changed per second.
    pub change_rate: f64,
    /// Of each second's changes: refreshed (new expiry), removed, added (the rest).
    pub refresh_share: f64,
    /// Of each second's changes: removed; as many new proxies are added.
    pub remove_share: f64,
}

/// The harness's view of the pool: the live proxies, oldest change first.
#[derive(Debug)]
pub struct PoolDriver {
    pool: RedisPool,
    spec: PoolSpec,
    upstreams: Vec<UpstreamId>,
    live: VecDeque<u64>,
    next: u64,
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl PoolDriver {
    /// A driver over `pool`.
    pub fn new(pool: RedisPool, spec: PoolSpec) -> Result<Self> {
        if spec.upstreams.is_empty() {
            bail!("at least one upstream is needed");
        }
        let upstreams = spec
            .upstreams
            .iter()
            .map(|u| UpstreamId::new(u.clone()).with_context(|| format!("upstream {u}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            pool,
            spec,
            upstreams,
            live: VecDeque::new(),
            next: 0,
        })
    }

    fn upstream_of(&self, n: u64) -> usize {
        usize::try_from(n % self.upstreams.len() as u64).unwrap_or(0)
    }

    fn id_of(&self, n: u64) -> Result<ProxyId> {
        Ok(ProxyId::new(format!(
            "fanout-{}-{n:08}",
            self.upstream_of(n)
        ))?)
    }

    fn candidate(&self, n: u64) -> Result<Candidate> {
        let a = n / 60_000 + 1;
        if a > 254 {
            bail!("more proxies than loopback endpoints");
        }
        let port = u16::try_from(1_024 + n % 60_000)?;
        let region = ["shanghai", "beijing", "guangdong", "zhejiang"][usize::try_from(n % 4)?];
        let carrier = ["telecom", "unicom", "mobile"][usize::try_from(n % 3)?];
        Ok(Candidate {
            id: self.id_of(n)?,
            dial: Dial {
                protocol: Protocol::Http,
                host: format!("127.{a}.0.1"),
                port,
                credentials: None,
            },
            labels: Labels {
                region: Some(Label::new(region)?),
                carrier: Some(Label::new(carrier)?),
                city: None,
            },
            ttl: self.spec.ttl,
            max_concurrency: 1,
        })
    }

    /// Upserts `ns` (per upstream, in calls of `UPSERT_CALL`) under operation IDs
    /// starting with `op`.
    async fn upsert(&self, op: &str, ns: &[u64]) -> Result<()> {
        for (u, upstream) in self.upstreams.iter().enumerate() {
            let mine: Vec<u64> = ns
                .iter()
                .copied()
                .filter(|n| self.upstream_of(*n) == u)
                .collect();
            for (c, chunk) in mine.chunks(UPSERT_CALL).enumerate() {
                let candidates = chunk
                    .iter()
                    .map(|n| self.candidate(*n))
                    .collect::<Result<Vec<_>>>()?;
                let report = self
                    .pool
                    .upsert(FetchedBatch {
                        upstream: upstream.clone(),
                        operation_id: OperationId::new(format!("{op}:{u}:{c}"))?,
                        safety_margin: Duration::from_secs(5),
                        max_size: NonZeroU32::new(1_000_000).unwrap_or(NonZeroU32::MIN),
                        quarantine: Duration::ZERO,
                        candidates,
                    })
                    .await
                    .context("upsert")?;
                let dropped = report.dropped_total();
                if dropped > 0 {
                    bail!(
                        "the pool dropped {dropped} candidates: {:?}",
                        report.dropped
                    );
                }
            }
        }
        Ok(())
    }

    /// Marks `ns` AVAILABLE (what a passed health check does).
    async fn available(&self, ns: &[u64]) -> Result<()> {
        for chunk in ns.chunks(MAX_UPDATE_BATCH) {
            let updates = chunk
                .iter()
                .map(|n| {
                    Ok(HealthUpdate {
                        proxy_id: self.id_of(*n)?,
                        verdict: HealthVerdict::Available,
                        success: true,
                        latency: Some(Duration::from_millis(20)),
                        failure: None,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            self.pool.apply_health(&updates).await.context("health")?;
        }
        Ok(())
    }

    /// Puts `spec.proxies` new AVAILABLE proxies into the pool.
    pub async fn fill(&mut self) -> Result<()> {
        let ns: Vec<u64> = (0..self.spec.proxies as u64).collect();
        self.upsert("fanout:fill", &ns).await?;
        self.available(&ns).await?;
        self.next = ns.len() as u64;
        self.live = ns.into();
        Ok(())
    }

    /// Changes per second.
    pub fn changes_per_batch(&self) -> usize {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let n = (self.spec.proxies as f64 * self.spec.change_rate).round() as usize;
        n.max(1)
    }

    /// One batch: the oldest-changed proxies are removed or refreshed, new ones added.
    /// Every change is registered with `tracker` before the writes start. Returns the
    /// time the pool writes took.
    pub async fn batch(&mut self, tracker: &Tracker) -> Result<Duration> {
        let total = self.changes_per_batch();
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let removed = ((total as f64 * self.spec.remove_share).round() as usize).min(total);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let refreshed =
            ((total as f64 * self.spec.refresh_share).round() as usize).min(total - removed);
        let added = removed;
        let remove: Vec<u64> = self.live.drain(..removed.min(self.live.len())).collect();
        let refresh: Vec<u64> = self.live.drain(..refreshed.min(self.live.len())).collect();
        let add: Vec<u64> = (self.next..self.next + added as u64).collect();
        self.next += added as u64;

        let batch = tracker.begin_batch();
        let started_ms = unix_ms();
        let min_expires_at_ms =
            started_ms + i64::try_from(self.spec.ttl.as_millis())? - CLOCK_MARGIN_MS;
        let mut expected = Vec::with_capacity(total);
        for n in &remove {
            expected.push((self.id_of(*n)?.to_string(), Kind::Remove));
        }
        for n in &refresh {
            expected.push((
                self.id_of(*n)?.to_string(),
                Kind::Refresh { min_expires_at_ms },
            ));
        }
        for n in &add {
            expected.push((self.id_of(*n)?.to_string(), Kind::Add));
        }
        tracker.expect(batch, expected);

        let t0 = std::time::Instant::now();
        for (u, upstream) in self.upstreams.iter().enumerate() {
            let ids = remove
                .iter()
                .filter(|n| self.upstream_of(**n) == u)
                .map(|n| self.id_of(*n))
                .collect::<Result<Vec<_>>>()?;
            if !ids.is_empty() {
                self.pool.remove(upstream, &ids).await.context("remove")?;
            }
        }
        let mut upsert = refresh.clone();
        upsert.extend(&add);
        self.upsert(&format!("fanout:batch:{batch}"), &upsert)
            .await?;
        self.available(&add).await?;
        let write = t0.elapsed();

        self.live.extend(refresh.iter().copied());
        self.live.extend(add.iter().copied());
        Ok(write)
    }
}
