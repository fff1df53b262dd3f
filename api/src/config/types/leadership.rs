//! `leadership`, validated: controller replicas and the leader lease.

use std::time::Duration;

/// Controller replicas and the leader lease (`leadership`, `docs/reliability.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeadershipConfig {
    /// How many controller replicas share the store (1 with the memory store).
    pub replicas: u32,
    /// The leader lease: a leader that could not renew for this long has stopped.
    pub lease: Duration,
    /// How often the leader renews its lease.
    pub renew_every: Duration,
    /// How often a follower tries to take the lease.
    pub retry_every: Duration,
    /// Where the lease lives.
    pub backend: LeadershipBackend,
}

/// Where the leader lease lives (`leadership.backend`). Either way the fencing token
/// of every leader-only write comes from the pool's Redis.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum LeadershipBackend {
    /// The lease is a key on the pool's Redis (also the choice outside Kubernetes).
    #[default]
    Redis,
    /// A `coordination.k8s.io/v1` Lease in the controller pod's namespace.
    Kubernetes(KubernetesLeadership),
}

/// The Kubernetes Lease of the controller replicas (`leadership.kubernetes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesLeadership {
    /// Name of the Lease (a DNS subdomain).
    pub lease_name: String,
    /// The leader labels its own pod `proxypool.io/leader=true` (every other replica
    /// labels its own `false`), so a Service can select the leader alone.
    pub label_pod: bool,
}

/// The pod label that marks the leading controller replica (`true` / `false`).
pub const LEADER_POD_LABEL: &str = "proxypool.io/leader";

impl LeadershipConfig {
    /// Longest time from a leader's death to another replica leading.
    pub fn failover_bound(&self) -> Duration {
        self.lease + self.retry_every
    }
}

impl Default for LeadershipConfig {
    fn default() -> Self {
        Self {
            replicas: 1,
            lease: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
            retry_every: Duration::from_secs(2),
            backend: LeadershipBackend::Redis,
        }
    }
}
