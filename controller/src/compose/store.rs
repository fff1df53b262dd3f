//! The store the config names and, with Redis, the leader election.

use std::sync::Arc;

use activity_pool::{Clock, SystemClock};
use proxy_pool_api::config::Config;

use super::ComposeError;
use crate::controlplane::ControlPlanePorts;
use crate::leadership::{
    Elector, ElectorOptions, KubeLease, Leadership, LeaseStore, PodLabel, RedisLease,
};
use crate::store::{self, Ports, Store};

/// A built store with every port of the same pool (the control plane needs more than
/// [`Ports`] carries) and how this replica is elected.
#[derive(Debug)]
pub struct BuiltStore {
    /// The controller's ports.
    pub store: Store,
    /// The control plane's ports.
    pub control_plane: ControlPlanePorts,
    /// Redis: the election (its leader-only writes are fenced by the elector's
    /// token). Memory: `None`, the one replica leads.
    pub elector: Option<Elector>,
    /// This replica's role.
    pub leadership: Leadership,
    /// Redis: the (fenced) pool that relays extraction demand to the leader.
    pub relay: Option<activity_pool::RedisPool>,
    /// The Kubernetes backend with `labelPod`: this replica's pod label.
    pub pod_label: Option<PodLabel>,
}

/// Builds the store the config names and, with Redis, the leader election: every
/// Redis port's leader-only writes carry the elector's fencing token. `pod` is this
/// replica's pod name in a cluster (the holder name's prefix; the Kubernetes backend's
/// pod label needs it).
pub async fn build_store(config: &Config, pod: Option<&str>) -> Result<BuiltStore, ComposeError> {
    use activity_pool::{Fence, MemoryPool};
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match &config.store {
        proxy_pool_api::config::StoreConfig::Memory => {
            let pool = Arc::new(MemoryPool::new(store::pool_options(&config.pool)));
            Ok(BuiltStore {
                store: Store {
                    ports: Ports::from_shared(pool.clone()),
                    redis: None,
                },
                control_plane: ControlPlanePorts::from_pool(pool, clock),
                elector: None,
                leadership: Leadership::sole(),
                relay: None,
                pod_label: None,
            })
        }
        proxy_pool_api::config::StoreConfig::Redis(_) => {
            let fence = Fence::new();
            // The store's one pool: the ports hold it fenced, the lease and the
            // control plane use the same one.
            let Some((built, redis)) = store::build_redis_store(config, &fence).await? else {
                return Err(ComposeError::Health("not a Redis store".into()));
            };
            let (lease, pod_label) = lease_store(config, &redis, pod).await?;
            let (elector, leadership) = Elector::new(
                lease,
                crate::leadership::holder_name(pod),
                fence.clone(),
                ElectorOptions::from(&config.leadership),
            );
            let fenced = redis.fenced(fence);
            // The same Redis keyspace behind both port sets.
            Ok(BuiltStore {
                store: built,
                control_plane: ControlPlanePorts::from_pool(Arc::new(fenced.clone()), clock),
                elector: Some(elector),
                leadership,
                relay: Some(fenced),
                pod_label,
            })
        }
    }
}

/// The leader lease the config names: the Redis key, or a Kubernetes Lease in the
/// namespace of the client's context (in a pod: its own) with tokens from Redis.
async fn lease_store(
    config: &Config,
    redis: &activity_pool::RedisPool,
    pod: Option<&str>,
) -> Result<(Arc<dyn LeaseStore>, Option<PodLabel>), ComposeError> {
    use proxy_pool_api::config::LeadershipBackend;
    let LeadershipBackend::Kubernetes(k) = &config.leadership.backend else {
        return Ok((Arc::new(RedisLease::new(redis.clone())), None));
    };
    let client = kube_client(None).await.map_err(ComposeError::Leadership)?;
    let lease = KubeLease::new(
        kube::Api::default_namespaced(client.clone()),
        &k.lease_name,
        redis.clone(),
    );
    let label = if k.label_pod {
        let pod = pod.ok_or_else(|| {
            ComposeError::Leadership(
                "labelPod needs the pod's name (PROXY_POOL_POD_NAME, from the downward API)".into(),
            )
        })?;
        Some(PodLabel::new(kube::Api::default_namespaced(client), pod))
    } else {
        None
    };
    Ok((Arc::new(lease), label))
}

/// A Kubernetes API client on `config` (a kubeconfig's), else on the one inferred from
/// the environment (`KUBECONFIG`, `~/.kube/config`, then the pod's mounted
/// ServiceAccount). The error says what failed and why (never a token).
pub(super) async fn kube_client(config: Option<kube::Config>) -> Result<kube::Client, String> {
    let config = match config {
        Some(c) => c,
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("Kubernetes API access (KUBECONFIG or in-cluster): {e}"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))
}
