//! `distribution`: the listener, its limits and rates, and authentication (methods,
//! permissions, TokenReview), checked against the clients that use them.

use std::num::NonZeroU32;
use std::time::Duration;

use super::ctx::secret_file;
use super::ctx::{Ctx, MAX_COUNT_PER_REQUEST};
use crate::config::raw::{RawAuth, RawDistribution, RawTokenReview};
use crate::config::types::{
    AuthConfig, AuthMethodConfig, AuthMethodKind, AuthMode, ClientConfig, DistributionConfig,
    FulfillmentDefault, LimitsConfig, TokenReviewConfig,
};

pub(super) fn distribution(
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
        request_timeout: cx.positive_duration(
            "distribution.limits.requestTimeout",
            l.request_timeout.as_deref(),
            Duration::from_secs(10),
        ),
    };
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
