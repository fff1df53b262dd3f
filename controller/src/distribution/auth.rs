//! Authentication and identity of Distribution clients: API key, Basic and Bearer
//! against hashed secrets from the config (constant-time comparison; Basic passwords
//! salted), or the source address when the config says `auth.mode: none`.
//!
//! Failed authentications (a credential presented and wrong) are throttled
//! ([`AuthThrottle`]): per source address for every method, and per user name for
//! Basic. A throttled caller gets 429
//! `AUTH_THROTTLED` before its credential is judged, right or wrong.
//!
//! Runs on headers only, before any body is read. Never logs or returns a presented
//! secret.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use activity_pool::model::ClientId;
use async_trait::async_trait;
use axum::http::HeaderMap;
use base64::Engine;
use proxy_pool_api::config::{
    AuthConfig, AuthMethodKind, AuthMode, ClientConfig, ClientGrants, Permission, SaltedHash,
    SecretHash,
};
use proxy_pool_api::throttle::Verdict;
pub use proxy_pool_api::throttle::{AuthThrottle, ThrottleConfig};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::problem::ApiError;

/// Longest credential header value looked at.
const MAX_CREDENTIAL_LEN: usize = 1024;

/// Who is calling, with what rights and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Stable ID (`client:<name>` or `anon:<ip>`); digested before it enters Redis.
    pub client_id: ClientId,
    /// Granted permissions.
    pub permissions: BTreeSet<Permission>,
    /// The configured client's grants (an anonymous caller's: the default, no limits
    /// beyond the listener's).
    pub grants: ClientGrants,
    /// The configured client's name (`None`: an anonymous caller in no-auth mode).
    pub client_name: Option<String>,
    /// Which credential identified the caller, for the unique-caller counts of usage
    /// analytics: `apiKey:`/`bearer:` + a 16-hex digest prefix, `basic:` + user name, or
    /// `addr:` + source address when anonymous. Never the secret itself.
    pub credential: String,
}

/// Why a credential was refused (never carries the credential).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Unknown or malformed credential.
    #[error("invalid credential")]
    Invalid,
    /// The verifier could not decide (e.g. a remote review failed).
    #[error("verifier unavailable")]
    Unavailable,
    /// Authenticated (e.g. a reviewed ServiceAccount token) but no configured client:
    /// 403, not 401.
    #[error("authenticated, but not a configured client")]
    NotAClient,
}

/// Checks bearer tokens. The static implementation compares hashes from the config;
/// a Kubernetes `TokenReview` implementation can replace it later.
#[async_trait]
pub trait BearerVerifier: Send + Sync + std::fmt::Debug {
    /// The client owning `token`.
    async fn verify(&self, token: &str) -> Result<Verified, AuthError>;
}

/// Who a bearer token belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Index into the configured clients.
    pub client: usize,
    /// A stable, non-secret name of the caller when the verifier knows one (a reviewed
    /// ServiceAccount's user name): usage counts use it, so a rotated token is not a
    /// new caller. `None`: a digest of the token labels the caller.
    pub subject: Option<String>,
}

impl Verified {
    /// A configured client known only by its token.
    pub fn client(client: usize) -> Self {
        Self {
            client,
            subject: None,
        }
    }
}

/// Bearer tokens as SHA-256 hashes from the config.
#[derive(Debug, Default)]
pub struct StaticBearerVerifier {
    tokens: Vec<(SecretHash, usize)>,
}

impl StaticBearerVerifier {
    /// From the configured clients.
    pub fn new(clients: &[ClientConfig]) -> Self {
        let tokens = clients
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.bearer_tokens.iter().map(move |h| (*h, i)))
            .collect();
        Self { tokens }
    }
}

#[async_trait]
impl BearerVerifier for StaticBearerVerifier {
    async fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        find_hash(&self.tokens, token)
            .map(Verified::client)
            .ok_or(AuthError::Invalid)
    }
}

/// Constant time in the secret: every configured hash is compared.
fn find_hash(hashes: &[(SecretHash, usize)], secret: &str) -> Option<usize> {
    let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
    let mut found = None;
    for (h, i) in hashes {
        if bool::from(h.0.ct_eq(&presented)) {
            found = Some(*i);
        }
    }
    found
}

