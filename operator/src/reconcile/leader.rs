//! The operator's leader election: one `coordination.k8s.io/v1` Lease held under this
//! replica's identity, so two operator replicas never reconcile at once. The Lease
//! protocol itself is `proxy_pool_lease` (shared with the controller's Kubernetes
//! leadership backend); this module only fixes the holder and the timing: renew every
//! third of the duration, and stop leading when no renewal succeeded for two thirds of
//! it, before another replica may take over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use proxy_pool_lease::Acquired;

use super::error::Error;

/// One replica's handle on the Lease.
#[derive(Clone, Debug)]
pub struct LeaseLock {
    lock: proxy_pool_lease::LeaseLock,
    identity: String,
    duration: Duration,
}

impl LeaseLock {
    /// A lock on Lease `name` held as `identity` (the pod name) for `duration`.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Self {
            lock: proxy_pool_lease::LeaseLock::new(api, name),
            identity: identity.into(),
            duration,
        }
    }

    /// How long the Lease lasts without renewal.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Takes or renews the Lease; `Ok(false)` when another replica holds it.
    pub async fn try_acquire(&self) -> Result<bool, Error> {
        Ok(!matches!(
            self.lock.try_acquire(&self.identity, self.duration).await?,
            Acquired::Held
        ))
    }

    /// Gives the Lease up (if still ours) so a standby takes over at once.
    pub async fn release(&self) -> Result<(), Error> {
        self.lock.release(&self.identity, None).await?;
        Ok(())
    }
}

/// Keeps renewing the Lease; returns when it is lost (another holder, or no successful
/// renewal for two thirds of the duration, leaving a margin before others may take it).
pub async fn hold(lock: &LeaseLock) {
    let period = lock.duration / 3;
    let deadline = lock.duration * 2 / 3;
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(period).await;
        match lock.try_acquire().await {
            Ok(true) => last_ok = tokio::time::Instant::now(),
            Ok(false) => {
                tracing::warn!(lease = %lock.lock.name(), "another replica took the Lease");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, lease = %lock.lock.name(), "cannot renew the Lease");
                if last_ok.elapsed() >= deadline {
                    return;
                }
            }
        }
    }
}
