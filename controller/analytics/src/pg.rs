//! The PostgreSQL store: explicit migrations, sequenced snapshot commits (one
//! transaction, absolute values, newer sequences only), batched retention, and the
//! committed-value reads behind the stats API. Never runs DDL outside `migrate`.

use std::collections::HashMap;

use jiff::Timestamp;
use jiff::civil::Date;
use tokio::sync::Mutex;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row, Transaction};

use crate::error::AnalyticsError;
use crate::model::{Kind, Subject};

/// Schema version this code reads and writes.
pub const SCHEMA_VERSION: i32 = 2;
/// Rows one retention `DELETE` removes.
pub const PRUNE_BATCH: i64 = 500;
/// Most retention batches per call.
pub const PRUNE_MAX_BATCHES: usize = 64;
/// Most totals rows read at once (subjects are CRs: far fewer in practice).
pub const MAX_SUBJECTS: i64 = 100_000;

/// The migrations, in order (each idempotent; never edited once released).
const MIGRATIONS: [&str; 2] = [
    include_str!("../migrations/0001_analytics.sql"),
    include_str!("../migrations/0002_gateway_bytes.sql"),
];

/// Cumulative values of one subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TotalRow {
    /// Subject.
    pub subject: Subject,
    /// Requests (PV).
    pub requests: i64,
    /// Proxies extracted.
    pub proxies: i64,
    /// Gateway bytes from the clients.
    pub bytes_up: i64,
    /// Gateway bytes to the clients.
    pub bytes_down: i64,
    /// HLL estimate of unique identities (UV).
    pub uv: i64,
    /// Raw Redis HLL bytes.
    pub hll: Vec<u8>,
    /// First day counted.
    pub first_day: Date,
}

/// One subject's day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyRow {
    /// Subject.
    pub subject: Subject,
    /// Natural day in the history's time zone.
    pub day: Date,
    /// Requests (PV).
    pub requests: i64,
    /// Proxies extracted.
    pub proxies: i64,
    /// Gateway bytes from the clients.
    pub bytes_up: i64,
    /// Gateway bytes to the clients.
    pub bytes_down: i64,
    /// HLL estimate of unique identities.
    pub uv: i64,
    /// Raw Redis HLL bytes.
    pub hll: Vec<u8>,
    /// Flagged degraded when written.
    pub degraded: bool,
}

/// Coverage of one day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayCoverage {
    /// Day.
    pub day: Date,
    /// Counts of that day may be incomplete.
    pub degraded: bool,
    /// Why (`redis_recovered`, `events_dropped`, `redis_unavailable`, `sql_retry`,
    /// `collection_started`, `restart_gap`).
    pub reasons: Vec<String>,
}

/// A full snapshot of the dirty working set.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Monotonic sequence (Redis `INCR`).
    pub seq: i64,
    /// When it was taken.
    pub taken_at: Timestamp,
    /// Totals of every dirty subject.
    pub totals: Vec<TotalRow>,
    /// Every dirty day.
    pub days: Vec<DailyRow>,
    /// Days covered by this snapshot, with degradation reasons.
    pub coverage: Vec<DayCoverage>,
}

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Written.
    Committed,
    /// Not newer than the committed sequence: nothing changed.
    Stale {
        /// The committed sequence.
        committed: i64,
    },
}

/// The last committed snapshot's bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Sequence.
    pub last_seq: i64,
    /// When it was committed (Unix ms).
    pub last_flush_ms: i64,
    /// When the history started (Unix ms).
    pub first_flush_ms: i64,
    /// The history's time zone.
    pub time_zone: String,
}

/// A PostgreSQL connection that reconnects after a failure.
#[derive(Debug)]
pub struct PgStore {
    config: Config,
    // tokio's Mutex: the client is held across awaits of one query or transaction;
    // each PgStore has a single user (the worker, or the stats reader).
    client: Mutex<Option<Client>>,
}

/// One row's statement parameters, in the order of the statement's `$n`.
type Params<'r> = Vec<Box<dyn ToSql + Sync + Send + 'r>>;