/// The listener's authenticator.
#[derive(Debug)]
pub struct Authenticator {
    mode: AuthMode,
    default_permissions: Option<BTreeSet<Permission>>,
    methods: Vec<(AuthMethodKind, Option<BTreeSet<Permission>>)>,
    clients: Vec<ClientConfig>,
    api_keys: Vec<(SecretHash, usize)>,
    bearer: Arc<dyn BearerVerifier>,
    challenge: String,
    throttle: Arc<AuthThrottle>,
}

impl Authenticator {
    /// From the config, with the static bearer verifier.
    pub fn new(auth: &AuthConfig, clients: &[ClientConfig]) -> Self {
        Self::with_bearer(auth, clients, Arc::new(StaticBearerVerifier::new(clients)))
    }

    /// From the config, with another bearer verifier.
    pub fn with_bearer(
        auth: &AuthConfig,
        clients: &[ClientConfig],
        bearer: Arc<dyn BearerVerifier>,
    ) -> Self {
        let api_keys = clients
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.api_keys.iter().map(move |h| (*h, i)))
            .collect();
        let methods: Vec<_> = auth
            .methods
            .iter()
            .map(|m| (m.kind, m.permissions.clone()))
            .collect();
        let challenge = methods
            .iter()
            .map(|(k, _)| match k {
                AuthMethodKind::ApiKey => "ApiKey header=\"X-API-Key\"",
                AuthMethodKind::Basic => "Basic realm=\"proxy-pool\"",
                AuthMethodKind::Bearer => "Bearer realm=\"proxy-pool\"",
            })
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            mode: auth.mode.clone(),
            default_permissions: auth.permissions.clone(),
            methods,
            clients: clients.to_vec(),
            api_keys,
            bearer,
            challenge,
            throttle: Arc::new(AuthThrottle::default()),
        }
    }

    /// Uses `throttle` for failed authentications (tests shorten its settings).
    pub fn with_throttle(mut self, throttle: Arc<AuthThrottle>) -> Self {
        self.throttle = throttle;
        self
    }

    fn enabled(&self, kind: AuthMethodKind) -> Option<&Option<BTreeSet<Permission>>> {
        self.methods
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, p)| p)
    }

    fn unauthenticated(&self) -> ApiError {
        ApiError::Unauthenticated {
            challenge: self.challenge.clone(),
        }
    }

    /// Identifies the caller from its headers and source address; failures count
    /// against the source (and a Basic user name), and a throttled caller is refused
    /// before its credential is judged.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        source: IpAddr,
    ) -> Result<Identity, ApiError> {
        if self.mode == AuthMode::None {
            return self.anonymous(source);
        }
        let user = basic_user(headers);
        let now = Instant::now();
        if let Verdict::Throttled(retry_after) = self.throttle.check(source, user.as_deref(), now) {
            return Err(ApiError::AuthThrottled { retry_after });
        }
        let result = self.identify(headers).await;
        // Only a presented credential that is wrong counts as a guess; a request
        // without any (a client's first try before the challenge) does not.
        let presented = headers.contains_key("x-api-key")
            || headers.contains_key(axum::http::header::AUTHORIZATION);
        match (&result, user.as_deref()) {
            (Err(ApiError::Unauthenticated { .. }), u) if presented => {
                self.throttle.failed(source, u, now);
            }
            (Ok(_), Some(u)) => self.throttle.succeeded(source, u, now),
            _ => {}
        }
        result
    }

    async fn identify(&self, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let api_key = single(headers, "x-api-key")?;
        let authorization = single(headers, "authorization")?;
        let (kind, index, credential) = if let Some(key) =
            api_key.filter(|_| self.enabled(AuthMethodKind::ApiKey).is_some())
        {
            let i = find_hash(&self.api_keys, key).ok_or_else(|| self.unauthenticated())?;
            (AuthMethodKind::ApiKey, i, digest_label("apiKey", key))
        } else if let Some(value) = authorization {
            let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
            let rest = rest.trim();
            if scheme.eq_ignore_ascii_case("basic") && self.enabled(AuthMethodKind::Basic).is_some()
            {
                let (i, user) = self.basic(rest).ok_or_else(|| self.unauthenticated())?;
                (AuthMethodKind::Basic, i, format!("basic:{user}"))
            } else if scheme.eq_ignore_ascii_case("bearer")
                && self.enabled(AuthMethodKind::Bearer).is_some()
            {
                match self.bearer.verify(rest).await {
                    Ok(v) => {
                        let label = match v.subject {
                            Some(subject) => format!("bearer:{subject}"),
                            None => digest_label("bearer", rest),
                        };
                        (AuthMethodKind::Bearer, v.client, label)
                    }
                    Err(AuthError::Invalid) => return Err(self.unauthenticated()),
                    Err(AuthError::Unavailable) => return Err(ApiError::AuthUnavailable),
                    Err(AuthError::NotAClient) => {
                        return Err(ApiError::PermissionDenied("distribution:extract"));
                    }
                }
            } else {
                return Err(self.unauthenticated());
            }
        } else {
            return Err(self.unauthenticated());
        };
        let client = self.clients.get(index).ok_or(ApiError::Internal)?;
        let permissions = client
            .permissions
            .clone()
            .or_else(|| self.enabled(kind).cloned().flatten())
            .or_else(|| self.default_permissions.clone())
            .unwrap_or_else(|| Permission::ALL.into_iter().collect());
        Ok(Identity {
            client_id: ClientId::new(format!("client:{}", client.name))
                .map_err(|_| ApiError::Internal)?,
            permissions,
            grants: client.grants.clone(),
            client_name: Some(client.name.clone()),
            credential,
        })
    }

    fn anonymous(&self, source: IpAddr) -> Result<Identity, ApiError> {
        let ip = match source {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        Ok(Identity {
            // An IP address is always a valid identifier (digits, hex, `.` and `:`).
            client_id: ClientId::new(format!("anon:{ip}")).map_err(|_| ApiError::Internal)?,
            permissions: self
                .default_permissions
                .clone()
                .unwrap_or_else(|| Permission::ALL.into_iter().collect()),
            grants: ClientGrants::default(),
            client_name: None,
            credential: format!("addr:{ip}"),
        })
    }

    /// Checks `base64(user:password)` against the user's salted hash (constant time);
    /// an unknown user costs the same hash work.
    fn basic(&self, encoded: &str) -> Option<(usize, String)> {
        let (user, password) = decode_basic(encoded)?;
        let found = self.clients.iter().enumerate().find_map(|(i, c)| {
            c.basic
                .as_ref()
                .filter(|b| b.username == user)
                .map(|b| (i, &b.password))
        });
        match found {
            Some((i, hash)) => hash.matches(password.as_bytes()).then_some((i, user)),
            None => {
                SaltedHash::burn(password.as_bytes());
                None
            }
        }
    }
}

