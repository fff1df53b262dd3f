//! ServiceAccount Distribution clients: when a `bearer` method has `tokenReview`, the
//! controller reviews bearer tokens with the Kubernetes API server
//! ([`KubeTokenReviewer`]) through the `proxy-pool-cache` read-through cache (namespace
//! `token_review`, `cache.namespaces.tokenReview`) on the store's Redis, and maps the
//! reviewed user `system:serviceaccount:<ns>:<name>` to the client listing `ns/name`
//! in `clients[].serviceAccounts` — on every request. Configured `bearerTokens` hashes
//! are checked first and never reviewed.
//!
//! API access: `tokenReview.kubeconfigFile` when set, else `kube::Config::infer`
//! (`KUBECONFIG`, `~/.kube/config`, then the pod's mounted ServiceAccount). Without a
//! `cache` section every request is reviewed (correct, slower). The cache counters are
//! registered in the controller registry (`proxy_pool_controller_cache_*{cache="token_review"}`).

use std::collections::HashMap;
use std::sync::Arc;

use proxy_pool_api::config::{
    CacheConfig, Config, StoreConfig, TokenReviewConfig, service_account_user,
};
use proxy_pool_cache::{
    CacheMetricsCollector, CacheStore, MAX_BATCH, Namespace, NamespaceMetrics, RedisStore,
};

use super::ComposeError;
use crate::distribution::{
    BearerVerifier, KubeTokenReviewer, StaticBearerVerifier, TokenReviewBearerVerifier,
};
use crate::metrics::Metrics;

/// The cache namespace (Redis keys `<keyPrefix>:cache:v1:token_review:…`, metrics label).
pub const NAMESPACE: &str = "token_review";

/// The reviewing bearer verifier and its cache counters.
#[derive(Debug)]
pub struct Bearer {
    /// Static hashes first, then TokenReview.
    pub verifier: Arc<dyn BearerVerifier>,
    /// The `token_review` namespace counters (also registered in the registry).
    pub cache_metrics: Arc<NamespaceMetrics>,
}

/// Builds the TokenReview verifier when a `bearer` method has `tokenReview` (`None`
/// otherwise), with the cache when `cache` is enabled, and registers its metrics.
pub async fn prepare(config: &Config, metrics: &Metrics) -> Result<Option<Bearer>, ComposeError> {
    let Some(review) = config
        .distribution
        .auth
        .methods
        .iter()
        .find_map(|m| m.token_review.as_ref())
    else {
        return Ok(None);
    };
    let client = kube_client(review).await?;
    let mut users = HashMap::new();
    for (i, c) in config.clients.iter().enumerate() {
        for sa in &c.service_accounts {
            let user = service_account_user(sa).ok_or_else(|| {
                ComposeError::TokenReview(format!("clients[{i}].serviceAccounts: `{sa}`"))
            })?;
            users.insert(user, i);
        }
    }
    let (ns, prefix, store) = match (&config.cache, &config.store) {
        (Some(cache), StoreConfig::Redis(redis)) => {
            // Re-connects after a transport error (a restarted Redis, a Sentinel
            // failover).
            let conn = super::usage::redis_conn(redis)?;
            let store: Arc<dyn CacheStore> = Arc::new(RedisStore::new(conn));
            (namespace(cache), cache.key_prefix.clone(), Some(store))
        }
        _ => (Namespace::new(NAMESPACE), String::new(), None),
    };
    let cached = store.is_some();
    let verifier = TokenReviewBearerVerifier::new(
        review.audience.clone(),
        Arc::new(KubeTokenReviewer::new(client)),
        ns,
        &prefix,
        store,
        users,
    )
    .with_static_tokens(StaticBearerVerifier::new(&config.clients));
    let cache_metrics = verifier.cache_metrics();
    let collector = CacheMetricsCollector::default();
    collector.add(NAMESPACE, cache_metrics.clone());
    metrics.register_with(|r| r.register_collector(Box::new(collector)));
    tracing::info!(
        audience = %review.audience,
        cached,
        "bearer tokens reviewed by Kubernetes (TokenReview)"
    );
    Ok(Some(Bearer {
        verifier: Arc::new(verifier),
        cache_metrics,
    }))
}

/// The API client: the named kubeconfig, else inferred from the environment.
async fn kube_client(review: &TokenReviewConfig) -> Result<kube::Client, ComposeError> {
    let err =
        |what: &str, e: &dyn std::fmt::Display| ComposeError::TokenReview(format!("{what}: {e}"));
    let config = match &review.kubeconfig_file {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                err(
                    &format!("tokenReview.kubeconfigFile {}", path.display()),
                    &e,
                )
            })?;
            let options = kube::config::KubeConfigOptions::default();
            Some(
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| err("tokenReview.kubeconfigFile", &e))?,
            )
        }
        None => None,
    };
    super::store::kube_client(config)
        .await
        .map_err(ComposeError::TokenReview)
}

/// The `tokenReview` namespace settings with the section's shared ones.
fn namespace(cache: &CacheConfig) -> Namespace {
    let t = &cache.token_review;
    Namespace {
        name: NAMESPACE.to_owned(),
        ttl: t.ttl,
        jitter_percent: t.jitter_percent,
        negative_ttl: None,
        max_entry_bytes: t.max_entry_bytes as usize,
        batch_size: (cache.batch_size as usize).clamp(1, MAX_BATCH),
        loader_timeout: cache.loader_timeout,
        loader_concurrency: (cache.loader_concurrency as usize).max(1),
        redis_timeout: cache.redis_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_api::config::load_yaml;
    use std::time::Duration;

    const REDIS: &str = "store: {backend: redis, redis: {address: \"redis://127.0.0.1:1/0\"}}\n";

    #[test]
    fn the_namespace_takes_the_section_settings() {
        let c = load_yaml(&format!(
            "{REDIS}cache: {{enabled: true, batchSize: 7, loaderConcurrency: 3, redisTimeout: 50ms, namespaces: {{tokenReview: {{ttl: 30s, jitterPercent: 5}}}}}}\n"
        ))
        .unwrap_or_else(|e| panic!("{e:?}"));
        let ns = namespace(c.cache.as_ref().unwrap_or_else(|| panic!("cache on")));
        assert_eq!(ns.name, "token_review");
        assert_eq!(ns.ttl, Duration::from_secs(30));
        assert_eq!(ns.jitter_percent, 5);
        assert_eq!(ns.negative_ttl, None);
        assert_eq!(ns.batch_size, 7);
        assert_eq!(ns.loader_concurrency, 3);
        assert_eq!(ns.redis_timeout, Duration::from_millis(50));
    }

    #[tokio::test]
    async fn nothing_without_token_review_and_a_bad_kubeconfig_names_the_field() {
        let metrics = Metrics::new();
        let c = load_yaml("{}").unwrap_or_else(|e| panic!("{e:?}"));
        assert!(matches!(prepare(&c, &metrics).await, Ok(None)));
        let c = load_yaml(
            "distribution: {auth: {methods: [{type: bearer, tokenReview: {audience: a, kubeconfigFile: /nonexistent/kubeconfig}}]}}\nclients: [{name: a, serviceAccounts: [ns/a]}]\n",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        match prepare(&c, &metrics).await {
            Err(ComposeError::TokenReview(m)) => {
                assert!(m.contains("tokenReview.kubeconfigFile"), "{m}");
            }
            other => panic!("expected a tokenReview error, got {other:?}"),
        }
    }
}
