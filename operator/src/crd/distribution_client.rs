//! `DistributionClient`: one client of the Distribution API (and of the gateway):
//! how it authenticates, what it may do, and its limits.
//!
//! Credentials live in Secrets; this type only references them.

use kube::KubeSchema;
use proxy_pool_api::client_limits::GatewayLimits;
use proxy_pool_api::config::Permission;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    LABEL_VALUE_PATTERN, MAX_FILTER_VALUES, NAME_PATTERN, ObservedConditions, SecretKeyRef,
    SecretRef,
};

custom_resource! {
    #[kube(
        kind = "DistributionClient",
        doc = "A client of the Distribution API and the gateway: credentials, permissions and limits.",
        status = "DistributionClientStatus",
        shortname = "dclient",
        printcolumn(
            name = "Permissions",
            type_ = "string",
            json_path = ".spec.permissions"
        ),
        printcolumn(
            name = "Max Extract",
            type_ = "integer",
            json_path = ".spec.maxExtractCount"
        )
    )]
    /// A client of the Distribution API and the gateway.
    #[derive(JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct DistributionClientSpec {
        /// Accepted credentials; any one of them identifies this client.
        pub auth: ClientAuth,
        /// What the client may do.
        #[schemars(length(min = 1, max = 8))]
        #[schemars(extend("x-kubernetes-list-type" = "set"))]
        pub permissions: Vec<Permission>,
        /// Most proxies one extract request may ask for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = 10_000))]
        #[schemars(extend("format" = "int32"))]
        pub max_extract_count: Option<u32>,
        /// Upstreams the client may take proxies from. Empty: any. Request filters can only narrow it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(
            length(max = MAX_FILTER_VALUES),
            inner(length(max = 253), pattern(NAME_PATTERN))
        )]
        #[schemars(extend("x-kubernetes-list-type" = "set"))]
        pub allowed_upstreams: Vec<String>,
        /// Regions the client may take proxies from. Empty: any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(
            length(max = MAX_FILTER_VALUES),
            inner(length(max = 63), pattern(LABEL_VALUE_PATTERN))
        )]
        #[schemars(extend("x-kubernetes-list-type" = "set"))]
        pub allowed_regions: Vec<String>,
        /// Per-client request rate limit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rate_limit: Option<RateLimit>,
        /// The client's limits on the gateways, fleet-wide: each gateway of a group
        /// enforces its share (the budget divided by the group's live gateways, rounded
        /// up). Exceeding one answers `429` (SOCKS5 reply `0x02`) with the limit's reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gateway_limits: Option<GatewayLimitsSpec>,
    }
}

/// A client's fleet-wide gateway limits (`api::client_limits::GatewayLimits`, whose
/// `validate` the schema mirrors). Absent fields do not limit.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("!has(self.burst) || has(self.requestsPerSecond)")
    .message("gatewayLimits.burst needs gatewayLimits.requestsPerSecond"))]
#[x_kube(validation = Rule::new("!has(self.burst) || !has(self.requestsPerSecond) || self.burst >= self.requestsPerSecond")
    .message("gatewayLimits.burst must be at least gatewayLimits.requestsPerSecond"))]
#[serde(rename_all = "camelCase")]
pub struct GatewayLimitsSpec {
    /// Concurrent connections (kept-alive HTTP connections, CONNECT tunnels, SOCKS5
    /// connections) across the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    #[schemars(extend("format" = "int32"))]
    pub max_connections: Option<u32>,
    /// Sustained requests per second across the group (a forwarded request, a CONNECT
    /// tunnel or a SOCKS5 connection each count one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    #[schemars(extend("format" = "int32"))]
    pub requests_per_second: Option<u32>,
    /// Token-bucket size for `requestsPerSecond`. Default: `requestsPerSecond`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000))]
    #[schemars(extend("format" = "int32"))]
    pub burst: Option<u32>,
    /// Bytes per UTC day, both directions together, as the gateways meter them
    /// (approximate: see docs/gateway.md "Limits").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    #[schemars(extend("format" = "int64"))]
    pub daily_bytes: Option<u64>,
}

impl GatewayLimitsSpec {
    /// The one conversion to the shared type (0 cannot pass the schema; it would limit
    /// nothing here).
    pub fn limits(&self) -> GatewayLimits {
        use std::num::{NonZeroU32, NonZeroU64};
        GatewayLimits {
            max_connections: self.max_connections.and_then(NonZeroU32::new),
            requests_per_second: self.requests_per_second.and_then(NonZeroU32::new),
            burst: self.burst.and_then(NonZeroU32::new),
            daily_bytes: self.daily_bytes.and_then(NonZeroU64::new),
        }
    }
}

/// Credentials a client may present. At least one.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("has(self.apiKey) || has(self.basic) || has(self.bearer) || (has(self.serviceAccounts) && size(self.serviceAccounts) > 0)")
    .message("auth needs at least one of apiKey, basic, bearer or serviceAccounts"))]
#[serde(rename_all = "camelCase")]
pub struct ClientAuth {
    /// `X-API-Key` header; the key's value is in the referenced Secret key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<SecretKeyAuth>,
    /// HTTP Basic (and gateway proxy auth); Secret keys `username` and `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicAuth>,
    /// `Authorization: Bearer`; the token is in the referenced Secret key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<SecretKeyAuth>,
    /// ServiceAccounts of this resource's namespace whose tokens identify the client
    /// (`Authorization: Bearer <ServiceAccount token>`, checked with a Kubernetes
    /// TokenReview). Needs the installation's TokenReview method (chart value
    /// `controller.tokenReview.enabled` and a `bearer` method with `tokenReview` in
    /// `controller.config`); without it the client is left out of the config and
    /// reported Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 253), pattern(NAME_PATTERN))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub service_accounts: Vec<String>,
}

/// A credential held in one Secret key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyAuth {
    /// Where the credential is.
    pub secret_ref: SecretKeyRef,
}

/// Username and password in a Secret (keys `username` and `password`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The Secret.
    pub secret_ref: SecretRef,
}

/// A token bucket.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("!has(self.burst) || self.burst >= self.requestsPerSecond")
    .message("rateLimit.burst must be at least rateLimit.requestsPerSecond"))]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    /// Sustained requests per second.
    #[schemars(range(min = 1, max = 100_000))]
    #[schemars(extend("format" = "int32"))]
    pub requests_per_second: u32,
    /// Bucket size. Default: `requestsPerSecond`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    #[schemars(extend("format" = "int32"))]
    pub burst: Option<u32>,
}

/// What the operator last reported about a client.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DistributionClientStatus {
    /// Generation and conditions.
    #[serde(flatten)]
    pub observed: ObservedConditions,
}

impl AsRef<ObservedConditions> for DistributionClientStatus {
    fn as_ref(&self) -> &ObservedConditions {
        &self.observed
    }
}
