//! Shared fixtures of the analytics integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use activity_pool::testkit::RedisServer;
use jiff::Timestamp;
use jiff::civil::Date;
use proxy_pool_analytics::{
    Collector, DailyRow, DayCoverage, Engine, Event, FlushReport, IsWriter, Kind, ManualClock,
    PgStore, Settings, Subject, TotalRow, WorkingSet,
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

    /// [`Rig::new`] with the engine started (schema checked, state loaded).
    pub async fn started(now: &str, zone: &str) -> Self {
        let mut rig = Self::new(now, zone).await;
        rig.engine.start().await.unwrap();
        rig
    }

    /// The committed total of one subject (it must exist).
    pub async fn total(&self, kind: Kind, name: &str) -> TotalRow {
        let subject = Subject {
            kind,
            name: name.into(),
        };
        self.store.total(&subject).await.unwrap().unwrap()
    }

    /// The committed days `from..=to` (dates as `2026-05-10`) of one subject.
    pub async fn days(&self, kind: Kind, name: &str, from: &str, to: &str) -> Vec<DailyRow> {
        let subject = Subject {
            kind,
            name: name.into(),
        };
        self.store.days(&subject, day(from), day(to)).await.unwrap()
    }

    /// The committed coverage of one day (as `2026-05-10`).
    pub async fn coverage(&self, of: &str) -> Vec<DayCoverage> {
        self.store.coverage(day(of), day(of)).await.unwrap()
    }

    /// Runs one Redis command whose reply is OK / an integer nobody reads.
    pub async fn redis(&mut self, args: &[&str]) {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let _: () = cmd.query_async(&mut self.conn).await.unwrap();
    }

    /// Applies every queued event and flushes, which must succeed.
    pub async fn drain_and_flush(&mut self) -> FlushReport {
        self.drain().await;
        self.engine.flush().await.unwrap()
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

fn day(s: &str) -> Date {
    s.parse().unwrap()
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
