//! Composition for the controller's `main`: builds the collector, the worker task and
//! the stats router from the validated sections. I/O (files, connections) happens here,
//! once, at start-up; nothing here runs DDL (see [`crate::migrate`]).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use proxy_pool_cache::RedisOptions;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::collector::Collector;
use crate::day::{Clock, SystemClock};
use crate::engine::{Engine, IsWriter, always_writer, run};
use crate::error::AnalyticsError;
use crate::link::RedisConn;
use crate::metrics::AnalyticsMetrics;
use crate::model::Event;
use crate::options::{AnalyticsOptions, Settings};
use crate::pg::PgStore;
use crate::stats::{StatsState, router};
use crate::ws::WorkingSet;

/// Largest secret file read (password, identity key).
const MAX_SECRET_FILE: u64 = 4096;

/// What `main` wires: the collector for the Distribution API and the gateway outcome
/// path, the router to merge into the admin listener, and the worker task to await at
/// shutdown (it finishes after its bounded final flush).
#[derive(Debug)]
pub struct Analytics {
    /// Clone into every producer.
    pub collector: Collector,
    /// Merge into the admin router.
    pub router: Router,
    /// The worker; await it after signalling shutdown.
    pub worker: JoinHandle<()>,
    /// Register on the controller's Prometheus registry.
    pub metrics: AnalyticsMetrics,
}

/// Connect timeout used when the DSN sets none.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads a small secret file (a mounted Secret key: symlinks are followed); its content
/// never appears in an error.
fn read_secret(path: &str) -> Result<Vec<u8>, AnalyticsError> {
    let meta = std::fs::metadata(path)
        .map_err(|_| AnalyticsError::Corrupt(format!("cannot read {path}")))?;
    if !meta.is_file() || meta.len() > MAX_SECRET_FILE {
        return Err(AnalyticsError::Corrupt(format!(
            "{path}: not a small regular file"
        )));
    }
    let mut b =
        std::fs::read(path).map_err(|_| AnalyticsError::Corrupt(format!("cannot read {path}")))?;
    while b.last().is_some_and(|c| c.is_ascii_whitespace()) {
        b.pop();
    }
    Ok(b)
}

/// The PostgreSQL client config of the section (password from its file).
pub fn pg_config(opts: &AnalyticsOptions) -> Result<tokio_postgres::Config, AnalyticsError> {
    let mut cfg: tokio_postgres::Config = opts
        .postgres_dsn
        .parse()
        .map_err(|_| AnalyticsError::Corrupt("analytics.postgresDsn".into()))?;
    if let Some(p) = &opts.postgres_password_file {
        cfg.password(read_secret(p)?);
    }
    Ok(cfg)
}

/// The PostgreSQL client config from a DSN file (libpq key=value or a
/// `postgresql://` URL; may carry the password). Neither the DSN nor the parse error
/// text is ever shown: only the file name.
pub fn pg_config_from_file(path: &Path) -> Result<tokio_postgres::Config, AnalyticsError> {
    let shown = path.display().to_string();
    let bytes = read_secret(&shown)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| AnalyticsError::Corrupt(format!("{shown}: not UTF-8")))?;
    let mut cfg: tokio_postgres::Config = text
        .trim()
        .parse()
        .map_err(|_| AnalyticsError::Corrupt(format!("{shown}: not a valid PostgreSQL DSN")))?;
    if cfg.get_hosts().is_empty() {
        return Err(AnalyticsError::Corrupt(format!(
            "{shown}: the DSN names no host"
        )));
    }
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    Ok(cfg)
}

/// Reads the optional identity key file (at least 32 bytes when given).
pub fn identity_key_from_file(path: Option<&Path>) -> Result<Vec<u8>, AnalyticsError> {
    match path {
        None => Ok(Vec::new()),
        Some(p) => {
            let shown = p.display().to_string();
            let k = read_secret(&shown)?;
            if k.len() < 32 {
                return Err(AnalyticsError::Corrupt(format!(
                    "{shown}: identity key shorter than 32 bytes"
                )));
            }
            Ok(k)
        }
    }
}

