//! `clients[]`, validated: Distribution clients and their credentials.

use std::collections::BTreeSet;
use std::fmt;
use std::num::NonZeroU32;
use std::path::PathBuf;

use super::distribution::{Permission, Rate};
use crate::client_limits::GatewayLimits;
use crate::secret::SaltedHash;

/// A SHA-256 of a secret; compared in constant time by the authenticator.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretHash(pub [u8; 32]);

impl fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretHash(***)")
    }
}

/// HTTP Basic credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasicCredentials {
    /// User name.
    pub username: String,
    /// Password, salted and hashed.
    pub password: SaltedHash,
}

/// What a client may take, and how fast: declared by a configured client, carried by
/// the caller it authenticates as. The default grants everything the listener allows
/// (an anonymous caller's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientGrants {
    /// Most proxies per request (`None`: the listener's limit).
    pub max_extract_count: Option<NonZeroU32>,
    /// Allowed upstreams (empty: any).
    pub allowed_upstreams: Vec<String>,
    /// Allowed regions (empty: any).
    pub allowed_regions: Vec<String>,
    /// Own rate limit (`None`: the listener default).
    pub rate_limit: Option<Rate>,
}

/// A Distribution client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Name and client ID.
    pub name: String,
    /// Declared permissions.
    pub permissions: Option<BTreeSet<Permission>>,
    /// What it may take, and how fast.
    pub grants: ClientGrants,
    /// API key hashes.
    pub api_keys: Vec<SecretHash>,
    /// Basic credentials.
    pub basic: Option<BasicCredentials>,
    /// Bearer token hashes.
    pub bearer_tokens: Vec<SecretHash>,
    /// Kubernetes ServiceAccounts (`namespace/name`) whose reviewed tokens are this
    /// client.
    pub service_accounts: Vec<String>,
    /// Fleet-wide gateway limits (validated); `None`: unlimited.
    pub gateway_limits: Option<GatewayLimits>,
    /// Credentials still in files: [`crate::config::resolve_secret_files`] reads and hashes
    /// them into the fields above (and empties this list).
    pub secret_files: Vec<ClientSecretFile>,
}

/// The Kubernetes user a `namespace/name` ServiceAccount authenticates as
/// (`system:serviceaccount:<namespace>:<name>`); `None` when not of that shape.
pub fn service_account_user(service_account: &str) -> Option<String> {
    let (ns, name) = service_account.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| format!("system:serviceaccount:{ns}:{name}"))
}

/// What a client credential file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientSecretKind {
    /// An `X-API-Key` value.
    ApiKey,
    /// A bearer token.
    BearerToken,
    /// The HTTP Basic user name (the password comes with a `BasicPassword` entry or
    /// is the salted hash in `password`).
    BasicUsername {
        /// The password's salted hash when it is given inline.
        password: Option<SaltedHash>,
    },
    /// The HTTP Basic password.
    BasicPassword {
        /// The user name when it is given inline (else a `BasicUsername` entry).
        username: Option<String>,
    },
}

/// A client credential referenced by file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSecretFile {
    /// What it holds.
    pub kind: ClientSecretKind,
    /// The file.
    pub path: PathBuf,
    /// Its field path in the config, for error messages.
    pub field: String,
}