/// `user:password` of a Basic credential.
fn decode_basic(encoded: &str) -> Option<(String, String)> {
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// The user name of an `Authorization: Basic` header (for the per-user throttle).
fn basic_user(headers: &HeaderMap) -> Option<Vec<u8>> {
    let value = headers.get("authorization")?.to_str().ok()?;
    if value.len() > MAX_CREDENTIAL_LEN {
        return None;
    }
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    decode_basic(rest.trim()).map(|(user, _)| user.into_bytes())
}

/// The value of a header that may appear at most once.
fn single<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<Option<&'a str>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let Some(v) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::InvalidHeader {
            header: name,
            reason: "must appear at most once",
        });
    }
    if v.len() > MAX_CREDENTIAL_LEN {
        return Err(ApiError::InvalidHeader {
            header: name,
            reason: "too long",
        });
    }
    v.to_str().map(Some).map_err(|_| ApiError::InvalidHeader {
        header: name,
        reason: "must be visible ASCII",
    })
}

/// `<method>:` + the first 16 hex digits of the secret's SHA-256: tells credentials
/// apart without carrying the secret.
fn digest_label(method: &str, secret: &str) -> String {
    let d = Sha256::digest(secret.as_bytes());
    format!("{method}:{}", hex::encode(&d[..8]))
}

/// Lower-case hex SHA-256 of a secret, as the config stores it.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A Basic password as the config stores it: `sha256:<salt hex>:<digest hex>` with a
/// fresh random salt (`proxy-pool-controller hash-password`).
pub fn hash_password(password: &str) -> String {
    SaltedHash::new(password.as_bytes()).to_text()
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
