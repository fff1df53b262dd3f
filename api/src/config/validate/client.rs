//! `clients[]`: names, limits and credentials (hashes now, files queued for loading),
//! and the rule that no credential identifies two clients.

use std::collections::HashSet;
use std::num::NonZeroU32;

use super::ctx::secret_file;
use super::ctx::{Ctx, MAX_COUNT_PER_REQUEST, MAX_LIST_VALUES};
use crate::client_limits::GatewayLimits;
use crate::config::checks::{check_basic_username, check_service_account};
use crate::config::error::ConfigError;
use crate::config::raw::{RawBasic, RawClient, RawHashedSecret};
use crate::config::types::{
    BasicCredentials, ClientConfig, ClientGrants, ClientSecretFile, ClientSecretKind, SaltedHash,
    SecretHash,
};

/// Longest client name (the client ID adds a short prefix).
pub const MAX_CLIENT_NAME: usize = 100;

pub(super) fn client(cx: &mut Ctx, path: &str, raw: &RawClient) -> ClientConfig {
    cx.identifier(&format!("{path}.name"), &raw.name, MAX_CLIENT_NAME);
    let grants = grants(cx, path, raw);
    let mut secret_files = Vec::new();
    let api_keys = hashed_secrets(
        cx,
        &format!("{path}.apiKeys"),
        &raw.api_keys,
        &ClientSecretKind::ApiKey,
        &mut secret_files,
    );
    let bearer_tokens = hashed_secrets(
        cx,
        &format!("{path}.bearerTokens"),
        &raw.bearer_tokens,
        &ClientSecretKind::BearerToken,
        &mut secret_files,
    );
    let basic = raw
        .basic
        .as_ref()
        .and_then(|b| basic(cx, &format!("{path}.basic"), b, &mut secret_files));
    let sa_path = format!("{path}.serviceAccounts");
    if raw.service_accounts.len() > MAX_LIST_VALUES {
        cx.err(&sa_path, format!("at most {MAX_LIST_VALUES} values"));
    }
    for (i, sa) in raw.service_accounts.iter().enumerate() {
        if let Err(e) = check_service_account(sa) {
            cx.err(format!("{sa_path}[{i}]"), e);
        }
    }
    if api_keys.is_empty()
        && basic.is_none()
        && bearer_tokens.is_empty()
        && secret_files.is_empty()
        && raw.service_accounts.is_empty()
    {
        cx.err(
            path,
            "needs at least one of apiKeys, basic, bearerTokens or serviceAccounts",
        );
    }
    ClientConfig {
        name: raw.name.clone(),
        permissions: cx.permissions(&format!("{path}.permissions"), raw.permissions.as_ref()),
        grants,
        api_keys,
        basic,
        bearer_tokens,
        service_accounts: raw.service_accounts.clone(),
        gateway_limits: gateway_limits(cx, path, raw),
        secret_files,
    }
}

/// `gatewayLimits`: checked, and dropped when it limits nothing.
fn gateway_limits(cx: &mut Ctx, path: &str, raw: &RawClient) -> Option<GatewayLimits> {
    let limits = raw.gateway_limits?;
    match limits.validate() {
        Ok(()) => (!limits.is_empty()).then_some(limits),
        Err(e) => {
            cx.err(format!("{path}.gatewayLimits"), e.to_string());
            None
        }
    }
}

/// `maxExtractCount`, `allowedUpstreams`, `allowedRegions` and `rateLimit`.
fn grants(cx: &mut Ctx, path: &str, raw: &RawClient) -> ClientGrants {
    let max_extract_count = match raw.max_extract_count {
        None => None,
        Some(n) if (1..=MAX_COUNT_PER_REQUEST).contains(&n) => NonZeroU32::new(n),
        Some(n) => {
            cx.err(
                format!("{path}.maxExtractCount"),
                format!("must be between 1 and {MAX_COUNT_PER_REQUEST}, got {n}"),
            );
            None
        }
    };
    ClientGrants {
        max_extract_count,
        allowed_upstreams: cx.list(
            &format!("{path}.allowedUpstreams"),
            &raw.allowed_upstreams,
            63,
        ),
        allowed_regions: cx.list(&format!("{path}.allowedRegions"), &raw.allowed_regions, 64),
        rate_limit: cx.rate(&format!("{path}.rateLimit"), raw.rate_limit.as_ref()),
    }
}

