//! What a rendering reads and returns: the custom resources and Secret data in, the
//! config, the Secret keys to mount and each left-out resource's problems out.

use std::collections::{BTreeMap, BTreeSet};

use proxy_pool_api::config::{ConfigError, RawConfig};
use sha2::{Digest, Sha256};

use crate::crd::{DistributionClient, Routing, Upstream};

/// Data of the Secrets in the namespace, by Secret name then key.
pub type SecretData = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// The kind of a custom resource, as it keys [`Rendered::problems`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `Upstream`.
    Upstream,
    /// `Routing`.
    Routing,
    /// `DistributionClient`.
    DistributionClient,
}

impl Kind {
    /// The Kubernetes kind, also the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upstream => "Upstream",
            Self::Routing => "Routing",
            Self::DistributionClient => "DistributionClient",
        }
    }
}

/// Why a resource is left out of the controller config (shown as its Degraded condition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// `PascalCase` reason, e.g. `SecretNotFound`.
    pub reason: &'static str,
    /// Human-readable detail; names Secrets and keys, never their values.
    pub message: String,
}

impl Problem {
    pub(super) fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// The resources and Secrets one rendering reads.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// Settings not derived from custom resources (store, listeners, …), from the chart.
    pub base: &'a RawConfig,
    /// Upstreams of the namespace.
    pub upstreams: &'a [Upstream],
    /// Routings of the namespace.
    pub routings: &'a [Routing],
    /// DistributionClients of the namespace.
    pub clients: &'a [DistributionClient],
    /// Data of the Secrets the resources may reference (missing name: no such Secret).
    pub secrets: &'a SecretData,
    /// Directory where the controller pod mounts referenced Secret keys as
    /// `<dir>/<secret>/<key>`.
    pub secret_dir: &'a str,
}

/// The outcome of one rendering.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The controller config; it passed the controller's own `validate()` unless
    /// [`Rendered::global`] is non-empty.
    pub config: RawConfig,
    /// Secret keys the controller pod must mount, by Secret name.
    pub mounts: BTreeMap<String, BTreeSet<String>>,
    /// Resources left out of the config and why, by kind and name.
    pub problems: BTreeMap<(Kind, String), Vec<Problem>>,
    /// Problems no single resource explains (e.g. in the base config): when non-empty
    /// the config must not be written.
    pub global: Vec<ConfigError>,
    /// Digest of the referenced Secret keys' values (SHA-256 over their hashes), so a
    /// changed password changes the config hash without revealing anything.
    pub secrets_digest: String,
    /// Clients that may send traffic through gateways — in the config, holding
    /// `gateway:connect` and with `auth.basic` — by name. Gateways get their
    /// credentials as files from here (see `gateway::gateway_clients`).
    pub gateway_clients: BTreeMap<String, GatewayClient>,
}

/// A gateway client: the Secret with its `username` and `password` keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayClient {
    /// The `auth.basic` Secret.
    pub secret: String,
    /// SHA-256 (hex) over the Secret's name and the two values: changes when the
    /// credentials do, reveals nothing.
    pub digest: String,
    /// The client's fleet-wide gateway limits (rendered into its clients-file entries).
    pub limits: Option<proxy_pool_api::client_limits::GatewayLimits>,
}

impl Rendered {
    /// Problems of one resource (empty: it is in the config).
    pub fn problems_of(&self, kind: Kind, name: &str) -> &[Problem] {
        self.problems
            .get(&(kind, name.to_owned()))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The config as YAML, null fields left out.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let mut value = serde_yaml::to_value(&self.config)?;
        strip_nulls(&mut value);
        serde_yaml::to_string(&value)
    }

    /// Why the Distribution API refuses every extract request with this config, if it
    /// does: no usable DistributionClient is in it (none exists, or each one was left
    /// out) and anonymous access was not asked for (`auth.mode: none`). Fail closed.
    pub fn extraction_refused(&self) -> Option<Problem> {
        let anonymous = self.config.distribution.auth.mode.as_deref() == Some("none");
        (self.config.clients.is_empty() && !anonymous).then(|| {
            Problem::new(
                "ExtractionRefused",
                "no usable DistributionClient is in the controller config: the Distribution \
                 API refuses every extract request (401) until one is (anonymous access only \
                 with distribution.auth.mode: none)",
            )
        })
    }

    /// Content hash of the config YAML and the referenced Secret values.
    pub fn hash(&self, yaml: &str) -> String {
        let mut h = Sha256::new();
        h.update(yaml.as_bytes());
        h.update([0]);
        h.update(self.secrets_digest.as_bytes());
        hex::encode(h.finalize())
    }
}

/// The name of a custom resource (empty when it has none).
pub(super) fn name<K: kube::Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

fn strip_nulls(value: &mut serde_yaml::Value) {
    match value {
        serde_yaml::Value::Mapping(m) => {
            m.retain(|_, v| !v.is_null());
            for (_, v) in m.iter_mut() {
                strip_nulls(v);
            }
        }
        serde_yaml::Value::Sequence(s) => s.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}
