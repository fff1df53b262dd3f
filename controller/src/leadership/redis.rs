//! The leader lease on the pool's Redis (`SET PX` + renewal by holder and token, keys
//! under the `{activity}` hash tag; `activity_pool::RedisPool::leader_acquire`). The
//! fencing token is derived from Redis server time and the newest token, so it never
//! goes backwards, not even after a Sentinel failover lost the last grant.

use std::time::Duration;

use activity_pool::{LeaderGrant, PoolError, RedisPool};
use async_trait::async_trait;

use super::{LeaseError, LeaseStore};

/// [`LeaseStore`] on the activity pool's Redis.
#[derive(Clone, Debug)]
pub struct RedisLease {
    pool: RedisPool,
}

impl RedisLease {
    /// The lease on `pool`'s Redis.
    pub fn new(pool: RedisPool) -> Self {
        Self { pool }
    }
}

fn lease_error(e: PoolError) -> LeaseError {
    LeaseError(match e {
        PoolError::Unavailable(code) => code,
        PoolError::InvalidInput { field, .. } => format!("invalid {field}"),
        other => other.to_string(),
    })
}

#[async_trait]
impl LeaseStore for RedisLease {
    async fn acquire(&self, holder: &str, ttl: Duration) -> Result<Option<u64>, LeaseError> {
        match self.pool.leader_acquire(holder, ttl).await {
            Ok(LeaderGrant::Granted(t)) => Ok(Some(t)),
            Ok(LeaderGrant::Held) => Ok(None),
            Err(e) => Err(lease_error(e)),
        }
    }

    async fn renew(&self, holder: &str, token: u64, ttl: Duration) -> Result<bool, LeaseError> {
        self.pool
            .leader_renew(holder, token, ttl)
            .await
            .map_err(lease_error)
    }

    async fn release(&self, holder: &str, token: u64) -> Result<(), LeaseError> {
        self.pool
            .leader_release(holder, token)
            .await
            .map(|_| ())
            .map_err(lease_error)
    }
}
