//! `Upstream`: one vendor (or a fixed list) of short-lived proxies, and how the
//! controller fetches, sizes and health-checks its inventory.
//!
//! Wire format only: no Secret values ever appear here, only references to them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use proxy_pool_api::config::VendorFormat;
use proxy_pool_api::proxy::Protocol;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    DURATION_MAX_LEN, DURATION_PATTERN, LABEL_VALUE_PATTERN, ObservedConditions, SecretRef,
};

custom_resource! {
    #[kube(
        kind = "Upstream",
        doc = "A provider of short-lived proxies: where they come from, their lifetime, capacity and health checks.",
        status = "UpstreamStatus",
        shortname = "ups",
        printcolumn(name = "Protocol", type_ = "string", json_path = ".spec.protocol"),
        printcolumn(name = "Region", type_ = "string", json_path = ".spec.labels.region"),
        printcolumn(
            name = "Managed",
            type_ = "integer",
            description = "Proxies in the pool that are not extracted, expired or removed",
            json_path = ".status.inventory.managed"
        ),
        printcolumn(
            name = "Available",
            type_ = "integer",
            description = "Healthy, unowned proxies that can be handed out now",
            json_path = ".status.inventory.available"
        )
    )]
    /// A provider of short-lived proxies.
    #[derive(KubeSchema)]
    #[x_kube(validation = Rule::new("duration(self.safetyMargin) < duration(self.ttl)")
        .message("safetyMargin must be shorter than ttl")
        .reason(Reason::FieldValueInvalid)
        .field_path(".safetyMargin"))]
    #[serde(rename_all = "camelCase")]
    pub struct UpstreamSpec {
        /// Where the proxies come from.
        pub source: UpstreamSource,
        /// Protocol the vendor's proxies speak.
        pub protocol: Protocol,
        /// Labels given to every proxy of this upstream (a vendor record may override them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub labels: Option<UpstreamLabels>,
        /// Hard lifetime of a fetched proxy when the vendor does not report its expiry.
        #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
        pub ttl: String,
        /// How long this upstream's proxies are held back (neither extracted nor assigned
        /// to gateways) after a new pool generation begins: first install, or a Redis
        /// that lost its data. Default: `ttl`; `0s` turns it off (a vendor that never
        /// offers the same proxy twice).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
        pub quarantine: Option<String>,
        /// A proxy stops being handed out this long before it expires
        /// (`usableUntil = expiresAt - safetyMargin`). Must be shorter than `ttl`.
        #[serde(default = "default_safety_margin")]
        #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
        pub safety_margin: String,
        /// Most concurrent requests or tunnels one vendor proxy may carry.
        #[serde(default = "default_max_concurrency")]
        #[schemars(range(min = 1, max = 100_000))]
        #[schemars(extend("format" = "int32"))]
        pub max_concurrency_per_proxy: u32,
        /// Hard limit on this upstream's un-extracted inventory.
        #[schemars(range(min = 1, max = 1_000_000))]
        #[schemars(extend("format" = "int32"))]
        pub max_size: u32,
        /// Time between two fetches from the source.
        #[serde(default = "default_fetch_interval")]
        #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
        pub fetch_interval: String,
        /// Limits on what one fetch may cost the vendor account.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub fetch_budget: Option<FetchBudget>,
        /// Health checking of this upstream's proxies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub health: Option<HealthSettings>,
    }
}

/// Exactly one of `vendorApi` or `static`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("has(self.vendorApi) != has(self.static)")
    .message("source needs exactly one of vendorApi or static"))]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSource {
    /// Fetch proxies from a vendor's HTTP API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_api: Option<VendorApiSource>,
    /// A fixed list of proxies (refreshed every `fetchInterval` with a new `ttl`).
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_list: Option<StaticSource>,
}

/// A vendor's HTTP API that returns proxies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VendorApiSource {
    /// The URL fetched with GET.
    #[schemars(length(min = 8, max = 2048), pattern(r"^https?://[^\s]+$"))]
    pub url: String,
    /// How the response body lists proxies.
    pub format: VendorFormat,
    /// Secret with the vendor account's credentials: key `apiKey` (sent as a bearer
    /// token) and/or keys `username` + `password` (used to authenticate to the proxies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,
}

