//! A DistributionClient's config entry: its permissions, limits and credentials
//! (API key, bearer token, Basic user name and password) as mounted files; and which
//! clients of the config may use gateways.

use std::collections::BTreeMap;

use proxy_pool_api::config::RawConfig;
use proxy_pool_api::config::raw::{RawBasic, RawClient, RawHashedSecret, RawRate};
use sha2::{Digest, Sha256};

use super::cx::{Cx, trim_newline};
use super::model::{GatewayClient, Kind, name};
use crate::crd::{DistributionClient, SecretKeyRef};

impl Cx<'_> {
    /// The config's clients that may use gateways with Basic credentials.
    pub(super) fn gateway_clients(&self, config: &RawConfig) -> BTreeMap<String, GatewayClient> {
        // The clients of the config with their gateway limits (converted from the CRD
        // once, for the config; the gateways' clients file carries the same).
        let in_config: BTreeMap<&str, _> = config
            .clients
            .iter()
            .map(|c| (c.name.as_str(), c.gateway_limits))
            .collect();
        let mut out = BTreeMap::new();
        for c in self.inputs.clients {
            let n = name(c);
            let Some(basic) = &c.spec.auth.basic else {
                continue;
            };
            let Some(limits) = in_config.get(n.as_str()).copied() else {
                continue;
            };
            if !c
                .spec
                .permissions
                .contains(&crate::crd::Permission::GatewayConnect)
            {
                continue;
            }
            let secret = basic.secret_ref.name.clone();
            let data = self.inputs.secrets.get(&secret);
            let mut h = Sha256::new();
            h.update(secret.as_bytes());
            for key in ["username", "password"] {
                let value = data.and_then(|d| d.get(key)).map(Vec::as_slice);
                h.update([0]);
                h.update(Sha256::digest(trim_newline(value.unwrap_or_default())));
            }
            out.insert(
                n,
                GatewayClient {
                    secret,
                    digest: hex::encode(h.finalize()),
                    limits,
                },
            );
        }
        out
    }

    pub(super) fn client(&mut self, c: &DistributionClient) -> Option<RawClient> {
        let n = name(c);
        let auth = &c.spec.auth;
        let mut out = RawClient {
            name: n.clone(),
            permissions: Some(
                c.spec
                    .permissions
                    .iter()
                    .map(|p| p.as_str().to_owned())
                    .collect(),
            ),
            max_extract_count: c.spec.max_extract_count,
            allowed_upstreams: c.spec.allowed_upstreams.clone(),
            allowed_regions: c.spec.allowed_regions.clone(),
            rate_limit: c.spec.rate_limit.as_ref().map(|r| RawRate {
                requests_per_second: r.requests_per_second,
                burst: r.burst,
            }),
            gateway_limits: c.spec.gateway_limits.as_ref().map(|l| l.limits()),
            ..RawClient::default()
        };
        // ServiceAccounts are named in the client's own namespace (the controller
        // matches `namespace/name`, the TokenReview's `system:serviceaccount:` user).
        if !auth.service_accounts.is_empty() {
            let ns = c.metadata.namespace.clone().unwrap_or_default();
            out.service_accounts = auth
                .service_accounts
                .iter()
                .map(|sa| format!("{ns}/{sa}"))
                .collect();
        }
        let mut problems = Vec::new();
        let file = |path| RawHashedSecret {
            sha256: None,
            file: Some(path),
        };
        if let Some(k) = &auth.api_key {
            match self.credential_file(&k.secret_ref) {
                Ok(path) => out.api_keys.push(file(path)),
                Err(p) => problems.push(p),
            }
        }
        if let Some(b) = &auth.bearer {
            match self.credential_file(&b.secret_ref) {
                Ok(path) => out.bearer_tokens.push(file(path)),
                Err(p) => problems.push(p),
            }
        }
        if let Some(b) = &auth.basic {
            let secret = &b.secret_ref.name;
            let gateway = c
                .spec
                .permissions
                .contains(&crate::crd::Permission::GatewayConnect);
            let basic = self.username_file(secret).and_then(|username_file| {
                if gateway {
                    self.gateway_username(secret)?;
                }
                let password = SecretKeyRef {
                    name: secret.clone(),
                    key: "password".into(),
                };
                Ok(RawBasic {
                    username: None,
                    username_file: Some(username_file),
                    password_sha256: None,
                    password_hash: None,
                    password_file: Some(self.credential_file(&password)?),
                })
            });
            match basic {
                Ok(b) => out.basic = Some(b),
                Err(p) => problems.push(p),
            }
        }
        if problems.is_empty() {
            Some(out)
        } else {
            for p in problems {
                self.problem(Kind::DistributionClient, &n, p);
            }
            None
        }
    }
}
