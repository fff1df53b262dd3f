//! Rendering tests: every example custom resource goes through the operator and the
//! result passes the controller's own loader; bad references become problems; no
//! Secret value ever reaches the output.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Secret;
use proxy_pool_api::config::{RawConfig, load_yaml};

use super::*;
use crate::crd::{DistributionClient, Routing, Upstream};

/// Everything in `examples/*.yaml`: the custom resources and the Secrets.
#[derive(Default)]
struct Examples {
    upstreams: Vec<Upstream>,
    routings: Vec<Routing>,
    clients: Vec<DistributionClient>,
    secrets: SecretData,
    /// Every Secret value, to check none leaks.
    secret_values: Vec<String>,
}

fn examples() -> Examples {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut out = Examples::default();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read example");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(doc).expect("example YAML");
            let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
            match kind {
                "Upstream" => out
                    .upstreams
                    .push(serde_yaml::from_value(value).expect("Upstream")),
                "Routing" => out
                    .routings
                    .push(serde_yaml::from_value(value).expect("Routing")),
                "DistributionClient" => out
                    .clients
                    .push(serde_yaml::from_value(value).expect("DistributionClient")),
                "Secret" => {
                    let s: Secret = serde_yaml::from_value(value).expect("Secret");
                    let name = s.metadata.name.clone().expect("Secret name");
                    let entry = out.secrets.entry(name).or_default();
                    for (k, v) in s.string_data.unwrap_or_default() {
                        out.secret_values.push(v.clone());
                        entry.insert(k, v.into_bytes());
                    }
                    for (k, v) in s.data.unwrap_or_default() {
                        out.secret_values
                            .push(String::from_utf8_lossy(&v.0).into_owned());
                        entry.insert(k, v.0);
                    }
                }
                // controller.yaml is a controller config, not a Kubernetes object.
                _ => {}
            }
        }
    }
    out
}

use serde::Deserialize;

fn inputs<'a>(ex: &'a Examples, base: &'a RawConfig) -> Inputs<'a> {
    Inputs {
        base,
        upstreams: &ex.upstreams,
        routings: &ex.routings,
        clients: &ex.clients,
        secrets: &ex.secrets,
        secret_dir: "/etc/proxy-pool/secrets",
    }
}

#[test]
fn every_example_renders_into_a_config_the_controller_accepts() {
    let ex = examples();
    assert!(!ex.upstreams.is_empty() && !ex.routings.is_empty() && !ex.clients.is_empty());
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    assert!(out.problems.is_empty(), "problems: {:?}", out.problems);
    assert!(out.global.is_empty(), "global problems: {:?}", out.global);
    assert_eq!(out.config.upstreams.len(), ex.upstreams.len());
    assert_eq!(out.config.routings.len(), ex.routings.len());
    assert_eq!(out.config.clients.len(), ex.clients.len());
    // The controller's own loader (parse + validate) accepts the written YAML.
    let yaml = out.to_yaml().expect("YAML");
    let config = load_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n---\n{yaml}"));
    assert_eq!(config.upstreams.len(), ex.upstreams.len());
    assert_eq!(config.clients.len(), ex.clients.len());
    // Also with the chart's default base config.
    let chart_base: RawConfig = serde_yaml::from_str(CHART_LIKE_BASE).expect("base");
    let yaml = render(&inputs(&ex, &chart_base)).to_yaml().expect("YAML");
    load_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n---\n{yaml}"));
}

const CHART_LIKE_BASE: &str = "
store:
  backend: redis
  redis:
    sentinel: {masterName: mymaster, addresses: ['redis-sentinel:26379']}
    passwordFile: /etc/proxy-pool/redis/password
distribution: {listen: '0.0.0.0:8081'}
admin: {listen: '0.0.0.0:9090'}
controlPlane: {enabled: true, listen: '0.0.0.0:9443'}
";

