//! Raw config → typed config: a pure function that collects every problem, each with
//! its field path, instead of stopping at the first.

use std::collections::{BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

use super::duration::{duration_at, duration_in, show};
use super::raw::{
    RawAuth, RawBasic, RawClient, RawConfig, RawControlPlane, RawDistribution, RawHashedSecret,
    RawPool, RawProxyCredentials, RawRate, RawRedis, RawRouting, RawSource, RawStore,
    RawTokenReview, RawUpstream, RawUpstreamHealth,
};
use super::types::{
    AdminConfig, AuthConfig, AuthMethodConfig, AuthMethodKind, AuthMode, BasicCredentials,
    ClientConfig, ClientSecretFile, ClientSecretKind, Config, ControlPlaneConfig, ControlPlaneTls,
    ControlPlaneTransport, DistributionConfig, EgressPolicy, FulfillmentDefault, LimitsConfig,
    PasswordSource, Permission, PoolConfig, PortRanges, Protocol, ProxyCredentials, Rate,
    RedisConfig, RedisTarget, RedisTls, RetryConfig, RoutingConfig, SaltedHash, SecretHash,
    ShutdownConfig, SourceConfig, StaticProxy, StaticSourceConfig, StickyConfig, StoreConfig,
    Strategy, TokenReviewConfig, UpstreamConfig, UpstreamHealthConfig, UsernameParamConfig,
    VendorApiConfig, VendorFormat,
};
use super::{ConfigError, ConfigErrors};
use crate::proxy::one_of;

/// Largest `count` the pool accepts in one extraction.
pub const MAX_COUNT_PER_REQUEST: u32 = 1000;
/// Most values of one list filter or allow-list.
pub const MAX_LIST_VALUES: usize = 64;
/// Longest client name (the client ID adds a short prefix).
pub const MAX_CLIENT_NAME: usize = 100;

/// Collects problems while building the typed config.
#[derive(Default)]
struct Ctx {
    errors: Vec<ConfigError>,
}

impl Ctx {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn duration(&mut self, path: &str, raw: Option<&str>, default: Duration) -> Duration {
        duration_at(&mut self.errors, path, raw, default).unwrap_or(default)
    }

    fn required_duration(&mut self, path: &str, raw: Option<&str>) -> Duration {
        if raw.is_none() {
            self.err(path, "is required");
        }
        self.duration(path, raw, Duration::from_secs(1))
    }

    fn socket(&mut self, path: &str, raw: Option<&str>, default: &str) -> SocketAddr {
        let text = raw.unwrap_or(default);
        text.parse().unwrap_or_else(|_| {
            self.err(path, format!("`{text}` is not an `ip:port` address"));
            SocketAddr::from(([127, 0, 0, 1], 0))
        })
    }

    fn range(&mut self, path: &str, value: Option<u32>, default: u32, min: u32, max: u32) -> u32 {
        let v = value.unwrap_or(default);
        if v < min || v > max {
            self.err(path, format!("must be between {min} and {max}, got {v}"));
            return default;
        }
        v
    }

    fn identifier(&mut self, path: &str, value: &str, max: usize) -> bool {
        match check_identifier(value, max) {
            Ok(()) => true,
            Err(e) => {
                self.err(path, e);
                false
            }
        }
    }

    fn list(&mut self, path: &str, values: &[String], max_len: usize) -> Vec<String> {
        if values.len() > MAX_LIST_VALUES {
            self.err(path, format!("at most {MAX_LIST_VALUES} values"));
        }
        let mut seen = HashSet::new();
        for (i, v) in values.iter().enumerate() {
            self.identifier(&format!("{path}[{i}]"), v, max_len);
            if !seen.insert(v.as_str()) {
                self.err(format!("{path}[{i}]"), format!("duplicate value `{v}`"));
            }
        }
        values.to_vec()
    }

    fn permissions(
        &mut self,
        path: &str,
        raw: Option<&Vec<String>>,
    ) -> Option<BTreeSet<Permission>> {
        let raw = raw?;
        let mut set = BTreeSet::new();
        for (i, p) in raw.iter().enumerate() {
            match Permission::parse(p) {
                Some(p) => {
                    set.insert(p);
                }
                None => self.err(
                    format!("{path}[{i}]"),
                    format!(
                        "unknown permission `{p}` (use distribution:extract, gateway:connect, stats:read)"
                    ),
                ),
            }
        }
        Some(set)
    }

    fn rate(&mut self, path: &str, raw: Option<&RawRate>) -> Option<Rate> {
        let raw = raw?;
        let Some(rps) = NonZeroU32::new(raw.requests_per_second) else {
            self.err(format!("{path}.requestsPerSecond"), "must be at least 1");
            return None;
        };
        let burst = raw.burst.unwrap_or(raw.requests_per_second);
        if burst < raw.requests_per_second {
            self.err(
                format!("{path}.burst"),
                "must be at least requestsPerSecond",
            );
        }
        Some(Rate {
            requests_per_second: rps,
            burst: NonZeroU32::new(burst).unwrap_or(rps),
        })
    }

    fn cidrs(&mut self, path: &str, values: &[String]) -> Vec<IpNet> {
        values
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let parsed = t
                    .parse::<IpNet>()
                    .ok()
                    .or_else(|| t.parse::<IpAddr>().ok().map(IpNet::from));
                if parsed.is_none() {
                    self.err(
                        format!("{path}[{i}]"),
                        format!("`{t}` is not a CIDR or IP address"),
                    );
                }
                parsed
            })
            .collect()
    }

    fn hash(&mut self, path: &str, hex_text: &str) -> SecretHash {
        let mut out = [0u8; 32];
        let ok = hex_text.len() == 64
            && hex_text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && hex::decode_to_slice(hex_text, &mut out).is_ok();
        if !ok {
            self.err(path, "must be a lower-case hex SHA-256 (64 characters)");
        }
        SecretHash(out)
    }
}

/// `1..=max` bytes of `[A-Za-z0-9._:-]`: safe in a Redis key and a log line.
pub fn check_identifier(value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > max {
        return Err(format!("must be at most {max} bytes"));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(format!(
            "character {bad:?} not allowed (use A-Z a-z 0-9 . _ : -)"
        ));
    }
    Ok(())
}

