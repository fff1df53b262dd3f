//! The analytics worker: applies queued events to Redis on every replica; on the one
//! replica that writes (the controller's leader, [`IsWriter`]) it also flushes
//! sequenced full snapshots to PostgreSQL, checks Redis against the last SQL snapshot
//! (rebuilding it from SQL when it is missing, wrong-typed or older), flags degraded
//! days, prunes old days, and does the bounded final flush. A replica that does not
//! write hands its degraded-day flags over through Redis instead.
//!
//! Two writers at once (a deposed leader that has not noticed yet) cannot double count
//! or lose data: snapshots carry absolute values under a sequence PostgreSQL refuses
//! to go back on, and a flush clears only the dirty markers no batch touched since it
//! read them ([`WorkingSet::committed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::civil::Date;
use tokio::sync::mpsc;

use crate::collector::CollectorStats;
use crate::day::{Clock, minus_days};
use crate::error::AnalyticsError;
use crate::model::Event;
use crate::options::Settings;
use crate::pg::{CommitOutcome, DailyRow, DayCoverage, Meta, PgStore, Snapshot, TotalRow};
use crate::ws::{Dirty, WorkingSet, parse_note};

/// Which flush the writer gate is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushKind {
    /// A periodic or early flush while running.
    Periodic,
    /// The one final flush at shutdown.
    Final,
}

/// Whether this replica writes (flushes) now; asked before every flush. A
/// single-process deployment writes always ([`always_writer`]).
pub type IsWriter = Arc<dyn Fn(FlushKind) -> bool + Send + Sync>;

/// The writer gate of a single-process deployment.
pub fn always_writer() -> IsWriter {
    Arc::new(|_| true)
}

/// Events applied per Redis pipeline.
pub const APPLY_BATCH: usize = 512;

/// Why a day is degraded.
pub mod reason {
    /// Redis lost or rolled back its working set; rebuilt from the last SQL snapshot.
    pub const REDIS_RECOVERED: &str = "redis_recovered";
    /// Events were dropped because the queue was full.
    pub const EVENTS_DROPPED: &str = "events_dropped";
    /// Events were lost because Redis was unavailable.
    pub const REDIS_UNAVAILABLE: &str = "redis_unavailable";
    /// A flush to PostgreSQL failed; the day was committed later from Redis.
    pub const SQL_RETRY: &str = "sql_retry";
    /// Collection started during the day.
    pub const COLLECTION_STARTED: &str = "collection_started";
    /// The worker was down for longer than two flush intervals.
    pub const RESTART_GAP: &str = "restart_gap";

    /// The reason of this name (notes read back from Redis).
    pub fn known(name: &str) -> Option<&'static str> {
        [
            REDIS_RECOVERED,
            EVENTS_DROPPED,
            REDIS_UNAVAILABLE,
            SQL_RETRY,
            COLLECTION_STARTED,
            RESTART_GAP,
        ]
        .into_iter()
        .find(|r| *r == name)
    }
}

/// Worker counters.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    /// Events applied to Redis.
    pub applied: AtomicU64,
    /// Events lost to Redis failures.
    pub lost: AtomicU64,
    /// Snapshots committed.
    pub flushes: AtomicU64,
    /// Failed flushes.
    pub flush_errors: AtomicU64,
    /// Rebuilds from SQL.
    pub recoveries: AtomicU64,
    /// Daily rows pruned.
    pub pruned: AtomicU64,
    /// Last flush duration, ms.
    pub last_flush_ms: AtomicU64,
}

/// What one flush did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushReport {
    /// Snapshot sequence.
    pub seq: i64,
    /// Commit outcome.
    pub outcome: CommitOutcome,
    /// Daily rows written.
    pub days: usize,
    /// Whether Redis was rebuilt from SQL first.
    pub recovered: bool,
}

/// The worker's state.
#[derive(Debug)]
pub struct Engine {
    ws: WorkingSet,
    pg: Arc<PgStore>,
    settings: Settings,
    clock: Arc<dyn Clock>,
    collector: Arc<CollectorStats>,
    pending: BTreeMap<Date, BTreeSet<&'static str>>,
    started: bool,
    seen_dropped: u64,
    since_flush: u64,
    metrics: Arc<WorkerMetrics>,
}

