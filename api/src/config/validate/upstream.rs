//! `upstreams[]`: protocol, lifetimes, capacity, the source (static list or vendor
//! API) with its credentials, and health checking.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use super::ctx::Ctx;
use crate::config::checks::{check_proxy_credential, split_host_port, target_url};
use crate::config::raw::{RawProxyCredentials, RawSource, RawUpstream, RawUpstreamHealth};
use crate::config::types::{
    PasswordSource, Protocol, ProxyCredentials, SourceConfig, StaticSourceConfig, UpstreamConfig,
    UpstreamHealthConfig, VendorApiConfig, VendorFormat,
};

pub(super) fn upstream(
    cx: &mut Ctx,
    path: &str,
    raw: &RawUpstream,
    max_ttl: Duration,
) -> UpstreamConfig {
    cx.identifier(&format!("{path}.name"), &raw.name, 63);
    let text = raw.protocol.as_deref().unwrap_or(Protocol::Http.as_str());
    let protocol = cx.one_of(
        format!("{path}.protocol"),
        text,
        &Protocol::ALL,
        Protocol::as_str,
        Protocol::Http,
    );
    for (field, v) in [
        ("region", &raw.labels.region),
        ("carrier", &raw.labels.carrier),
        ("city", &raw.labels.city),
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
    let fetch_interval = cx.duration_at_least(
        &format!("{path}.fetchInterval"),
        raw.fetch_interval.as_deref(),
        Duration::from_secs(10),
        Duration::from_millis(100),
    );
    UpstreamConfig {
        name: raw.name.clone(),
        source: source(cx, &format!("{path}.source"), &raw.source),
        protocol,
        region: raw.labels.region.clone(),
        carrier: raw.labels.carrier.clone(),
        city: raw.labels.city.clone(),
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
    let interval = cx.duration_at_least(
        &format!("{path}.interval"),
        raw.interval.as_deref(),
        d.interval,
        Duration::from_secs(1),
    );
    let timeout = cx.duration_at_least(
        &format!("{path}.timeout"),
        raw.timeout.as_deref(),
        d.timeout,
        Duration::from_millis(100),
    );
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
            let format = cx.one_of(
                format!("{path}.vendorApi.format"),
                &v.format,
                &VendorFormat::ALL,
                VendorFormat::as_str,
                VendorFormat::Json,
            );
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
    } else if let Err(e) = check_proxy_credential(&raw.username) {
        cx.err(format!("{path}.username"), e);
    }
    let password = match (&raw.password, &raw.password_file) {
        (Some(p), None) => {
            if let Err(e) = check_proxy_credential(p) {
                cx.err(format!("{path}.password"), e);
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
