//! `leadership`: controller replicas and the leader lease, as written.

use serde::{Deserialize, Serialize};

/// `leadership`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLeadership {
    /// How many controller replicas share the store (1..=16; memory store: 1).
    #[serde(default)]
    pub replicas: Option<u32>,
    /// The leader lease, e.g. `10s`.
    #[serde(default)]
    pub lease: Option<String>,
    /// How often the leader renews it (at most a third of the lease).
    #[serde(default)]
    pub renew_every: Option<String>,
    /// How often a follower tries to take it.
    #[serde(default)]
    pub retry_every: Option<String>,
    /// Where the lease lives: `redis` (default) or `kubernetes`.
    #[serde(default)]
    pub backend: Option<String>,
    /// The Kubernetes Lease (`backend: kubernetes`).
    #[serde(default)]
    pub kubernetes: Option<RawKubernetesLeadership>,
}

/// `leadership.kubernetes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawKubernetesLeadership {
    /// Name of the `coordination.k8s.io/v1` Lease in the pod's namespace.
    #[serde(default)]
    pub lease_name: Option<String>,
    /// Whether the leader labels its own pod (`proxypool.io/leader`).
    #[serde(default)]
    pub label_pod: Option<bool>,
}