#[test]
fn no_secret_value_reaches_the_config() {
    let ex = examples();
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let yaml = out.to_yaml().expect("YAML");
    for value in &ex.secret_values {
        // User names are identifiers the schema holds in clear (see docs/operator.md).
        let is_username = ex
            .secrets
            .values()
            .any(|s| s.get("username").is_some_and(|u| u == value.as_bytes()));
        if !is_username {
            assert!(
                !yaml.contains(value.as_str()),
                "secret value leaked into:\n{yaml}"
            );
        }
    }
    assert!(yaml.contains("/etc/proxy-pool/secrets/vendor-sim-credentials/password"));
    assert!(yaml.contains("/etc/proxy-pool/secrets/vendor-sim-credentials/apiKey"));
    // Upstream proxy user names are files too: not in clear.
    assert!(yaml.contains("/etc/proxy-pool/secrets/vendor-sim-credentials/username"));
    assert!(!yaml.contains("proxyuser"), "{yaml}");
    let mounted = out.mounts.get("vendor-sim-credentials").expect("mount");
    assert!(mounted.contains("password") && mounted.contains("apiKey"));
    // Client credentials are files too: not even their hash is in the config.
    let key = hex::encode(Sha256::digest(b"example-client-api-key-change-me"));
    assert!(!yaml.contains(&key));
    let client = &out.config.clients[0];
    let dir = "/etc/proxy-pool/secrets/team-crawler-credentials";
    assert_eq!(
        client.api_keys[0].file.as_deref(),
        Some(format!("{dir}/apiKey").as_str())
    );
    assert_eq!(client.api_keys[0].sha256, None);
    let basic = client.basic.as_ref().expect("basic");
    assert_eq!(
        (
            basic.username_file.as_deref(),
            basic.password_file.as_deref()
        ),
        (
            Some(format!("{dir}/username").as_str()),
            Some(format!("{dir}/password").as_str())
        )
    );
    assert_eq!((&basic.username, &basic.password_sha256), (&None, &None));
    let mounted = out
        .mounts
        .get("team-crawler-credentials")
        .expect("client mount");
    assert_eq!(
        mounted.iter().map(String::as_str).collect::<Vec<_>>(),
        ["apiKey", "password", "username"]
    );
}

#[test]
fn every_routing_and_upstream_field_reaches_the_config() {
    let ex = examples();
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let r = &out.config.routings[0];
    assert_eq!(r.name, "shanghai-crawler");
    assert_eq!(r.clients, ["team-crawler"]);
    assert_eq!(
        r.username_params,
        BTreeMap::from([("region".to_owned(), vec!["shanghai".to_owned()])])
    );
    assert_eq!(r.target_hosts, ["localhost", "*.example.com"]);
    assert_eq!(r.regions, ["shanghai"]);
    assert_eq!(r.carriers, ["telecom"]);
    assert_eq!(r.strategy.as_deref(), Some("powerOfTwoChoices"));
    let sticky = r.sticky_session.as_ref().expect("sticky");
    assert_eq!(
        (sticky.ttl.as_deref(), sticky.idle_timeout.as_deref()),
        (Some("10m"), Some("2m"))
    );
    let retry = r.retry.as_ref().expect("retry");
    assert_eq!(
        (retry.max_attempts, retry.deadline.as_deref()),
        (Some(3), Some("10s"))
    );
    assert_eq!(
        r.gateway_groups,
        ["edge"],
        "the gateways of its GatewayGroup"
    );
    // An inline (deprecated) gateway is the implicit group named after the Routing.
    let mut inline = ex.routings[0].clone();
    inline.spec.gateway_group = None;
    inline.spec.gateway =
        Some(serde_yaml::from_str("listeners: {http: {port: 3128}}").expect("GatewaySpec"));
    let routings = [inline];
    let out_inline = render(&Inputs {
        routings: &routings,
        ..inputs(&ex, &base)
    });
    assert_eq!(
        out_inline.config.routings[0].gateway_groups,
        ["shanghai-crawler"],
        "its own gateway"
    );

    let u = &out.config.upstreams[0];
    let v = u.source.vendor_api.as_ref().expect("vendor");
    assert_eq!(
        (
            v.max_proxies_per_fetch,
            v.max_requests_per_minute,
            v.timeout.as_deref()
        ),
        (Some(50), Some(30), Some("5s"))
    );
    let h = u.health.as_ref().expect("health");
    assert_eq!(h.interval.as_deref(), Some("15s"));
    assert_eq!(h.timeout.as_deref(), Some("3s"));
    assert_eq!((h.failure_threshold, h.egress), (Some(2), Some(true)));
    assert_eq!(h.targets, ["https://localhost/"]);

    // What the controller makes of it.
    let config = load_yaml(&out.to_yaml().expect("YAML")).expect("valid");
    let r = &config.routings[0];
    assert_eq!(r.sticky.as_ref().map(|s| s.param.as_str()), Some("session"));
    assert_eq!(r.retry.deadline, std::time::Duration::from_secs(10));
    assert_eq!(config.upstreams[0].health.failure_threshold.get(), 2);
    assert!(config.upstreams[0].health.egress);
}

