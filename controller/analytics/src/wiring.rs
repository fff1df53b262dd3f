//! Composition for the controller's `main`: builds the collector, the worker task and
//! the stats router from the validated sections. I/O (files, connections) happens here,
//! once, at start-up; nothing here runs DDL (see [`crate::migrate`]).

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use proxy_pool_cache::RedisOptions;
use tokio::task::JoinHandle;

use crate::collector::Collector;
use crate::day::{Clock, SystemClock};
use crate::engine::{Engine, run};
use crate::error::AnalyticsError;
use crate::metrics::AnalyticsMetrics;
use crate::options::AnalyticsOptions;
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

fn read_secret(path: &str) -> Result<Vec<u8>, AnalyticsError> {
    let meta = std::fs::symlink_metadata(path)
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
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (collector, rx) = Collector::bounded(settings.queue_size, Arc::clone(&clock));
    let ws = WorkingSet::new(conn, &redis.key_prefix, id_key);
    let engine = Engine::new(
        ws.clone(),
        Arc::new(PgStore::new(cfg.clone())),
        settings.clone(),
        Arc::clone(&clock),
        collector.stats(),
    );
    let metrics = AnalyticsMetrics {
        collector: collector.clone(),
        worker: engine.metrics(),
    };
    let worker = tokio::spawn(run(engine, rx, shutdown));
    let router = router(StatsState {
        pg: Arc::new(PgStore::new(cfg)),
        ws: Some(ws),
        days: settings.days,
        clock,
    });
    Ok(Some(Analytics {
        collector,
        router,
        worker,
        metrics,
    }))
}
