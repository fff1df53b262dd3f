//! The cache's storage port and its Redis adapter. The adapter issues one `MGET` per
//! batch and one `MULTI` pipeline of `SET … PX` per write-back; it never retries past
//! its budget and never runs Lua.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, MultiplexedConnection};

/// A storage failure; the cache reacts by going to the source.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The round trip took longer than its budget.
    #[error("cache store timed out")]
    Timeout,
    /// The store answered with an error or the connection failed.
    #[error("cache store failed: {0}")]
    Backend(String),
}

/// Raw byte storage with per-entry TTLs.
#[async_trait]
pub trait CacheStore: Send + Sync + Debug {
    /// Values of `keys`, in order; `None` for a missing key.
    async fn mget(
        &self,
        keys: &[String],
        budget: Duration,
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError>;
    /// Stores every entry with its TTL.
    async fn mset(
        &self,
        entries: &[(String, Vec<u8>, Duration)],
        budget: Duration,
    ) -> Result<(), StoreError>;
}

/// Redis adapter over a connection that is cheap to clone and shared by callers: a
/// [`MultiplexedConnection`] by default, or any other `ConnectionLike` handle (the
/// controller passes one that re-connects after a transport error).
#[derive(Clone)]
pub struct RedisStore<C = MultiplexedConnection> {
    conn: C,
}

impl<C> Debug for RedisStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").finish_non_exhaustive()
    }
}

impl<C> RedisStore<C> {
    /// Wraps a connection made by the caller (I/O at the edge).
    pub fn new(conn: C) -> Self {
        Self { conn }
    }
}

fn backend(e: redis::RedisError) -> StoreError {
    StoreError::Backend(e.to_string())
}

#[async_trait]
impl<C> CacheStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn mget(
        &self,
        keys: &[String],
        budget: Duration,
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("MGET");
        for k in keys {
            cmd.arg(k);
        }
        match tokio::time::timeout(budget, cmd.query_async::<Vec<Option<Vec<u8>>>>(&mut conn)).await
        {
            Ok(r) => r.map_err(backend),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    async fn mset(
        &self,
        entries: &[(String, Vec<u8>, Duration)],
        budget: Duration,
    ) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (k, v, ttl) in entries {
            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            pipe.cmd("SET").arg(k).arg(v).arg("PX").arg(ms).ignore();
        }
        match tokio::time::timeout(budget, pipe.query_async::<()>(&mut conn)).await {
            Ok(r) => r.map_err(backend),
            Err(_) => Err(StoreError::Timeout),
        }
    }
}
