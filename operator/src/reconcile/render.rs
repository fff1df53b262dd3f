//! Custom resources → the controller's configuration (`proxy_pool_api::config::RawConfig`).
//!
//! Pure: takes the resources, the operator's base config and the data of the Secrets
//! they reference, returns the config, the Secret keys the controller must mount and,
//! per resource, what kept it out of the config. It never copies a Secret value into
//! the output: passwords, vendor API keys and every client credential (API key,
//! bearer token, Basic user name and password) become file paths of the mounted
//! Secret; the controller reads (and hashes) them when it loads the config. Upstream
//! proxy user names are files too (`credentials.usernameFile`).

use std::collections::{BTreeMap, BTreeSet};

use proxy_pool_api::config::raw::{
    RawBasic, RawClient, RawHashedSecret, RawLabels, RawProxyCredentials, RawRate, RawRetry,
    RawRouting, RawSource, RawStaticSource, RawStickySession, RawUpstream, RawUpstreamHealth,
    RawVendorApi,
};
use proxy_pool_api::config::{
    ConfigError, FieldPath, RawConfig, check_basic_username, check_proxy_credential, validate,
};
use sha2::{Digest, Sha256};

use crate::crd::{DistributionClient, Routing, SecretKeyRef, Upstream, VendorFormat};

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
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
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

struct Cx<'a> {
    inputs: &'a Inputs<'a>,
    mounts: BTreeMap<String, BTreeSet<String>>,
    problems: BTreeMap<(Kind, String), Vec<Problem>>,
    secret_hasher: Sha256,
}

