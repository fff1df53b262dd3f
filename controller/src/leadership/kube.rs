//! The leader lease as a Kubernetes `coordination.k8s.io/v1` Lease
//! (`leadership.backend: kubernetes`), the Lease protocol shared with the operator
//! (`proxy_pool_lease`). The fencing token still comes from the pool's Redis: each new
//! tenure takes one (`RedisPool::leader_token`, greater than every earlier token) and
//! attaches it to the Lease before the holder is told it leads, so every leader-only
//! write stays fenced whatever the Lease's clocks say. Renewals and releases apply only
//! to the tenure carrying the caller's token.

use std::time::Duration;

use activity_pool::RedisPool;
use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use proxy_pool_lease::{Acquired, LeaseLock};

use super::{LeaseError, LeaseStore};

/// [`LeaseStore`] on a Kubernetes Lease, with fencing tokens from Redis.
#[derive(Clone)]
pub struct KubeLease {
    lock: LeaseLock,
    pool: RedisPool,
}

impl std::fmt::Debug for KubeLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLease")
            .field("lease", &self.lock.name())
            .finish_non_exhaustive()
    }
}

impl KubeLease {
    /// The Lease `name` of `api`'s namespace; tokens from `pool`'s Redis.
    pub fn new(api: Api<Lease>, name: &str, pool: RedisPool) -> Self {
        Self {
            lock: LeaseLock::new(api, name),
            pool,
        }
    }
}

/// An API error by status code and reason only (never a URL or a body).
fn kube_error(e: kube::Error) -> LeaseError {
    LeaseError(match e {
        kube::Error::Api(s) => format!("kubernetes_api_{}_{}", s.code, s.reason),
        _ => "kubernetes_unreachable".into(),
    })
}

#[async_trait]
impl LeaseStore for KubeLease {
    async fn acquire(&self, holder: &str, ttl: Duration) -> Result<Option<u64>, LeaseError> {
        match self
            .lock
            .try_acquire(holder, ttl)
            .await
            .map_err(kube_error)?
        {
            Acquired::Held => return Ok(None),
            Acquired::Renewed { token: Some(t) } => {
                if let Ok(t) = t.parse() {
                    return Ok(Some(t));
                }
            }
            // A new tenure, or one whose token was never attached (the process that
            // took it stopped in between): take a token now.
            Acquired::Renewed { token: None } | Acquired::Taken => {}
        }
        let token = self
            .pool
            .leader_token()
            .await
            .map_err(|e| LeaseError(format!("fencing token: {e}")))?;
        let attached = self
            .lock
            .set_token(holder, &token.to_string())
            .await
            .map_err(kube_error)?;
        Ok(attached.then_some(token))
    }

    async fn renew(&self, holder: &str, token: u64, ttl: Duration) -> Result<bool, LeaseError> {
        self.lock
            .renew(holder, Some(&token.to_string()), ttl)
            .await
            .map_err(kube_error)
    }

    async fn release(&self, holder: &str, token: u64) -> Result<(), LeaseError> {
        self.lock
            .release(holder, Some(&token.to_string()))
            .await
            .map(drop)
            .map_err(kube_error)
    }
}
