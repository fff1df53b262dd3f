//! `Routing`: which gateway traffic it matches, which proxies may carry it, how one
//! is picked, and the gateway Deployment that serves it.
//!
//! Wire format only; the operator turns it into controller config and workloads.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::KubeSchema;
use proxy_pool_api::proxy::{Dimension, Strategy};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    DURATION_MAX_LEN, DURATION_PATTERN, LABEL_VALUE_PATTERN, MAX_FILTER_VALUES, NAME_PATTERN,
    ObservedConditions,
};

/// A GatewayGroup's name as a Routing names it: a DNS-1123 label (its gateway
/// objects are named after it).
pub const GROUP_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

custom_resource! {
    #[kube(
        kind = "Routing",
        doc = "Gateway routing rules and the gateway Deployment + Service that serve them.",
        status = "RoutingStatus",
        shortname = "rtg",
        printcolumn(name = "Strategy", type_ = "string", json_path = ".spec.strategy"),
        printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
        printcolumn(
            name = "Gateway Group",
            type_ = "string",
            json_path = ".status.gatewayGroup"
        ),
        printcolumn(
            name = "Ready Replicas",
            type_ = "integer",
            json_path = ".status.readyReplicas"
        )
    )]
    /// Gateway routing rules and the gateway fleet serving them.
    #[derive(KubeSchema)]
    #[x_kube(validation = Rule::new("!(has(self.gateway) && has(self.gatewayGroup))")
        .message("spec.gateway (deprecated) and spec.gatewayGroup are mutually exclusive: name a GatewayGroup and drop the inline gateway"))]
    #[x_kube(validation = Rule::new("has(self.gateway) || has(self.gatewayGroup)")
        .message("spec.gatewayGroup (or the deprecated spec.gateway) is required"))]
    #[serde(rename_all = "camelCase")]
    pub struct RoutingSpec {
        /// Routings are tried from the highest priority down (ties by name); the first
        /// whose `match` fits a request wins.
        #[serde(default)]
        #[schemars(range(min = -1000, max = 1000))]
        pub priority: i32,
        /// Which requests this routing takes. Absent: every request.
        #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
        pub match_: Option<RoutingMatch>,
        /// Names of the Upstreams whose proxies may carry the traffic. Empty: any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(
            length(max = MAX_FILTER_VALUES),
            inner(length(max = 253), pattern(NAME_PATTERN))
        )]
        #[schemars(extend("x-kubernetes-list-type" = "set"))]
        pub upstreams: Vec<String>,
        /// Label filters on the proxies. OR within a dimension, AND across.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub labels: Option<LabelFilter>,
        /// How a proxy is chosen among the candidates.
        #[serde(default)]
        pub strategy: Strategy,
        /// Username parameters that select proxies, each with the dimension it selects
        /// by: `region`, `city`, `carrier`, `upstream` or `protocol` (e.g.
        /// `country: region`). Absent: `country` and `region` select the region,
        /// `city` the city, `carrier` the carrier; `{}`: none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(extend("maxProperties" = 16))]
        pub selectors: Option<BTreeMap<String, Dimension>>,
        /// Keep a client session on one proxy while it stays usable.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub sticky_session: Option<StickySession>,
        /// Retries on DIAL and PROXY_HANDSHAKE failures.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub retry: Option<RetryBudget>,
        /// Target ports CONNECT tunnels may reach: `"443"` or a range `"8000-8999"`.
        /// Empty: 443 and 80.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(
            length(max = 64),
            inner(length(max = 11), pattern(r"^[0-9]{1,5}(-[0-9]{1,5})?$"))
        )]
        pub connect_ports: Vec<String>,
        /// The GatewayGroup (same namespace) whose gateways serve this routing, with
        /// every other Routing naming it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(min = 1, max = 63), pattern(GROUP_NAME_PATTERN))]
        pub gateway_group: Option<String>,
        /// Deprecated: a gateway Deployment and Service of this routing alone (an
        /// implicit gateway group named after it). Use `gatewayGroup`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gateway: Option<GatewaySpec>,
    }
}

/// Conditions on a request; all given conditions must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingMatch {
    /// Names of the DistributionClients (with `gateway:connect`) whose traffic matches.
    /// Empty: any authenticated client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_FILTER_VALUES),
        inner(length(max = 253), pattern(NAME_PATTERN))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub clients: Vec<String>,
    /// Parameters carried in the proxy username (`user-region-shanghai-session-abc`),
    /// each of which must equal the given value, e.g. `region: shanghai`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub username_params: BTreeMap<String, String>,
    /// Target hosts: exact names or `*.suffix` wildcards. Empty: any target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(
            length(max = 255),
            pattern(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
        )
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub target_hosts: Vec<String>,
}

