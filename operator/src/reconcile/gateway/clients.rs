//! A gateway group's clients file: which DistributionClients its gateways accept and where
//! the gateway finds their Basic credentials (mounted Secret keys, never values),
//! with a content hash that changes when a credential does. Pure.

use std::collections::{BTreeMap, BTreeSet};

use proxy_pool_api::gateway_clients::{self, ClientEntry};
use sha2::{Digest, Sha256};

use crate::crd::Routing;
use crate::reconcile::render::GatewayClient;

/// Where a gateway container finds its clients file and the client Secrets:
/// `clients.json` and `secrets/<secret>/{username,password}`.
pub const CLIENTS_DIR: &str = "/etc/proxy-pool-gateway";
/// Key of the clients file in the clients ConfigMap (and its name in the volume).
pub const CLIENTS_KEY: &str = "clients.json";

/// The clients a Routing's gateway accepts, as the gateway's `--clients-file` and
/// the Secret keys it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayClients {
    /// Names of the DistributionClients, sorted.
    pub names: Vec<String>,
    /// The clients file (JSON); credentials only by mounted file path.
    pub file: String,
    /// Secret keys the gateway pod mounts, by Secret name.
    pub mounts: BTreeMap<String, BTreeSet<String>>,
    /// Content hash of the file and the credentials' values.
    pub hash: String,
}

/// The clients a group's Routings accept: `None` (every client) when one of them names
/// none in `match.clients`, else the union of the names.
pub fn wanted_clients<'a>(
    routings: impl IntoIterator<Item = &'a Routing>,
) -> Option<BTreeSet<String>> {
    let mut wanted = BTreeSet::new();
    for r in routings {
        let named = r.spec.match_.as_ref().map(|m| &m.clients);
        match named {
            Some(c) if !c.is_empty() => wanted.extend(c.iter().cloned()),
            _ => return None,
        }
    }
    Some(wanted)
}

/// The clients of a gateway group: every usable gateway client (`gateway:connect`
/// with `auth.basic`), narrowed to `wanted` (see [`wanted_clients`]) — a gateway
/// serves only its group's Routings, so other clients would be refused anyway and
/// their Secrets stay out of its pods.
pub fn gateway_clients(
    wanted: Option<&BTreeSet<String>>,
    available: &BTreeMap<String, GatewayClient>,
) -> GatewayClients {
    let mut names = Vec::new();
    let mut entries = Vec::new();
    let mut mounts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut h = Sha256::new();
    for (name, c) in available {
        if wanted.is_some_and(|w| !w.contains(name)) {
            continue;
        }
        let mut entry = ClientEntry::from_secret_dir(
            name.as_str(),
            &format!("{CLIENTS_DIR}/secrets/{}", c.secret),
        );
        entry.limits = c.limits;
        entries.push(entry);
        mounts
            .entry(c.secret.clone())
            .or_default()
            .extend(["username".to_owned(), "password".to_owned()]);
        h.update(c.digest.as_bytes());
        h.update([0]);
        names.push(name.clone());
    }
    let file = gateway_clients::render(&entries);
    h.update(file.as_bytes());
    GatewayClients {
        names,
        file,
        mounts,
        hash: hex::encode(h.finalize()),
    }
}