/// Prepares `sql` once in `tx` and executes it with the parameters of each of `rows`.
async fn execute_each<T>(
    tx: &Transaction<'_>,
    sql: &str,
    rows: &[T],
    params: impl Fn(&T) -> Params<'_>,
) -> Result<(), tokio_postgres::Error> {
    let statement = tx.prepare(sql).await?;
    for row in rows {
        tx.execute_raw(&statement, params(row)).await?;
    }
    Ok(())
}

fn day_of(row: &Row, idx: &str) -> Result<Date, AnalyticsError> {
    let s: String = row.try_get(idx)?;
    s.parse()
        .map_err(|_| AnalyticsError::Corrupt(format!("bad date {s}")))
}

fn subject_of(row: &Row) -> Result<Subject, AnalyticsError> {
    let kind: String = row.try_get("kind")?;
    let kind = Kind::parse(&kind).ok_or_else(|| AnalyticsError::Corrupt("bad kind".into()))?;
    Ok(Subject {
        kind,
        name: row.try_get("name")?,
    })
}

fn daily_of(row: &Row) -> Result<DailyRow, AnalyticsError> {
    Ok(DailyRow {
        subject: subject_of(row)?,
        day: day_of(row, "day")?,
        requests: row.try_get("requests")?,
        proxies: row.try_get("proxies")?,
        bytes_up: row.try_get("bytes_up")?,
        bytes_down: row.try_get("bytes_down")?,
        uv: row.try_get("uv")?,
        hll: row.try_get("hll")?,
        degraded: row.try_get("degraded")?,
    })
}

fn total_of(row: &Row) -> Result<TotalRow, AnalyticsError> {
    Ok(TotalRow {
        subject: subject_of(row)?,
        requests: row.try_get("requests")?,
        proxies: row.try_get("proxies")?,
        bytes_up: row.try_get("bytes_up")?,
        bytes_down: row.try_get("bytes_down")?,
        uv: row.try_get("uv")?,
        hll: row.try_get("hll")?,
        first_day: day_of(row, "first_day")?,
    })
}

const DAILY_COLS: &str =
    "kind, name, day::text AS day, requests, proxies, bytes_up, bytes_down, uv, hll, degraded";
const TOTAL_COLS: &str =
    "kind, name, requests, proxies, bytes_up, bytes_down, uv, hll, first_day::text AS first_day";

/// Writes a subject's totals from a newer snapshot: counts never go down, the first
/// day only earlier.
const UPSERT_TOTAL: &str = "INSERT INTO pp_analytics_total (kind, name, requests, proxies, uv, hll, seq, first_day, bytes_up, bytes_down) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::date, $9, $10) ON CONFLICT (kind, name) DO UPDATE SET \
     requests = GREATEST(pp_analytics_total.requests, EXCLUDED.requests), \
     proxies = GREATEST(pp_analytics_total.proxies, EXCLUDED.proxies), \
     bytes_up = GREATEST(pp_analytics_total.bytes_up, EXCLUDED.bytes_up), \
     bytes_down = GREATEST(pp_analytics_total.bytes_down, EXCLUDED.bytes_down), \
     uv = GREATEST(pp_analytics_total.uv, EXCLUDED.uv), hll = EXCLUDED.hll, seq = EXCLUDED.seq, \
     first_day = LEAST(pp_analytics_total.first_day, EXCLUDED.first_day) \
     WHERE pp_analytics_total.seq < EXCLUDED.seq";

/// [`UPSERT_TOTAL`]'s parameters for `t` in snapshot `seq`.
fn total_params(t: &TotalRow, seq: i64) -> Params<'_> {
    vec![
        Box::new(t.subject.kind.as_str()),
        Box::new(&t.subject.name),
        Box::new(t.requests),
        Box::new(t.proxies),
        Box::new(t.uv),
        Box::new(&t.hll),
        Box::new(seq),
        Box::new(t.first_day.to_string()),
        Box::new(t.bytes_up),
        Box::new(t.bytes_down),
    ]
}

