//! `distribution`: the Distribution API listener, its limits, rates and authentication, as
//! written.

use serde::{Deserialize, Serialize};

/// `distribution`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawDistribution {
    /// Listen address, e.g. `0.0.0.0:8081`.
    #[serde(default)]
    pub listen: Option<String>,
    /// Largest `count` one request may ask for.
    #[serde(default)]
    pub max_count_per_request: Option<u32>,
    /// `partial` (default) or `allOrNothing`, used when a request omits it.
    #[serde(default)]
    pub default_fulfillment: Option<String>,
    /// Each returned proxy has at least this much life left.
    #[serde(default)]
    pub min_remaining_ttl: Option<String>,
    /// Each returned proxy was health-checked at most this long ago (unset: not required).
    #[serde(default)]
    pub max_health_check_age: Option<String>,
    /// Eligible proxies always kept for the gateway.
    #[serde(default)]
    pub reserve_for_gateway: Option<u32>,
    /// How long an idempotent result answers replays.
    #[serde(default)]
    pub idempotency_ttl: Option<String>,
    /// Request size and concurrency limits.
    #[serde(default)]
    pub limits: RawLimits,
    /// CIDRs whose forwarded headers are believed.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Source CIDRs allowed to call the API (empty: any source).
    #[serde(default)]
    pub allowed_sources: Vec<String>,
    /// Global and default per-client rate limits.
    #[serde(default)]
    pub rate_limit: RawRateLimits,
    /// Authentication of the listener.
    #[serde(default)]
    pub auth: RawAuth,
}

/// `distribution.limits`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLimits {
    /// Largest request body.
    #[serde(default)]
    pub max_body_bytes: Option<u32>,
    /// Largest sum of header names and values.
    #[serde(default)]
    pub max_header_bytes: Option<u32>,
    /// Most header fields.
    #[serde(default)]
    pub max_headers: Option<u32>,
    /// Most open connections.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Most open connections from one source address.
    #[serde(default)]
    pub max_connections_per_source: Option<u32>,
    /// Most requests served at once; more wait briefly, then get 503.
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Deadline of one request.
    #[serde(default)]
    pub request_timeout: Option<String>,
}

/// `distribution.rateLimit`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRateLimits {
    /// Across every client and replica.
    #[serde(default)]
    pub global: Option<RawRate>,
    /// Per client unless the client sets its own.
    #[serde(default)]
    pub per_client: Option<RawRate>,
}

/// A token bucket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRate {
    /// Sustained requests per second.
    pub requests_per_second: u32,
    /// Bucket size; default `requestsPerSecond`.
    #[serde(default)]
    pub burst: Option<u32>,
}

/// `distribution.auth`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAuth {
    /// `any` (default: a configured client's credential is required) or `none`
    /// (anonymous callers, identified by source address; only when written).
    #[serde(default)]
    pub mode: Option<String>,
    /// Permissions of credentials (and of anonymous clients) that declare none.
    #[serde(default)]
    pub permissions: Option<Vec<String>>,
    /// Enabled methods (`mode: any`; default: every method some client uses).
    #[serde(default)]
    pub methods: Vec<RawAuthMethod>,
}

/// One entry of `distribution.auth.methods`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAuthMethod {
    /// `apiKey`, `basic` or `bearer`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Permissions granted through this method when the client declares none.
    #[serde(default)]
    pub permissions: Option<Vec<String>>,
    /// `type: bearer` only: tokens that match no `bearerTokens` hash are Kubernetes
    /// ServiceAccount tokens checked with a `TokenReview` (see `clients[].serviceAccounts`).
    #[serde(default)]
    pub token_review: Option<RawTokenReview>,
}

/// `distribution.auth.methods[].tokenReview`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawTokenReview {
    /// The audience tokens must be issued for (the TokenRequest `audiences`).
    #[serde(default)]
    pub audience: String,
    /// Kubeconfig used to reach the API server (default: `KUBECONFIG`, then
    /// `~/.kube/config`, then the pod's ServiceAccount).
    #[serde(default)]
    pub kubeconfig_file: Option<String>,
}