/// A Routing's `labels.cities` and an Upstream's `labels.city` reach the controller's
/// config, which validates them as labels.
#[test]
fn cities_reach_the_config() {
    let mut ex = examples();
    let labels = ex.routings[0]
        .spec
        .labels
        .get_or_insert_with(Default::default);
    labels.cities = vec!["pudong".into(), "minhang".into()];
    let labels = ex.upstreams[0]
        .spec
        .labels
        .get_or_insert_with(Default::default);
    labels.city = Some("pudong".into());
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    assert_eq!(out.config.routings[0].cities, ["pudong", "minhang"]);
    assert_eq!(
        out.config.upstreams[0].labels.city.as_deref(),
        Some("pudong")
    );
    let config = load_yaml(&out.to_yaml().expect("YAML")).expect("valid");
    assert_eq!(config.routings[0].cities, ["pudong", "minhang"]);
    assert_eq!(config.upstreams[0].city.as_deref(), Some("pudong"));
}

#[test]
fn client_credential_files_resolve_in_the_controller() {
    // Write the example Secrets where the rendered config says they are mounted,
    // then let the controller's loader read and hash them.
    let ex = examples();
    let dir = std::env::temp_dir().join(format!("proxy-pool-render-{}", std::process::id()));
    let secret_dir = dir.join("secrets").display().to_string();
    for (secret, keys) in &ex.secrets {
        std::fs::create_dir_all(dir.join("secrets").join(secret)).expect("mkdir");
        for (k, v) in keys {
            std::fs::write(dir.join("secrets").join(secret).join(k), v).expect("write");
        }
    }
    let base = RawConfig::default();
    let out = render(&Inputs {
        secret_dir: &secret_dir,
        ..inputs(&ex, &base)
    });
    let loaded = proxy_pool_api::config::load_yaml_with_files(&out.to_yaml().expect("YAML"));
    let _ = std::fs::remove_dir_all(&dir);
    let config = loaded.expect("files resolve");
    let c = &config.clients[0];
    assert_eq!(
        c.api_keys[0].0,
        <[u8; 32]>::from(Sha256::digest(b"example-client-api-key-change-me"))
    );
    let basic = c.basic.as_ref().expect("basic");
    assert_eq!(basic.username, "crawlerbot");
    assert!(basic.password.matches(b"example-password-change-me"));
}

#[test]
fn an_empty_or_bad_client_secret_is_a_problem() {
    let mut ex = examples();
    let s = ex
        .secrets
        .get_mut("team-crawler-credentials")
        .expect("client secret");
    s.insert("apiKey".into(), b"\n".to_vec());
    s.insert("username".into(), b"a:b".to_vec());
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let p = out.problems_of(Kind::DistributionClient, "team-crawler");
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p.iter().all(|p| p.reason == "InvalidSecret"), "{p:?}");
    assert!(out.config.clients.is_empty());
}

#[test]
fn a_missing_secret_leaves_the_resource_out_and_says_why() {
    let mut ex = examples();
    ex.secrets.remove("vendor-sim-credentials");
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let p = out.problems_of(Kind::Upstream, "vendor-sim");
    assert_eq!(p[0].reason, "SecretNotFound", "{p:?}");
    assert!(out.config.upstreams.is_empty());
    // The routing that named it cannot be served either.
    let p = out.problems_of(Kind::Routing, "shanghai-crawler");
    assert_eq!(p[0].reason, "UnknownUpstream", "{p:?}");
    assert!(out.global.is_empty(), "{:?}", out.global);
    load_yaml(&out.to_yaml().expect("YAML")).expect("still a valid config");
}

#[test]
fn an_unknown_upstream_or_missing_key_is_a_problem_not_a_failure() {
    let mut ex = examples();
    ex.routings[0].spec.upstreams = vec!["does-not-exist".into()];
    ex.secrets
        .get_mut("team-crawler-credentials")
        .expect("client secret")
        .remove("password");
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let p = out.problems_of(Kind::Routing, "shanghai-crawler");
    assert!(
        p.iter()
            .any(|p| p.reason == "UnknownUpstream" || p.reason == "UnknownClient"),
        "{p:?}"
    );
    let p = out.problems_of(Kind::DistributionClient, "team-crawler");
    assert_eq!(p[0].reason, "SecretKeyMissing");
    assert!(!p[0].message.contains("example-"), "no values in messages");
    assert!(out.problems_of(Kind::Upstream, "vendor-sim").is_empty());
}

