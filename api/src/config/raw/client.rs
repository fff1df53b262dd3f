//! `clients[]`: Distribution (and gateway) clients and their credentials, as written.

use serde::{Deserialize, Serialize};

use super::distribution::RawRate;
use crate::client_limits::GatewayLimits;

/// One `clients[]` entry: a DistributionClient.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawClient {
    /// Unique name; the client's ID.
    pub name: String,
    /// Permissions; unset: those of the method / listener.
    #[serde(default)]
    pub permissions: Option<Vec<String>>,
    /// Most proxies one request may ask for.
    #[serde(default)]
    pub max_extract_count: Option<u32>,
    /// Upstreams it may take proxies from (empty: any).
    #[serde(default)]
    pub allowed_upstreams: Vec<String>,
    /// Regions it may take proxies from (empty: any).
    #[serde(default)]
    pub allowed_regions: Vec<String>,
    /// Its own rate limit.
    #[serde(default)]
    pub rate_limit: Option<RawRate>,
    /// `X-API-Key` values, as hashes.
    #[serde(default)]
    pub api_keys: Vec<RawHashedSecret>,
    /// HTTP Basic.
    #[serde(default)]
    pub basic: Option<RawBasic>,
    /// `Authorization: Bearer` tokens, as hashes.
    #[serde(default)]
    pub bearer_tokens: Vec<RawHashedSecret>,
    /// Kubernetes ServiceAccounts (`namespace/name`) whose tokens identify this client
    /// (needs a `bearer` method with `tokenReview`).
    #[serde(default)]
    pub service_accounts: Vec<String>,
    /// Fleet-wide gateway limits (the DistributionClient's `gatewayLimits`); the
    /// controller judges the `dailyBytes` quota from the gateways' metered bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_limits: Option<GatewayLimits>,
}

/// A client secret: exactly one of its hash or a file holding it (a mounted Secret
/// key, read and hashed when the controller loads its config).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawHashedSecret {
    /// Lower-case hex SHA-256 of the secret.
    #[serde(default)]
    pub sha256: Option<String>,
    /// File holding the secret (trailing newline ignored).
    #[serde(default)]
    pub file: Option<String>,
}

/// HTTP Basic credentials: the user name in clear or in a file, the password as its
/// salted hash or in a file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawBasic {
    /// User name.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the user name (trailing newline ignored).
    #[serde(default)]
    pub username_file: Option<String>,
    /// No longer accepted (an unsalted digest of a guessable password): refused with
    /// a message pointing to `passwordHash` / `passwordFile`.
    #[serde(default)]
    pub password_sha256: Option<String>,
    /// The password as `sha256:<salt hex>:<SHA-256(salt || password) hex>`
    /// (`proxy-pool-controller hash-password` prints it).
    #[serde(default)]
    pub password_hash: Option<String>,
    /// File holding the password (trailing newline ignored).
    #[serde(default)]
    pub password_file: Option<String>,
}