/// The start-up check of the database: the schema is at this code's version and the
/// history (if any) uses the configured time zone. Never migrates.
/// [`AnalyticsError::SchemaMissing`] and [`AnalyticsError::TimeZoneMismatch`] are
/// deployment errors; [`AnalyticsError::Sql`] means PostgreSQL is not reachable now.
pub async fn check_database(
    pg: &tokio_postgres::Config,
    settings: &Settings,
) -> Result<(), AnalyticsError> {
    let store = PgStore::new(pg.clone());
    store.check_schema().await?;
    if let Some(m) = store.meta().await?
        && m.time_zone != settings.days.zone_name()
    {
        return Err(AnalyticsError::TimeZoneMismatch {
            stored: m.time_zone,
            configured: settings.days.zone_name().to_owned(),
        });
    }
    Ok(())
}

/// Built, not yet running: the collector and router can be handed out before the
/// worker starts ([`Prepared::spawn`]).
#[derive(Debug)]
pub struct Prepared {
    /// Clone into every producer.
    pub collector: Collector,
    /// Merge into the admin router.
    pub router: Router,
    /// Register on the controller's Prometheus registry.
    pub metrics: AnalyticsMetrics,
    engine: Engine,
    rx: mpsc::Receiver<Event>,
}

impl Prepared {
    /// Starts the worker; it flushes only while `writer` says so; it stops collecting
    /// when `shutdown` resolves, applies what is queued and (writing) makes one final
    /// flush bounded by the settings' `shutdown_grace`.
    pub fn spawn(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        writer: IsWriter,
    ) -> JoinHandle<()> {
        tokio::spawn(run(self.engine, self.rx, shutdown, writer))
    }
}

/// Builds analytics from typed settings: the worker's and the stats reader's
/// PostgreSQL stores (no I/O yet), the working set under `<key_prefix>:analytics:v1:`.
pub fn prepare(
    settings: Settings,
    pg: tokio_postgres::Config,
    key_prefix: &str,
    identity_key: Vec<u8>,
    conn: impl Into<RedisConn>,
) -> Prepared {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (collector, rx) = Collector::bounded(settings.queue_size, Arc::clone(&clock));
    let ws = WorkingSet::new(conn, key_prefix, identity_key);
    let engine = Engine::new(
        ws.clone(),
        Arc::new(PgStore::new(pg.clone())),
        settings.clone(),
        Arc::clone(&clock),
        collector.stats(),
    );
    let metrics = AnalyticsMetrics {
        collector: collector.clone(),
        worker: engine.metrics(),
    };
    let router = router(StatsState {
        pg: Arc::new(PgStore::new(pg)),
        ws: Some(ws),
        days: settings.days,
        clock,
    });
    Prepared {
        collector,
        router,
        metrics,
        engine,
        rx,
    }
}

/// Starts analytics, or returns `None` when the section is off. `conn` is a connection
/// made from the `redis` section; `shutdown` resolves when the process stops.
pub fn start(
    opts: &AnalyticsOptions,
    redis: &RedisOptions,
    conn: redis::aio::MultiplexedConnection,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Option<Analytics>, AnalyticsError> {
    if !opts.enabled {
        return Ok(None);
    }
    let settings = opts
        .settings()
        .map_err(|e| AnalyticsError::Corrupt(e.to_string()))?;
    let id_key = match &opts.identity_key_file {
        Some(p) => read_secret(p)?,
        None => Vec::new(),
    };
    let cfg = pg_config(opts)?;
    let p = prepare(settings, cfg, &redis.key_prefix, id_key, conn);
    Ok(Some(Analytics {
        collector: p.collector.clone(),
        router: p.router.clone(),
        metrics: p.metrics.clone(),
        worker: p.spawn(shutdown, always_writer()),
    }))
}