#[test]
fn the_validator_blames_the_resource_it_rejects() {
    let mut ex = examples();
    // The CRD admits up to 10000; the controller's validator only 1000.
    ex.clients[0].spec.max_extract_count = Some(5000);
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let p = out.problems_of(Kind::DistributionClient, "team-crawler");
    assert_eq!(p[0].reason, "InvalidConfig", "{p:?}");
    assert!(p[0].message.contains("maxExtractCount"), "{p:?}");
    assert!(out.global.is_empty(), "{:?}", out.global);
}

#[test]
fn a_bad_base_config_is_global() {
    let ex = examples();
    let base: RawConfig = serde_yaml::from_str("store: {backend: nosuch}").expect("raw");
    let out = render(&inputs(&ex, &base));
    assert!(!out.global.is_empty());
    assert!(out.global[0].path.to_string().starts_with("store"));
}

#[test]
fn rendering_is_deterministic_and_the_hash_follows_secret_values() {
    let mut ex = examples();
    let base = RawConfig::default();
    let a = render(&inputs(&ex, &base));
    ex.upstreams.reverse();
    ex.clients.reverse();
    let b = render(&inputs(&ex, &base));
    let (ya, yb) = (a.to_yaml().expect("a"), b.to_yaml().expect("b"));
    assert_eq!(ya, yb);
    assert_eq!(a.hash(&ya), b.hash(&yb));
    ex.secrets
        .get_mut("vendor-sim-credentials")
        .expect("secret")
        .insert("password".into(), b"rotated".to_vec());
    let c = render(&inputs(&ex, &base));
    let yc = c.to_yaml().expect("c");
    assert_eq!(ya, yc, "a password file's content is not in the config");
    assert_ne!(a.hash(&ya), c.hash(&yc), "but it rolls the controller");
}

#[test]
fn priorities_are_inverted_and_empty_upstreams_mean_all() {
    let mut ex = examples();
    ex.routings[0].spec.upstreams.clear();
    ex.routings[0].spec.priority = 10;
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    assert_eq!(out.config.routings[0].priority, -10);
    assert_eq!(
        out.config.routings[0].upstreams,
        vec!["vendor-sim".to_owned()]
    );
}

#[test]
fn gateway_clients_are_the_config_clients_with_gateway_connect_and_basic() {
    use crate::crd::Permission;
    use crate::reconcile::gateway::{gateway_clients, wanted_clients};
    let mut ex = examples();
    // A second client: Basic auth but no gateway:connect — not a gateway client.
    let mut extract_only = ex.clients[0].clone();
    extract_only.metadata.name = Some("extract-only".into());
    extract_only.spec.permissions = vec![Permission::DistributionExtract];
    extract_only.spec.auth.api_key = None;
    extract_only.spec.auth.basic = Some(crate::crd::BasicAuth {
        secret_ref: crate::crd::SecretRef {
            name: "extract-only-basic".into(),
        },
    });
    ex.secrets.insert(
        "extract-only-basic".into(),
        BTreeMap::from([
            ("username".to_owned(), b"extractor".to_vec()),
            ("password".to_owned(), b"pw-extract".to_vec()),
        ]),
    );
    // A third client with gateway:connect whose Secret is missing: left out.
    let mut broken = ex.clients[0].clone();
    broken.metadata.name = Some("broken".into());
    broken.spec.auth.api_key = None;
    broken.spec.auth.basic = Some(crate::crd::BasicAuth {
        secret_ref: crate::crd::SecretRef {
            name: "no-such-secret".into(),
        },
    });
    ex.clients.push(extract_only);
    ex.clients.push(broken);
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    assert_eq!(
        out.gateway_clients.keys().collect::<Vec<_>>(),
        ["team-crawler"],
        "{:?}",
        out.problems
    );
    let c = &out.gateway_clients["team-crawler"];
    assert_eq!(c.secret, "team-crawler-credentials");
    // The Routing example names team-crawler: its gateway gets exactly that client.
    let routing = &ex.routings[0];
    let clients = gateway_clients(wanted_clients([routing]).as_ref(), &out.gateway_clients);
    assert_eq!(clients.names, ["team-crawler"]);
    for value in &ex.secret_values {
        assert!(!clients.file.contains(value.as_str()), "{}", clients.file);
    }
    let pw = hex::encode(Sha256::digest(b"example-password-change-me"));
    assert!(!clients.file.contains(&pw) && !c.digest.contains(&pw));
    // A changed password changes the digest (so the gateway rolls), nothing else.
    if let Some(s) = ex.secrets.get_mut("team-crawler-credentials") {
        s.insert("password".into(), b"rotated".to_vec());
    }
    let again = render(&inputs(&ex, &base));
    let rotated = gateway_clients(wanted_clients([routing]).as_ref(), &again.gateway_clients);
    assert_eq!(rotated.file, clients.file);
    assert_ne!(rotated.hash, clients.hash);
}