/// Validates a raw config into the typed one, reporting every problem.
pub fn validate(raw: &RawConfig) -> Result<Config, ConfigErrors> {
    let mut cx = Ctx::default();
    let store = store(&mut cx, &raw.store);
    let pool = pool(&mut cx, &raw.pool);
    let upstreams: Vec<UpstreamConfig> = raw
        .upstreams
        .iter()
        .enumerate()
        .map(|(i, u)| upstream(&mut cx, &format!("upstreams[{i}]"), u, pool.max_ttl))
        .collect();
    unique(
        &mut cx,
        "upstreams",
        raw.upstreams.iter().map(|u| u.name.as_str()),
    );
    let clients: Vec<ClientConfig> = raw
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| client(&mut cx, &format!("clients[{i}]"), c))
        .collect();
    unique(
        &mut cx,
        "clients",
        raw.clients.iter().map(|c| c.name.as_str()),
    );
    credentials_unique(&mut cx, &clients);
    let distribution = distribution(&mut cx, &raw.distribution, &clients);
    let upstream_names: HashSet<&str> = raw.upstreams.iter().map(|u| u.name.as_str()).collect();
    let client_names: HashSet<&str> = raw.clients.iter().map(|c| c.name.as_str()).collect();
    let mut routings: Vec<RoutingConfig> = raw
        .routings
        .iter()
        .enumerate()
        .map(|(i, r)| {
            routing(
                &mut cx,
                &format!("routings[{i}]"),
                r,
                &upstream_names,
                &client_names,
            )
        })
        .collect();
    unique(
        &mut cx,
        "routings",
        raw.routings.iter().map(|r| r.name.as_str()),
    );
    routings.sort_by(|a, b| a.priority.cmp(&b.priority).then(a.name.cmp(&b.name)));
    let admin = AdminConfig {
        listen: cx.socket(
            "admin.listen",
            raw.admin.listen.as_deref(),
            "127.0.0.1:9090",
        ),
    };
    if admin.listen.port() != 0 && admin.listen == distribution.listen {
        cx.err("admin.listen", "must differ from distribution.listen");
    }
    let control_plane = if raw.control_plane.enabled {
        let listen = cx.socket(
            "controlPlane.listen",
            raw.control_plane.listen.as_deref(),
            "0.0.0.0:9443",
        );
        let transport = control_plane_transport(&mut cx, &raw.control_plane, listen);
        Some(control_plane_tunables(
            &mut cx,
            &raw.control_plane,
            listen,
            transport,
            distribution.limits.request_timeout,
        ))
    } else {
        None
    };
    let grace_period = cx.duration(
        "shutdown.gracePeriod",
        raw.shutdown.grace_period.as_deref(),
        Duration::from_secs(25),
    );
    let drain_delay = cx.duration(
        "shutdown.drainDelay",
        raw.shutdown.drain_delay.as_deref(),
        Duration::ZERO,
    );
    if grace_period.is_zero() {
        cx.err("shutdown.gracePeriod", "must be positive");
    }
    if drain_delay >= grace_period && !grace_period.is_zero() {
        cx.err("shutdown.drainDelay", "must be shorter than gracePeriod");
    }
    let (analytics, cache) = super::usage::usage(
        &mut cx.errors,
        &raw.analytics,
        &raw.cache,
        &store,
        grace_period,
    );
    let leadership = super::leadership::leadership(
        &mut cx.errors,
        &raw.leadership,
        &store,
        control_plane.as_ref(),
    );
    let egress = match EgressPolicy::parse(&raw.egress.deny_cidrs, &raw.egress.allow_cidrs) {
        Ok(p) => p,
        Err(problems) => {
            for p in problems {
                let (field, msg) = p.split_once(": ").unwrap_or(("", p.as_str()));
                let field = field.replacen("deny", "egress.denyCidrs", 1).replacen(
                    "allow",
                    "egress.allowCidrs",
                    1,
                );
                cx.err(field, msg);
            }
            EgressPolicy::default()
        }
    };
    // Static proxies are dialled by the checker and the gateways under the same policy:
    // one on a refused range would never serve, so it is a config error here.
    for (i, u) in upstreams.iter().enumerate() {
        if let SourceConfig::Static(st) = &u.source {
            for (j, p) in st.proxies.iter().enumerate() {
                if let Err(reason) = egress.check_host(&p.host) {
                    cx.err(
                        format!("upstreams[{i}].source.static.proxies[{j}]"),
                        format!(
                            "refused by the egress policy ({reason}); add the range to \
                             egress.allowCidrs to opt in"
                        ),
                    );
                }
            }
        }
    }
    if cx.errors.is_empty() {
        Ok(Config {
            leadership,
            store,
            pool,
            distribution,
            admin,
            control_plane,
            upstreams,
            routings,
            clients,
            analytics,
            cache,
            shutdown: ShutdownConfig {
                grace_period,
                drain_delay,
            },
            egress,
        })
    } else {
        Err(ConfigErrors(cx.errors))
    }
}

fn unique<'a>(cx: &mut Ctx, path: &str, names: impl Iterator<Item = &'a str>) {
    let mut seen = HashSet::new();
    for (i, n) in names.enumerate() {
        if !seen.insert(n) {
            cx.err(format!("{path}[{i}].name"), format!("duplicate name `{n}`"));
        }
    }
}

fn store(cx: &mut Ctx, raw: &RawStore) -> StoreConfig {
    match raw.backend.as_deref().unwrap_or("memory") {
        "memory" => {
            if raw.redis.is_some() {
                cx.err("store.redis", "only allowed with `backend: redis`");
            }
            StoreConfig::Memory
        }
        "redis" => match &raw.redis {
            Some(r) => StoreConfig::Redis(redis(cx, r)),
            None => {
                cx.err("store.redis", "is required with `backend: redis`");
                StoreConfig::Memory
            }
        },
        other => {
            cx.err(
                "store.backend",
                format!("`{other}` is not one of memory, redis"),
            );
            StoreConfig::Memory
        }
    }
}