/// Writes a subject's day from a newer snapshot (absolute values); a day once
/// degraded stays so.
const UPSERT_DAILY: &str = "INSERT INTO pp_analytics_daily (kind, name, day, requests, proxies, uv, hll, seq, degraded, bytes_up, bytes_down) \
     VALUES ($1, $2, $3::text::date, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (kind, name, day) DO UPDATE SET \
     requests = EXCLUDED.requests, proxies = EXCLUDED.proxies, uv = EXCLUDED.uv, hll = EXCLUDED.hll, \
     bytes_up = EXCLUDED.bytes_up, bytes_down = EXCLUDED.bytes_down, \
     seq = EXCLUDED.seq, degraded = pp_analytics_daily.degraded OR EXCLUDED.degraded \
     WHERE pp_analytics_daily.seq < EXCLUDED.seq";

/// [`UPSERT_DAILY`]'s parameters for `d` in snapshot `seq`.
fn daily_params(d: &DailyRow, seq: i64) -> Params<'_> {
    vec![
        Box::new(d.subject.kind.as_str()),
        Box::new(&d.subject.name),
        Box::new(d.day.to_string()),
        Box::new(d.requests),
        Box::new(d.proxies),
        Box::new(d.uv),
        Box::new(&d.hll),
        Box::new(seq),
        Box::new(d.degraded),
        Box::new(d.bytes_up),
        Box::new(d.bytes_down),
    ]
}

/// Writes a day's coverage: degraded once, degraded for good, with every reason.
const UPSERT_COVERAGE: &str = "INSERT INTO pp_analytics_days (day, degraded, reasons, seq) VALUES ($1::text::date, $2, $3, $4) \
     ON CONFLICT (day) DO UPDATE SET degraded = pp_analytics_days.degraded OR EXCLUDED.degraded, \
     reasons = ARRAY(SELECT DISTINCT unnest(pp_analytics_days.reasons || EXCLUDED.reasons) ORDER BY 1), \
     seq = GREATEST(pp_analytics_days.seq, EXCLUDED.seq)";

/// [`UPSERT_COVERAGE`]'s parameters for `c` in snapshot `seq`.
fn coverage_params(c: &DayCoverage, seq: i64) -> Params<'_> {
    vec![
        Box::new(c.day.to_string()),
        Box::new(c.degraded),
        Box::new(&c.reasons),
        Box::new(seq),
    ]
}

