//! The controller's own Redis connection (rate limiter, readiness, the start-up
//! eviction-policy check), separate from the activity pool's but made by the same
//! connector (direct or Sentinel-resolved master, TLS, ACL users) and the same
//! reconnecting connection (`activity_pool::RedisConn`): one multiplexed connection
//! re-made after any error, every call bounded by a timeout.
//!
//! Owns no pool key; never prints the password.

use std::fmt;
use std::time::Duration;

use activity_pool::{RedisConn, RedisConnector};
use redis::aio::MultiplexedConnection;

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

/// One lazily (re)connected multiplexed connection ([`RedisConn`], the store's
/// connector's), forgotten after any failed or timed-out call.
pub struct RedisLink {
    conn: RedisConn,
    timeout: Duration,
}

/// How long a failed connect makes calls fail fast.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

impl fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLink")
            .field("timeout", &self.timeout)
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

impl RedisLink {
    /// A link through `connector` (the pool's: direct or Sentinel, TLS, ACL users),
    /// every call bounded by `timeout`.
    pub fn new(connector: RedisConnector, timeout: Duration) -> Self {
        Self {
            conn: RedisConn::relink_with(connector.connect_fn(timeout), RETRY_AFTER_FAILURE),
            timeout,
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, LinkError> {
        self.conn
            .current()
            .await
            .map_err(|_| LinkError::Unavailable)
    }

    async fn forget(&self) {
        self.conn.reset().await;
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
