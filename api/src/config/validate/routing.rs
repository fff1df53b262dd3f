//! `routings[]`: references to upstreams and clients, strategy, match conditions
//! (username parameters, target hosts), sticky sessions, retries and CONNECT ports.

use std::collections::HashSet;
use std::time::Duration;

use super::ctx::{Ctx, MAX_LIST_VALUES};
use crate::config::checks::username_token;
use crate::config::raw::RawRouting;
use crate::config::raw::{RawRetry, RawStickySession};
use crate::config::types::{
    Dimension, PortRanges, RetryConfig, RoutingConfig, Selector, Sticky, Strategy,
    UsernameParamConfig,
};
use crate::controlplane::model::Routing;

pub(super) fn routing(
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
    let strategy = cx.one_of(
        format!("{path}.strategy"),
        text,
        &Strategy::ALL,
        Strategy::as_str,
        Strategy::default(),
    );
    RoutingConfig {
        name: raw.name.clone(),
        priority: raw.priority,
        clients: raw.clients.clone(),
        upstreams: raw.upstreams.clone(),
        regions: cx.list(&format!("{path}.regions"), &raw.regions, 64),
        carriers: cx.list(&format!("{path}.carriers"), &raw.carriers, 64),
        cities: cx.list(&format!("{path}.cities"), &raw.cities, 64),
        strategy,
        username_params: username_params(cx, &format!("{path}.usernameParams"), raw),
        selectors: raw
            .selectors
            .as_ref()
            .map(|s| selectors(cx, &format!("{path}.selectors"), s)),
        target_hosts: target_hosts(cx, &format!("{path}.targetHosts"), &raw.target_hosts),
        target_check_port: match raw.target_check_port {
            Some(0) => {
                cx.err(format!("{path}.targetCheckPort"), "must be 1 to 65535");
                443
            }
            Some(p) => p,
            None => 443,
        },
        // Sessions are on unless turned off: a client asking for `session-…` gets one.
        sticky: match &raw.sticky_session {
            Some(s) if s.enabled == Some(false) => None,
            s => Some(sticky(
                cx,
                &format!("{path}.stickySession"),
                s.as_ref().unwrap_or(&RawStickySession::default()),
            )),
        },
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

fn selectors(
    cx: &mut Ctx,
    path: &str,
    raw: &std::collections::BTreeMap<String, String>,
) -> Vec<Selector> {
    if raw.len() > Routing::MAX_SELECTORS {
        cx.err(
            path,
            format!("at most {} selectors", Routing::MAX_SELECTORS),
        );
    }
    let mut seen = HashSet::new();
    raw.iter()
        .filter_map(|(param, dimension)| {
            if let Err(e) = username_token(param) {
                cx.err(format!("{path}.{param}"), format!("parameter {e}"));
            }
            if !seen.insert(param.to_ascii_lowercase()) {
                cx.err(
                    format!("{path}.{param}"),
                    "duplicate parameter (keys ignore case)",
                );
            }
            let Some(d) = Dimension::parse(dimension) else {
                cx.err(
                    format!("{path}.{param}"),
                    format!(
                        "unknown dimension `{dimension}`: expected one of {}",
                        crate::proxy::one_of(Dimension::ALL)
                    ),
                );
                return None;
            };
            Some(Selector::new(param.clone(), d))
        })
        .collect()
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

fn sticky(cx: &mut Ctx, path: &str, raw: &RawStickySession) -> Sticky {
    let ttl = cx.duration_at_least(
        &format!("{path}.ttl"),
        raw.ttl.as_deref(),
        Sticky::DEFAULT_TTL,
        Duration::from_secs(1),
    );
    let idle_timeout = cx.positive_duration(
        &format!("{path}.idleTimeout"),
        raw.idle_timeout.as_deref(),
        Sticky::DEFAULT_IDLE_TIMEOUT,
    );
    if idle_timeout > ttl {
        cx.err(format!("{path}.idleTimeout"), "must not be longer than ttl");
    }
    let max_ttl = cx.positive_duration(
        &format!("{path}.maxTtl"),
        raw.max_ttl.as_deref(),
        Sticky::default_max_ttl(ttl),
    );
    if max_ttl < ttl {
        cx.err(format!("{path}.maxTtl"), "must not be shorter than ttl");
    }
    if ttl.max(max_ttl) > Sticky::LIMIT {
        cx.err(
            format!(
                "{path}.{}",
                if ttl > Sticky::LIMIT { "ttl" } else { "maxTtl" }
            ),
            "must be at most 24h",
        );
    }
    let param = raw
        .param
        .clone()
        .unwrap_or_else(|| Sticky::DEFAULT_PARAM.to_owned());
    if let Err(e) = username_token(&param) {
        cx.err(format!("{path}.param"), e);
    }
    Sticky {
        param,
        session_ttl: ttl,
        idle_timeout,
        max_ttl,
    }
}

fn retry(cx: &mut Ctx, path: &str, raw: Option<&RawRetry>) -> RetryConfig {
    let d = RetryConfig::default();
    let Some(raw) = raw else {
        return d;
    };
    let deadline = cx.duration_at_least(
        &format!("{path}.deadline"),
        raw.deadline.as_deref(),
        d.deadline,
        Duration::from_millis(100),
    );
    RetryConfig {
        max_attempts: cx.range(
            &format!("{path}.maxAttempts"),
            raw.max_attempts,
            d.max_attempts,
            1,
            crate::controlplane::model::RetryBudget::MAX_ATTEMPTS,
        ),
        deadline,
    }
}
