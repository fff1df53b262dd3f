//! Raw config → typed config: a pure function that collects every problem, each with
//! its field path, instead of stopping at the first.
//!
//! One file per config section; [`validate`] runs them in order and checks what spans
//! sections (unique names, listeners that must differ, static proxies against the egress
//! policy).

mod client;
mod control_plane;
mod ctx;
mod distribution;
mod leadership;
mod routing;
mod store;
mod upstream;
mod usage;

use std::collections::HashSet;
use std::time::Duration;

use crate::config::error::ConfigErrors;
use crate::config::raw::RawConfig;
use crate::config::types::{
    AdminConfig, ClientConfig, Config, EgressPolicy, RoutingConfig, ShutdownConfig, SourceConfig,
    UpstreamConfig,
};

use ctx::Ctx;

pub(super) use client::duplicate_credentials;
pub use ctx::{MAX_COUNT_PER_REQUEST, MAX_LIST_VALUES};
pub use leadership::{DEFAULT_LEASE_NAME, MAX_REPLICAS};
pub use routing::{MAX_TARGET_HOSTS, MAX_USERNAME_PARAMS};
pub use upstream::MAX_HEALTH_TARGETS;
pub use usage::{MAX_CACHE_BATCH, MAX_KEY_PREFIX, TOKEN_REVIEW_MAX_TTL};

/// Validates a raw config into the typed one, reporting every problem.
pub fn validate(raw: &RawConfig) -> Result<Config, ConfigErrors> {
    let mut cx = Ctx::default();
    let store = store::store(&mut cx, &raw.store);
    let pool = store::pool(&mut cx, &raw.pool);
    let upstreams: Vec<UpstreamConfig> = raw
        .upstreams
        .iter()
        .enumerate()
        .map(|(i, u)| upstream::upstream(&mut cx, &format!("upstreams[{i}]"), u, pool.max_ttl))
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
        .map(|(i, c)| client::client(&mut cx, &format!("clients[{i}]"), c))
        .collect();
    unique(
        &mut cx,
        "clients",
        raw.clients.iter().map(|c| c.name.as_str()),
    );
    client::credentials_unique(&mut cx, &clients);
    let distribution = distribution::distribution(&mut cx, &raw.distribution, &clients);
    let upstream_names: HashSet<&str> = raw.upstreams.iter().map(|u| u.name.as_str()).collect();
    let client_names: HashSet<&str> = raw.clients.iter().map(|c| c.name.as_str()).collect();
    let mut routings: Vec<RoutingConfig> = raw
        .routings
        .iter()
        .enumerate()
        .map(|(i, r)| {
            routing::routing(
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
        let transport = control_plane::control_plane_transport(&mut cx, &raw.control_plane, listen);
        Some(control_plane::control_plane_tunables(
            &mut cx,
            &raw.control_plane,
            listen,
            transport,
            distribution.limits.request_timeout,
        ))
    } else {
        None
    };
    let grace_period = cx.positive_duration(
        "shutdown.gracePeriod",
        raw.shutdown.grace_period.as_deref(),
        Duration::from_secs(25),
    );
    let drain_delay = cx.duration(
        "shutdown.drainDelay",
        raw.shutdown.drain_delay.as_deref(),
        Duration::ZERO,
    );
    if drain_delay >= grace_period && !grace_period.is_zero() {
        cx.err("shutdown.drainDelay", "must be shorter than gracePeriod");
    }
    let (analytics, cache) =
        usage::usage(&mut cx, &raw.analytics, &raw.cache, &store, grace_period);
    let leadership =
        leadership::leadership(&mut cx, &raw.leadership, &store, control_plane.as_ref());
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