#[test]
fn gateway_limits_render_into_the_config_and_the_clients_file() {
    use crate::crd::GatewayLimitsSpec;
    use crate::reconcile::gateway::gateway_clients;
    use proxy_pool_api::gateway_clients::ClientEntry;
    let mut ex = examples();
    let base = RawConfig::default();
    // Without gatewayLimits: in neither.
    let out = render(&inputs(&ex, &base));
    assert_eq!(out.config.clients[0].gateway_limits, None);
    let file = gateway_clients(None, &out.gateway_clients).file;
    let entries: Vec<ClientEntry> = serde_json::from_str(&file).expect("clients file");
    assert_eq!(entries[0].limits, None);
    assert!(!file.contains("limits"), "{file}");

    ex.clients[0].spec.gateway_limits = Some(GatewayLimitsSpec {
        max_connections: Some(200),
        requests_per_second: Some(50),
        burst: Some(100),
        daily_bytes: Some(10 << 30),
    });
    let out = render(&inputs(&ex, &base));
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let want = proxy_pool_api::client_limits::GatewayLimits {
        max_connections: std::num::NonZeroU32::new(200),
        requests_per_second: std::num::NonZeroU32::new(50),
        burst: std::num::NonZeroU32::new(100),
        daily_bytes: std::num::NonZeroU64::new(10 << 30),
    };
    // The controller config (which passed the controller's own validation)...
    let raw = &out.config.clients[0];
    assert_eq!(
        (raw.name.as_str(), raw.gateway_limits),
        ("team-crawler", Some(want))
    );
    let yaml = out.to_yaml().expect("config YAML");
    let loaded = load_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n---\n{yaml}"));
    assert_eq!(loaded.clients[0].gateway_limits, Some(want));
    // ...and the gateways' clients file carry the same limits.
    let rendered = gateway_clients(None, &out.gateway_clients);
    let entries: Vec<ClientEntry> = serde_json::from_str(&rendered.file).expect("clients file");
    assert_eq!(entries[0].limits, Some(want));
    assert!(
        rendered.file.contains(r#""limits":{"maxConnections":200,"requestsPerSecond":50,"burst":100,"dailyBytes":10737418240}"#),
        "{}",
        rendered.file
    );
}

#[test]
fn a_gateway_client_needs_a_user_name_the_gateway_can_parse() {
    let mut ex = examples();
    if let Some(s) = ex.secrets.get_mut("team-crawler-credentials") {
        s.insert("username".into(), b"team-crawler".to_vec());
    }
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let p = out.problems_of(Kind::DistributionClient, "team-crawler");
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].reason, "InvalidSecret");
    assert!(p[0].message.contains("gateway:connect"), "{}", p[0].message);
    assert!(out.gateway_clients.is_empty());
    // Without gateway:connect the same user name is fine for the Distribution API.
    ex.clients[0]
        .spec
        .permissions
        .retain(|p| *p != crate::crd::Permission::GatewayConnect);
    let out = render(&inputs(&ex, &base));
    assert!(
        out.problems_of(Kind::DistributionClient, "team-crawler")
            .is_empty()
    );
    assert!(out.gateway_clients.is_empty());
}

