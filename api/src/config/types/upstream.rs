//! `upstreams[]`, validated: providers of proxies, their sources and health checks.

use std::fmt;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::proxy::Protocol;

/// One provider.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamConfig {
    /// Unique name (a valid pool upstream ID).
    pub name: String,
    /// Source.
    pub source: SourceConfig,
    /// Protocol.
    pub protocol: Protocol,
    /// Region label.
    pub region: Option<String>,
    /// Carrier label.
    pub carrier: Option<String>,
    /// City label.
    pub city: Option<String>,
    /// Hard lifetime.
    pub ttl: Duration,
    /// Safety margin (< ttl).
    pub safety_margin: Duration,
    /// How long after a new pool generation begins (first install, or a store that
    /// lost its data) this upstream's proxies are held back: neither extracted nor
    /// assigned to gateways (`docs/pool.md`, "Pool generations"). Default `ttl`; at
    /// most `pool.maxTtl`; `0s` turns the hold-back off.
    pub quarantine: Duration,
    /// Per-proxy capacity.
    pub max_concurrency_per_proxy: u32,
    /// Hard limit on un-extracted inventory.
    pub max_size: NonZeroU32,
    /// Time between fetches.
    pub fetch_interval: Duration,
    /// Health checking of its proxies.
    pub health: UpstreamHealthConfig,
}

/// Health checking of one upstream's proxies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamHealthConfig {
    /// Time between two checks of one AVAILABLE proxy.
    pub interval: Duration,
    /// Deadline of one check (≤ `interval`).
    pub timeout: Duration,
    /// Consecutive failures that make a proxy UNHEALTHY (1–20).
    pub failure_threshold: NonZeroU32,
    /// Also run EGRESS checks.
    pub egress: bool,
    /// TARGET check URLs (http/https, at most 16).
    pub targets: Vec<String>,
}

impl Default for UpstreamHealthConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(5),
            failure_threshold: NonZeroU32::MIN.saturating_add(1),
            egress: false,
            targets: Vec::new(),
        }
    }
}

/// Where an upstream's proxies come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceConfig {
    /// A fixed list.
    Static(StaticSourceConfig),
    /// A vendor API (fetched by the provider reconciler).
    VendorApi(VendorApiConfig),
}

/// A fixed list of proxies.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticSourceConfig {
    /// Endpoints.
    pub proxies: Vec<StaticProxy>,
    /// Credentials of every listed proxy.
    pub credentials: Option<ProxyCredentials>,
    /// Mark upserted proxies AVAILABLE right away.
    pub assume_healthy: bool,
}

/// One listed endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticProxy {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Credentials of upstream proxies.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyCredentials {
    /// Username.
    pub username: String,
    /// Where the password is.
    pub password: PasswordSource,
}

impl fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyCredentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// A password inline or in a file.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// Inline (local runs).
    Inline(String),
    /// A file read at start-up.
    File(PathBuf),
}

impl fmt::Debug for PasswordSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inline(_) => f.write_str("Inline(***)"),
            Self::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

/// A vendor API source.
#[derive(Clone, Debug, PartialEq)]
pub struct VendorApiConfig {
    /// URL.
    pub url: String,
    /// `json` or `lines`.
    pub format: VendorFormat,
    /// File with the API key.
    pub api_key_file: Option<PathBuf>,
    /// Credentials of the vendor's proxies.
    pub credentials: Option<ProxyCredentials>,
    /// Deadline of one call.
    pub timeout: Duration,
    /// Most calls per minute.
    pub max_requests_per_minute: u32,
    /// Most proxies taken from one call (`None`: as many as the vendor returns).
    pub max_proxies_per_fetch: Option<NonZeroU32>,
}

/// Response body formats a vendor API may use; the wire names are `json` and `lines`
/// (serde and [`VendorFormat::as_str`] spell them the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum VendorFormat {
    /// A JSON array of proxy objects.
    Json,
    /// One `host:port` (or `host:port:user:pass`) per line.
    Lines,
}

impl VendorFormat {
    /// Every format, in the order the docs list them.
    pub const ALL: [VendorFormat; 2] = [VendorFormat::Json, VendorFormat::Lines];

    /// The wire name: `json` or `lines`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Lines => "lines",
        }
    }

    /// Inverse of [`VendorFormat::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }
}