impl Engine {
    /// A worker over its stores.
    pub fn new(
        ws: WorkingSet,
        pg: Arc<PgStore>,
        settings: Settings,
        clock: Arc<dyn Clock>,
        collector: Arc<CollectorStats>,
    ) -> Self {
        Self {
            ws,
            pg,
            settings,
            clock,
            collector,
            pending: BTreeMap::new(),
            started: false,
            seen_dropped: 0,
            since_flush: 0,
            metrics: Arc::default(),
        }
    }

    /// The worker's counters.
    pub fn metrics(&self) -> Arc<WorkerMetrics> {
        Arc::clone(&self.metrics)
    }

    /// Days flagged but not yet committed.
    pub fn pending_degraded(&self) -> Vec<(Date, Vec<&'static str>)> {
        self.pending
            .iter()
            .map(|(d, r)| (*d, r.iter().copied().collect()))
            .collect()
    }

    fn today(&self) -> Date {
        self.settings.days.day_of(self.clock.now())
    }

    fn flag(&mut self, day: Date, why: &'static str) {
        self.pending.entry(day).or_default().insert(why);
    }

    /// Flags today when the collector dropped events since the last look.
    fn flag_dropped(&mut self) {
        let dropped = self.collector.counts().dropped;
        if dropped > self.seen_dropped {
            self.seen_dropped = dropped;
            let today = self.today();
            self.flag(today, reason::EVENTS_DROPPED);
        }
    }

    /// Start-up: schema and time zone checks, start/gap flags, Redis check.
    pub async fn start(&mut self) -> Result<(), AnalyticsError> {
        self.pg.check_schema().await?;
        let meta = self.pg.meta().await?;
        let zone = self.settings.days.zone_name().to_owned();
        let today = self.today();
        match &meta {
            Some(m) if m.time_zone != zone => {
                return Err(AnalyticsError::TimeZoneMismatch {
                    stored: m.time_zone.clone(),
                    configured: zone,
                });
            }
            Some(m) => {
                let gap_ms = self.clock.now().as_millisecond() - m.last_flush_ms;
                let allowed = 2 * i64::try_from(self.settings.flush_interval.as_millis())
                    .unwrap_or(i64::MAX)
                    + 30_000;
                if gap_ms > allowed {
                    self.flag(today, reason::RESTART_GAP);
                }
            }
            None => self.flag(today, reason::COLLECTION_STARTED),
        }
        self.recover_if_needed(meta.as_ref()).await?;
        self.started = true;
        Ok(())
    }

    /// Applies a batch of events to Redis. A Redis failure loses them (counted, days
    /// flagged); it never blocks or fails the caller.
    pub async fn apply(&mut self, events: &[Event]) {
        for chunk in events.chunks(APPLY_BATCH) {
            match self.ws.apply(chunk, &self.settings.days).await {
                Ok(_) => {
                    self.metrics
                        .applied
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    self.metrics
                        .lost
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    tracing::warn!(error = %e, events = chunk.len(), "analytics events lost: redis failed");
                    let days: BTreeSet<Date> = chunk
                        .iter()
                        .map(|e| self.settings.days.day_of(e.at()))
                        .collect();
                    for d in days {
                        self.flag(d, reason::REDIS_UNAVAILABLE);
                    }
                }
            }
            self.since_flush += chunk.len() as u64;
        }
    }

    /// A replica that does not flush: notes the flags it raised (dropped events, lost
    /// batches) in Redis for the writer's next commit, and forgets them once noted. A
    /// Redis failure keeps them for the next try.
    pub async fn hand_over(&mut self) {
        self.flag_dropped();
        self.since_flush = 0;
        let notes: Vec<(Date, &str)> = self
            .pending
            .iter()
            .flat_map(|(d, r)| r.iter().map(move |why| (*d, *why)))
            .collect();
        match self.ws.note_degraded(&notes).await {
            Ok(()) => self.pending.clear(),
            Err(e) => {
                tracing::warn!(error = %e, "analytics degraded-day notes not handed over; retried")
            }
        }
    }

    /// Takes the degraded-day notes other replicas handed over into this writer's
    /// pending flags; returns them as stored, to clear after a commit.
    async fn take_notes(&mut self) -> Result<Vec<String>, AnalyticsError> {
        let notes = self.ws.degraded_notes().await?;
        for (day, why) in notes.iter().filter_map(|n| parse_note(n)) {
            if let Some(why) = reason::known(why) {
                self.flag(day, why);
            }
        }
        Ok(notes)
    }

