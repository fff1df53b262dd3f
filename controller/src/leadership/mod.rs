//! Leadership of the controller replicas: exactly one of them runs the background
//! loops (ownership passes and snapshot publishing, provider fetches, the health
//! reducer and planner, maintenance, static upstreams, the analytics writer); every
//! replica serves the Distribution API.
//!
//! The port is a lease with a fencing token ([`LeaseStore`]): a Redis key
//! ([`RedisLease`]) or a Kubernetes Lease ([`KubeLease`], its token from the same
//! Redis); [`Elector`] drives it, and with the Kubernetes backend [`PodLabel`] marks
//! the leader's pod.
//! A leader renews every `renew_every` and considers itself deposed as soon as it could
//! not renew for `lease` (measured from before its last successful renewal was sent, so
//! it stops no later than the store lets another replica take over), when the store
//! says another holder has the lease, or when a fenced write was refused
//! ([`activity_pool::Fence::lost`]). A deposed leader never leads again in the same
//! process: the loops it ran hold in-memory state (publisher versions, the ownership
//! map) that a new leader rebuilds from the pool, so the controller shuts down and its
//! supervisor restarts it as a follower (`docs/reliability.md`).
//!
//! It never logs a token as a secret (tokens are not secrets) nor anything of the store
//! but its error codes.

#[cfg(any(test, feature = "testkit"))]
pub mod contract;
mod kube;
mod memory;
mod pod_label;
mod redis;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::Fence;
use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

pub use self::kube::KubeLease;
pub use self::memory::MemoryLease;
pub use self::pod_label::PodLabel;
pub use self::redis::RedisLease;

/// Why the lease store could not answer. Retryable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("leader lease store unavailable: {0}")]
pub struct LeaseError(pub String);

/// The lease with a fencing token. Implementations: [`RedisLease`], [`KubeLease`]
/// (a Kubernetes Lease, tokens from Redis) and [`MemoryLease`] (tests).
#[async_trait]
pub trait LeaseStore: Send + Sync + fmt::Debug {
    /// Takes the lease for `ttl` when it is free (answering a new fencing token greater
    /// than every earlier one) or extends it when `holder` has it (its token);
    /// `None` when another holder has a live lease.
    async fn acquire(&self, holder: &str, ttl: Duration) -> Result<Option<u64>, LeaseError>;
    /// Extends `holder`'s lease under `token`; `false` when it no longer holds it.
    async fn renew(&self, holder: &str, token: u64, ttl: Duration) -> Result<bool, LeaseError>;
    /// Gives the lease up if `holder` still holds it under `token`.
    async fn release(&self, holder: &str, token: u64) -> Result<(), LeaseError>;
}

/// A replica's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Waiting for the lease.
    Follower,
    /// Leading under this fencing token.
    Leader(u64),
    /// Was the leader and lost it; this process leads no more.
    Deposed,
}

/// Timing of the election (`leadership` in the config).
#[derive(Clone, Copy, Debug)]
pub struct ElectorOptions {
    /// Lease length.
    pub lease: Duration,
    /// The leader renews this often.
    pub renew_every: Duration,
    /// A follower tries this often.
    pub retry_every: Duration,
}

impl From<&proxy_pool_api::config::LeadershipConfig> for ElectorOptions {
    fn from(c: &proxy_pool_api::config::LeadershipConfig) -> Self {
        Self {
            lease: c.lease,
            renew_every: c.renew_every,
            retry_every: c.retry_every,
        }
    }
}

/// Runs the election for one replica.
#[derive(Debug)]
pub struct Elector {
    store: Arc<dyn LeaseStore>,
    holder: String,
    fence: Fence,
    options: ElectorOptions,
    role: watch::Sender<Role>,
}

/// A read handle on a replica's role.
#[derive(Clone, Debug)]
pub struct Leadership {
    role: watch::Receiver<Role>,
    /// [`Leadership::sole`]: the sender, kept so the role never reads as closed.
    _sole: Option<Arc<watch::Sender<Role>>>,
}

