use std::time::Duration;

use super::*;

const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
/// A salted password hash (the digest is not checked against anything here).
const SALTED: &str =
    "sha256:0011223344556677:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn paths(text: &str) -> Vec<String> {
    match load_yaml(text) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.into_iter().map(|e| e.path.to_string()).collect(),
    }
}

/// The problem paths of `text`, sorted.
fn sorted_paths(text: &str) -> Vec<String> {
    let mut got = paths(text);
    got.sort();
    got
}

/// The problem paths of `text` (see [`paths`]), after asserting that every one of
/// `want` is among them.
fn paths_including(text: &str, want: &[&str]) -> Vec<String> {
    let got = paths(text);
    for want in want {
        assert!(got.iter().any(|p| p == want), "missing {want} in {got:?}");
    }
    got
}

#[test]
fn empty_file_gives_defaults() {
    let c = load_yaml("{}").expect("defaults are valid");
    assert_eq!(c.store, StoreConfig::Memory);
    assert_eq!(
        c.distribution.auth.mode,
        AuthMode::Any,
        "fail closed: no anonymous access unless written"
    );
    assert_eq!(c.distribution.max_count_per_request.get(), 100);
    assert_eq!(
        c.distribution.default_fulfillment,
        FulfillmentDefault::Partial
    );
    assert_eq!(c.distribution.idempotency_ttl, Duration::from_secs(600));
    assert!(c.control_plane.is_none());
    assert!(c.analytics.is_none() && c.cache.is_none());
}

#[test]
fn unknown_fields_are_rejected_with_their_path() {
    let e = load_yaml("distribution:\n  auth:\n    mood: any\n").unwrap_err();
    assert_eq!(e.0.len(), 1);
    assert_eq!(e.0[0].path, "distribution.auth.mood");
    assert!(e.0[0].message.contains("mood"), "{}", e.0[0].message);
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = format!(
        r#"
store: {{backend: redis}}
distribution:
  listen: nowhere
  maxCountPerRequest: 0
  defaultFulfillment: most
  trustedProxies: [10.0.0.0/8, banana]
  auth: {{mode: any, methods: [{{type: apiKey}}, {{type: magic}}]}}
upstreams:
  - name: "bad name"
    ttl: 10s
    safetyMargin: 20s
    labels: {{region: us, city: "new york"}}
    source: {{static: {{proxies: ["nope"]}}}}
clients:
  - name: c1
    basic: {{username: u, passwordHash: "{SALTED}"}}
  - name: c1
    apiKeys: [{{sha256: XYZ}}]
shutdown: {{gracePeriod: 1s, drainDelay: 2s}}
"#
    );
    paths_including(
        &text,
        &[
            "store.redis",
            "distribution.listen",
            "distribution.maxCountPerRequest",
            "distribution.defaultFulfillment",
            "distribution.trustedProxies[1]",
            "distribution.auth.methods[1].type",
            "upstreams[0].name",
            "upstreams[0].safetyMargin",
            "upstreams[0].maxSize",
            "upstreams[0].labels.city",
            "upstreams[0].source.static.proxies[0]",
            "clients[1].name",
            "clients[1].apiKeys[0].sha256",
            "clients[0].basic",
            "shutdown.drainDelay",
        ],
    );
}

#[test]
fn a_full_config_types_every_section() {
    let text = format!(
        r#"
store:
  backend: redis
  redis:
    sentinel: {{masterName: mymaster, addresses: ["127.0.0.1:26379"]}}
    passwordFile: /run/secrets/redis
distribution:
  listen: 0.0.0.0:8081
  maxCountPerRequest: 50
  trustedProxies: [10.0.0.0/8, 127.0.0.1]
  rateLimit: {{global: {{requestsPerSecond: 100, burst: 200}}, perClient: {{requestsPerSecond: 10}}}}
  auth:
    mode: any
    permissions: [distribution:extract]
    methods: [{{type: apiKey}}, {{type: bearer, permissions: [stats:read]}}]
upstreams:
  - name: demo
    ttl: 2m
    maxSize: 100
    labels: {{region: shanghai, city: pudong}}
    source:
      static:
        proxies: ["127.0.0.1:20001", "[::1]:20002", "proxy.example:3128"]
        credentials: {{username: u, password: p}}
  - name: vendor
    ttl: 1m
    maxSize: 10
    source: {{vendorApi: {{url: "http://vendor:8080/v1", format: json}}}}
routings:
  - {{name: r2, priority: 2, upstreams: [demo]}}
  - {{name: r1, priority: 1, upstreams: [vendor], clients: [team]}}
clients:
  - name: team
    maxExtractCount: 20
    allowedUpstreams: [demo]
    allowedRegions: [shanghai]
    apiKeys: [{{sha256: {HASH}}}]
controlPlane: {{enabled: true}}
egress: {{allowCidrs: [127.0.0.0/8, "::1"], denyCidrs: [10.96.0.0/12]}}
"#
    );
    let c = load_yaml(&text).expect("valid");
    assert_eq!(c.egress.allow().len(), 2);
    assert!(
        matches!(&c.store, StoreConfig::Redis(r) if matches!(r.target, RedisTarget::Sentinel{..}))
    );
    assert_eq!(c.distribution.trusted_proxies.len(), 2);
    assert_eq!(
        c.distribution.per_client_rate.map(|r| r.burst.get()),
        Some(10)
    );
    assert_eq!(c.routings[0].name, "r1");
    let SourceConfig::Static(s) = &c.upstreams[0].source else {
        panic!("static")
    };
    assert_eq!(s.proxies[1].host, "::1");
    let demo = &c.upstreams[0];
    assert_eq!(
        (demo.region.as_deref(), demo.city.as_deref()),
        (Some("shanghai"), Some("pudong"))
    );
    assert!(s.assume_healthy);
    assert_eq!(c.clients[0].api_keys[0].0[0], 0x9f);
    assert!(c.control_plane.is_some());
    assert!(!format!("{c:?}").contains("password: \"p\""));
}

#[test]
fn a_client_needs_an_enabled_method() {
    let text = format!(
        "distribution: {{auth: {{mode: any, methods: [{{type: basic}}]}}}}\nclients: [{{name: c, apiKeys: [{{sha256: {HASH}}}]}}]\n"
    );
    assert_eq!(paths(&text), vec!["clients[0].apiKeys".to_owned()]);
}

