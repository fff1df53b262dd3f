//! A Routing's clients file: which DistributionClients its gateway accepts and where
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

/// The clients of a Routing's gateway: every usable gateway client (`gateway:connect`
/// with `auth.basic`), narrowed to `match.clients` when the Routing names clients —
/// a gateway serves only its own Routing, so others would be refused anyway and their
/// Secrets stay out of its pods.
pub fn gateway_clients(r: &Routing, available: &BTreeMap<String, GatewayClient>) -> GatewayClients {
    let wanted: BTreeSet<&str> = r
        .spec
        .match_
        .as_ref()
        .map(|m| m.clients.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut names = Vec::new();
    let mut entries = Vec::new();
    let mut mounts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut h = Sha256::new();
    for (name, c) in available {
        if !wanted.is_empty() && !wanted.contains(name.as_str()) {
            continue;
        }
        entries.push(ClientEntry::from_secret_dir(
            name.as_str(),
            &format!("{CLIENTS_DIR}/secrets/{}", c.secret),
        ));
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
