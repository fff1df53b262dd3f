//! Shared fixtures of the analytics integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use activity_pool::testkit::RedisServer;
use jiff::Timestamp;
use proxy_pool_analytics::{
    Collector, Engine, Event, IsWriter, Kind, ManualClock, PgStore, Settings, Subject, TotalRow,
    WorkingSet,
};
use tokio::sync::mpsc;

pub use proxy_pool_analytics::testkit::Postgres;

/// Redis + PostgreSQL + a worker on a manual clock.
pub struct Rig {
    pub redis: RedisServer,
    pub pg: Postgres,
    pub clock: ManualClock,
    pub collector: Collector,
    pub rx: mpsc::Receiver<Event>,
    pub engine: Engine,
    pub store: Arc<PgStore>,
    pub conn: redis::aio::MultiplexedConnection,
    pub settings: Settings,
}

pub async fn redis_conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The working set every rig's engine uses.
fn working_set(conn: &redis::aio::MultiplexedConnection) -> WorkingSet {
    WorkingSet::new(conn.clone(), "test", b"k".to_vec())
}

impl Rig {
    /// Migrated database, empty Redis, clock at `now`.
    pub async fn new(now: &str, zone: &str) -> Self {
        let redis = RedisServer::start();
        let pg = Postgres::start();
        let store = Arc::new(PgStore::new(pg.config()));
        store.migrate().await.unwrap();
        let clock = ManualClock::new(now.parse::<Timestamp>().unwrap());
        let settings = Settings::for_zone(zone).unwrap();
        let (collector, rx) = Collector::bounded(100_000, Arc::new(clock.clone()));
        let conn = redis_conn(&redis).await;
        let engine = Engine::new(
            working_set(&conn),
            store.clone(),
            settings.clone(),
            Arc::new(clock.clone()),
            collector.stats(),
        );
        Self {
            redis,
            pg,
            clock,
            collector,
            rx,
            engine,
            store,
            conn,
            settings,
        }
    }

    /// The committed total of one subject (it must exist).
    pub async fn total(&self, kind: Kind, name: &str) -> TotalRow {
        let subject = Subject {
            kind,
            name: name.into(),
        };
        self.store.total(&subject).await.unwrap().unwrap()
    }

    /// Another handle on the engine's working set (another replica's, say).
    pub fn working_set(&self) -> WorkingSet {
        working_set(&self.conn)
    }

    /// Applies every queued event.
    pub async fn drain(&mut self) {
        let mut buf = Vec::new();
        while let Ok(e) = self.rx.try_recv() {
            buf.push(e);
        }
        self.engine.apply(&buf).await;
    }
}

/// A worker task ([`proxy_pool_analytics::run`]) running until [`Worker::stop`].
pub struct Worker {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Worker {
    /// Runs `engine` on `rx`, flushing while `writer` says so.
    pub fn spawn(engine: Engine, rx: mpsc::Receiver<Event>, writer: IsWriter) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(proxy_pool_analytics::run(
            engine,
            rx,
            async move {
                let _ = stopped.await;
            },
            writer,
        ));
        Self { stop, task }
    }

    /// Signals shutdown and waits (bounded) for the worker's final step.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap();
    }
}