    /// Whether enough events arrived to flush early.
    pub fn flush_due(&self) -> bool {
        self.since_flush >= self.settings.flush_after_events
    }

    /// Compares Redis with the last SQL snapshot; rebuilds Redis when it is missing,
    /// wrong-typed or older. Returns whether it rebuilt.
    pub async fn recover_if_needed(&mut self, meta: Option<&Meta>) -> Result<bool, AnalyticsError> {
        let stale = match (self.ws.seq().await, meta) {
            (Ok(_), None) => false,
            (Ok(None), Some(_)) => true,
            (Ok(Some(s)), Some(m)) => s < m.last_seq,
            (Err(AnalyticsError::Corrupt(_)), _) => true,
            (Err(e), _) => return Err(e),
        };
        if stale {
            self.rebuild(meta).await?;
        }
        Ok(stale)
    }

    async fn rebuild(&mut self, meta: Option<&Meta>) -> Result<(), AnalyticsError> {
        let today = self.today();
        let hot_from = minus_days(today, i64::from(self.settings.hot_days) - 1);
        let totals = self.pg.totals().await?;
        let days = self.pg.days_since(hot_from).await?;
        let wiped = self.ws.wipe().await?;
        let seq = meta.map_or(0, |m| m.last_seq);
        self.ws.restore(&totals, &days, seq).await?;
        self.metrics.recoveries.fetch_add(1, Ordering::Relaxed);
        let since = meta
            .and_then(|m| jiff::Timestamp::from_millisecond(m.last_flush_ms).ok())
            .map_or(today, |t| self.settings.days.day_of(t))
            .max(hot_from);
        let mut d = since;
        loop {
            self.flag(d, reason::REDIS_RECOVERED);
            match d.tomorrow() {
                Ok(next) if d < today => d = next,
                _ => break,
            }
        }
        tracing::warn!(
            wiped,
            totals = totals.len(),
            days = days.len(),
            seq,
            "analytics working set rebuilt from postgres"
        );
        Ok(())
    }

    /// `Corrupt` when a Redis counter is behind its committed SQL value: keys were
    /// evicted and re-created by new events (the absolute snapshot would lose counts).
    async fn behind_sql(
        &self,
        totals: &[TotalRow],
        days: &[DailyRow],
    ) -> Result<(), AnalyticsError> {
        if totals.is_empty() && days.is_empty() {
            return Ok(());
        }
        let from = days
            .iter()
            .map(|d| d.day)
            .min()
            .unwrap_or_else(|| self.today());
        let (sql_totals, sql_days) = self.pg.committed_requests(from).await?;
        let total_behind = totals
            .iter()
            .any(|t| sql_totals.get(&t.subject).is_some_and(|&n| t.requests < n));
        let day_behind = days.iter().any(|d| {
            sql_days
                .get(&(d.subject.clone(), d.day))
                .is_some_and(|&n| d.requests < n)
        });
        if total_behind || day_behind {
            return Err(AnalyticsError::Corrupt(
                "redis counters behind postgres".into(),
            ));
        }
        Ok(())
    }

    /// One flush: check, snapshot, commit, clear, prune.
    pub async fn flush(&mut self) -> Result<FlushReport, AnalyticsError> {
        let started = std::time::Instant::now();
        let r = self.try_flush().await;
        self.metrics.last_flush_ms.store(
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        match &r {
            Ok(_) => {
                self.metrics.flushes.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                if matches!(e, AnalyticsError::Sql(_)) {
                    let today = self.today();
                    self.flag(today, reason::SQL_RETRY);
                }
                self.metrics.flush_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "analytics flush failed; data stays in redis");
            }
        }
        r
    }

