//! `distribution`, validated: the Distribution API listener, its limits, rates and
//! authentication.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Fulfilment used when a request omits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FulfillmentDefault {
    /// Return what is eligible.
    Partial,
    /// All or nothing.
    AllOrNothing,
}

/// The Distribution API.
#[derive(Clone, Debug, PartialEq)]
pub struct DistributionConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Largest `count`.
    pub max_count_per_request: NonZeroU32,
    /// Fulfilment when omitted.
    pub default_fulfillment: FulfillmentDefault,
    /// Least remaining life of a returned proxy.
    pub min_remaining_ttl: Duration,
    /// Oldest health check of a returned proxy (`None`: not required).
    pub max_health_check_age: Option<Duration>,
    /// Eligible proxies kept for the gateway.
    pub reserve_for_gateway: u32,
    /// Replay window of idempotent results.
    pub idempotency_ttl: Duration,
    /// Request limits.
    pub limits: LimitsConfig,
    /// CIDRs whose forwarded headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Source CIDRs allowed to call the API (empty: any source).
    pub allowed_sources: Vec<IpNet>,
    /// Across every client and replica (`None`: unlimited).
    pub global_rate: Option<Rate>,
    /// Default per-client rate (`None`: unlimited).
    pub per_client_rate: Option<Rate>,
    /// Authentication.
    pub auth: AuthConfig,
}

/// Request limits of the Distribution listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsConfig {
    /// Largest body.
    pub max_body_bytes: u32,
    /// Largest sum of header names and values.
    pub max_header_bytes: u32,
    /// Most header fields.
    pub max_headers: u32,
    /// Most open connections.
    pub max_connections: u32,
    /// Most open connections from one source address.
    pub max_connections_per_source: u32,
    /// Most requests served at once.
    pub max_in_flight: u32,
    /// Deadline of one request.
    pub request_timeout: Duration,
}

/// A token bucket: `requests_per_second` sustained, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Sustained rate.
    pub requests_per_second: NonZeroU32,
    /// Bucket size (≥ 1).
    pub burst: NonZeroU32,
}

/// A permission a client can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Permission {
    /// `distribution:extract`: `POST /api/v1/proxies/extract`.
    #[serde(rename = "distribution:extract")]
    DistributionExtract,
    /// `gateway:connect`: send traffic through the gateway.
    #[serde(rename = "gateway:connect")]
    GatewayConnect,
    /// `stats:read`: read the client's own usage statistics.
    #[serde(rename = "stats:read")]
    StatsRead,
}

impl Permission {
    /// Every permission (what a credential without declared permissions holds).
    pub const ALL: [Permission; 3] = [
        Permission::DistributionExtract,
        Permission::GatewayConnect,
        Permission::StatsRead,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DistributionExtract => "distribution:extract",
            Self::GatewayConnect => "gateway:connect",
            Self::StatsRead => "stats:read",
        }
    }

    /// Inverse of [`Permission::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// An authentication method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuthMethodKind {
    /// `X-API-Key`.
    ApiKey,
    /// `Authorization: Basic`.
    Basic,
    /// `Authorization: Bearer`.
    Bearer,
}

impl AuthMethodKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiKey => "apiKey",
            Self::Basic => "basic",
            Self::Bearer => "bearer",
        }
    }
}

/// How the listener authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// No credentials; clients are identified by source address. Only when the config
    /// says `auth.mode: none`.
    None,
    /// Any enabled method identifies a configured client; without a usable client
    /// every request is refused (401).
    Any,
}

/// Authentication of the Distribution listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    /// Mode.
    pub mode: AuthMode,
    /// Permissions of credentials (and anonymous clients) that declare none
    /// (`None`: every permission, the compatible default).
    pub permissions: Option<BTreeSet<Permission>>,
    /// Enabled methods, each with optional permissions.
    pub methods: Vec<AuthMethodConfig>,
}

/// One enabled method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthMethodConfig {
    /// Which.
    pub kind: AuthMethodKind,
    /// Permissions through this method when the client declares none.
    pub permissions: Option<BTreeSet<Permission>>,
    /// `bearer` only: ServiceAccount tokens reviewed by Kubernetes.
    pub token_review: Option<TokenReviewConfig>,
}

/// Bearer tokens checked with a Kubernetes `TokenReview`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenReviewConfig {
    /// The audience tokens must carry.
    pub audience: String,
    /// Kubeconfig to use (`None`: `KUBECONFIG`, `~/.kube/config`, then in-cluster).
    pub kubeconfig_file: Option<PathBuf>,
}