/// Label filters; each list is OR, the lists are AND. Empty lists match anything.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelFilter {
    /// Allowed regions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_FILTER_VALUES),
        inner(length(max = 63), pattern(LABEL_VALUE_PATTERN))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub regions: Vec<String>,
    /// Allowed carriers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_FILTER_VALUES),
        inner(length(max = 63), pattern(LABEL_VALUE_PATTERN))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub carriers: Vec<String>,
    /// Allowed cities (inside the regions, which also serve as countries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_FILTER_VALUES),
        inner(length(max = 63), pattern(LABEL_VALUE_PATTERN))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub cities: Vec<String>,
}

/// Sticky sessions, keyed by the `session` username parameter. On for every Routing,
/// also without this block (with its defaults); `enabled: false` turns them off.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("duration(self.idleTimeout) <= duration(self.ttl)")
    .message("stickySession.idleTimeout must not be longer than stickySession.ttl"))]
#[x_kube(validation = Rule::new("!has(self.maxTtl) || duration(self.maxTtl) >= duration(self.ttl)")
    .message("stickySession.maxTtl must not be shorter than stickySession.ttl"))]
#[x_kube(validation = Rule::new("duration(self.ttl) <= duration('24h') && (!has(self.maxTtl) || duration(self.maxTtl) <= duration('24h'))")
    .message("stickySession.ttl and stickySession.maxTtl must be at most 24h"))]
#[serde(rename_all = "camelCase")]
pub struct StickySession {
    /// Longest life of a session's binding to one proxy.
    #[serde(default = "default_session_ttl")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub ttl: String,
    /// A session unused this long is forgotten.
    #[serde(default = "default_idle_timeout")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub idle_timeout: String,
    /// Longest life a client may choose with the `sesstime-<minutes>` username
    /// parameter. Default: 30m, or `ttl` when longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub max_ttl: Option<String>,
    /// `false` turns sessions off: every request rotates, a `session` parameter is
    /// ignored.
    #[serde(default = "default_true")]
    pub enabled: bool,
}

/// Bounded retries on another proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryBudget {
    /// Attempts per request, the first included.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 10))]
    #[schemars(extend("format" = "int32"))]
    pub max_attempts: u32,
    /// Deadline for all attempts together.
    #[serde(default = "default_retry_deadline")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub deadline: String,
}

/// The gateway workload of a routing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// Gateway pods.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: i32,
    /// Listeners the gateway Service exposes.
    pub listeners: GatewayListeners,
    /// Compute resources of each gateway container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// At least one listener; ports must differ.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("has(self.http) || has(self.socks5)")
    .message("gateway.listeners needs at least one of http or socks5"))]
#[x_kube(validation = Rule::new("!has(self.http) || !has(self.socks5) || self.http.port != self.socks5.port")
    .message("gateway.listeners.http.port and gateway.listeners.socks5.port must differ"))]
#[serde(rename_all = "camelCase")]
pub struct GatewayListeners {
    /// HTTP proxy listener (CONNECT and absolute-URI forwarding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<Listener>,
    /// SOCKS5 listener (username/password auth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socks5: Option<Listener>,
}

/// One listener port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Service and container port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// What the operator last reported about a routing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingStatus {
    /// Generation and conditions.
    #[serde(flatten)]
    pub observed: ObservedConditions,
    /// Ready pods of the gateway Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Name of the gateway Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The gateway group serving it (`spec.gatewayGroup`, or its own name for an
    /// inline gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_group: Option<String>,
}

impl Routing {
    /// The gateway group whose gateways see this routing: `spec.gatewayGroup`, or the
    /// Routing's own name (the implicit group of an inline `spec.gateway`).
    pub fn group_name(&self) -> String {
        self.spec
            .gateway_group
            .clone()
            .unwrap_or_else(|| kube::ResourceExt::name_any(self))
    }
}

impl AsRef<ObservedConditions> for RoutingStatus {
    fn as_ref(&self) -> &ObservedConditions {
        &self.observed
    }
}

fn default_session_ttl() -> String {
    "10m".to_owned()
}
fn default_idle_timeout() -> String {
    "2m".to_owned()
}
fn default_true() -> bool {
    true
}
fn default_max_attempts() -> u32 {
    3
}
fn default_retry_deadline() -> String {
    "10s".to_owned()
}
fn default_replicas() -> i32 {
    2
}
