//! The edge between the control-plane contract and the gateway's own snapshot
//! types: `proxy_pool_api` domain values (already checked against the wire and the
//! checksum) become [`Snapshot`] values. Client credentials are not part of the
//! contract; the caller supplies them.

use proxy_pool_api::controlplane::model;
use std::time::Duration;

use crate::snapshot::live::from_unix_ms;
use crate::snapshot::{
    ClientCredential, ParamMatch, ProxyCredentials, ProxyId, RetryPolicy, Routing, RoutingMatch,
    Snapshot, StickyPolicy, Strategy, UpstreamProtocol, UpstreamProxy,
};

/// Converts a verified control-plane snapshot.
pub fn snapshot(s: &model::Snapshot, clients: &[ClientCredential]) -> Snapshot {
    Snapshot {
        version: s.version,
        epoch: s.ownership_epoch,
        generated_at: from_unix_ms(ms(s.generated_at_ms)),
        valid_until: from_unix_ms(ms(s.valid_until_ms)),
        routings: s.routings.iter().map(routing).collect(),
        proxies: s.proxies.iter().map(proxy).collect(),
        clients: clients.to_vec(),
    }
}

fn ms(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn proxy(p: &model::SnapshotProxy) -> UpstreamProxy {
    UpstreamProxy {
        id: ProxyId::from(p.id.as_str()),
        protocol: match p.protocol {
            model::Protocol::Http => UpstreamProtocol::Http,
            model::Protocol::Socks5 => UpstreamProtocol::Socks5,
        },
        host: p.host.clone(),
        port: p.port,
        credentials: p.credentials.as_ref().map(|c| ProxyCredentials {
            username: c.username.clone(),
            password: c.password.expose().to_owned(),
        }),
        upstream: p.upstream.clone(),
        region: p.region.clone().unwrap_or_default(),
        carrier: p.carrier.clone().unwrap_or_default(),
        max_concurrent: p.max_concurrency,
        expires_at: from_unix_ms(ms(p.expires_at_ms)),
        usable_until: from_unix_ms(ms(p.usable_until_ms)),
        observed_latency: None,
        draining: p.draining,
        assignment_epoch: p.assignment_epoch,
        lease_until: (p.lease_expires_at_ms > 0).then(|| from_unix_ms(ms(p.lease_expires_at_ms))),
        excluded_routings: p.excluded_routings.clone(),
    }
}

fn routing(r: &model::Routing) -> Routing {
    Routing {
        name: r.name.clone(),
        matcher: RoutingMatch {
            clients: r.matcher.clients.clone(),
            username_params: r
                .matcher
                .username_params
                .iter()
                .map(|p| ParamMatch {
                    key: p.key.clone(),
                    values: p.values.clone(),
                })
                .collect(),
            target_hosts: r.matcher.target_hosts.clone(),
        },
        upstreams: r.upstreams.clone(),
        regions: r.regions.clone(),
        carriers: r.carriers.clone(),
        strategy: match r.strategy {
            model::Strategy::RoundRobin => Strategy::RoundRobin,
            model::Strategy::LeastActive => Strategy::LeastActive,
            model::Strategy::PowerOfTwoChoices => Strategy::PowerOfTwoChoices,
        },
        sticky: r.sticky.as_ref().map(|s| StickyPolicy {
            ttl: s.session_ttl,
            idle_timeout: s.idle_timeout,
        }),
        session_param: r
            .sticky
            .as_ref()
            .map(|s| s.param.clone())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "session".to_owned()),
        retry: RetryPolicy {
            max_attempts: r.retry.max_attempts.clamp(1, 10),
            deadline: if r.retry.deadline.is_zero() {
                Duration::from_secs(10)
            } else {
                r.retry.deadline
            },
        },
        connect_ports: r.connect_ports.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_proxies_and_routings() {
        let snap = model::Snapshot {
            version: 7,
            ownership_epoch: 3,
            generated_at_ms: 1_000,
            valid_until_ms: 2_000,
            routings: vec![model::Routing {
                name: "r".into(),
                matcher: model::RoutingMatch {
                    username_params: vec![model::UsernameParam {
                        key: "region".into(),
                        values: vec!["sh".into(), "bj".into()],
                    }],
                    ..Default::default()
                },
                strategy: model::Strategy::LeastActive,
                sticky: Some(model::Sticky {
                    param: "sid".into(),
                    session_ttl: Duration::from_secs(60),
                    idle_timeout: Duration::from_secs(10),
                }),
                ..Default::default()
            }],
            proxies: vec![model::SnapshotProxy {
                id: "p1".into(),
                upstream: "vendor".into(),
                protocol: model::Protocol::Socks5,
                host: "127.0.0.1".into(),
                port: 1080,
                credentials: Some(model::Credentials {
                    username: "u".into(),
                    password: model::Secret::new("pw"),
                }),
                region: Some("sh".into()),
                carrier: None,
                max_concurrency: 4,
                expires_at_ms: 5_000,
                usable_until_ms: 4_000,
                assignment_epoch: 3,
                draining: false,
                lease_expires_at_ms: 3_500,
                excluded_routings: vec!["other".into()],
            }],
            checksum: model::Checksum::default(),
        };
        let s = snapshot(&snap, &[]);
        assert_eq!((s.version, s.epoch), (7, 3));
        let p = &s.proxies[0];
        assert_eq!(p.protocol, UpstreamProtocol::Socks5);
        assert_eq!(p.credentials.as_ref().unwrap().password, "pw");
        assert_eq!((p.max_concurrent, p.assignment_epoch), (4, 3));
        assert_eq!(p.usable_until, from_unix_ms(4_000));
        assert_eq!(p.lease_until, Some(from_unix_ms(3_500)));
        assert_eq!(p.excluded_routings, ["other"]);
        let r = &s.routings[0];
        assert_eq!(r.strategy, Strategy::LeastActive);
        assert_eq!(r.session_param, "sid");
        assert_eq!(r.matcher.username_params[0].values.len(), 2);
    }
}