#[test]
fn routing_references_must_exist() {
    let got = paths("routings: [{name: r, upstreams: [ghost], clients: [nobody]}]");
    assert_eq!(
        got,
        vec!["routings[0].upstreams[0]", "routings[0].clients[0]"]
    );
}

#[test]
fn control_plane_tunables_have_defaults_and_are_checked_with_their_paths() {
    let c = load_yaml("controlPlane: {enabled: true}\n").expect("valid");
    let cp = c.control_plane.expect("on");
    assert_eq!(cp.target_slots_per_worker, 10_000);
    assert_eq!(cp.drain_batch, 64);
    assert_eq!(cp.drain_wait, Duration::from_secs(5));
    assert_eq!(cp.lease, Duration::from_secs(30));
    assert_eq!(cp.renew_before, Duration::from_secs(15));
    assert_eq!(cp.snapshot_validity, Duration::from_secs(30));
    assert_eq!(cp.max_stale_age, Duration::from_secs(60));
    assert_eq!(cp.report_interval, Duration::from_secs(5));
    let c = load_yaml(
        "controlPlane: {enabled: true, extractionReserve: 2, targetSlotsPerWorker: 50, drainBatch: 4, \
         drainWait: 0s, lease: 20s, renewBefore: 5s, snapshotValidity: 10s, maxStaleAge: 15s, \
         reportInterval: 500ms}\n",
    )
    .expect("valid");
    let cp = c.control_plane.expect("on");
    assert_eq!(
        (
            cp.extraction_reserve,
            cp.target_slots_per_worker,
            cp.drain_batch
        ),
        (2, 50, 4)
    );
    assert_eq!(cp.drain_wait, Duration::ZERO);
    assert_eq!(
        (cp.lease, cp.renew_before),
        (Duration::from_secs(20), Duration::from_secs(5))
    );
    assert_eq!(cp.report_interval, Duration::from_millis(500));
    assert_eq!(
        paths(
            "controlPlane: {enabled: true, extractionReserve: 20000, targetSlotsPerWorker: 0, \
             drainBatch: 0, drainWait: 2m, lease: 1s, renewBefore: soon, snapshotValidity: 0s, \
             maxStaleAge: 2h, reportInterval: 10ms}\n"
        ),
        vec![
            "controlPlane.lease",
            "controlPlane.renewBefore",
            "controlPlane.snapshotValidity",
            "controlPlane.maxStaleAge",
            "controlPlane.reportInterval",
            "controlPlane.drainWait",
            "controlPlane.targetSlotsPerWorker",
            "controlPlane.extractionReserve",
            "controlPlane.drainBatch",
        ]
    );
    // Relations: renewBefore below lease; drainWait below the request timeout.
    assert_eq!(
        paths(
            "controlPlane: {enabled: true, lease: 10s, renewBefore: 10s, drainWait: 20s}\n\
             distribution: {limits: {requestTimeout: 10s}}\n"
        ),
        vec!["controlPlane.renewBefore", "controlPlane.drainWait"]
    );
}

#[test]
fn control_plane_transport() {
    let c = load_yaml(
        "controlPlane: {enabled: true, listen: '127.0.0.1:0', loopbackPlaintext: true}\n",
    )
    .expect("valid");
    let cp = c.control_plane.expect("on");
    assert_eq!(cp.transport, ControlPlaneTransport::LoopbackPlaintext);
    assert_eq!(cp.extraction_reserve, 0);
    let c = load_yaml("controlPlane: {enabled: true, listen: '127.0.0.1:0', loopbackPlaintext: true, extractionReserve: 3}\n")
        .expect("valid");
    assert_eq!(c.control_plane.expect("on").extraction_reserve, 3);
    let c = load_yaml("controlPlane: {enabled: true}\n").expect("valid");
    assert_eq!(
        c.control_plane.expect("on").transport,
        ControlPlaneTransport::Unconfigured
    );
    let c = load_yaml(
        "controlPlane: {enabled: true, tls: {certFile: /c.pem, keyFile: /k.pem, clientCaFile: /ca.pem}}\n",
    )
    .expect("valid");
    let ControlPlaneTransport::Mtls(t) = c.control_plane.expect("on").transport else {
        panic!("mtls")
    };
    assert_eq!(t.trust_domain, "proxy-pool.local");
    assert_eq!(t.environment, "default");
    assert_eq!(
        paths("controlPlane: {enabled: true, listen: '0.0.0.0:9443', loopbackPlaintext: true}\n"),
        vec!["controlPlane.loopbackPlaintext".to_owned()]
    );
    assert_eq!(
        paths(
            "controlPlane: {enabled: true, tls: {certFile: /c.pem, keyFile: '', clientCaFile: /ca.pem, trustDomain: 'a/b'}}\n"
        ),
        vec![
            "controlPlane.tls.keyFile".to_owned(),
            "controlPlane.tls.trustDomain".to_owned()
        ]
    );
    assert_eq!(
        paths(
            "controlPlane: {enabled: true, listen: '127.0.0.1:1', loopbackPlaintext: true, tls: {certFile: a, keyFile: b, clientCaFile: c}}\n"
        ),
        vec!["controlPlane.loopbackPlaintext".to_owned()]
    );
}

const REDIS_STORE: &str =
    "store: {backend: redis, redis: {address: \"redis://127.0.0.1:6379/0\"}}\n";

#[test]
fn analytics_and_cache_defaults_when_enabled() {
    let c = load_yaml(&format!(
        "{REDIS_STORE}analytics: {{enabled: true, dsnFile: /etc/pp/dsn}}\ncache: {{enabled: true}}\n"
    ))
    .expect("valid");
    let a = c.analytics.expect("analytics on");
    assert_eq!(a.dsn_file, std::path::PathBuf::from("/etc/pp/dsn"));
    assert_eq!(a.time_zone, "UTC");
    assert_eq!(a.key_prefix, "pp");
    assert_eq!(a.queue_capacity, 4096);
    assert_eq!(a.flush_interval, Duration::from_secs(60));
    assert_eq!(a.retention_days, 90);
    assert_eq!(a.hot_days, 3);
    assert_eq!(a.shutdown_flush_timeout, Duration::from_secs(5));
    assert_eq!(a.identity_key_file, None);
    let k = c.cache.expect("cache on");
    assert_eq!(k.batch_size, 100);
    assert_eq!(k.token_review.ttl, Duration::from_secs(120));
    assert_eq!(k.token_review.negative_ttl, None);
    assert_eq!(k.redis_timeout, Duration::from_millis(20));
}