fn redis(cx: &mut Ctx, raw: &RawRedis) -> RedisConfig {
    let mut tls_wanted = false;
    let target = match (&raw.address, &raw.sentinel) {
        (Some(a), None) => {
            if a.starts_with("rediss://") {
                tls_wanted = true;
            } else if !(a.starts_with("redis://") || a.starts_with("redis+unix://")) {
                cx.err(
                    "store.redis.address",
                    "must be a redis:// or rediss:// (TLS) URL",
                );
            }
            RedisTarget::Address(a.clone())
        }
        (None, Some(s)) => {
            tls_wanted = s.tls;
            if let Some(u) = &s.username
                && (u.is_empty() || u.len() > 256 || u.chars().any(|c| c.is_whitespace()))
            {
                cx.err(
                    "store.redis.sentinel.username",
                    "must be 1 to 256 bytes without spaces",
                );
            }
            if s.master_name.is_empty() {
                cx.err("store.redis.sentinel.masterName", "must not be empty");
            }
            if s.addresses.is_empty() {
                cx.err("store.redis.sentinel.addresses", "at least one sentinel");
            }
            for (i, a) in s.addresses.iter().enumerate() {
                if split_host_port(a).is_none() {
                    cx.err(
                        format!("store.redis.sentinel.addresses[{i}]"),
                        format!("`{a}` is not host:port"),
                    );
                }
            }
            RedisTarget::Sentinel {
                master_name: s.master_name.clone(),
                addresses: s.addresses.clone(),
                username: s.username.clone(),
                password_file: s
                    .password_file
                    .as_deref()
                    .map(|f| secret_file(cx, "store.redis.sentinel.passwordFile", f)),
            }
        }
        _ => {
            cx.err("store.redis", "needs exactly one of address or sentinel");
            RedisTarget::Address(String::new())
        }
    };
    let command_timeout = cx.duration(
        "store.redis.commandTimeout",
        raw.command_timeout.as_deref(),
        Duration::from_millis(500),
    );
    if command_timeout.is_zero() {
        cx.err("store.redis.commandTimeout", "must be positive");
    }
    if let Some(u) = &raw.username
        && (u.is_empty() || u.len() > 256 || u.chars().any(|c| c.is_whitespace()))
    {
        cx.err(
            "store.redis.username",
            "must be 1 to 256 bytes without spaces",
        );
    }
    let tls = match (&raw.tls, tls_wanted) {
        (_, true) => Some(RedisTls {
            ca_file: raw
                .tls
                .as_ref()
                .and_then(|t| t.ca_file.as_deref())
                .map(|f| secret_file(cx, "store.redis.tls.caFile", f)),
        }),
        (Some(_), false) => {
            cx.err(
                "store.redis.tls",
                "only with a rediss:// address or `sentinel.tls: true`",
            );
            None
        }
        (None, false) => None,
    };
    RedisConfig {
        target,
        username: raw.username.clone(),
        password_file: raw.password_file.as_ref().map(PathBuf::from),
        command_timeout,
        tls,
    }
}

fn pool(cx: &mut Ctx, raw: &RawPool) -> PoolConfig {
    PoolConfig {
        extract_scan_budget: cx.range(
            "pool.extractScanBudget",
            raw.extract_scan_budget,
            2048,
            16,
            1_000_000,
        ),
        inventory_scan_budget: cx.range(
            "pool.inventoryScanBudget",
            raw.inventory_scan_budget,
            20_000,
            16,
            10_000_000,
        ),
        opportunistic_purge: cx.range(
            "pool.opportunisticPurge",
            raw.opportunistic_purge,
            16,
            0,
            10_000,
        ),
        max_ttl: cx.duration(
            "pool.maxTtl",
            raw.max_ttl.as_deref(),
            Duration::from_secs(24 * 3600),
        ),
        maintenance_interval: cx.duration(
            "pool.maintenanceInterval",
            raw.maintenance_interval.as_deref(),
            Duration::from_secs(1),
        ),
        maintenance_batch: cx.range(
            "pool.maintenanceBatch",
            raw.maintenance_batch,
            1000,
            1,
            10_000,
        ),
    }
}

fn distribution(
    cx: &mut Ctx,
    raw: &RawDistribution,
    clients: &[ClientConfig],
) -> DistributionConfig {
    let max_count = cx.range(
        "distribution.maxCountPerRequest",
        raw.max_count_per_request,
        100,
        1,
        MAX_COUNT_PER_REQUEST,
    );
    let default_fulfillment = match raw.default_fulfillment.as_deref().unwrap_or("partial") {
        "partial" => FulfillmentDefault::Partial,
        "allOrNothing" => FulfillmentDefault::AllOrNothing,
        other => {
            cx.err(
                "distribution.defaultFulfillment",
                format!("`{other}` is not one of partial, allOrNothing"),
            );
            FulfillmentDefault::Partial
        }
    };
    let idempotency_ttl = cx.duration(
        "distribution.idempotencyTtl",
        raw.idempotency_ttl.as_deref(),
        Duration::from_secs(600),
    );
    if idempotency_ttl.is_zero() || idempotency_ttl > Duration::from_secs(24 * 3600) {
        cx.err("distribution.idempotencyTtl", "must be between 1s and 24h");
    }
    let l = &raw.limits;
    let limits = LimitsConfig {
        max_body_bytes: cx.range(
            "distribution.limits.maxBodyBytes",
            l.max_body_bytes,
            16 * 1024,
            256,
            1024 * 1024,
        ),
        max_header_bytes: cx.range(
            "distribution.limits.maxHeaderBytes",
            l.max_header_bytes,
            16 * 1024,
            1024,
            64 * 1024,
        ),
        max_headers: cx.range("distribution.limits.maxHeaders", l.max_headers, 64, 8, 100),
        max_connections: cx.range(
            "distribution.limits.maxConnections",
            l.max_connections,
            1024,
            1,
            100_000,
        ),
        max_connections_per_source: cx.range(
            "distribution.limits.maxConnectionsPerSource",
            l.max_connections_per_source,
            256,
            1,
            100_000,
        ),
        max_in_flight: cx.range(
            "distribution.limits.maxInFlight",
            l.max_in_flight,
            256,
            1,
            100_000,
        ),
        request_timeout: cx.duration(
            "distribution.limits.requestTimeout",
            l.request_timeout.as_deref(),
            Duration::from_secs(10),
        ),
    };
    if limits.request_timeout.is_zero() {
        cx.err("distribution.limits.requestTimeout", "must be positive");
    }
    if l.max_connections_per_source.is_some()
        && limits.max_connections_per_source > limits.max_connections
    {
        cx.err(
            "distribution.limits.maxConnectionsPerSource",
            "must not exceed maxConnections",
        );
    }
    let trusted_proxies = cx.cidrs("distribution.trustedProxies", &raw.trusted_proxies);
    let allowed_sources = cx.cidrs("distribution.allowedSources", &raw.allowed_sources);
    DistributionConfig {
        listen: cx.socket(
            "distribution.listen",
            raw.listen.as_deref(),
            "127.0.0.1:8081",
        ),
        max_count_per_request: NonZeroU32::new(max_count).unwrap_or(NonZeroU32::MIN),
        default_fulfillment,
        min_remaining_ttl: cx.duration(
            "distribution.minRemainingTtl",
            raw.min_remaining_ttl.as_deref(),
            Duration::from_secs(5),
        ),
        max_health_check_age: raw
            .max_health_check_age
            .as_deref()
            .map(|s| cx.duration("distribution.maxHealthCheckAge", Some(s), Duration::ZERO)),
        reserve_for_gateway: raw.reserve_for_gateway.unwrap_or(0),
        idempotency_ttl,
        limits,
        trusted_proxies,
        allowed_sources,
        global_rate: cx.rate(
            "distribution.rateLimit.global",
            raw.rate_limit.global.as_ref(),
        ),
        per_client_rate: cx.rate(
            "distribution.rateLimit.perClient",
            raw.rate_limit.per_client.as_ref(),
        ),
        auth: auth(cx, &raw.auth, clients),
    }
}

