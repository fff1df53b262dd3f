//! `leadership`: how many controller replicas share the store, and the leader lease
//! that lets exactly one of them run the background loops (`docs/reliability.md`).
//!
//! The memory store holds the pool inside one process, so it is refused above one
//! replica; with Redis, `controlPlane.maxStaleAge` must exceed the failover bound
//! (`lease + retryEvery`), or gateways would refuse traffic during every leader change.
//! Usage analytics runs with any number of replicas: every replica records usage into
//! Redis and only the leader flushes it to PostgreSQL.
//! The lease is a Redis key (`backend: redis`) or a Kubernetes Lease (`backend:
//! kubernetes`, Redis store only: the fencing token still comes from Redis).

use std::time::Duration;

use super::ctx::Ctx;
use crate::config::checks::dns_name;
use crate::config::raw::RawLeadership;
use crate::config::types::{
    ControlPlaneConfig, KubernetesLeadership, LeadershipBackend, LeadershipConfig, StoreConfig,
};

/// Most controller replicas on one store.
pub const MAX_REPLICAS: u32 = 16;

/// The Lease name when `leadership.kubernetes.leaseName` is not set.
pub const DEFAULT_LEASE_NAME: &str = "proxy-pool-controller";

/// Validates `leadership` against the store and the control plane.
pub(super) fn leadership(
    cx: &mut Ctx,
    raw: &RawLeadership,
    store: &StoreConfig,
    control_plane: Option<&ControlPlaneConfig>,
) -> LeadershipConfig {
    let replicas = raw.replicas.unwrap_or(1);
    if !(1..=MAX_REPLICAS).contains(&replicas) {
        cx.err(
            "leadership.replicas",
            format!("must be between 1 and {MAX_REPLICAS}, got {replicas}"),
        );
    } else if replicas > 1 && matches!(store, StoreConfig::Memory) {
        cx.err(
            "leadership.replicas",
            format!(
                "the memory store lives inside one controller process and cannot be shared: \
                 run 1 replica, or use `store.backend: redis` for {replicas}"
            ),
        );
    }
    let secs = Duration::from_secs;
    let lease = cx.duration_in(
        "leadership.lease",
        raw.lease.as_deref(),
        secs(10),
        secs(2)..=secs(300),
    );
    let renew_every = cx.duration_in(
        "leadership.renewEvery",
        raw.renew_every.as_deref(),
        secs(2),
        Duration::from_millis(100)..=secs(100),
    );
    if renew_every * 3 > lease {
        cx.err(
            "leadership.renewEvery",
            "must be at most a third of leadership.lease",
        );
    }
    let retry_every = cx.duration_in(
        "leadership.retryEvery",
        raw.retry_every.as_deref(),
        secs(2),
        Duration::from_millis(100)..=secs(300),
    );
    let config = LeadershipConfig {
        replicas,
        lease,
        renew_every,
        retry_every,
        backend: backend(cx, raw, store),
    };
    if let (StoreConfig::Redis(_), Some(cp)) = (store, control_plane)
        && cp.max_stale_age <= config.failover_bound()
    {
        cx.err(
            "controlPlane.maxStaleAge",
            format!(
                "must exceed the leader failover bound (leadership.lease + leadership.retryEvery \
                 = {:?}), or gateways stop serving during a leader change",
                config.failover_bound()
            ),
        );
    }
    config
}

/// `leadership.backend` and `leadership.kubernetes`.
fn backend(cx: &mut Ctx, raw: &RawLeadership, store: &StoreConfig) -> LeadershipBackend {
    match raw.backend.as_deref().unwrap_or("redis") {
        "redis" => {
            if raw.kubernetes.is_some() {
                cx.err(
                    "leadership.kubernetes",
                    "only with leadership.backend: kubernetes",
                );
            }
            LeadershipBackend::Redis
        }
        "kubernetes" => {
            if !matches!(store, StoreConfig::Redis(_)) {
                cx.err(
                    "leadership.backend",
                    "kubernetes needs store.backend: redis (the fencing token of every \
                     leader-only write comes from the pool's Redis; the memory store has one \
                     replica and nothing to elect)",
                );
            }
            let k = raw.kubernetes.clone().unwrap_or_default();
            let lease_name = k.lease_name.unwrap_or_else(|| DEFAULT_LEASE_NAME.into());
            if !dns_name(&lease_name, 253, true) {
                cx.err(
                    "leadership.kubernetes.leaseName",
                    format!("`{lease_name}` is not a DNS-1123 subdomain"),
                );
            }
            LeadershipBackend::Kubernetes(KubernetesLeadership {
                lease_name,
                label_pod: k.label_pod.unwrap_or(true),
            })
        }
        other => {
            cx.err(
                "leadership.backend",
                format!("must be `redis` or `kubernetes`, got `{other}`"),
            );
            LeadershipBackend::Redis
        }
    }
}