    async fn try_flush(&mut self) -> Result<FlushReport, AnalyticsError> {
        if !self.started {
            self.start().await?;
        }
        self.flag_dropped();
        let notes = self.take_notes().await?;
        let meta = self.pg.meta().await?;
        let mut recovered = self.recover_if_needed(meta.as_ref()).await?;
        let (items, totals, mut days) = loop {
            let items: Vec<Dirty> = self.ws.dirty().await?;
            let read = match self.ws.read(&items).await {
                Ok((t, d)) => self.behind_sql(&t, &d).await.map(|()| (t, d)),
                Err(e) => Err(e),
            };
            match read {
                Ok((t, d)) => break (items, t, d),
                Err(AnalyticsError::Corrupt(what)) if !recovered => {
                    tracing::warn!(what, "analytics working set inconsistent");
                    self.rebuild(meta.as_ref()).await?;
                    recovered = true;
                }
                Err(e) => return Err(e),
            }
        };
        let seq = self.ws.next_seq().await?;
        let now = self.clock.now();
        let today = self.settings.days.day_of(now);
        let mut covered: BTreeSet<Date> = days.iter().map(|d| d.day).collect();
        covered.insert(today);
        covered.extend(self.pending.keys().copied());
        let keep_from = minus_days(today, i64::from(self.settings.retention_days) - 1);
        covered.retain(|d| *d >= keep_from);
        for d in &mut days {
            d.degraded = self.pending.contains_key(&d.day);
        }
        let coverage = covered
            .iter()
            .map(|d| {
                let reasons: Vec<String> = self
                    .pending
                    .get(d)
                    .map(|r| r.iter().map(|s| (*s).to_owned()).collect())
                    .unwrap_or_default();
                DayCoverage {
                    day: *d,
                    degraded: !reasons.is_empty(),
                    reasons,
                }
            })
            .collect();
        let snap = Snapshot {
            seq,
            taken_at: now,
            totals,
            days,
            coverage,
        };
        let outcome = match self.pg.commit(&snap, self.settings.days.zone_name()).await {
            Ok(o) => o,
            Err(e) => {
                for d in covered {
                    if snap.days.iter().any(|r| r.day == d) {
                        self.flag(d, reason::SQL_RETRY);
                    }
                }
                return Err(e);
            }
        };
        if outcome == CommitOutcome::Committed {
            self.pending
                .retain(|d, _| !covered.contains(d) && *d >= keep_from);
            self.ws
                .committed(&items, &self.settings.days, self.settings.hot_days, now)
                .await?;
            self.ws.clear_degraded(&notes).await?;
            self.since_flush = 0;
            match self.pg.prune(keep_from).await {
                Ok(n) => {
                    self.metrics.pruned.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "analytics retention failed; retried next flush")
                }
            }
        }
        Ok(FlushReport {
            seq,
            outcome,
            days: snap.days.len(),
            recovered,
        })
    }
}

impl Engine {
    /// A flush when `writer` says this replica writes; otherwise the flags are handed
    /// over to the writer through Redis.
    async fn flush_or_hand_over(&mut self, writer: &IsWriter) -> Option<FlushReport> {
        if writer(FlushKind::Periodic) {
            self.flush().await.ok()
        } else {
            self.hand_over().await;
            None
        }
    }
}

/// Runs the worker until `shutdown`, then stops collecting, drains the queue and (when
/// `writer` says this replica writes) makes a final flush, all within the configured
/// grace period. Events are applied to Redis whatever `writer` says; flushes happen
/// only while it says so (asked before each one).
pub async fn run(
    mut engine: Engine,
    mut rx: mpsc::Receiver<Event>,
    shutdown: impl Future<Output = ()>,
    writer: IsWriter,
) {
    let mut tick = tokio::time::interval(engine.settings.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    if writer(FlushKind::Periodic)
        && let Err(e) = engine.start().await
    {
        tracing::warn!(error = %e, "analytics start failed; retried at each flush");
    }
    tokio::pin!(shutdown);
    let mut buf = Vec::with_capacity(APPLY_BATCH);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            n = rx.recv_many(&mut buf, APPLY_BATCH) => {
                if n == 0 {
                    break;
                }
                engine.apply(&buf).await;
                buf.clear();
                if engine.flush_due() {
                    engine.flush_or_hand_over(&writer).await;
                }
            }
            _ = tick.tick() => {
                engine.flush_or_hand_over(&writer).await;
            }
        }
    }
    let grace = engine.settings.shutdown_grace;
    let last = async {
        rx.close();
        while rx.recv_many(&mut buf, APPLY_BATCH).await > 0 {
            engine.apply(&buf).await;
            buf.clear();
        }
        if writer(FlushKind::Final) {
            engine.flush().await.map(Some)
        } else {
            engine.hand_over().await;
            Ok(None)
        }
    };
    match tokio::time::timeout(grace, last).await {
        Ok(Ok(Some(r))) => {
            tracing::info!(seq = r.seq, days = r.days, "analytics final flush done")
        }
        Ok(Ok(None)) => tracing::info!("analytics events applied; the leader flushes them"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "analytics final flush failed; data left in redis")
        }
        Err(_) => tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "analytics final flush timed out; data left in redis"
        ),
    }
}