fn auth(cx: &mut Ctx, raw: &RawAuth, clients: &[ClientConfig]) -> AuthConfig {
    // Fail closed: anonymous access only when the config says so. Without a usable
    // client (none configured, or every one left out) every request gets 401.
    let mode = match raw.mode.as_deref().unwrap_or("any") {
        "none" => AuthMode::None,
        "any" => AuthMode::Any,
        other => {
            cx.err(
                "distribution.auth.mode",
                format!("`{other}` is not one of none, any"),
            );
            AuthMode::Any
        }
    };
    let permissions = cx.permissions("distribution.auth.permissions", raw.permissions.as_ref());
    let mut methods = Vec::new();
    for (i, m) in raw.methods.iter().enumerate() {
        let path = format!("distribution.auth.methods[{i}]");
        let kind = match m.kind.as_str() {
            "apiKey" => AuthMethodKind::ApiKey,
            "basic" => AuthMethodKind::Basic,
            "bearer" => AuthMethodKind::Bearer,
            other => {
                cx.err(
                    format!("{path}.type"),
                    format!("`{other}` is not one of apiKey, basic, bearer"),
                );
                continue;
            }
        };
        if methods.iter().any(|x: &AuthMethodConfig| x.kind == kind) {
            cx.err(
                format!("{path}.type"),
                format!("method `{}` listed twice", kind.as_str()),
            );
        }
        let permissions = cx.permissions(&format!("{path}.permissions"), m.permissions.as_ref());
        let token_review = m.token_review.as_ref().and_then(|t| {
            let p = format!("{path}.tokenReview");
            if kind == AuthMethodKind::Bearer {
                Some(token_review(cx, &p, t))
            } else {
                cx.err(p, "only allowed with `type: bearer`");
                None
            }
        });
        methods.push(AuthMethodConfig {
            kind,
            permissions,
            token_review,
        });
    }
    if mode == AuthMode::Any {
        if raw.methods.is_empty() {
            methods = [
                AuthMethodKind::ApiKey,
                AuthMethodKind::Basic,
                AuthMethodKind::Bearer,
            ]
            .into_iter()
            .map(|kind| AuthMethodConfig {
                kind,
                permissions: None,
                token_review: None,
            })
            .collect();
        }
        let enabled = |k| methods.iter().any(|m| m.kind == k);
        let reviewed = methods.iter().any(|m| m.token_review.is_some());
        for (i, c) in clients.iter().enumerate() {
            let uses = [
                (!c.api_keys.is_empty(), AuthMethodKind::ApiKey, "apiKeys"),
                (c.basic.is_some(), AuthMethodKind::Basic, "basic"),
                (
                    !c.bearer_tokens.is_empty(),
                    AuthMethodKind::Bearer,
                    "bearerTokens",
                ),
            ];
            for (used, kind, field) in uses {
                if used && !enabled(kind) {
                    cx.err(
                        format!("clients[{i}].{field}"),
                        format!(
                            "method `{}` is not enabled in distribution.auth.methods",
                            kind.as_str()
                        ),
                    );
                }
            }
            if !c.service_accounts.is_empty() && !reviewed {
                cx.err(
                    format!("clients[{i}].serviceAccounts"),
                    "needs a `bearer` method with tokenReview in distribution.auth.methods",
                );
            }
        }
    } else if !raw.methods.is_empty() {
        cx.err("distribution.auth.methods", "only allowed with `mode: any`");
    }
    AuthConfig {
        mode,
        permissions,
        methods,
    }
}

/// `tokenReview`: a usable audience and, when given, a kubeconfig path.
fn token_review(cx: &mut Ctx, path: &str, raw: &RawTokenReview) -> TokenReviewConfig {
    let a = &raw.audience;
    if a.is_empty() || a.len() > 256 || a.chars().any(|c| c.is_whitespace() || c.is_control()) {
        cx.err(
            format!("{path}.audience"),
            "must be 1 to 256 bytes without spaces or control characters",
        );
    }
    TokenReviewConfig {
        audience: a.clone(),
        kubeconfig_file: raw
            .kubeconfig_file
            .as_deref()
            .map(|f| secret_file(cx, &format!("{path}.kubeconfigFile"), f)),
    }
}

/// Whether `s` is a DNS-1123 name of at most `max` bytes: a label, or with `dots` a
/// subdomain (Kubernetes object names).
pub(super) fn dns_name(s: &str, max: usize, dots: bool) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    !s.is_empty()
        && s.len() <= max
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(ok_char)
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
        && (dots || !s.contains('.'))
}

