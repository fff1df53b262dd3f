//! `upstreams[]`: providers of proxies, their sources and health checks, as written.

use serde::{Deserialize, Serialize};

/// One `upstreams[]` entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawUpstream {
    /// Unique name.
    pub name: String,
    /// Where the proxies come from.
    #[serde(default)]
    pub source: RawSource,
    /// `http` or `socks5`.
    #[serde(default)]
    pub protocol: Option<String>,
    /// Labels given to every proxy.
    #[serde(default)]
    pub labels: RawLabels,
    /// Hard lifetime of a proxy.
    #[serde(default)]
    pub ttl: Option<String>,
    /// `usableUntil = expiresAt - safetyMargin`.
    #[serde(default)]
    pub safety_margin: Option<String>,
    /// How long this upstream's proxies are held back after a new pool generation
    /// begins (default: `ttl`).
    #[serde(default)]
    pub quarantine: Option<String>,
    /// Most concurrent requests one proxy may carry.
    #[serde(default)]
    pub max_concurrency_per_proxy: Option<u32>,
    /// Hard limit on un-extracted inventory.
    #[serde(default)]
    pub max_size: Option<u32>,
    /// Time between two fetches.
    #[serde(default)]
    pub fetch_interval: Option<String>,
    /// Health checking of this upstream's proxies.
    #[serde(default)]
    pub health: Option<RawUpstreamHealth>,
}

/// `upstreams[].health`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawUpstreamHealth {
    /// Time between two checks of one AVAILABLE proxy.
    #[serde(default)]
    pub interval: Option<String>,
    /// Deadline of one check.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Consecutive failures that make a proxy UNHEALTHY.
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    /// Also run EGRESS checks (exit address and anonymity).
    #[serde(default)]
    pub egress: Option<bool>,
    /// URLs probed by TARGET checks.
    #[serde(default)]
    pub targets: Vec<String>,
}

/// `upstreams[].source`: exactly one of `static` or `vendorApi`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawSource {
    /// A fixed list of proxies.
    #[serde(default, rename = "static")]
    pub static_list: Option<RawStaticSource>,
    /// A vendor HTTP API.
    #[serde(default)]
    pub vendor_api: Option<RawVendorApi>,
}

/// `upstreams[].source.static`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawStaticSource {
    /// `host:port` entries.
    pub proxies: Vec<String>,
    /// Credentials used for every listed proxy.
    #[serde(default)]
    pub credentials: Option<RawProxyCredentials>,
    /// Mark upserted proxies AVAILABLE right away (no checker needed). Default `true`.
    #[serde(default)]
    pub assume_healthy: Option<bool>,
}

/// Credentials of upstream proxies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawProxyCredentials {
    /// Username (empty when `usernameFile` is given).
    #[serde(default)]
    pub username: String,
    /// File holding the username (a mounted Secret key): read by
    /// [`crate::config::load_yaml_with_files`] when the controller loads its config.
    #[serde(default)]
    pub username_file: Option<String>,
    /// Inline password (local runs only; prefer `passwordFile`).
    #[serde(default)]
    pub password: Option<String>,
    /// File holding the password (a mounted Secret key).
    #[serde(default)]
    pub password_file: Option<String>,
}

/// `upstreams[].source.vendorApi`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawVendorApi {
    /// URL fetched with GET.
    pub url: String,
    /// `json` or `lines`.
    pub format: String,
    /// File with the vendor API key (sent as a bearer token).
    #[serde(default)]
    pub api_key_file: Option<String>,
    /// Credentials of the vendor's proxies.
    #[serde(default)]
    pub credentials: Option<RawProxyCredentials>,
    /// Deadline of one vendor call.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Most vendor calls per minute.
    #[serde(default)]
    pub max_requests_per_minute: Option<u32>,
    /// Most proxies asked for in one call (unset: what the vendor returns, up to
    /// `maxSize`).
    #[serde(default)]
    pub max_proxies_per_fetch: Option<u32>,
}

/// Region / carrier / city labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLabels {
    /// Region (also the country), e.g. `shanghai`.
    #[serde(default)]
    pub region: Option<String>,
    /// Carrier, e.g. `telecom`.
    #[serde(default)]
    pub carrier: Option<String>,
    /// City, e.g. `pudong`.
    #[serde(default)]
    pub city: Option<String>,
}