/// `apiKeys[]` / `bearerTokens[]`: hashes now, files queued for loading.
fn hashed_secrets(
    cx: &mut Ctx,
    path: &str,
    raw: &[RawHashedSecret],
    kind: &ClientSecretKind,
    files: &mut Vec<ClientSecretFile>,
) -> Vec<SecretHash> {
    let mut hashes = Vec::new();
    for (i, k) in raw.iter().enumerate() {
        let p = format!("{path}[{i}]");
        match (&k.sha256, &k.file) {
            (Some(h), None) => hashes.push(cx.hash(&format!("{p}.sha256"), h)),
            (None, Some(f)) => {
                let field = format!("{p}.file");
                files.push(ClientSecretFile {
                    kind: kind.clone(),
                    path: secret_file(cx, &field, f),
                    field,
                });
            }
            _ => cx.err(p, "needs exactly one of sha256 or file"),
        }
    }
    hashes
}

/// `basic`: the credentials when both parts are inline, else queued files.
fn basic(
    cx: &mut Ctx,
    path: &str,
    raw: &RawBasic,
    files: &mut Vec<ClientSecretFile>,
) -> Option<BasicCredentials> {
    let username = match (&raw.username, &raw.username_file) {
        (Some(u), None) => {
            if let Err(e) = check_basic_username(u) {
                cx.err(format!("{path}.username"), e);
            }
            Some(Ok(u.clone()))
        }
        (None, Some(f)) => {
            let field = format!("{path}.usernameFile");
            Some(Err((secret_file(cx, &field, f), field)))
        }
        _ => {
            cx.err(path, "needs exactly one of username or usernameFile");
            None
        }
    };
    if raw.password_sha256.is_some() {
        cx.err(
            format!("{path}.passwordSha256"),
            "an unsalted digest is no longer accepted: use passwordFile, or passwordHash \
             (`sha256:<salt hex>:<digest hex>`, see `proxy-pool-controller hash-password`)",
        );
    }
    let password = match (&raw.password_hash, &raw.password_file) {
        (Some(h), None) => match SaltedHash::parse(h) {
            Ok(h) => Some(Ok(h)),
            Err(e) => {
                cx.err(format!("{path}.passwordHash"), e);
                None
            }
        },
        (None, Some(f)) => {
            let field = format!("{path}.passwordFile");
            Some(Err((secret_file(cx, &field, f), field)))
        }
        _ if raw.password_sha256.is_some() => None,
        _ => {
            cx.err(path, "needs exactly one of passwordHash or passwordFile");
            None
        }
    };
    match (username?, password?) {
        (Ok(username), Ok(password)) => Some(BasicCredentials { username, password }),
        (Ok(username), Err((path, field))) => {
            files.push(ClientSecretFile {
                kind: ClientSecretKind::BasicPassword {
                    username: Some(username),
                },
                path,
                field,
            });
            None
        }
        (Err((path, field)), Ok(hash)) => {
            files.push(ClientSecretFile {
                kind: ClientSecretKind::BasicUsername {
                    password: Some(hash),
                },
                path,
                field,
            });
            None
        }
        (Err((upath, ufield)), Err((ppath, pfield))) => {
            files.push(ClientSecretFile {
                kind: ClientSecretKind::BasicUsername { password: None },
                path: upath,
                field: ufield,
            });
            files.push(ClientSecretFile {
                kind: ClientSecretKind::BasicPassword { username: None },
                path: ppath,
                field: pfield,
            });
            None
        }
    }
}

/// Problems of clients whose credentials collide (run again once files are read).
pub(in crate::config) fn duplicate_credentials(clients: &[ClientConfig]) -> Vec<ConfigError> {
    let mut cx = Ctx::default();
    credentials_unique(&mut cx, clients);
    cx.errors
}

pub(super) fn credentials_unique(cx: &mut Ctx, clients: &[ClientConfig]) {
    let mut keys = HashSet::new();
    let mut tokens = HashSet::new();
    let mut users = HashSet::new();
    let mut accounts = std::collections::HashMap::new();
    for (i, c) in clients.iter().enumerate() {
        for (j, sa) in c.service_accounts.iter().enumerate() {
            if let Some(first) = accounts.get(sa.as_str()) {
                cx.err(
                    format!("clients[{i}].serviceAccounts[{j}]"),
                    format!("ServiceAccount `{sa}` already identifies clients[{first}]"),
                );
            } else {
                accounts.insert(sa.as_str(), i);
            }
        }
        for (j, k) in c.api_keys.iter().enumerate() {
            if !keys.insert(k.0) {
                cx.err(
                    format!("clients[{i}].apiKeys[{j}]"),
                    "the same API key is configured twice",
                );
            }
        }
        for (j, k) in c.bearer_tokens.iter().enumerate() {
            if !tokens.insert(k.0) {
                cx.err(
                    format!("clients[{i}].bearerTokens[{j}]"),
                    "the same token is configured twice",
                );
            }
        }
        if let Some(b) = &c.basic
            && !users.insert(b.username.clone())
        {
            cx.err(
                format!("clients[{i}].basic.username"),
                "the same username is configured twice",
            );
        }
    }
}