#[test]
fn analytics_needs_a_redis_store_and_a_dsn_file() {
    let p = paths("analytics: {enabled: true}\ncache: {enabled: true}\n");
    assert_eq!(
        p,
        vec!["analytics.enabled", "analytics.dsnFile", "cache.enabled"]
    );
    // Off sections are not checked at all.
    assert!(paths("analytics: {enabled: false, timeZone: \"/bad\"}\n").is_empty());
}

#[test]
fn analytics_and_cache_problems_carry_their_paths() {
    let text = format!(
        r#"{REDIS_STORE}shutdown: {{gracePeriod: 10s}}
analytics:
  enabled: true
  dsnFile: relative/dsn
  timeZone: "../etc/passwd"
  keyPrefix: "bad prefix"
  queueCapacity: 0
  flushInterval: 1500ms
  flushAfterEvents: 0
  retentionDays: 30
  hotDays: 40
  shutdownFlushTimeout: 10s
  identityKeyFile: key
cache:
  enabled: true
  batchSize: 101
  loaderTimeout: 1ms
  loaderConcurrency: 0
  redisTimeout: 6s
  namespaces:
    tokenReview: {{ttl: 121s, negativeTtl: 5s}}
"#
    );
    let got = paths_including(
        &text,
        &[
            "analytics.dsnFile",
            "analytics.timeZone",
            "analytics.keyPrefix",
            "analytics.queueCapacity",
            "analytics.flushInterval",
            "analytics.flushAfterEvents",
            "analytics.retentionDays",
            "analytics.hotDays",
            "analytics.shutdownFlushTimeout",
            "analytics.identityKeyFile",
            "cache.batchSize",
            "cache.loaderTimeout",
            "cache.loaderConcurrency",
            "cache.redisTimeout",
            "cache.namespaces.tokenReview.ttl",
            "cache.namespaces.tokenReview.negativeTtl",
        ],
    );
    assert_eq!(got.len(), 16, "{got:?}");
}

#[test]
fn unknown_usage_fields_and_namespaces_are_rejected() {
    let e = load_yaml("analytics: {enabled: true, postgresDsn: \"host=db\"}\n").unwrap_err();
    assert_eq!(e.0[0].path, "analytics.postgresDsn");
    let e = load_yaml("cache: {namespaces: {books: {ttl: 1s}}}\n").unwrap_err();
    assert_eq!(e.0[0].path, "cache.namespaces.books");
}

#[test]
fn accepted_time_zones_and_no_secret_namespace() {
    let c = load_yaml(&format!(
        "{REDIS_STORE}analytics: {{enabled: true, dsnFile: /d, timeZone: America/Argentina/Buenos_Aires}}\n\
         cache: {{enabled: true, namespaces: {{tokenReview: {{ttl: 30s}}}}}}\n"
    ))
    .expect("valid");
    assert_eq!(
        c.analytics.map(|a| a.time_zone).as_deref(),
        Some("America/Argentina/Buenos_Aires")
    );
    assert_eq!(
        c.cache.map(|k| k.token_review.ttl),
        Some(Duration::from_secs(30))
    );
    // Secrets are mounted files read at load: there is no `secret` cache namespace.
    let e = load_yaml("cache: {namespaces: {secret: {ttl: 60s}}}\n").unwrap_err();
    assert_eq!(e.0[0].path, "cache.namespaces.secret");
}

const SA_AUTH: &str = "distribution:\n  auth:\n    methods:\n      - type: bearer\n        tokenReview: {audience: proxy-pool}\n";

#[test]
fn service_account_clients_with_token_review() {
    let c = load_yaml(&format!(
        "{SA_AUTH}clients:\n  - {{name: a, serviceAccounts: [team-a/puller, team-a/pusher.v2]}}\n  - {{name: b, bearerTokens: [{{sha256: {HASH}}}], serviceAccounts: [team-b/x]}}\n"
    ))
    .expect("valid");
    let m = &c.distribution.auth.methods;
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].kind, AuthMethodKind::Bearer);
    let t = m[0].token_review.as_ref().expect("tokenReview");
    assert_eq!(t.audience, "proxy-pool");
    assert_eq!(t.kubeconfig_file, None);
    assert_eq!(
        c.clients[0].service_accounts,
        vec!["team-a/puller".to_owned(), "team-a/pusher.v2".to_owned()]
    );
    assert_eq!(c.clients[1].bearer_tokens.len(), 1);
    assert_eq!(
        service_account_user("team-a/puller").as_deref(),
        Some("system:serviceaccount:team-a:puller")
    );
    assert_eq!(service_account_user("nope"), None);
    // Works without the cache (every request reviewed); a kubeconfig may be named.
    let c = load_yaml(
        "distribution: {auth: {methods: [{type: bearer, tokenReview: {audience: \"https://pp.example/\", kubeconfigFile: /etc/kube/config}}]}}\nclients: [{name: a, serviceAccounts: [ns/a]}]\n",
    )
    .expect("valid");
    assert!(c.cache.is_none());
    assert_eq!(
        c.distribution.auth.methods[0]
            .token_review
            .as_ref()
            .and_then(|t| t.kubeconfig_file.clone()),
        Some(std::path::PathBuf::from("/etc/kube/config"))
    );
}