/// A fixed list of proxies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticSource {
    /// `host:port` entries.
    #[schemars(
        length(min = 1, max = 10_000),
        inner(length(max = 261), pattern(r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$"))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub proxies: Vec<String>,
    /// Secret with keys `username` and `password` used for every listed proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,
}

/// Labels that routing and extraction filter on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamLabels {
    /// Region of the proxies' exit addresses, e.g. `shanghai` (also the country a
    /// username's `country` parameter selects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(LABEL_VALUE_PATTERN))]
    pub region: Option<String>,
    /// Carrier (ISP) of the exit addresses, e.g. `telecom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(LABEL_VALUE_PATTERN))]
    pub carrier: Option<String>,
    /// City of the exit addresses, e.g. `pudong` (a vendor that names one per proxy
    /// overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(LABEL_VALUE_PATTERN))]
    pub city: Option<String>,
}

/// Limits on fetching from the vendor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchBudget {
    /// Most vendor API calls per minute, retries included.
    #[serde(default = "default_requests_per_minute")]
    #[schemars(range(min = 1, max = 600))]
    #[schemars(extend("format" = "int32"))]
    pub max_requests_per_minute: u32,
    /// Most proxies asked for in one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100_000))]
    #[schemars(extend("format" = "int32"))]
    pub max_proxies_per_fetch: Option<u32>,
    /// Deadline of one vendor API call.
    #[serde(default = "default_fetch_timeout")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub timeout: String,
}

/// Health checking of an upstream's proxies by the checkers.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("duration(self.timeout) <= duration(self.interval)")
    .message("health.timeout must not be longer than health.interval"))]
#[serde(rename_all = "camelCase")]
pub struct HealthSettings {
    /// Time between two BASIC checks of one proxy.
    #[serde(default = "default_health_interval")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub interval: String,
    /// Deadline of one check.
    #[serde(default = "default_health_timeout")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub timeout: String,
    /// Consecutive failures that make a proxy UNHEALTHY.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1, max = 20))]
    #[schemars(extend("format" = "int32"))]
    pub failure_threshold: u32,
    /// Also run EGRESS checks (exit address and anonymity).
    #[serde(default)]
    pub egress: bool,
    /// URLs probed by TARGET checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(max = 2048), pattern(r"^https?://[^\s]+$"))
    )]
    pub targets: Vec<String>,
}

/// What the controller last reported about an upstream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamStatus {
    /// Generation and conditions.
    #[serde(flatten)]
    pub observed: ObservedConditions,
    /// Inventory counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<UpstreamInventory>,
    /// When the source was last fetched successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetch_time: Option<Time>,
}

impl AsRef<ObservedConditions> for UpstreamStatus {
    fn as_ref(&self) -> &ObservedConditions {
        &self.observed
    }
}

/// Inventory of one upstream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamInventory {
    /// Proxies FETCHED, CHECKING, AVAILABLE, SUSPECT or DRAINING.
    pub managed: i64,
    /// AVAILABLE proxies with no owner, before their `usableUntil`.
    pub available: i64,
    /// Free request slots: max concurrency minus active and reserved, over available proxies.
    pub available_slots: i64,
    /// While set, a new pool generation (first install, or a Redis that lost its data)
    /// holds this upstream's proxies back — neither extractable nor assignable — until
    /// then (`spec.quarantine`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined_until: Option<Time>,
}

fn default_safety_margin() -> String {
    "5s".to_owned()
}
fn default_max_concurrency() -> u32 {
    1
}
fn default_fetch_interval() -> String {
    "10s".to_owned()
}
fn default_requests_per_minute() -> u32 {
    60
}
fn default_fetch_timeout() -> String {
    "10s".to_owned()
}
fn default_health_interval() -> String {
    "15s".to_owned()
}
fn default_health_timeout() -> String {
    "5s".to_owned()
}
fn default_failure_threshold() -> u32 {
    2
}
