//! `store` and `pool`: where the activity pool lives and its tunables, as written.

use serde::{Deserialize, Serialize};

/// `store`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawStore {
    /// `memory` (default) or `redis`.
    #[serde(default)]
    pub backend: Option<String>,
    /// Redis connection; required when `backend: redis`.
    #[serde(default)]
    pub redis: Option<RawRedis>,
}

/// `store.redis`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRedis {
    /// `redis://host:port/[db]` of a single Redis.
    #[serde(default)]
    pub address: Option<String>,
    /// A Sentinel-monitored master instead of `address`.
    #[serde(default)]
    pub sentinel: Option<RawSentinel>,
    /// ACL user name.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the password (a mounted Secret key).
    #[serde(default)]
    pub password_file: Option<String>,
    /// Bound on one Redis round trip, e.g. `500ms`.
    #[serde(default)]
    pub command_timeout: Option<String>,
    /// TLS settings (`rediss://` addresses, or `sentinel.tls`).
    #[serde(default)]
    pub tls: Option<RawRedisTls>,
}

/// `store.redis.tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRedisTls {
    /// PEM trust bundle the server certificates are verified against (default: the
    /// system's roots).
    #[serde(default)]
    pub ca_file: Option<String>,
}

/// `store.redis.sentinel`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawSentinel {
    /// The master's name in the sentinels' configuration.
    pub master_name: String,
    /// `host:port` of each sentinel.
    pub addresses: Vec<String>,
    /// ACL user name on the sentinels.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the sentinels' password (a mounted Secret key).
    #[serde(default)]
    pub password_file: Option<String>,
    /// Talk TLS to the sentinels and to the master they name.
    #[serde(default)]
    pub tls: bool,
}

/// `pool`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawPool {
    /// Index members one extraction may examine.
    #[serde(default)]
    pub extract_scan_budget: Option<u32>,
    /// Index members one inventory read may examine.
    #[serde(default)]
    pub inventory_scan_budget: Option<u32>,
    /// Expired records each write purges on the side.
    #[serde(default)]
    pub opportunistic_purge: Option<u32>,
    /// Longest vendor TTL accepted.
    #[serde(default)]
    pub max_ttl: Option<String>,
    /// Time between two maintenance passes.
    #[serde(default)]
    pub maintenance_interval: Option<String>,
    /// Records one maintenance pass purges at most.
    #[serde(default)]
    pub maintenance_batch: Option<u32>,
}