/// Whether `namespace/name` names a ServiceAccount: a DNS-1123 label, `/`, a DNS-1123
/// subdomain.
fn check_service_account(value: &str) -> Result<(), String> {
    match value.split_once('/') {
        Some((ns, name)) if dns_name(ns, 63, false) && dns_name(name, 253, true) => Ok(()),
        _ => Err(format!(
            "`{value}` is not `namespace/name` (a DNS label, `/`, a DNS subdomain)"
        )),
    }
}

fn client(cx: &mut Ctx, path: &str, raw: &RawClient) -> ClientConfig {
    cx.identifier(&format!("{path}.name"), &raw.name, MAX_CLIENT_NAME);
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
        max_extract_count,
        allowed_upstreams: cx.list(
            &format!("{path}.allowedUpstreams"),
            &raw.allowed_upstreams,
            63,
        ),
        allowed_regions: cx.list(&format!("{path}.allowedRegions"), &raw.allowed_regions, 64),
        rate_limit: cx.rate(&format!("{path}.rateLimit"), raw.rate_limit.as_ref()),
        api_keys,
        basic,
        bearer_tokens,
        service_accounts: raw.service_accounts.clone(),
        secret_files,
    }
}

/// A file path of a credential: non-empty, no NUL.
fn secret_file(cx: &mut Ctx, path: &str, file: &str) -> PathBuf {
    if file.trim().is_empty() || file.contains('\0') {
        cx.err(path, "must be a file path");
    }
    PathBuf::from(file)
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

/// Whether an HTTP Basic user name is acceptable.
pub(super) fn check_basic_username(username: &str) -> Result<(), &'static str> {
    if username.is_empty() || username.contains(':') || username.len() > 128 {
        return Err("must be 1 to 128 bytes without `:`");
    }
    Ok(())
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
pub(super) fn duplicate_credentials(clients: &[ClientConfig]) -> Vec<ConfigError> {
    let mut cx = Ctx::default();
    credentials_unique(&mut cx, clients);
    cx.errors
}

fn credentials_unique(cx: &mut Ctx, clients: &[ClientConfig]) {
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

fn upstream(cx: &mut Ctx, path: &str, raw: &RawUpstream, max_ttl: Duration) -> UpstreamConfig {
    cx.identifier(&format!("{path}.name"), &raw.name, 63);
    let text = raw.protocol.as_deref().unwrap_or(Protocol::Http.as_str());
    let protocol = Protocol::parse(text).unwrap_or_else(|| {
        cx.err(
            format!("{path}.protocol"),
            format!("`{text}` is not one of {}", one_of(Protocol::ALL)),
        );
        Protocol::Http
    });
    for (field, v) in [
        ("region", &raw.labels.region),
        ("carrier", &raw.labels.carrier),
    ] {
        if let Some(v) = v {
            cx.identifier(&format!("{path}.labels.{field}"), v, 64);
        }
    }
    let ttl = cx.required_duration(&format!("{path}.ttl"), raw.ttl.as_deref());
    let safety_margin = cx.duration(
        &format!("{path}.safetyMargin"),
        raw.safety_margin.as_deref(),
        Duration::from_secs(5),
    );
    if raw.ttl.is_some() && safety_margin >= ttl {
        cx.err(format!("{path}.safetyMargin"), "must be shorter than ttl");
    }
    if ttl > max_ttl {
        cx.err(format!("{path}.ttl"), "must not exceed pool.maxTtl");
    }
    let quarantine = cx.duration(
        &format!("{path}.quarantine"),
        raw.quarantine.as_deref(),
        ttl,
    );
    if quarantine > max_ttl {
        cx.err(format!("{path}.quarantine"), "must not exceed pool.maxTtl");
    }
    if raw.max_size.is_none() {
        cx.err(format!("{path}.maxSize"), "is required");
    }
    let max_size = cx.range(&format!("{path}.maxSize"), raw.max_size, 1, 1, 1_000_000);
    let fetch_interval = cx.duration(
        &format!("{path}.fetchInterval"),
        raw.fetch_interval.as_deref(),
        Duration::from_secs(10),
    );
    if fetch_interval < Duration::from_millis(100) {
        cx.err(format!("{path}.fetchInterval"), "must be at least 100ms");
    }
    UpstreamConfig {
        name: raw.name.clone(),
        source: source(cx, &format!("{path}.source"), &raw.source),
        protocol,
        region: raw.labels.region.clone(),
        carrier: raw.labels.carrier.clone(),
        ttl,
        safety_margin,
        quarantine,
        max_concurrency_per_proxy: cx.range(
            &format!("{path}.maxConcurrencyPerProxy"),
            raw.max_concurrency_per_proxy,
            1,
            1,
            100_000,
        ),
        max_size: NonZeroU32::new(max_size).unwrap_or(NonZeroU32::MIN),
        fetch_interval,
        health: upstream_health(cx, &format!("{path}.health"), raw.health.as_ref()),
    }
}

/// Most TARGET URLs of one upstream.
pub const MAX_HEALTH_TARGETS: usize = 16;

fn upstream_health(
    cx: &mut Ctx,
    path: &str,
    raw: Option<&RawUpstreamHealth>,
) -> UpstreamHealthConfig {
    let d = UpstreamHealthConfig::default();
    let Some(raw) = raw else {
        return d;
    };
    let interval = cx.duration(
        &format!("{path}.interval"),
        raw.interval.as_deref(),
        d.interval,
    );
    let timeout = cx.duration(
        &format!("{path}.timeout"),
        raw.timeout.as_deref(),
        d.timeout,
    );
    if interval < Duration::from_secs(1) {
        cx.err(format!("{path}.interval"), "must be at least 1s");
    }
    if timeout < Duration::from_millis(100) {
        cx.err(format!("{path}.timeout"), "must be at least 100ms");
    }
    if timeout > interval {
        cx.err(
            format!("{path}.timeout"),
            "must not be longer than interval",
        );
    }
    let threshold = cx.range(
        &format!("{path}.failureThreshold"),
        raw.failure_threshold,
        d.failure_threshold.get(),
        1,
        20,
    );
    if raw.targets.len() > MAX_HEALTH_TARGETS {
        cx.err(
            format!("{path}.targets"),
            format!("at most {MAX_HEALTH_TARGETS} URLs"),
        );
    }
    for (i, t) in raw.targets.iter().enumerate() {
        if target_url(t).is_none() {
            cx.err(
                format!("{path}.targets[{i}]"),
                "must be an http(s) URL with a host, at most 2048 bytes",
            );
        }
    }
    UpstreamHealthConfig {
        interval,
        timeout,
        failure_threshold: NonZeroU32::new(threshold).unwrap_or(d.failure_threshold),
        egress: raw.egress.unwrap_or(d.egress),
        targets: raw.targets.clone(),
    }
}

/// Host and port of an `http(s)://host[:port][/…]` URL (default port by scheme).
pub fn target_url(url: &str) -> Option<(String, u16)> {
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (rest, default_port) = if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    if let Some(sp) = split_host_port(authority) {
        return Some((sp.host, sp.port));
    }
    let host = authority
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(authority);
    let valid = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
        && (!host.contains(':') || host.parse::<std::net::Ipv6Addr>().is_ok());
    (valid && !host.is_empty()).then(|| (host.to_owned(), default_port))
}

fn source(cx: &mut Ctx, path: &str, raw: &RawSource) -> SourceConfig {
    match (&raw.static_list, &raw.vendor_api) {
        (Some(s), None) => {
            if s.proxies.is_empty() || s.proxies.len() > 10_000 {
                cx.err(format!("{path}.static.proxies"), "needs 1 to 10000 entries");
            }
            let mut seen = HashSet::new();
            let proxies = s
                .proxies
                .iter()
                .enumerate()
                .filter_map(|(i, p)| {
                    let parsed = split_host_port(p);
                    match &parsed {
                        None => cx.err(
                            format!("{path}.static.proxies[{i}]"),
                            format!("`{p}` is not host:port"),
                        ),
                        Some(sp) if !seen.insert((sp.host.to_ascii_lowercase(), sp.port)) => cx
                            .err(
                                format!("{path}.static.proxies[{i}]"),
                                format!("duplicate `{p}`"),
                            ),
                        Some(_) => {}
                    }
                    parsed
                })
                .collect();
            SourceConfig::Static(StaticSourceConfig {
                proxies,
                credentials: s
                    .credentials
                    .as_ref()
                    .map(|c| proxy_credentials(cx, &format!("{path}.static.credentials"), c)),
                assume_healthy: s.assume_healthy.unwrap_or(true),
            })
        }
        (None, Some(v)) => {
            if !(v.url.starts_with("http://") || v.url.starts_with("https://"))
                || v.url.len() > 2048
            {
                cx.err(
                    format!("{path}.vendorApi.url"),
                    "must be an http(s) URL of at most 2048 bytes",
                );
            }
            let format = match v.format.as_str() {
                "json" => VendorFormat::Json,
                "lines" => VendorFormat::Lines,
                other => {
                    cx.err(
                        format!("{path}.vendorApi.format"),
                        format!("`{other}` is not one of json, lines"),
                    );
                    VendorFormat::Json
                }
            };
            SourceConfig::VendorApi(VendorApiConfig {
                url: v.url.clone(),
                format,
                api_key_file: v.api_key_file.as_ref().map(PathBuf::from),
                credentials: v
                    .credentials
                    .as_ref()
                    .map(|c| proxy_credentials(cx, &format!("{path}.vendorApi.credentials"), c)),
                timeout: cx.duration(
                    &format!("{path}.vendorApi.timeout"),
                    v.timeout.as_deref(),
                    Duration::from_secs(10),
                ),
                max_requests_per_minute: cx.range(
                    &format!("{path}.vendorApi.maxRequestsPerMinute"),
                    v.max_requests_per_minute,
                    60,
                    1,
                    600,
                ),
                max_proxies_per_fetch: v.max_proxies_per_fetch.and_then(|n| {
                    NonZeroU32::new(cx.range(
                        &format!("{path}.vendorApi.maxProxiesPerFetch"),
                        Some(n),
                        1,
                        1,
                        100_000,
                    ))
                }),
            })
        }
        _ => {
            cx.err(path, "needs exactly one of static or vendorApi");
            SourceConfig::Static(StaticSourceConfig {
                proxies: Vec::new(),
                credentials: None,
                assume_healthy: true,
            })
        }
    }
}

fn proxy_credentials(cx: &mut Ctx, path: &str, raw: &RawProxyCredentials) -> ProxyCredentials {
    if raw.username_file.is_some() {
        // Read (and checked) by `load_yaml_with_files`, which then clears it.
        if !raw.username.is_empty() {
            cx.err(path, "needs exactly one of username or usernameFile");
        }
    } else if raw.username.is_empty()
        || raw.username.len() > 255
        || raw.username.chars().any(char::is_control)
    {
        cx.err(
            format!("{path}.username"),
            "must be 1 to 255 bytes without control characters",
        );
    }
    let password = match (&raw.password, &raw.password_file) {
        (Some(p), None) => {
            if p.is_empty() || p.len() > 255 || p.chars().any(char::is_control) {
                cx.err(
                    format!("{path}.password"),
                    "must be 1 to 255 bytes without control characters",
                );
            }
            PasswordSource::Inline(p.clone())
        }
        (None, Some(f)) => PasswordSource::File(PathBuf::from(f)),
        _ => {
            cx.err(path, "needs exactly one of password or passwordFile");
            PasswordSource::Inline(String::new())
        }
    };
    ProxyCredentials {
        username: raw.username.clone(),
        password,
    }
}

fn routing(
    cx: &mut Ctx,
    path: &str,
    raw: &RawRouting,
    upstreams: &HashSet<&str>,
    clients: &HashSet<&str>,
) -> RoutingConfig {
    cx.identifier(&format!("{path}.name"), &raw.name, 63);
    if raw.upstreams.is_empty() {
        cx.err(format!("{path}.upstreams"), "at least one upstream");
    }
    for (i, u) in raw.upstreams.iter().enumerate() {
        if !upstreams.contains(u.as_str()) {
            cx.err(
                format!("{path}.upstreams[{i}]"),
                format!("unknown upstream `{u}`"),
            );
        }
    }
    for (i, c) in raw.clients.iter().enumerate() {
        if !clients.contains(c.as_str()) {
            cx.err(
                format!("{path}.clients[{i}]"),
                format!("unknown client `{c}`"),
            );
        }
    }
    let text = raw
        .strategy
        .as_deref()
        .unwrap_or(Strategy::default().as_str());
    let strategy = Strategy::parse(text).unwrap_or_else(|| {
        cx.err(
            format!("{path}.strategy"),
            format!("`{text}` is not one of {}", one_of(Strategy::ALL)),
        );
        Strategy::default()
    });
    RoutingConfig {
        name: raw.name.clone(),
        priority: raw.priority,
        clients: raw.clients.clone(),
        upstreams: raw.upstreams.clone(),
        regions: cx.list(&format!("{path}.regions"), &raw.regions, 64),
        carriers: cx.list(&format!("{path}.carriers"), &raw.carriers, 64),
        strategy,
        username_params: username_params(cx, &format!("{path}.usernameParams"), raw),
        target_hosts: target_hosts(cx, &format!("{path}.targetHosts"), &raw.target_hosts),
        target_check_port: match raw.target_check_port {
            Some(0) => {
                cx.err(format!("{path}.targetCheckPort"), "must be 1 to 65535");
                443
            }
            Some(p) => p,
            None => 443,
        },
        sticky: raw
            .sticky_session
            .as_ref()
            .map(|s| sticky(cx, &format!("{path}.stickySession"), s)),
        retry: retry(cx, &format!("{path}.retry"), raw.retry.as_ref()),
        gateway_groups: cx.list(&format!("{path}.gatewayGroups"), &raw.gateway_groups, 253),
        connect_ports: match PortRanges::parse(&raw.connect_ports) {
            Ok(p) => p,
            Err(problems) => {
                for p in problems {
                    match p.split_once(": ") {
                        Some((index, msg)) if index.starts_with('[') => {
                            cx.err(format!("{path}.connectPorts{index}"), msg);
                        }
                        _ => cx.err(format!("{path}.connectPorts"), p),
                    }
                }
                PortRanges::default()
            }
        },
    }
}

/// Most username parameters one routing matches on.
pub const MAX_USERNAME_PARAMS: usize = 16;
/// Most target host patterns of one routing.
pub const MAX_TARGET_HOSTS: usize = 256;

/// A username parameter key or value: what `user-key-value` can carry.
fn username_token(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 64 {
        return Err("must be 1 to 64 bytes".into());
    }
    match value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_')))
    {
        Some(bad) => Err(format!(
            "character {bad:?} not allowed (use A-Z a-z 0-9 . _)"
        )),
        None => Ok(()),
    }
}

fn username_params(cx: &mut Ctx, path: &str, raw: &RawRouting) -> Vec<UsernameParamConfig> {
    if raw.username_params.len() > MAX_USERNAME_PARAMS {
        cx.err(path, format!("at most {MAX_USERNAME_PARAMS} parameters"));
    }
    raw.username_params
        .iter()
        .map(|(key, values)| {
            if let Err(e) = username_token(key) {
                cx.err(format!("{path}.{key}"), format!("key {e}"));
            }
            if values.len() > MAX_LIST_VALUES {
                cx.err(
                    format!("{path}.{key}"),
                    format!("at most {MAX_LIST_VALUES} values"),
                );
            }
            let mut seen = HashSet::new();
            for (i, v) in values.iter().enumerate() {
                if let Err(e) = username_token(v) {
                    cx.err(format!("{path}.{key}[{i}]"), e);
                }
                if !seen.insert(v.as_str()) {
                    cx.err(
                        format!("{path}.{key}[{i}]"),
                        format!("duplicate value `{v}`"),
                    );
                }
            }
            UsernameParamConfig {
                key: key.clone(),
                values: values.clone(),
            }
        })
        .collect()
}

/// `host` or `*.suffix`, DNS characters only.
fn target_hosts(cx: &mut Ctx, path: &str, raw: &[String]) -> Vec<String> {
    if raw.len() > MAX_TARGET_HOSTS {
        cx.err(path, format!("at most {MAX_TARGET_HOSTS} hosts"));
    }
    let mut seen = HashSet::new();
    raw.iter()
        .enumerate()
        .map(|(i, h)| {
            let name = h.strip_prefix("*.").unwrap_or(h);
            let ok = !name.is_empty()
                && h.len() <= 255
                && !name.starts_with(['.', '-'])
                && !name.ends_with(['.', '-'])
                && !name.contains("..")
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
            if !ok {
                cx.err(
                    format!("{path}[{i}]"),
                    format!("`{h}` is not a host name or `*.suffix` pattern"),
                );
            }
            let lower = h.to_ascii_lowercase();
            if !seen.insert(lower.clone()) {
                cx.err(format!("{path}[{i}]"), format!("duplicate host `{h}`"));
            }
            lower
        })
        .collect()
}

fn sticky(cx: &mut Ctx, path: &str, raw: &super::raw::RawStickySession) -> StickyConfig {
    let ttl = cx.duration(
        &format!("{path}.ttl"),
        raw.ttl.as_deref(),
        Duration::from_secs(600),
    );
    let idle_timeout = cx.duration(
        &format!("{path}.idleTimeout"),
        raw.idle_timeout.as_deref(),
        Duration::from_secs(120),
    );
    if ttl < Duration::from_secs(1) {
        cx.err(format!("{path}.ttl"), "must be at least 1s");
    }
    if idle_timeout.is_zero() {
        cx.err(format!("{path}.idleTimeout"), "must be positive");
    }
    if idle_timeout > ttl {
        cx.err(format!("{path}.idleTimeout"), "must not be longer than ttl");
    }
    let param = raw.param.clone().unwrap_or_else(|| "session".to_owned());
    if let Err(e) = username_token(&param) {
        cx.err(format!("{path}.param"), e);
    }
    StickyConfig {
        param,
        ttl,
        idle_timeout,
    }
}

fn retry(cx: &mut Ctx, path: &str, raw: Option<&super::raw::RawRetry>) -> RetryConfig {
    let d = RetryConfig::default();
    let Some(raw) = raw else {
        return d;
    };
    let deadline = cx.duration(
        &format!("{path}.deadline"),
        raw.deadline.as_deref(),
        d.deadline,
    );
    if deadline < Duration::from_millis(100) {
        cx.err(format!("{path}.deadline"), "must be at least 100ms");
    }
    RetryConfig {
        max_attempts: cx.range(
            &format!("{path}.maxAttempts"),
            raw.max_attempts,
            d.max_attempts,
            1,
            10,
        ),
        deadline,
    }
}

/// Splits `host:port` or `[v6]:port`.
pub fn split_host_port(s: &str) -> Option<StaticProxy> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:")?;
        h.parse::<std::net::Ipv6Addr>().ok()?;
        (h, p)
    } else {
        let (h, p) = s.rsplit_once(':')?;
        if h.contains(':') {
            return None;
        }
        (h, p)
    };
    let valid_host = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    valid_host.then(|| StaticProxy {
        host: host.to_owned(),
        port,
    })
}

