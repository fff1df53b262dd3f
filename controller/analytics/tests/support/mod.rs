//! Shared fixtures of the analytics integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use activity_pool::testkit::RedisServer;
use jiff::Timestamp;
use proxy_pool_analytics::{Collector, Engine, Event, ManualClock, PgStore, Settings, WorkingSet};
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
        let ws = WorkingSet::new(conn.clone(), "test", b"k".to_vec());
        let engine = Engine::new(
            ws,
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

    /// Applies every queued event.
    pub async fn drain(&mut self) {
        let mut buf = Vec::new();
        while let Ok(e) = self.rx.try_recv() {
            buf.push(e);
        }
        self.engine.apply(&buf).await;
    }
}
