//! The controller's own Redis connection (rate limiter, readiness, the start-up
//! eviction-policy check), separate from the activity pool's but made by the same
//! connector (direct or Sentinel-resolved master, TLS, ACL users): one multiplexed
//! connection re-made after any error, every call bounded by a timeout.
//!
//! Owns no pool key; never prints the password.

use std::fmt;
use std::time::{Duration, Instant};

use activity_pool::RedisConnector;
use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

/// Why a Redis call failed (no Redis text is kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Bad address in the config.
    #[error("invalid redis address")]
    InvalidAddress,
    /// Could not connect or the call failed / timed out.
    #[error("redis unavailable")]
    Unavailable,
}

/// One lazily (re)connected multiplexed connection.
pub struct RedisLink {
    connector: RedisConnector,
    timeout: Duration,
    conn: Mutex<LinkState>,
}

#[derive(Default)]
struct LinkState {
    conn: Option<MultiplexedConnection>,
    /// After a failed connect, calls fail fast for [`RETRY_AFTER_FAILURE`] instead of
    /// queueing behind the mutex for a connect timeout each.
    failed_at: Option<Instant>,
}

/// How long a failed connect makes calls fail fast.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

impl fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLink")
            .field("timeout", &self.timeout)
            .field("connector", &self.connector)
            .finish_non_exhaustive()
    }
}

impl RedisLink {
    /// A link through `connector` (the pool's: direct or Sentinel, TLS, ACL users),
    /// every call bounded by `timeout`.
    pub fn new(connector: RedisConnector, timeout: Duration) -> Self {
        Self {
            connector,
            timeout,
            conn: Mutex::new(LinkState::default()),
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, LinkError> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.conn.as_ref() {
            return Ok(c.clone());
        }
        if guard
            .failed_at
            .is_some_and(|t| t.elapsed() < RETRY_AFTER_FAILURE)
        {
            return Err(LinkError::Unavailable);
        }
        match self.connector.connect(self.timeout).await {
            Ok(conn) => {
                guard.conn = Some(conn.clone());
                guard.failed_at = None;
                Ok(conn)
            }
            Err(_) => {
                guard.failed_at = Some(Instant::now());
                Err(LinkError::Unavailable)
            }
        }
    }

    async fn forget(&self) {
        self.conn.lock().await.conn = None;
    }

    /// Runs a prepared script (EVALSHA, loading it on NOSCRIPT).
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, LinkError> {
        let mut conn = self.connection().await?;
        match tokio::time::timeout(self.timeout, inv.invoke_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            _ => {
                self.forget().await;
                Err(LinkError::Unavailable)
            }
        }
    }

    /// `PING`.
    pub async fn ping(&self) -> Result<(), LinkError> {
        let mut conn = self.connection().await?;
        let r: Result<Result<String, _>, _> =
            tokio::time::timeout(self.timeout, redis::cmd("PING").query_async(&mut conn)).await;
        match r {
            Ok(Ok(_)) => Ok(()),
            _ => {
                self.forget().await;
                Err(LinkError::Unavailable)
            }
        }
    }

    /// The server's `maxmemory-policy`, from `INFO memory` (readable where `CONFIG`
    /// is not, e.g. on managed services).
    pub async fn eviction_policy(&self) -> Result<String, LinkError> {
        let mut conn = self.connection().await?;
        let r: Result<Result<String, _>, _> = tokio::time::timeout(
            self.timeout,
            redis::cmd("INFO").arg("memory").query_async(&mut conn),
        )
        .await;
        let Ok(Ok(text)) = r else {
            self.forget().await;
            return Err(LinkError::Unavailable);
        };
        text.lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(|p| p.trim().to_owned())
            .ok_or(LinkError::Unavailable)
    }
}