/// `controlPlane.loopbackPlaintext` / `controlPlane.tls`: plaintext only on a loopback
/// listener, never together with TLS; TLS needs its three files.
fn control_plane_transport(
    cx: &mut Ctx,
    raw: &RawControlPlane,
    listen: SocketAddr,
) -> ControlPlaneTransport {
    match (&raw.tls, raw.loopback_plaintext) {
        (Some(_), true) => {
            cx.err(
                "controlPlane.loopbackPlaintext",
                "cannot be combined with controlPlane.tls",
            );
            ControlPlaneTransport::Unconfigured
        }
        (None, true) => {
            if !listen.ip().is_loopback() {
                cx.err(
                    "controlPlane.loopbackPlaintext",
                    "plaintext is allowed only on a loopback listen address",
                );
            }
            ControlPlaneTransport::LoopbackPlaintext
        }
        (Some(t), false) => {
            let mut file = |field: &str, v: &str| {
                if v.trim().is_empty() {
                    cx.err(format!("controlPlane.tls.{field}"), "is required");
                }
                PathBuf::from(v)
            };
            let cert_file = file("certFile", &t.cert_file);
            let key_file = file("keyFile", &t.key_file);
            let client_ca_file = file("clientCaFile", &t.client_ca_file);
            let mut name = |field: &str, v: &Option<String>, default: &str| {
                let v = v.clone().unwrap_or_else(|| default.to_owned());
                if v.is_empty() || v.contains('/') || v.chars().any(char::is_whitespace) {
                    cx.err(
                        format!("controlPlane.tls.{field}"),
                        "must be a non-empty name without '/' or spaces",
                    );
                }
                v
            };
            let trust_domain = name("trustDomain", &t.trust_domain, "proxy-pool.local");
            let environment = name("environment", &t.environment, "default");
            ControlPlaneTransport::Mtls(ControlPlaneTls {
                cert_file,
                key_file,
                client_ca_file,
                trust_domain,
                environment,
            })
        }
        (None, false) => ControlPlaneTransport::Unconfigured,
    }
}