#[test]
fn service_account_problems_carry_their_paths() {
    let bad = r#"distribution:
  auth:
    methods:
      - {type: bearer, tokenReview: {audience: ""}}
      - {type: apiKey, tokenReview: {audience: x}}
clients:
  - name: a
    serviceAccounts: [noslash, "Upper/x", "ns/", "/x", "a/b/c", "-ns/x", "ns/x_y", ok/one]
  - name: b
    serviceAccounts: [ok/one]
  - name: c
    permissions: []
"#;
    assert_eq!(
        paths(bad),
        vec![
            "clients[0].serviceAccounts[0]",
            "clients[0].serviceAccounts[1]",
            "clients[0].serviceAccounts[2]",
            "clients[0].serviceAccounts[3]",
            "clients[0].serviceAccounts[4]",
            "clients[0].serviceAccounts[5]",
            "clients[0].serviceAccounts[6]",
            "clients[2]",
            "clients[1].serviceAccounts[0]",
            "distribution.auth.methods[0].tokenReview.audience",
            "distribution.auth.methods[1].tokenReview",
        ]
    );
    // serviceAccounts without a reviewing bearer method (default methods included).
    assert_eq!(
        paths("clients: [{name: a, serviceAccounts: [ns/a]}]\n"),
        vec!["clients[0].serviceAccounts"]
    );
    assert_eq!(
        paths(
            "distribution: {auth: {methods: [{type: bearer}]}}\nclients: [{name: a, serviceAccounts: [ns/a]}]\n"
        ),
        vec!["clients[0].serviceAccounts"]
    );
    assert_eq!(
        paths(
            "distribution: {auth: {methods: [{type: bearer, tokenReview: {audience: a, kubeconfigFile: \"\"}}]}}\nclients: [{name: a, serviceAccounts: [ns/a]}]\n"
        ),
        vec!["distribution.auth.methods[0].tokenReview.kubeconfigFile"]
    );
    assert_eq!(
        paths(
            "distribution: {auth: {methods: [{type: bearer, tokenReview: {audience: a, extra: 1}}]}}\n"
        ),
        vec!["distribution.auth.methods[0].tokenReview.extra"]
    );
}

/// One static upstream `u` with one proxy, for the routing tests.
const UPSTREAM_U: &str = "upstreams:\n  - {name: u, ttl: 1m, maxSize: 5, source: {static: {proxies: [\"192.0.2.1:1\"]}}}\n";

#[test]
fn routing_match_selection_sticky_retry_and_groups() {
    let text = UPSTREAM_U.to_owned()
        + r#"
clients:
  - {name: team, apiKeys: [{file: /run/k}]}
routings:
  - name: r
    upstreams: [u]
    clients: [team]
    regions: [shanghai]
    carriers: [telecom, unicom]
    cities: [pudong, minhang]
    strategy: leastActive
    usernameParams: {region: [shanghai, beijing], country: []}
    targetHosts: [Example.com, "*.example.org"]
    stickySession: {ttl: 5m, idleTimeout: 1m}
    retry: {maxAttempts: 2, deadline: 3s}
    gatewayGroups: [edge]
"#;
    let c = load_yaml(&text).expect("valid");
    let r = &c.routings[0];
    assert_eq!(r.carriers, ["telecom", "unicom"]);
    assert_eq!(r.cities, ["pudong", "minhang"]);
    assert_eq!(r.strategy, Strategy::LeastActive);
    assert_eq!(
        r.username_params,
        vec![
            UsernameParamConfig {
                key: "country".into(),
                values: vec![]
            },
            UsernameParamConfig {
                key: "region".into(),
                values: vec!["shanghai".into(), "beijing".into()]
            },
        ]
    );
    assert_eq!(r.target_hosts, ["example.com", "*.example.org"]);
    assert_eq!(
        r.sticky,
        Some(Sticky {
            param: "session".into(),
            session_ttl: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(60),
            max_ttl: Duration::from_secs(30 * 60),
        })
    );
    assert_eq!(
        r.retry,
        RetryConfig {
            max_attempts: 2,
            deadline: Duration::from_secs(3)
        }
    );
    assert_eq!(r.gateway_groups, ["edge"]);

    // Defaults: sessions on (`session`, 10 min, 2 min idle, clients may ask for up to
    // 30), 3 attempts in 10 s, every gateway.
    let c = load_yaml(&(UPSTREAM_U.to_owned() + "routings: [{name: r, upstreams: [u]}]\n"))
        .expect("valid");
    let r = &c.routings[0];
    let default = Sticky {
        param: "session".into(),
        session_ttl: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(120),
        max_ttl: Duration::from_secs(1800),
    };
    assert_eq!(
        (r.sticky.as_ref(), r.retry),
        (Some(&default), RetryConfig::default())
    );
    assert!(r.gateway_groups.is_empty() && r.target_hosts.is_empty());

    // Turned off; a maximum for `sesstime`; a ttl above 30 min is its own default maximum.
    let sticky = |block: &str| {
        let text = UPSTREAM_U.to_owned()
            + &format!("routings: [{{name: r, upstreams: [u], stickySession: {block}}}]\n");
        load_yaml(&text).expect("valid").routings[0].sticky.clone()
    };
    assert_eq!(sticky("{enabled: false, ttl: 1m}"), None);
    assert_eq!(sticky("{enabled: true}"), Some(default.clone()));
    assert_eq!(
        sticky("{maxTtl: 2h}").map(|s| s.max_ttl),
        Some(Duration::from_secs(7200))
    );
    assert_eq!(
        sticky("{ttl: 45m, idleTimeout: 1m}").map(|s| s.max_ttl),
        Some(Duration::from_secs(2700))
    );
}

#[test]
fn routing_fields_are_validated_with_their_paths() {
    let text = UPSTREAM_U.to_owned()
        + r#"
routings:
  - name: r
    upstreams: [u]
    carriers: ["bad carrier", telecom, telecom]
    cities: [pudong, "new york", pudong]
    usernameParams: {"re-gion": [ok], region: ["a b", x, x]}
    targetHosts: ["*.", "a..b", "ok.com", "OK.com", "http://x"]
    stickySession: {ttl: 1m, idleTimeout: 2m, param: "se-ss"}
    retry: {maxAttempts: 11, deadline: 10ms}
    gatewayGroups: ["no/slash"]
"#;
    let mut want = [
        "routings[0].carriers[0]",
        "routings[0].carriers[2]",
        "routings[0].cities[1]",
        "routings[0].cities[2]",
        "routings[0].usernameParams.re-gion",
        "routings[0].usernameParams.region[0]",
        "routings[0].usernameParams.region[2]",
        "routings[0].targetHosts[0]",
        "routings[0].targetHosts[1]",
        "routings[0].targetHosts[3]",
        "routings[0].targetHosts[4]",
        "routings[0].stickySession.idleTimeout",
        "routings[0].stickySession.param",
        "routings[0].retry.deadline",
        "routings[0].retry.maxAttempts",
        "routings[0].gatewayGroups[0]",
    ];
    want.sort();
    assert_eq!(sorted_paths(&text), want);
    let e = load_yaml("routings: [{name: r, upstreams: [u], stickySession: {ttl: 1m, idle: 1s}}]")
        .unwrap_err();
    assert_eq!(e.0[0].path, "routings[0].stickySession.idle");
    // The client-chosen maximum: not below ttl, neither above a day.
    for (block, path) in [
        (
            "{ttl: 20m, maxTtl: 10m}",
            "routings[0].stickySession.maxTtl",
        ),
        ("{maxTtl: 25h}", "routings[0].stickySession.maxTtl"),
        (
            "{ttl: 25h, idleTimeout: 1m}",
            "routings[0].stickySession.ttl",
        ),
    ] {
        let text = UPSTREAM_U.to_owned()
            + &format!("routings: [{{name: r, upstreams: [u], stickySession: {block}}}]\n");
        assert_eq!(sorted_paths(&text), [path], "{block}");
    }
}