impl PgStore {
    /// A store for `config` (no I/O until first use).
    pub fn new(config: Config) -> Self {
        Self {
            config,
            client: Mutex::new(None),
        }
    }

    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Client>>, AnalyticsError> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            let (client, conn) = self.config.connect(NoTls).await?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "analytics postgres connection ended");
                }
            });
            *guard = Some(client);
        }
        Ok(guard)
    }

    async fn with<T>(
        &self,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, AnalyticsError>,
    ) -> Result<T, AnalyticsError> {
        let mut guard = self.client().await?;
        let Some(client) = guard.as_mut() else {
            return Err(AnalyticsError::Unavailable("postgres"));
        };
        let r = f(client).await;
        if r.is_err() && client.is_closed() {
            *guard = None;
        }
        r
    }

    /// Applies the migrations (the explicit `migrate` entry point).
    pub async fn migrate(&self) -> Result<(), AnalyticsError> {
        self.with(async |c| {
            for m in MIGRATIONS {
                c.batch_execute(m).await?;
            }
            Ok(())
        })
        .await
    }

    /// Fails unless the schema is at `SCHEMA_VERSION` (start-up never migrates).
    pub async fn check_schema(&self) -> Result<(), AnalyticsError> {
        self.with(async |c| {
            let exists: bool = c
                .query_one("SELECT to_regclass('pp_analytics_schema') IS NOT NULL", &[])
                .await?
                .try_get(0)?;
            if !exists {
                return Err(AnalyticsError::SchemaMissing);
            }
            let v: Option<i32> = c
                .query_one("SELECT max(version) FROM pp_analytics_schema", &[])
                .await?
                .try_get(0)?;
            if v != Some(SCHEMA_VERSION) {
                return Err(AnalyticsError::SchemaMissing);
            }
            Ok(())
        })
        .await
    }

    /// The last committed snapshot's bookkeeping, if any.
    pub async fn meta(&self) -> Result<Option<Meta>, AnalyticsError> {
        self.with(async |c| {
            let row = c
                .query_opt(
                    "SELECT last_seq, last_flush_ms, first_flush_ms, time_zone FROM pp_analytics_meta WHERE id = 1",
                    &[],
                )
                .await?;
            row.map(|r| {
                Ok(Meta {
                    last_seq: r.try_get(0)?,
                    last_flush_ms: r.try_get(1)?,
                    first_flush_ms: r.try_get(2)?,
                    time_zone: r.try_get(3)?,
                })
            })
            .transpose()
        })
        .await
    }

    /// Writes `snap` in one transaction if its sequence is newer than the committed one.
    pub async fn commit(
        &self,
        snap: &Snapshot,
        time_zone: &str,
    ) -> Result<CommitOutcome, AnalyticsError> {
        self.with(async |c| {
            let tx = c.transaction().await?;
            let cur: Option<i64> = tx
                .query_opt("SELECT last_seq FROM pp_analytics_meta WHERE id = 1 FOR UPDATE", &[])
                .await?
                .map(|r| r.try_get(0))
                .transpose()?;
            if let Some(committed) = cur.filter(|&c| c >= snap.seq) {
                tx.rollback().await?;
                return Ok(CommitOutcome::Stale { committed });
            }
            let now = snap.taken_at.as_millisecond();
            tx.execute(
                "INSERT INTO pp_analytics_meta (id, last_seq, last_flush_ms, first_flush_ms, time_zone, format) \
                 VALUES (1, $1, $2, $2, $3, 1) ON CONFLICT (id) DO UPDATE SET last_seq = EXCLUDED.last_seq, \
                 last_flush_ms = EXCLUDED.last_flush_ms",
                &[&snap.seq, &now, &time_zone],
            )
            .await?;
            let seq = snap.seq;
            execute_each(&tx, UPSERT_TOTAL, &snap.totals, |t| total_params(t, seq)).await?;
            execute_each(&tx, UPSERT_DAILY, &snap.days, |d| daily_params(d, seq)).await?;
            execute_each(&tx, UPSERT_COVERAGE, &snap.coverage, |c| coverage_params(c, seq)).await?;
            tx.commit().await?;
            Ok(CommitOutcome::Committed)
        })
        .await
    }

    /// Deletes daily and coverage rows before `keep_from` in batches; returns rows deleted.
    pub async fn prune(&self, keep_from: Date) -> Result<u64, AnalyticsError> {
        let cutoff = keep_from.to_string();
        self.with(async |c| {
            let mut n = 0;
            for _ in 0..PRUNE_MAX_BATCHES {
                let d = c
                    .execute(
                        "DELETE FROM pp_analytics_daily WHERE ctid IN (SELECT ctid FROM pp_analytics_daily \
                         WHERE day < $1::text::date ORDER BY day LIMIT $2)",
                        &[&cutoff, &PRUNE_BATCH],
                    )
                    .await?;
                n += d;
                if d < PRUNE_BATCH as u64 {
                    break;
                }
            }
            n += c
                .execute("DELETE FROM pp_analytics_days WHERE day < $1::text::date", &[&cutoff])
                .await?;
            Ok(n)
        })
        .await
    }

    /// Every total (bounded by `MAX_SUBJECTS`).
    pub async fn totals(&self) -> Result<Vec<TotalRow>, AnalyticsError> {
        self.with(async |c| {
            let q =
                format!("SELECT {TOTAL_COLS} FROM pp_analytics_total ORDER BY kind, name LIMIT $1");
            c.query(&q, &[&MAX_SUBJECTS])
                .await?
                .iter()
                .map(total_of)
                .collect()
        })
        .await
    }

    /// Committed request counts (no HLL bytes): every total, and daily rows on or after
    /// `from`. Used to notice a Redis working set that lost keys (it would be behind).
    pub async fn committed_requests(
        &self,
        from: Date,
    ) -> Result<(HashMap<Subject, i64>, HashMap<(Subject, Date), i64>), AnalyticsError> {
        self.with(async |c| {
            let mut totals = HashMap::new();
            for r in c
                .query(
                    "SELECT kind, name, requests FROM pp_analytics_total LIMIT $1",
                    &[&MAX_SUBJECTS],
                )
                .await?
            {
                totals.insert(subject_of(&r)?, r.try_get::<_, i64>("requests")?);
            }
            let mut days = HashMap::new();
            for r in c
                .query(
                    "SELECT kind, name, day::text AS day, requests FROM pp_analytics_daily \
                     WHERE day >= $1::text::date LIMIT $2",
                    &[&from.to_string(), &MAX_SUBJECTS],
                )
                .await?
            {
                days.insert(
                    (subject_of(&r)?, day_of(&r, "day")?),
                    r.try_get::<_, i64>("requests")?,
                );
            }
            Ok((totals, days))
        })
        .await
    }

    /// One subject's total.
    pub async fn total(&self, s: &Subject) -> Result<Option<TotalRow>, AnalyticsError> {
        self.with(async |c| {
            let q = format!(
                "SELECT {TOTAL_COLS} FROM pp_analytics_total WHERE kind = $1 AND name = $2"
            );
            c.query_opt(&q, &[&s.kind.as_str(), &s.name])
                .await?
                .as_ref()
                .map(total_of)
                .transpose()
        })
        .await
    }

    /// Daily rows of every subject on or after `from` (bounded).
    pub async fn days_since(&self, from: Date) -> Result<Vec<DailyRow>, AnalyticsError> {
        self.with(async |c| {
            let q = format!(
                "SELECT {DAILY_COLS} FROM pp_analytics_daily WHERE day >= $1::text::date ORDER BY day LIMIT $2"
            );
            c.query(&q, &[&from.to_string(), &MAX_SUBJECTS])
                .await?
                .iter()
                .map(daily_of)
                .collect()
        })
        .await
    }

    /// One subject's daily rows in `[from, to]`.
    pub async fn days(
        &self,
        s: &Subject,
        from: Date,
        to: Date,
    ) -> Result<Vec<DailyRow>, AnalyticsError> {
        self.with(async |c| {
            let q = format!(
                "SELECT {DAILY_COLS} FROM pp_analytics_daily WHERE kind = $1 AND name = $2 \
                 AND day BETWEEN $3::text::date AND $4::text::date ORDER BY day"
            );
            c.query(
                &q,
                &[
                    &s.kind.as_str(),
                    &s.name,
                    &from.to_string(),
                    &to.to_string(),
                ],
            )
            .await?
            .iter()
            .map(daily_of)
            .collect()
        })
        .await
    }

    /// Coverage rows in `[from, to]`.
    pub async fn coverage(&self, from: Date, to: Date) -> Result<Vec<DayCoverage>, AnalyticsError> {
        self.with(async |c| {
            c.query(
                "SELECT day::text AS day, degraded, reasons FROM pp_analytics_days \
                 WHERE day BETWEEN $1::text::date AND $2::text::date ORDER BY day",
                &[&from.to_string(), &to.to_string()],
            )
            .await?
            .iter()
            .map(|r| {
                Ok(DayCoverage {
                    day: day_of(r, "day")?,
                    degraded: r.try_get("degraded")?,
                    reasons: r.try_get("reasons")?,
                })
            })
            .collect()
        })
        .await
    }
}

/// Applies the migrations at `dsn`: the explicit entry point for `controller migrate`.
pub async fn migrate(config: Config) -> Result<(), AnalyticsError> {
    PgStore::new(config).migrate().await
}