/// The control plane's tunables (`controlPlane.*` beyond the listener), each checked
/// with its path; `drainWait` must leave the Distribution request time to answer.
fn control_plane_tunables(
    cx: &mut Ctx,
    raw: &RawControlPlane,
    listen: SocketAddr,
    transport: ControlPlaneTransport,
    request_timeout: Duration,
) -> ControlPlaneConfig {
    let mut within =
        |path: &str, raw: Option<&str>, default: Duration, min: Duration, max: Duration| {
            duration_in(&mut cx.errors, path, raw, default, (min, max))
        };
    let lease = within(
        "controlPlane.lease",
        raw.lease.as_deref(),
        Duration::from_secs(30),
        Duration::from_secs(5),
        Duration::from_secs(3600),
    );
    let renew_before = within(
        "controlPlane.renewBefore",
        raw.renew_before.as_deref(),
        Duration::from_secs(15),
        Duration::from_secs(2),
        Duration::from_secs(3600),
    );
    let snapshot_validity = within(
        "controlPlane.snapshotValidity",
        raw.snapshot_validity.as_deref(),
        Duration::from_secs(30),
        Duration::from_secs(2),
        Duration::from_secs(3600),
    );
    let max_stale_age = within(
        "controlPlane.maxStaleAge",
        raw.max_stale_age.as_deref(),
        Duration::from_secs(60),
        Duration::from_secs(1),
        Duration::from_secs(3600),
    );
    let report_interval = within(
        "controlPlane.reportInterval",
        raw.report_interval.as_deref(),
        Duration::from_secs(5),
        Duration::from_millis(100),
        Duration::from_secs(60),
    );
    let drain_wait = within(
        "controlPlane.drainWait",
        raw.drain_wait.as_deref(),
        Duration::from_secs(5),
        Duration::ZERO,
        Duration::from_secs(60),
    );
    if renew_before >= lease {
        cx.err(
            "controlPlane.renewBefore",
            format!("must be shorter than controlPlane.lease ({})", show(lease)),
        );
    }
    if !drain_wait.is_zero() && drain_wait >= request_timeout {
        cx.err(
            "controlPlane.drainWait",
            format!(
                "must be shorter than distribution.limits.requestTimeout ({})",
                show(request_timeout)
            ),
        );
    }
    let slots = raw.target_slots_per_worker.unwrap_or(10_000);
    if !(1..=10_000_000).contains(&slots) {
        cx.err(
            "controlPlane.targetSlotsPerWorker",
            format!("must be between 1 and 10000000, got {slots}"),
        );
    }
    ControlPlaneConfig {
        listen,
        transport,
        extraction_reserve: cx.range(
            "controlPlane.extractionReserve",
            raw.extraction_reserve,
            0,
            0,
            10_000,
        ),
        target_slots_per_worker: slots.clamp(1, 10_000_000),
        drain_batch: cx.range("controlPlane.drainBatch", raw.drain_batch, 64, 1, 10_000),
        drain_wait,
        lease,
        renew_before: renew_before.min(lease),
        snapshot_validity,
        max_stale_age,
        report_interval,
    }
}