impl Cx<'_> {
    fn problem(&mut self, kind: Kind, name: &str, p: Problem) {
        self.problems
            .entry((kind, name.to_owned()))
            .or_default()
            .push(p);
    }

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

    /// The config's clients that may use gateways with Basic credentials.
    fn gateway_clients(&self, config: &RawConfig) -> BTreeMap<String, GatewayClient> {
        let in_config: BTreeSet<&str> = config.clients.iter().map(|c| c.name.as_str()).collect();
        let mut out = BTreeMap::new();
        for c in self.inputs.clients {
            let n = name(c);
            let Some(basic) = &c.spec.auth.basic else {
                continue;
            };
            if !in_config.contains(n.as_str())
                || !c
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
                },
            );
        }
        out
    }

    /// The Secret, or a `SecretNotFound` problem.
    fn secret(&self, secret: &str) -> Result<&BTreeMap<String, Vec<u8>>, Problem> {
        self.inputs.secrets.get(secret).ok_or_else(|| {
            Problem::new(
                "SecretNotFound",
                format!("Secret {secret:?} does not exist in this namespace"),
            )
        })
    }

    /// A key the controller reads from a mounted file: returns its path.
    fn file(&mut self, secret: &str, key: &str) -> String {
        let value = self
            .inputs
            .secrets
            .get(secret)
            .and_then(|s| s.get(key))
            .map(Vec::as_slice)
            .unwrap_or_default();
        self.digest(secret, key, value);
        self.mounts
            .entry(secret.to_owned())
            .or_default()
            .insert(key.to_owned());
        format!(
            "{}/{secret}/{key}",
            self.inputs.secret_dir.trim_end_matches('/')
        )
    }

    fn digest(&mut self, secret: &str, key: &str, value: &[u8]) {
        self.secret_hasher.update(secret.as_bytes());
        self.secret_hasher.update([0]);
        self.secret_hasher.update(key.as_bytes());
        self.secret_hasher.update([0]);
        self.secret_hasher.update(Sha256::digest(value));
    }

    /// A client credential key the controller reads (and hashes) from a mounted file:
    /// checked to exist and be non-empty (the controller would refuse the whole
    /// config otherwise), returns the file path.
    fn credential_file(&mut self, r: &SecretKeyRef) -> Result<String, Problem> {
        let data = self.secret(&r.name)?;
        let value = data
            .get(&r.key)
            .ok_or_else(|| missing_key(&r.name, &r.key))?;
        if trim_newline(value).is_empty() {
            return Err(Problem::new(
                "InvalidSecret",
                format!("key {:?} of Secret {:?} is empty", r.key, r.name),
            ));
        }
        Ok(self.file(&r.name, &r.key))
    }

    /// A Basic user name file: also valid UTF-8 and a user name the controller accepts.
    fn username_file(&mut self, secret: &str) -> Result<String, Problem> {
        let r = SecretKeyRef {
            name: secret.to_owned(),
            key: "username".into(),
        };
        let data = self.secret(secret)?;
        let value = data
            .get("username")
            .ok_or_else(|| missing_key(secret, "username"))?;
        let ok =
            std::str::from_utf8(trim_newline(value)).is_ok_and(|u| check_basic_username(u).is_ok());
        if !ok {
            return Err(Problem::new(
                "InvalidSecret",
                format!(
                    "key \"username\" of Secret {secret:?} must be 1 to 128 bytes of UTF-8 without `:`"
                ),
            ));
        }
        self.credential_file(&r)
    }

    /// A gateway client's user name is what gateway clients present before their
    /// `-key-value` routing parameters: `A–Z a–z 0–9 _ . @`, at most 255 bytes.
    fn gateway_username(&self, secret: &str) -> Result<(), Problem> {
        let value = self
            .secret(secret)?
            .get("username")
            .map(|v| trim_newline(v))
            .unwrap_or_default();
        let ok = !value.is_empty()
            && value.len() <= 255
            && value
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@'));
        if ok {
            Ok(())
        } else {
            Err(Problem::new(
                "InvalidSecret",
                format!(
                    "key \"username\" of Secret {secret:?}: with gateway:connect the user name must be A-Z a-z 0-9 _ . @ only (`-` separates the gateway's username parameters)"
                ),
            ))
        }
    }

    /// `username` and `password` as mounted files (the user name checked here with the
    /// controller's own rule).
    fn proxy_credentials(&mut self, secret: &str) -> Result<RawProxyCredentials, Problem> {
        let data = self.secret(secret)?;
        if !data.contains_key("password") {
            return Err(missing_key(secret, "password"));
        }
        let value = data
            .get("username")
            .ok_or_else(|| missing_key(secret, "username"))?;
        let ok = std::str::from_utf8(trim_newline(value))
            .is_ok_and(|u| check_proxy_credential(u).is_ok());
        if !ok {
            return Err(Problem::new(
                "InvalidSecret",
                format!(
                    "key \"username\" of Secret {secret:?} must be 1 to 255 bytes of UTF-8 without control characters"
                ),
            ));
        }
        Ok(RawProxyCredentials {
            username: String::new(),
            username_file: Some(self.file(secret, "username")),
            password: None,
            password_file: Some(self.file(secret, "password")),
        })
    }

    fn upstream(&mut self, u: &Upstream) -> Option<RawUpstream> {
        let n = name(u);
        match self.upstream_source(u) {
            Ok(source) => Some(RawUpstream {
                name: n,
                source,
                protocol: Some(u.spec.protocol.as_str().to_owned()),
                labels: u
                    .spec
                    .labels
                    .as_ref()
                    .map(|l| RawLabels {
                        region: l.region.clone(),
                        carrier: l.carrier.clone(),
                    })
                    .unwrap_or_default(),
                ttl: Some(u.spec.ttl.clone()),
                safety_margin: Some(u.spec.safety_margin.clone()),
                quarantine: u.spec.quarantine.clone(),
                max_concurrency_per_proxy: Some(u.spec.max_concurrency_per_proxy),
                max_size: Some(u.spec.max_size),
                fetch_interval: Some(u.spec.fetch_interval.clone()),
                health: u.spec.health.as_ref().map(|h| RawUpstreamHealth {
                    interval: Some(h.interval.clone()),
                    timeout: Some(h.timeout.clone()),
                    failure_threshold: Some(h.failure_threshold),
                    egress: Some(h.egress),
                    targets: h.targets.clone(),
                }),
            }),
            Err(p) => {
                self.problem(Kind::Upstream, &n, p);
                None
            }
        }
    }

    fn upstream_source(&mut self, u: &Upstream) -> Result<RawSource, Problem> {
        let src = &u.spec.source;
        if let Some(v) = &src.vendor_api {
            let budget = u.spec.fetch_budget.as_ref();
            let (api_key_file, credentials) = match &v.credentials_secret_ref {
                None => (None, None),
                Some(r) => {
                    let data = self.secret(&r.name)?;
                    let has_key = data.contains_key("apiKey");
                    let has_user = data.contains_key("username") || data.contains_key("password");
                    if !has_key && !has_user {
                        return Err(Problem::new(
                            "SecretKeyMissing",
                            format!(
                                "Secret {:?} has neither key \"apiKey\" nor keys \"username\" and \"password\"",
                                r.name
                            ),
                        ));
                    }
                    let creds = if has_user {
                        Some(self.proxy_credentials(&r.name)?)
                    } else {
                        None
                    };
                    let key = has_key.then(|| self.file(&r.name, "apiKey"));
                    (key, creds)
                }
            };
            return Ok(RawSource {
                static_list: None,
                vendor_api: Some(RawVendorApi {
                    url: v.url.clone(),
                    format: match v.format {
                        VendorFormat::Json => "json",
                        VendorFormat::Lines => "lines",
                    }
                    .to_owned(),
                    api_key_file,
                    credentials,
                    timeout: budget.map(|b| b.timeout.clone()),
                    max_requests_per_minute: budget.map(|b| b.max_requests_per_minute),
                    max_proxies_per_fetch: budget.and_then(|b| b.max_proxies_per_fetch),
                }),
            });
        }
        if let Some(s) = &src.static_list {
            let credentials = match &s.credentials_secret_ref {
                None => None,
                Some(r) => Some(self.proxy_credentials(&r.name)?),
            };
            return Ok(RawSource {
                static_list: Some(RawStaticSource {
                    proxies: s.proxies.clone(),
                    credentials,
                    assume_healthy: None,
                }),
                vendor_api: None,
            });
        }
        Err(Problem::new(
            "InvalidSpec",
            "source needs exactly one of vendorApi or static",
        ))
    }

    fn client(&mut self, c: &DistributionClient) -> Option<RawClient> {
        let n = name(c);
        let auth = &c.spec.auth;
        let mut out = RawClient {
            name: n.clone(),
            permissions: Some(
                c.spec
                    .permissions
                    .iter()
                    .map(|p| permission(*p).to_owned())
                    .collect(),
            ),
            max_extract_count: c.spec.max_extract_count,
            allowed_upstreams: c.spec.allowed_upstreams.clone(),
            allowed_regions: c.spec.allowed_regions.clone(),
            rate_limit: c.spec.rate_limit.as_ref().map(|r| RawRate {
                requests_per_second: r.requests_per_second,
                burst: r.burst,
            }),
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

/// A Routing's config entry, or why it cannot have one.
fn routing(
    r: &Routing,
    upstreams: &BTreeSet<&str>,
    clients: &BTreeSet<&str>,
) -> Result<RawRouting, Problem> {
    let unknown: Vec<&str> = r
        .spec
        .upstreams
        .iter()
        .map(String::as_str)
        .filter(|u| !upstreams.contains(u))
        .collect();
    if !unknown.is_empty() {
        return Err(Problem::new(
            "UnknownUpstream",
            format!("upstream(s) {unknown:?} not found or not usable (see their status)"),
        ));
    }
    let match_clients = r
        .spec
        .match_
        .as_ref()
        .map(|m| m.clients.clone())
        .unwrap_or_default();
    let unknown: Vec<&str> = match_clients
        .iter()
        .map(String::as_str)
        .filter(|c| !clients.contains(c))
        .collect();
    if !unknown.is_empty() {
        return Err(Problem::new(
            "UnknownClient",
            format!("DistributionClient(s) {unknown:?} not found or not usable (see their status)"),
        ));
    }
    // The CRD's empty list means "any upstream"; the config wants them named.
    let names: Vec<String> = if r.spec.upstreams.is_empty() {
        upstreams.iter().map(|s| (*s).to_owned()).collect()
    } else {
        r.spec.upstreams.clone()
    };
    if names.is_empty() {
        return Err(Problem::new(
            "NoUpstreams",
            "no usable Upstream exists in this namespace",
        ));
    }
    let labels = r.spec.labels.clone().unwrap_or_default();
    let matcher = r.spec.match_.clone().unwrap_or_default();
    Ok(RawRouting {
        name: name(r),
        // The CRD runs the highest priority first, the config the lowest.
        priority: -r.spec.priority,
        clients: match_clients,
        upstreams: names,
        regions: labels.regions,
        carriers: labels.carriers,
        // The CRD's `usernameParams` map requires each key to equal one value.
        username_params: matcher
            .username_params
            .into_iter()
            .map(|(k, v)| (k, vec![v]))
            .collect(),
        target_hosts: matcher.target_hosts,
        target_check_port: None,
        sticky_session: r.spec.sticky_session.as_ref().map(|s| RawStickySession {
            ttl: Some(s.ttl.clone()),
            idle_timeout: Some(s.idle_timeout.clone()),
            param: None,
        }),
        retry: r.spec.retry.as_ref().map(|x| RawRetry {
            max_attempts: Some(x.max_attempts),
            deadline: Some(x.deadline.clone()),
        }),
        // Each Routing runs on its own gateway Deployment, whose pods register with
        // the Routing's name as their gateway group (`--gateway-group`).
        gateway_groups: vec![name(r)],
        connect_ports: r.spec.connect_ports.clone(),
        strategy: Some(r.spec.strategy.as_str().to_owned()),
    })
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

fn missing_key(secret: &str, key: &str) -> Problem {
    Problem::new(
        "SecretKeyMissing",
        format!("Secret {secret:?} has no key {key:?}"),
    )
}

fn trim_newline(value: &[u8]) -> &[u8] {
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    &value[..end]
}

fn permission(p: crate::crd::Permission) -> &'static str {
    match p {
        crate::crd::Permission::DistributionExtract => "distribution:extract",
        crate::crd::Permission::GatewayConnect => "gateway:connect",
        crate::crd::Permission::StatsRead => "stats:read",
    }
}

fn name<K: kube::Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

fn sorted<K: kube::Resource>(objs: &[K]) -> Vec<&K> {
    let mut v: Vec<&K> = objs.iter().collect();
    v.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    v
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

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