impl Leadership {
    /// A replica that leads from the start and never stops (the memory store: one
    /// replica only, nothing to elect).
    pub fn sole() -> Self {
        let (tx, role) = watch::channel(Role::Leader(0));
        Self {
            role,
            _sole: Some(Arc::new(tx)),
        }
    }

    /// The current role.
    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        matches!(self.role(), Role::Leader(_))
    }

    /// Waits until this replica leads; `false` when it never will (deposed, or the
    /// elector stopped).
    pub async fn elected(&self) -> bool {
        let mut rx = self.role.clone();
        rx.wait_for(|r| !matches!(r, Role::Follower))
            .await
            .is_ok_and(|r| matches!(*r, Role::Leader(_)))
    }

    /// Waits until this replica, having led, is deposed (or the elector stopped).
    pub async fn deposed(&self) {
        let mut rx = self.role.clone();
        let _ = rx.wait_for(|r| matches!(r, Role::Deposed)).await;
    }
}

impl Elector {
    /// An elector for `holder` (unique per process) that grants and revokes `fence`.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        holder: String,
        fence: Fence,
        options: ElectorOptions,
    ) -> (Self, Leadership) {
        let (role, rx) = watch::channel(Role::Follower);
        (
            Self {
                store,
                holder,
                fence,
                options,
                role,
            },
            Leadership {
                role: rx,
                _sole: None,
            },
        )
    }

    /// Campaigns, then leads until the lease is lost or `stop` resolves (then the lease
    /// is released so another replica takes over at once).
    pub async fn run(self, stop: impl std::future::Future<Output = ()> + Send) {
        tokio::pin!(stop);
        let token = tokio::select! {
            () = &mut stop => return,
            t = self.campaign() => t,
        };
        self.fence.grant(token);
        self.role.send_replace(Role::Leader(token));
        tracing::info!(holder = %self.holder, token, "leading");
        let released = tokio::select! {
            () = &mut stop => true,
            () = self.lead(token) => false,
        };
        self.fence.revoke();
        self.role.send_replace(Role::Deposed);
        if released {
            match self.store.release(&self.holder, token).await {
                Ok(()) => tracing::info!(holder = %self.holder, "leader lease released"),
                Err(e) => tracing::warn!(error = %e, "leader lease not released"),
            }
        } else {
            tracing::warn!(holder = %self.holder, token, "leadership lost: stepping down");
        }
    }

    async fn campaign(&self) -> u64 {
        loop {
            match self.store.acquire(&self.holder, self.options.lease).await {
                Ok(Some(token)) => return token,
                Ok(None) => tracing::debug!("another replica leads"),
                Err(e) => tracing::warn!(error = %e, "leader election: store unavailable"),
            }
            tokio::time::sleep(self.options.retry_every).await;
        }
    }

    /// Renews until the lease is lost; returns then.
    async fn lead(&self, token: u64) {
        let o = self.options;
        // The lease was set after this instant: the store's copy lasts at least until
        // `valid_until` (clock rates aside, which `renew_every ≤ lease / 3` absorbs).
        let mut valid_until = Instant::now() + o.lease;
        loop {
            tokio::select! {
                () = self.fence.lost() => {
                    tracing::warn!("a leader-only write was fenced");
                    return;
                }
                () = tokio::time::sleep_until(valid_until) => {
                    tracing::warn!("leader lease not renewed in time");
                    return;
                }
                () = tokio::time::sleep(o.renew_every) => {}
            }
            let sent = Instant::now();
            let renew = self.store.renew(&self.holder, token, o.lease);
            match tokio::time::timeout_at(valid_until, renew).await {
                Ok(Ok(true)) => valid_until = sent + o.lease,
                Ok(Ok(false)) => {
                    tracing::warn!("leader lease taken by another replica");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "leader lease renewal failed"),
                Err(_) => {}
            }
        }
    }
}

/// A holder name unique to this process: `<prefix>-<pid>-<random>` (the prefix is the
/// host / pod name when it is a valid holder, else `controller`).
pub fn holder_name(prefix: Option<&str>) -> String {
    let prefix = prefix
        .filter(|p| {
            !p.is_empty()
                && p.len() <= 64
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
        .unwrap_or("controller");
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    )
}

#[cfg(test)]
mod tests;
