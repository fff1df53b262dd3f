//! Builds the activity pool the config names (memory or Redis) and hands out its
//! ports. Reads referenced secret files here, at the edge.

use std::path::Path;
use std::sync::Arc;

use activity_pool::model::Secret;
use activity_pool::ports::{
    ActivityPool, ExtractionStore, HealthStore, InventoryReader, Maintenance, Upserter,
};
use activity_pool::{
    Fence, MemoryPool, PoolError, PoolOptions, RedisConnector, RedisOptions, RedisPool,
};
use proxy_pool_api::config::{
    Config, PasswordSource, PoolConfig, RedisConfig, RedisTarget, StoreConfig,
};

use crate::redis_link::{LinkError, RedisLink};

/// Why the controller could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A referenced secret file could not be read (its content is never shown).
    #[error("cannot read secret file {path}: {reason}")]
    SecretFile {
        /// The file.
        path: String,
        /// The I/O error kind.
        reason: String,
    },
    /// The pool could not be built or reached.
    #[error("activity pool: {0}")]
    Pool(#[from] PoolError),
    /// The controller's Redis link.
    #[error("redis: {0}")]
    Redis(#[from] LinkError),
    /// Redis may evict keys under memory pressure: pool keys would vanish (an
    /// extracted proxy handed out again, an owner forgotten). Refused at start.
    #[error(
        "redis maxmemory-policy is `{0}`: the activity pool needs `noeviction` (keys evicted \
         under memory pressure would break exclusivity); set `maxmemory-policy noeviction`"
    )]
    EvictionPolicy(String),
    /// The eviction policy could not be read (`INFO memory`).
    #[error(
        "cannot read redis maxmemory-policy (INFO memory): the controller starts only on a \
         Redis that never evicts; allow INFO to its ACL user"
    )]
    EvictionPolicyUnknown,
    /// A static upstream does not fit the pool's rules.
    #[error("{0}")]
    Static(#[from] crate::static_upstreams::StaticError),
}

/// The pool ports the controller uses.
#[derive(Clone)]
pub struct Ports {
    /// Distribution API.
    pub extraction: Arc<dyn ExtractionStore>,
    /// Admin inventory.
    pub inventory: Arc<dyn InventoryReader>,
    /// Static upstreams.
    pub upserter: Arc<dyn Upserter>,
    /// Static upstreams (assumed health).
    pub health: Arc<dyn HealthStore>,
    /// Maintenance loop.
    pub maintenance: Arc<dyn Maintenance>,
}

impl std::fmt::Debug for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ports").finish_non_exhaustive()
    }
}

impl Ports {
    /// Every port from one full pool.
    pub fn from_pool<P: ActivityPool + 'static>(pool: P) -> Self {
        Self::from_shared(Arc::new(pool))
    }

    /// Every port from one full pool shared with other users.
    pub fn from_shared<P: ActivityPool + 'static>(pool: Arc<P>) -> Self {
        Self {
            extraction: pool.clone(),
            inventory: pool.clone(),
            upserter: pool.clone(),
            health: pool.clone(),
            maintenance: pool,
        }
    }
}

/// A built store: its ports and, with Redis, the controller's own link.
#[derive(Debug)]
pub struct Store {
    /// Pool ports.
    pub ports: Ports,
    /// Rate limiter / readiness link (`None`: memory store).
    pub redis: Option<Arc<RedisLink>>,
}