#[test]
fn upstream_health_and_fetch_budget() {
    let text = r#"
upstreams:
  - name: v
    ttl: 5m
    maxSize: 100
    source:
      vendorApi: {url: "http://vendor/v1", format: json, maxProxiesPerFetch: 50}
    health:
      interval: 20s
      timeout: 2s
      failureThreshold: 4
      egress: true
      targets: ["https://example.com/health", "http://[::1]:8080/"]
  - name: s
    ttl: 5m
    maxSize: 1
    source: {static: {proxies: ["192.0.2.1:1"]}}
"#;
    let c = load_yaml(text).expect("valid");
    let h = &c.upstreams[0].health;
    assert_eq!(h.interval, Duration::from_secs(20));
    assert_eq!(h.timeout, Duration::from_secs(2));
    assert_eq!(h.failure_threshold.get(), 4);
    assert!(h.egress);
    assert_eq!(h.targets.len(), 2);
    let SourceConfig::VendorApi(v) = &c.upstreams[0].source else {
        panic!("vendor")
    };
    assert_eq!(v.max_proxies_per_fetch.map(|n| n.get()), Some(50));
    assert_eq!(c.upstreams[1].health, UpstreamHealthConfig::default());
    for (url, want) in [
        ("http://[::1]:8080/x", Some(("::1", 8080))),
        ("https://example.com", Some(("example.com", 443))),
        ("ftp://example.com", None),
        ("http://user@example.com/", None),
    ] {
        let want = want.map(|(host, port)| (host.to_owned(), port));
        assert_eq!(target_url(url), want, "{url}");
    }

    let bad = r#"
upstreams:
  - name: v
    ttl: 5m
    maxSize: 100
    source:
      vendorApi: {url: "http://vendor/v1", format: json, maxProxiesPerFetch: 0}
    health:
      interval: 10s
      timeout: 11s
      failureThreshold: 21
      targets: ["gopher://x", "http://"]
"#;
    assert_eq!(
        sorted_paths(bad),
        [
            "upstreams[0].health.failureThreshold",
            "upstreams[0].health.targets[0]",
            "upstreams[0].health.targets[1]",
            "upstreams[0].health.timeout",
            "upstreams[0].source.vendorApi.maxProxiesPerFetch",
        ]
    );
}

/// The freshness of health checks is global (`distribution.maxHealthCheckAge`, one
/// bound per extract request): a per-upstream `maxCheckAge` is refused, not ignored.
#[test]
fn a_per_upstream_max_check_age_is_refused() {
    let text = "upstreams: [{name: u, ttl: 1m, maxSize: 5, source: {static: {proxies: [\"192.0.2.1:1\"]}}, health: {maxCheckAge: 1m}}]\n";
    assert_eq!(paths(text), ["upstreams[0].health.maxCheckAge"]);
}

/// A temporary directory removed on drop (no dev-dependency for it).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "proxy-pool-config-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self, name: &str, content: &[u8]) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        p.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

