//! `store` and `pool`, validated: where the activity pool lives and its tunables.

use std::path::PathBuf;
use std::time::Duration;

/// The pool's backing store.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreConfig {
    /// The embedded in-memory pool (one controller replica only).
    Memory,
    /// Redis (production).
    Redis(RedisConfig),
}

/// How to reach Redis.
#[derive(Clone, Debug, PartialEq)]
pub struct RedisConfig {
    /// Direct or through sentinels.
    pub target: RedisTarget,
    /// ACL user.
    pub username: Option<String>,
    /// File holding the password; read when the store is built.
    pub password_file: Option<PathBuf>,
    /// Bound on one round trip.
    pub command_timeout: Duration,
    /// TLS to the master (and sentinels); `None`: plaintext.
    pub tls: Option<RedisTls>,
}

/// TLS to Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM trust bundle (`None`: the system's roots).
    pub ca_file: Option<PathBuf>,
}

/// Where the Redis master is.
#[derive(Clone, Debug, PartialEq)]
pub enum RedisTarget {
    /// `redis://host:port/[db]`.
    Address(String),
    /// A Sentinel-monitored master.
    Sentinel {
        /// Master name.
        master_name: String,
        /// `host:port` of each sentinel.
        addresses: Vec<String>,
        /// ACL user on the sentinels.
        username: Option<String>,
        /// File holding the sentinels' password; read when the store is built.
        password_file: Option<PathBuf>,
    },
}

/// Activity pool tunables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Index members one extraction may examine.
    pub extract_scan_budget: u32,
    /// Index members one inventory read may examine.
    pub inventory_scan_budget: u32,
    /// Expired records each write purges on the side.
    pub opportunistic_purge: u32,
    /// Longest vendor TTL accepted.
    pub max_ttl: Duration,
    /// Time between two maintenance passes.
    pub maintenance_interval: Duration,
    /// Records one maintenance pass purges at most.
    pub maintenance_batch: u32,
}