/// Reads a secret file, trimming one trailing newline.
pub fn read_secret(path: &Path) -> Result<String, BuildError> {
    let text = std::fs::read_to_string(path).map_err(|e| BuildError::SecretFile {
        path: path.display().to_string(),
        reason: e.kind().to_string(),
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// Resolves a password source.
pub fn resolve_password(p: &PasswordSource) -> Result<String, BuildError> {
    match p {
        PasswordSource::Inline(s) => Ok(s.clone()),
        PasswordSource::File(path) => read_secret(path),
    }
}

/// Pool options from the config.
pub fn pool_options(p: &PoolConfig) -> PoolOptions {
    PoolOptions {
        extract_scan_budget: p.extract_scan_budget,
        inventory_scan_budget: p.inventory_scan_budget,
        opportunistic_purge: p.opportunistic_purge,
        max_ttl: p.max_ttl,
        ..PoolOptions::default()
    }
}

/// Builds the store the config names; connects to Redis.
pub async fn build(config: &Config) -> Result<Store, BuildError> {
    build_fenced(config, None).await
}

/// [`build`], with the Redis pool's leader-only writes fenced by `fence`
/// (`activity_pool::RedisPool::fenced`; the memory store has nothing to fence).
pub async fn build_fenced(config: &Config, fence: Option<&Fence>) -> Result<Store, BuildError> {
    let options = pool_options(&config.pool);
    match &config.store {
        StoreConfig::Memory => Ok(Store {
            ports: Ports::from_pool(MemoryPool::new(options)),
            redis: None,
        }),
        StoreConfig::Redis(r) => Ok(build_redis(r, options, fence).await?.0),
    }
}

/// [`build_fenced`] for a Redis store, also returning the store's one [`RedisPool`],
/// unfenced: the ports hold it fenced by `fence`, and the control plane and the leader
/// lease use this same pool (one connection, one key book), never a second one.
/// `Ok(None)` for the memory store.
pub async fn build_redis_store(
    config: &Config,
    fence: &Fence,
) -> Result<Option<(Store, RedisPool)>, BuildError> {
    match &config.store {
        StoreConfig::Memory => Ok(None),
        StoreConfig::Redis(r) => Ok(Some(
            build_redis(r, pool_options(&config.pool), Some(fence)).await?,
        )),
    }
}

/// The connector for the configured Redis: direct or Sentinel, the password and ACL
/// user (of the master and of the sentinels), TLS with the configured trust bundle.
/// The one way the controller reaches Redis (pool, link, analytics, cache).
pub fn connector(r: &RedisConfig) -> Result<RedisConnector, BuildError> {
    let mut connector = match &r.target {
        RedisTarget::Address(url) => RedisConnector::direct(url)?,
        RedisTarget::Sentinel {
            master_name,
            addresses,
            username,
            password_file,
        } => {
            let password = password_file.as_deref().map(read_secret).transpose()?;
            RedisConnector::sentinel(master_name, addresses.clone())?
                .with_sentinel_auth(username.clone(), password.map(Secret::new))
        }
    };
    if let Some(p) = r.password_file.as_deref().map(read_secret).transpose()? {
        connector = connector.with_password(Secret::new(p));
    }
    if let Some(u) = &r.username {
        connector = connector.with_username(u.clone());
    }
    if let Some(tls) = &r.tls {
        let ca = match &tls.ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| BuildError::SecretFile {
                path: path.display().to_string(),
                reason: e.kind().to_string(),
            })?),
            None => None,
        };
        connector = connector.with_tls(ca);
    }
    Ok(connector)
}

async fn build_redis(
    r: &RedisConfig,
    options: PoolOptions,
    fence: Option<&Fence>,
) -> Result<(Store, RedisPool), BuildError> {
    let connector = connector(r)?;
    let link = RedisLink::new(connector.clone(), r.command_timeout);
    // Fail closed on a Redis that may evict pool keys.
    match link.eviction_policy().await {
        Ok(policy) if policy == "noeviction" => {}
        Ok(policy) => return Err(BuildError::EvictionPolicy(policy)),
        Err(_) => return Err(BuildError::EvictionPolicyUnknown),
    }
    let pool = RedisPool::new(
        connector,
        RedisOptions {
            pool: options,
            command_timeout: r.command_timeout,
            clock_override: None,
        },
    )
    .await?;
    let ports = match fence {
        Some(f) => pool.fenced(f.clone()),
        None => pool.clone(),
    };
    Ok((
        Store {
            ports: Ports::from_pool(ports),
            redis: Some(Arc::new(link)),
        },
        pool,
    ))
}