#[test]
fn client_credentials_in_files_are_read_and_hashed_at_load() {
    let dir = TempDir::new("ok");
    let key = dir.file("key", b"the-api-key\n");
    let token = dir.file("token", b"the-token\r\n");
    let user = dir.file("user", b"alice\n");
    let pass = dir.file("pass", b"s3cret");
    let carol = dir.file("carol", b"carol");
    let text = format!(
        r#"
clients:
  - name: a
    apiKeys: [{{file: "{key}"}}, {{sha256: {HASH}}}]
    bearerTokens: [{{file: "{token}"}}]
    basic: {{usernameFile: "{user}", passwordFile: "{pass}"}}
  - name: b
    basic: {{username: bob, passwordFile: "{pass}"}}
  - name: c
    basic: {{usernameFile: "{carol}", passwordHash: "{SALTED}"}}
"#
    );
    let validated = load_yaml(&text).expect("valid without reading files");
    assert_eq!(validated.clients[0].secret_files.len(), 4);
    assert_eq!(validated.clients[0].basic, None);
    assert!(
        !format!("{validated:?}").contains("the-api-key"),
        "nothing is read before resolve"
    );
    let c = load_yaml_with_files(&text).expect("files resolve");
    let a = &c.clients[0];
    assert!(a.secret_files.is_empty());
    assert_eq!(
        a.api_keys.iter().map(|h| h.0).collect::<Vec<_>>(),
        vec![
            {
                let mut h = [0u8; 32];
                hex::decode_to_slice(HASH, &mut h).unwrap();
                h
            },
            sha(b"the-api-key")
        ],
        "inline hashes first, then the files"
    );
    assert_eq!(a.bearer_tokens[0].0, sha(b"the-token"));
    let basic = a.basic.as_ref().expect("basic");
    assert_eq!(basic.username, "alice");
    assert!(basic.password.matches(b"s3cret") && !basic.password.matches(b"s3cret!"));
    let b = c.clients[1].basic.as_ref().expect("basic b");
    assert_eq!(b.username, "bob");
    assert!(b.password.matches(b"s3cret"));
    assert_ne!(
        basic.password, b.password,
        "the same password, stored with different salts"
    );
    assert_eq!(c.clients[2].basic.as_ref().expect("c").username, "carol");
    let shown = format!("{c:?}");
    for secret in ["the-api-key", "the-token", "s3cret"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
}

#[test]
fn credential_file_problems_name_the_field_and_the_file() {
    let dir = TempDir::new("bad");
    let empty = dir.file("empty", b"\n");
    let big = dir.file("big", &vec![b'x'; (MAX_SECRET_FILE_BYTES + 1) as usize]);
    let colon = dir.file("colon", b"a:b\n");
    let same1 = dir.file("same1", b"k\n");
    let same2 = dir.file("same2", b"k");
    let missing = dir.0.join("missing").display().to_string();
    let text = format!(
        r#"
clients:
  - name: a
    apiKeys: [{{file: "{missing}"}}, {{file: "{empty}"}}, {{file: "{big}"}}, {{file: "{dir}"}}]
  - name: b
    basic: {{usernameFile: "{colon}", passwordHash: "{SALTED}"}}
  - name: c
    bearerTokens: [{{file: "{same1}"}}, {{file: "{same2}"}}]
"#,
        dir = dir.0.display()
    );
    let errors = load_yaml_with_files(&text).unwrap_err().0;
    // The message of the (first) problem at `path`.
    let message = |path: &str| {
        errors
            .iter()
            .find(|e| e.path == path)
            .map(|e| e.message.as_str())
            .unwrap_or_else(|| panic!("no problem at {path}: {errors:?}"))
    };
    let m = message("clients[0].apiKeys[0].file");
    assert!(m.contains("does not exist") && m.contains(&missing), "{m}");
    assert!(message("clients[0].apiKeys[1].file").ends_with("is empty"));
    assert!(message("clients[0].apiKeys[2].file").contains("larger than"));
    assert!(message("clients[0].apiKeys[3].file").starts_with("cannot read"));
    assert!(message("clients[1].basic.usernameFile").contains("without `:`"));
    assert_eq!(
        message("clients[2].bearerTokens[1]"),
        "the same token is configured twice"
    );
    assert_eq!(errors.len(), 6, "{errors:?}");

    // Exactly one form of each secret.
    assert_eq!(
        sorted_paths(&format!(
            "clients:\n  - {{name: a, apiKeys: [{{sha256: {HASH}, file: /k}}, {{}}], basic: {{username: u, usernameFile: /u, passwordFile: ''}}}}\n"
        )),
        [
            "clients[0]",
            "clients[0].apiKeys[0]",
            "clients[0].apiKeys[1]",
            "clients[0].basic",
            "clients[0].basic.passwordFile"
        ]
    );
}

#[test]
fn upstream_proxy_user_names_in_files_are_read_at_load() {
    let dir = TempDir::new("upstream-user");
    let user = dir.file("username", b"proxy-account\n");
    let pass = dir.file("password", b"pw\n");
    let cfg = |user_field: &str| {
        format!(
            "upstreams:\n  - name: s\n    ttl: 5m\n    maxSize: 1\n    source:\n      static:\n        proxies: [\"192.0.2.1:1\"]\n        credentials: {{{user_field}, passwordFile: {pass:?}}}\n"
        )
    };
    let c = load_yaml_with_files(&cfg(&format!("usernameFile: {user:?}"))).expect("loads");
    let SourceConfig::Static(s) = &c.upstreams[0].source else {
        panic!("static")
    };
    let creds = s.credentials.as_ref().expect("credentials");
    assert_eq!(creds.username, "proxy-account");
    assert_eq!(creds.password, PasswordSource::File(pass.clone().into()));

    // A missing file names the field and the path; an empty one too.
    let missing = dir.0.join("nope").display().to_string();
    let err =
        load_yaml_with_files(&cfg(&format!("usernameFile: {missing:?}"))).expect_err("missing");
    assert_eq!(err.0.len(), 1, "{err}");
    assert_eq!(
        err.0[0].path,
        "upstreams[0].source.static.credentials.usernameFile"
    );
    assert!(err.0[0].message.contains(&missing) && err.0[0].message.ends_with("does not exist"));
    let empty = dir.file("empty", b"\n");
    let err = load_yaml_with_files(&cfg(&format!("usernameFile: {empty:?}"))).expect_err("empty");
    assert!(err.0[0].message.ends_with("is empty"), "{err}");
    let bad = dir.file("bad", b"a\x07b");
    let err = load_yaml_with_files(&cfg(&format!("usernameFile: {bad:?}"))).expect_err("control");
    assert!(!err.to_string().contains("a\x07b"), "{err}");
    // Both forms, or neither, are refused.
    let both = cfg(&format!("username: x, usernameFile: {user:?}"));
    assert_eq!(paths(&both), ["upstreams[0].source.static.credentials"]);
    assert!(load_yaml_with_files(&both).is_err());
    assert_eq!(
        paths(&cfg("username: ''")),
        ["upstreams[0].source.static.credentials.username"]
    );
}

#[test]
fn leadership_defaults_and_replicas_on_redis() {
    let c = load_yaml("{}").expect("defaults");
    assert_eq!(c.leadership, LeadershipConfig::default());
    assert_eq!(c.leadership.replicas, 1);
    let c = load_yaml(&format!(
        "{REDIS_STORE}leadership: {{replicas: 3, lease: 6s, renewEvery: 2s, retryEvery: 500ms}}\n"
    ))
    .expect("three replicas on redis");
    assert_eq!(c.leadership.replicas, 3);
    assert_eq!(c.leadership.failover_bound(), Duration::from_millis(6_500));
}

#[test]
fn the_memory_store_is_refused_above_one_replica() {
    let e = load_yaml("leadership: {replicas: 2}\n").unwrap_err();
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!(e.0[0].path, "leadership.replicas");
    assert!(
        e.0[0].message.contains("memory store"),
        "{}",
        e.0[0].message
    );
    assert_eq!(
        paths("leadership: {replicas: 0}\n"),
        vec!["leadership.replicas"]
    );
    assert_eq!(
        paths(&format!("{REDIS_STORE}leadership: {{replicas: 17}}\n")),
        vec!["leadership.replicas"]
    );
}

#[test]
fn anonymous_access_only_when_written_explicitly() {
    // No client, no mode: every caller must present a configured client's credential,
    // and with none configured every request is refused.
    let c = load_yaml("{}").expect("valid");
    assert_eq!(c.distribution.auth.mode, AuthMode::Any);
    assert!(c.clients.is_empty());
    let kinds: Vec<_> = c.distribution.auth.methods.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds,
        [
            AuthMethodKind::ApiKey,
            AuthMethodKind::Basic,
            AuthMethodKind::Bearer
        ]
    );
    // `mode: any` with no client is a valid (refusing) config, not an error.
    assert!(load_yaml("distribution: {auth: {mode: any}}").is_ok());
    let c = load_yaml("distribution: {auth: {mode: none}}").expect("explicit none");
    assert_eq!(c.distribution.auth.mode, AuthMode::None);
    // A bad mode never falls back to anonymous.
    assert_eq!(
        paths("distribution: {auth: {mode: open}}"),
        ["distribution.auth.mode"]
    );
}

