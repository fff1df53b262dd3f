//! Shared fixtures of the tests that run the vendor simulator into a pool
//! (`provider_sim`, `health_e2e`, `health_grpc`): the pool on memory or a real
//! redis-server, the pool IDs of vendor proxies, and proxy states read back.

#![allow(dead_code)]

/// Runs each named `async fn(redis: bool)` of the calling test file as two tests, one
/// on the memory pool (`memory::<name>`) and one on a real redis-server
/// (`redis::<name>`).
#[allow(unused_macros)]
macro_rules! on_both_pools {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(false).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(true).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both_pools;

use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{Protocol, ProxyId, ProxyState, UpstreamId};
use activity_pool::ports::ActivityPool;
use activity_pool::testkit::RedisServer;
use activity_pool::{MemoryPool, PoolOptions, RedisConnector, RedisOptions, RedisPool};
use proxy_pool_controller::provider::{
    CandidateDefaults, HttpVendorSource, ProviderMetrics, ProviderOptions, ProviderReconciler,
    VendorAuth, VendorFormat, VendorProxy, stable_id,
};
use proxy_pool_e2e::sim::Simulator;

/// A memory pool, or (`redis`) a pool on a fresh redis-server kept alive by the second
/// value.
pub async fn pool(redis: bool) -> (Arc<dyn ActivityPool>, Option<RedisServer>) {
    if !redis {
        return (Arc::new(MemoryPool::new(PoolOptions::default())), None);
    }
    let server = RedisServer::start();
    let connector = RedisConnector::direct(&server.url()).unwrap();
    let pool = RedisPool::new(connector, RedisOptions::default())
        .await
        .unwrap();
    (Arc::new(pool), Some(server))
}

/// The provider of upstream `upstream` (HTTP by default, a minute's TTL) buying from
/// the simulator's vendor API (`/v1/proxies?<query>`, JSON) into `pool`. The
/// simulator's proxies are on loopback: opted in explicitly. Its vendor API sells a new
/// proxy on every fetch and never offers one again: no proxy can come back from before
/// a data loss, so no quarantine.
pub fn sim_provider(
    sim: &Simulator,
    upstream: &UpstreamId,
    query: &str,
    pool: Arc<dyn ActivityPool>,
) -> ProviderReconciler {
    let source = sim_source(sim, query);
    let mut options =
        ProviderOptions::new(upstream.clone(), Protocol::Http, Duration::from_secs(60));
    options.defaults.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    options.quarantine = Duration::ZERO;
    ProviderReconciler::new(options, Arc::new(source), pool, ProviderMetrics::default()).unwrap()
}

/// The simulator's vendor API (`/v1/proxies?<query>`, JSON) with its API key.
pub fn sim_source(sim: &Simulator, query: &str) -> HttpVendorSource {
    let url = format!("{}/v1/proxies?{query}", sim.vendor_url());
    let auth = VendorAuth::api_key(sim.credentials().api_key.clone());
    HttpVendorSource::new(&url, VendorFormat::Json, auth).unwrap()
}

/// The pool ID the provider gives the proxy the vendor lists as `vendor_id`.
pub fn pool_id(upstream: &UpstreamId, vendor_id: &str, defaults: &CandidateDefaults) -> ProxyId {
    let v = VendorProxy {
        vendor_id: Some(vendor_id.to_owned()),
        ..VendorProxy::at("", 1)
    };
    stable_id(upstream, &v, defaults).unwrap()
}

/// The state of each of `ids` (`None`: no record).
pub async fn states(pool: &Arc<dyn ActivityPool>, ids: &[ProxyId]) -> Vec<Option<ProxyState>> {
    pool.records(ids)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.map(|r| r.state))
        .collect()
}

/// Polls the states of `ids` until `want` holds or `within` has passed; the last states.
pub async fn wait_for(
    pool: &Arc<dyn ActivityPool>,
    ids: &[ProxyId],
    within: Duration,
    want: impl Fn(&[Option<ProxyState>]) -> bool,
) -> Vec<Option<ProxyState>> {
    let until = tokio::time::Instant::now() + within;
    loop {
        let s = states(pool, ids).await;
        if want(&s) || tokio::time::Instant::now() > until {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