/// `auth.serviceAccounts` become `namespace/name` entries the controller's TokenReview
/// method matches; without that method the client is left out and says why.
#[test]
fn service_account_clients_need_the_token_review_method() {
    let mut ex = examples();
    let c = &mut ex.clients[0];
    c.metadata.namespace = Some("team-ns".into());
    c.spec.auth.service_accounts = vec!["crawler".into(), "crawler-batch".into()];
    let name = c.metadata.name.clone().expect("name");

    let reviewed: RawConfig = serde_yaml::from_str(
        "distribution:\n  auth:\n    methods:\n      - {type: apiKey}\n      - {type: basic}\n      - {type: bearer, tokenReview: {audience: proxy-pool}}\n",
    )
    .expect("base");
    let out = render(&inputs(&ex, &reviewed));
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let rendered = out
        .config
        .clients
        .iter()
        .find(|c| c.name == name)
        .expect("client rendered");
    assert_eq!(
        rendered.service_accounts,
        vec![
            "team-ns/crawler".to_owned(),
            "team-ns/crawler-batch".to_owned()
        ]
    );
    let loaded = load_yaml(&out.to_yaml().expect("YAML")).expect("controller accepts it");
    let loaded = loaded
        .clients
        .iter()
        .find(|c| c.name == name)
        .expect("loaded client");
    assert_eq!(loaded.service_accounts.len(), 2);

    // The default base has no TokenReview method: the client is left out, Degraded.
    let base = RawConfig::default();
    let out = render(&inputs(&ex, &base));
    let p = out.problems_of(Kind::DistributionClient, &name);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].reason, "InvalidConfig");
    assert!(p[0].message.contains("serviceAccounts"), "{p:?}");
    assert!(p[0].message.contains("tokenReview"), "{p:?}");
    assert!(out.config.clients.iter().all(|c| c.name != name));
    assert!(out.global.is_empty(), "{:?}", out.global);
    load_yaml(&out.to_yaml().expect("YAML")).expect("the rest still loads");
}

#[test]
fn without_a_usable_client_extraction_is_refused_and_said_why() {
    let mut ex = examples();
    let base: RawConfig = serde_yaml::from_str(CHART_LIKE_BASE).expect("base");
    assert!(
        render(&inputs(&ex, &base)).extraction_refused().is_none(),
        "clients render: extraction is served"
    );
    // The only clients' Secrets are gone: they are left out of the config, and the
    // rendered config fails closed (the controller answers 401) instead of opening up.
    ex.secrets.clear();
    let out = render(&inputs(&ex, &base));
    assert!(out.config.clients.is_empty());
    let why = out.extraction_refused().expect("refused");
    assert_eq!(why.reason, "ExtractionRefused");
    assert!(why.message.contains("401"), "{}", why.message);
    let config = load_yaml(&out.to_yaml().expect("YAML")).expect("valid");
    assert_eq!(
        config.distribution.auth.mode,
        proxy_pool_api::config::AuthMode::Any,
        "never anonymous by default"
    );
    // No DistributionClient at all (a fresh install): the same.
    ex.clients.clear();
    assert!(render(&inputs(&ex, &base)).extraction_refused().is_some());
    // Anonymous access written explicitly is not a refusal.
    let mut open: RawConfig = serde_yaml::from_str(CHART_LIKE_BASE).expect("base");
    open.distribution.auth.mode = Some("none".into());
    assert!(render(&inputs(&ex, &open)).extraction_refused().is_none());
}

/// A group's Routings reach its gateways highest priority first, ties by name: the
/// config keeps that order (the controller's validator sorts by the negated priority,
/// then the name) and every one of them names the group.
#[test]
fn routings_of_a_group_keep_priority_order_in_the_config() {
    let ex = examples();
    let base = RawConfig::default();
    let named = |name: &str, priority: i32| {
        let mut r = ex.routings[0].clone();
        r.metadata.name = Some(name.into());
        r.spec.priority = priority;
        r
    };
    let routings = [
        named("b-low", -5),
        named("a-tie", 10),
        named("c-high", 100),
        named("b-tie", 10),
    ];
    let out = render(&Inputs {
        routings: &routings,
        ..inputs(&ex, &base)
    });
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let config = load_yaml(&out.to_yaml().expect("YAML")).expect("the controller loads it");
    let names: Vec<&str> = config.routings.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["c-high", "a-tie", "b-tie", "b-low"]);
    assert!(
        config.routings.iter().all(|r| r.gateway_groups == ["edge"]),
        "every one is the group's"
    );
    // The GatewayGroup's status lists them in the same order.
    let served: Vec<String> = crate::reconcile::gateway::routings_of(&routings, "edge")
        .iter()
        .map(|r| kube::ResourceExt::name_any(*r))
        .collect();
    assert_eq!(served, names);
}