#[test]
fn egress_section_and_connect_ports() {
    let c = load_yaml(
        "egress: {denyCidrs: [10.96.0.0/12, 10.244.0.0/16], allowCidrs: [127.0.0.0/8]}\n\
         upstreams: [{name: u, ttl: 1m, maxSize: 1, source: {static: {proxies: ['h:1']}}}]\n\
         routings: [{name: r, upstreams: [u], connectPorts: ['22', '8000-8100']}, {name: d, upstreams: [u]}]\n",
    )
    .expect("valid");
    assert_eq!(
        c.egress.check_ip("10.97.0.1".parse().expect("ip")),
        Err(crate::egress::EgressDenied::Internal)
    );
    assert_eq!(c.egress.check_ip("127.0.0.1".parse().expect("ip")), Ok(()));
    let ports = |name: &str| {
        let routing = c.routings.iter().find(|r| r.name == name);
        &routing.expect(name).connect_ports
    };
    let r = ports("r");
    assert!(r.allows(22) && r.allows(8050) && !r.allows(443));
    let d = ports("d");
    assert!(
        d.allows(443) && d.allows(80) && !d.allows(22),
        "default 443 and 80"
    );
    assert_eq!(c.distribution.limits.max_connections_per_source, 256);
    let got = paths(
        "egress: {denyCidrs: [nope], allowCidrs: ['1.2.3.4/40']}\n\
         upstreams: [{name: u, ttl: 1m, maxSize: 1, source: {static: {proxies: ['h:1']}}}]\n\
         routings: [{name: r, upstreams: [u], connectPorts: ['0', '9-1']}]\n\
         distribution: {limits: {maxConnections: 10, maxConnectionsPerSource: 11}}\n",
    );
    assert_eq!(
        got,
        [
            "distribution.limits.maxConnectionsPerSource",
            "routings[0].connectPorts[0]",
            "routings[0].connectPorts[1]",
            "egress.denyCidrs[0]",
            "egress.allowCidrs[0]",
        ]
    );
}

#[test]
fn leadership_timing_is_checked() {
    assert_eq!(
        paths(&format!(
            "{REDIS_STORE}leadership: {{lease: 3s, renewEvery: 2s}}\n"
        )),
        vec!["leadership.renewEvery"]
    );
    assert_eq!(
        paths(&format!("{REDIS_STORE}leadership: {{lease: 1s}}\n")),
        vec!["leadership.lease"]
    );
    // Gateways must outlive a leader change on their last snapshot.
    let p = paths(&format!(
        "{REDIS_STORE}leadership: {{lease: 20s, renewEvery: 5s, retryEvery: 2s}}\n\
         controlPlane: {{enabled: true, listen: '127.0.0.1:0', loopbackPlaintext: true, maxStaleAge: 22s}}\n"
    ));
    assert_eq!(p, vec!["controlPlane.maxStaleAge"]);
    // Analytics runs on every replica (the leader flushes).
    let p = paths(&format!(
        "{REDIS_STORE}analytics: {{enabled: true, dsnFile: /etc/pp/dsn}}\nleadership: {{replicas: 3}}\n"
    ));
    assert!(p.is_empty(), "{p:?}");
}

#[test]
fn leadership_backend_kubernetes_is_redis_only_and_names_a_lease() {
    let c = load_yaml(&format!(
        "{REDIS_STORE}leadership: {{replicas: 3, backend: kubernetes}}\n"
    ))
    .unwrap();
    assert_eq!(
        c.leadership.backend,
        LeadershipBackend::Kubernetes(KubernetesLeadership {
            lease_name: DEFAULT_LEASE_NAME.into(),
            label_pod: true,
        })
    );
    let c = load_yaml(&format!(
        "{REDIS_STORE}leadership: {{backend: kubernetes, kubernetes: {{leaseName: pp.ctl, labelPod: false}}}}\n"
    ))
    .unwrap();
    assert_eq!(
        c.leadership.backend,
        LeadershipBackend::Kubernetes(KubernetesLeadership {
            lease_name: "pp.ctl".into(),
            label_pod: false,
        })
    );
    // The fencing token comes from Redis: no Kubernetes backend on the memory store.
    assert_eq!(
        paths("leadership: {backend: kubernetes}\n"),
        vec!["leadership.backend"]
    );
    // Every problem at once, each at its path.
    assert_eq!(
        paths(&format!(
            "{REDIS_STORE}leadership: {{backend: kubernetes, kubernetes: {{leaseName: Bad_Name}}}}\n"
        )),
        vec!["leadership.kubernetes.leaseName"]
    );
    assert_eq!(
        paths(&format!("{REDIS_STORE}leadership: {{backend: etcd}}\n")),
        vec!["leadership.backend"]
    );
    assert_eq!(
        paths(&format!(
            "{REDIS_STORE}leadership: {{kubernetes: {{leaseName: a}}}}\n"
        )),
        vec!["leadership.kubernetes"]
    );
    assert!(
        load_yaml(&format!(
            "{REDIS_STORE}leadership: {{backend: kubernetes, kubernetes: {{lease: a}}}}\n"
        ))
        .is_err(),
        "unknown fields are refused"
    );
}

#[test]
fn redis_tls_and_acl_users() {
    let c = load_yaml(
        "store: {backend: redis, redis: {address: 'rediss://r:6380/0', username: pool, tls: {caFile: /ca.pem}}}",
    )
    .expect("rediss");
    let StoreConfig::Redis(r) = c.store else {
        panic!("redis")
    };
    assert_eq!(r.username.as_deref(), Some("pool"));
    assert_eq!(
        r.tls.and_then(|t| t.ca_file),
        Some(std::path::PathBuf::from("/ca.pem"))
    );
    let c = load_yaml(
        "store: {backend: redis, redis: {sentinel: {masterName: m, addresses: ['s:26379'], username: watcher, passwordFile: /pw, tls: true}}}",
    )
    .expect("sentinel over TLS");
    let StoreConfig::Redis(r) = c.store else {
        panic!("redis")
    };
    assert!(r.tls.is_some());
    assert_eq!(
        r.target,
        RedisTarget::Sentinel {
            master_name: "m".into(),
            addresses: vec!["s:26379".into()],
            username: Some("watcher".into()),
            password_file: Some("/pw".into()),
        }
    );
    assert_eq!(
        paths("store: {backend: redis, redis: {address: 'redis://r:1', tls: {}}}"),
        ["store.redis.tls"]
    );
    assert_eq!(
        paths("store: {backend: redis, redis: {address: 'http://r:1'}}"),
        ["store.redis.address"]
    );
}

