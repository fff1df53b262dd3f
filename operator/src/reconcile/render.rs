//! Custom resources → the controller's configuration (`proxy_pool_api::config::RawConfig`).
//!
//! Pure: takes the resources, the operator's base config and the data of the Secrets
//! they reference, returns the config, the Secret keys the controller must mount and,
//! per resource, what kept it out of the config. It never copies a Secret value into
//! the output: passwords, vendor API keys and every client credential (API key,
//! bearer token, Basic user name and password) become file paths of the mounted
//! Secret; the controller reads (and hashes) them when it loads the config. Upstream
//! proxy user names are files too (`credentials.usernameFile`).
//!
//! Here: the rendering loop that leaves out what the validator rejects. Beside it:
//! `model` (inputs and outcome), `cx` (the cursor and its reading of Secret keys),
//! one module per kind for the config entries (`upstream`, `client`, `routing`).

mod client;
mod cx;
mod model;
mod routing;
mod upstream;

use std::collections::{BTreeMap, BTreeSet};

use proxy_pool_api::config::raw::{RawClient, RawRouting, RawUpstream};
use proxy_pool_api::config::{ConfigError, FieldPath, RawConfig, validate};
use sha2::{Digest, Sha256};

use cx::Cx;
use model::name;
pub use model::{GatewayClient, Inputs, Kind, Problem, Rendered, SecretData};
use routing::routing;

/// Renders the config: resources with a bad reference, or that the controller's
/// validator rejects, are left out and listed in [`Rendered::problems`].
pub fn render(inputs: &Inputs<'_>) -> Rendered {
    let mut cx = Cx {
        inputs,
        mounts: BTreeMap::new(),
        problems: BTreeMap::new(),
        secret_hasher: Sha256::new(),
    };
    let mut upstreams: Vec<(String, RawUpstream)> = sorted(inputs.upstreams)
        .into_iter()
        .filter_map(|u| cx.upstream(u).map(|raw| (name(u), raw)))
        .collect();
    let mut clients: Vec<(String, RawClient)> = sorted(inputs.clients)
        .into_iter()
        .filter_map(|c| cx.client(c).map(|raw| (name(c), raw)))
        .collect();
    let routings_in = sorted(inputs.routings);
    let mut global = Vec::new();
    // Leaving one resource out can invalidate another (a Routing naming a dropped
    // Upstream), so repeat until the validator accepts or blames no resource.
    for _ in 0..8 {
        let upstream_names: BTreeSet<&str> = upstreams.iter().map(|(n, _)| n.as_str()).collect();
        let client_names: BTreeSet<&str> = clients.iter().map(|(n, _)| n.as_str()).collect();
        let mut routings: Vec<(String, RawRouting)> = Vec::new();
        for r in &routings_in {
            let n = name(*r);
            if cx.problems.contains_key(&(Kind::Routing, n.clone())) {
                continue;
            }
            match routing(r, &upstream_names, &client_names) {
                Ok(raw) => routings.push((n, raw)),
                Err(p) => cx.problem(Kind::Routing, &n, p),
            }
        }
        let config = assemble(inputs.base, &upstreams, &routings, &clients);
        let errors = match validate(&config) {
            Ok(_) => Vec::new(),
            Err(e) => e.0,
        };
        let mut blamed = false;
        global.clear();
        for e in errors {
            match blame(&e.path, &upstreams, &routings, &clients) {
                Some((kind, who)) => {
                    blamed = true;
                    cx.problem(
                        kind,
                        &who,
                        Problem::new(
                            "InvalidConfig",
                            format!(
                                "rejected by the controller's validator: {}",
                                local_error(&e)
                            ),
                        ),
                    );
                }
                None => global.push(e),
            }
        }
        if !blamed {
            return cx.finish(config, global);
        }
        upstreams.retain(|(n, _)| !cx.problems.contains_key(&(Kind::Upstream, n.clone())));
        clients.retain(|(n, _)| {
            !cx.problems
                .contains_key(&(Kind::DistributionClient, n.clone()))
        });
    }
    let config = assemble(inputs.base, &upstreams, &[], &clients);
    global.push(ConfigError::new(
        FieldPath::default(),
        "the rendered config did not settle",
    ));
    cx.finish(config, global)
}

impl Cx<'_> {
    fn finish(self, config: RawConfig, global: Vec<ConfigError>) -> Rendered {
        let gateway_clients = self.gateway_clients(&config);
        Rendered {
            gateway_clients,
            config,
            mounts: self.mounts,
            problems: self.problems,
            global,
            secrets_digest: hex::encode(self.secret_hasher.finalize()),
        }
    }
}

fn assemble(
    base: &RawConfig,
    upstreams: &[(String, RawUpstream)],
    routings: &[(String, RawRouting)],
    clients: &[(String, RawClient)],
) -> RawConfig {
    let mut config = base.clone();
    config.upstreams = upstreams.iter().map(|(_, u)| u.clone()).collect();
    config.routings = routings.iter().map(|(_, r)| r.clone()).collect();
    config.clients = clients.iter().map(|(_, c)| c.clone()).collect();
    config
}

/// Which resource a validator error path (`routings[2].upstreams[0]`) belongs to.
fn blame(
    path: &FieldPath,
    upstreams: &[(String, RawUpstream)],
    routings: &[(String, RawRouting)],
    clients: &[(String, RawClient)],
) -> Option<(Kind, String)> {
    let (list, i, _) = path.list_entry()?;
    match list {
        "upstreams" => upstreams.get(i).map(|(n, _)| (Kind::Upstream, n.clone())),
        "routings" => routings.get(i).map(|(n, _)| (Kind::Routing, n.clone())),
        "clients" => clients
            .get(i)
            .map(|(n, _)| (Kind::DistributionClient, n.clone())),
        _ => None,
    }
}

/// The error with its `kind[i].` prefix cut, so it reads against the resource.
fn local_error(e: &ConfigError) -> String {
    match e.path.list_entry() {
        Some((_, _, field)) if !field.is_empty() => format!("{field}: {}", e.message),
        _ => e.message.clone(),
    }
}

fn sorted<K: kube::Resource>(objs: &[K]) -> Vec<&K> {
    let mut v: Vec<&K> = objs.iter().collect();
    v.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    v
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