#[test]
fn basic_passwords_are_only_accepted_salted() {
    let e = load_yaml(&format!(
        "clients: [{{name: a, basic: {{username: u, passwordSha256: {HASH}}}}}]"
    ))
    .unwrap_err();
    let m =
        e.0.iter()
            .find(|e| e.path == "clients[0].basic.passwordSha256")
            .map(|e| e.message.clone())
            .unwrap_or_default();
    assert!(
        m.contains("passwordHash") && m.contains("passwordFile"),
        "{e}"
    );
    let c = load_yaml(&format!(
        "clients: [{{name: a, basic: {{username: u, passwordHash: '{}'}}}}]",
        crate::secret::SaltedHash::with_salt(b"pepper-salt".to_vec(), b"pw").to_text()
    ))
    .expect("salted");
    assert!(
        c.clients[0]
            .basic
            .as_ref()
            .expect("basic")
            .password
            .matches(b"pw")
    );
    assert_eq!(
        paths("clients: [{name: a, basic: {username: u, passwordHash: 'sha256:00:11'}}]"),
        ["clients[0].basic.passwordHash", "clients[0]"]
    );
}

#[test]
fn static_proxies_on_refused_ranges_are_config_errors() {
    let text = |extra: &str| {
        format!(
            "{extra}upstreams: [{{name: u, ttl: 1m, maxSize: 3, source: {{static: {{proxies: ['127.0.0.1:1', '169.254.169.254:80', '203.0.113.1:3128']}}}}}}]\n"
        )
    };
    let e = load_yaml(&text("")).unwrap_err();
    let got: Vec<String> = e.0.iter().map(|e| e.path.to_string()).collect();
    assert_eq!(
        got,
        [
            "upstreams[0].source.static.proxies[0]",
            "upstreams[0].source.static.proxies[1]"
        ]
    );
    assert!(e.0[0].message.contains("loopback") && e.0[0].message.contains("allowCidrs"));
    assert_eq!(
        paths(&text("egress: {allowCidrs: [127.0.0.0/8]}\n")),
        ["upstreams[0].source.static.proxies[1]"],
        "opting in to loopback does not open the metadata endpoint"
    );
}

#[test]
fn an_upstreams_quarantine_defaults_to_its_ttl_and_is_bounded_by_the_pool_max_ttl() {
    let upstream = |extra: &str| {
        format!(
            "upstreams:\n  - name: v\n    ttl: 2m\n    maxSize: 10\n{extra}    source: {{vendorApi: {{url: \"http://vendor:8080/v1\", format: json}}}}\n"
        )
    };
    let c = load_yaml(&upstream("")).expect("valid");
    assert_eq!(
        c.upstreams[0].quarantine,
        Duration::from_secs(120),
        "default: ttl"
    );
    let c = load_yaml(&upstream("    quarantine: 0s\n")).expect("valid");
    assert_eq!(c.upstreams[0].quarantine, Duration::ZERO, "0s turns it off");
    let c = load_yaml(&upstream("    quarantine: 5m\n")).expect("valid");
    assert_eq!(c.upstreams[0].quarantine, Duration::from_secs(300));
    let e = load_yaml(&format!(
        "pool: {{maxTtl: 1h}}\n{}",
        upstream("    quarantine: 2h\n")
    ))
    .unwrap_err();
    assert_eq!(e.0.len(), 1, "{e:?}");
    assert_eq!(e.0[0].path, "upstreams[0].quarantine");
    assert_eq!(e.0[0].message, "must not exceed pool.maxTtl");
    assert_eq!(
        paths(&upstream("    quarantine: soon\n")),
        vec!["upstreams[0].quarantine".to_string()]
    );
}

#[test]
fn a_problem_carries_its_field_path_as_data() {
    let e = load_yaml("routings:\n  - name: r\n    upstreams: [nope]\n").unwrap_err();
    let problem =
        e.0.iter()
            .find(|e| e.path == "routings[0].upstreams[0]")
            .expect("the unknown upstream is reported");
    let (list, index, inside) = problem.path.list_entry().expect("a list entry");
    assert_eq!((list, index), ("routings", 0));
    assert_eq!(
        inside.segments(),
        [
            PathSegment::Field("upstreams".into()),
            PathSegment::Index(0)
        ]
    );
    assert_eq!(
        problem.to_string(),
        "routings[0].upstreams[0]: unknown upstream `nope`"
    );
}

#[test]
fn client_gateway_limits_are_typed_and_checked_with_their_paths() {
    let client = |limits: &str| {
        format!(
            "distribution: {{auth: {{mode: any, methods: [{{type: apiKey}}]}}}}\nclients: [{{name: c, apiKeys: [{{sha256: {HASH}}}], gatewayLimits: {limits}}}]\n"
        )
    };
    let cfg = load_yaml(&client(
        "{maxConnections: 10, requestsPerSecond: 5, burst: 20, dailyBytes: 1073741824}",
    ))
    .expect("valid");
    let limits = cfg.clients[0].gateway_limits.expect("kept");
    assert_eq!(limits.max_connections.map(|v| v.get()), Some(10));
    assert_eq!(limits.daily_bytes.map(|v| v.get()), Some(1 << 30));
    let empty = load_yaml(&client("{}")).expect("valid");
    assert_eq!(empty.clients[0].gateway_limits, None, "limits nothing");
    assert_eq!(
        paths(&client("{burst: 3}")),
        vec!["clients[0].gatewayLimits".to_owned()]
    );
    assert_eq!(
        paths(&client("{requestsPerSecond: 2000000}")),
        vec!["clients[0].gatewayLimits".to_owned()]
    );
    assert!(!paths(&client("{maxConnections: 0}")).is_empty());
    assert!(!paths(&client("{dailyByte: 1}")).is_empty());
}
