//! Mapping the controller's validated configuration (`api::config`) into control-plane
//! settings, for the composition root. Pure functions; no I/O.

use activity_pool::model::UpstreamId;
use proxy_pool_api::config::{Config, RoutingConfig, Strategy as ConfigStrategy};
use proxy_pool_api::controlplane::model::{
    RetryBudget, Routing, RoutingMatch, Strategy, UsernameParam,
};

use crate::controlplane::config::{ClientSpec, ControlPlaneConfig, OwnershipConfig, RoutingSpec};

/// A configured routing as the control plane publishes it: every match field, the
/// label filters, strategy, sticky sessions and retry budget go into the snapshot's
/// `Routing`; `gatewayGroups` decide which workers see it (empty: every group).
pub fn routing_spec(r: &RoutingConfig) -> RoutingSpec {
    RoutingSpec {
        routing: Routing {
            name: r.name.clone(),
            matcher: RoutingMatch {
                username_params: r
                    .username_params
                    .iter()
                    .map(|p| UsernameParam {
                        key: p.key.clone(),
                        values: p.values.clone(),
                    })
                    .collect(),
                clients: r.clients.clone(),
                target_hosts: r.target_hosts.clone(),
            },
            upstreams: r.upstreams.clone(),
            regions: r.regions.clone(),
            carriers: r.carriers.clone(),
            cities: r.cities.clone(),
            strategy: match r.strategy {
                ConfigStrategy::RoundRobin => Strategy::RoundRobin,
                ConfigStrategy::LeastActive => Strategy::LeastActive,
                ConfigStrategy::PowerOfTwoChoices => Strategy::PowerOfTwoChoices,
            },
            sticky: r.sticky.clone(),
            retry: RetryBudget {
                max_attempts: r.retry.max_attempts,
                deadline: r.retry.deadline,
            },
            connect_ports: r.connect_ports.clone(),
            selectors: r.selectors.clone(),
        },
        gateway_groups: r.gateway_groups.clone(),
    }
}

/// Control-plane settings from the controller config: the routings in match order,
/// the clients (names and daily byte quotas), every valid upstream name and the
/// `controlPlane` tunables; the rest at defaults.
pub fn control_plane_config(config: &Config) -> ControlPlaneConfig {
    let mut cp = ControlPlaneConfig {
        routings: config.routings.iter().map(routing_spec).collect(),
        clients: config
            .clients
            .iter()
            .map(|c| ClientSpec {
                name: c.name.clone(),
                daily_bytes: c
                    .gateway_limits
                    .and_then(|l| l.daily_bytes)
                    .map(std::num::NonZeroU64::get),
            })
            .collect(),
        ownership: OwnershipConfig {
            upstreams: config
                .upstreams
                .iter()
                .filter_map(|u| UpstreamId::new(&u.name).ok())
                .collect(),
            ..OwnershipConfig::default()
        },
        ..ControlPlaneConfig::default()
    };
    if let Some(t) = &config.control_plane {
        let o = &mut cp.ownership;
        o.extraction_reserve = t.extraction_reserve;
        o.target_slots_per_worker = t.target_slots_per_worker;
        o.drain_batch = t.drain_batch;
        o.lease = t.lease;
        o.renew_before = t.renew_before;
        cp.snapshot_validity = t.snapshot_validity;
        cp.max_stale_age = t.max_stale_age;
        cp.report_interval = t.report_interval;
        // A report must outlive the interval between two of them (capacity fails
        // closed when it expires).
        cp.runtime_report_ttl = cp.runtime_report_ttl.max(t.report_interval * 3);
    }
    cp
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_api::config::{RetryConfig, UsernameParamConfig};
    use proxy_pool_api::controlplane::model::Sticky;
    use std::time::Duration;

    #[test]
    fn routings_keep_order_and_fields() {
        let r = RoutingConfig {
            selectors: None,
            name: "r1".into(),
            priority: 1,
            clients: vec!["c".into()],
            upstreams: vec!["u".into()],
            regions: vec!["sh".into()],
            carriers: vec!["telecom".into()],
            cities: vec!["pudong".into()],
            strategy: ConfigStrategy::LeastActive,
            username_params: vec![UsernameParamConfig {
                key: "region".into(),
                values: vec!["sh".into(), "bj".into()],
            }],
            target_hosts: vec!["example.com".into(), "*.example.org".into()],
            target_check_port: 443,
            sticky: Some(Sticky {
                param: "session".into(),
                session_ttl: Duration::from_secs(300),
                idle_timeout: Duration::from_secs(60),
                max_ttl: Duration::from_secs(900),
            }),
            retry: RetryConfig {
                max_attempts: 2,
                deadline: Duration::from_secs(4),
            },
            gateway_groups: vec!["edge".into()],
            connect_ports: proxy_pool_api::config::PortRanges::parse(&["8443".into()])
                .expect("ports"),
        };
        let s = routing_spec(&r);
        let w = &s.routing;
        assert_eq!(w.name, "r1");
        assert!(w.connect_ports.allows(8443) && !w.connect_ports.allows(443));
        assert_eq!(w.matcher.clients, vec!["c".to_string()]);
        assert_eq!(
            w.matcher.username_params,
            vec![UsernameParam {
                key: "region".into(),
                values: vec!["sh".into(), "bj".into()]
            }]
        );
        assert_eq!(w.matcher.target_hosts, ["example.com", "*.example.org"]);
        assert_eq!(w.upstreams, ["u"]);
        assert_eq!(w.regions, ["sh"]);
        assert_eq!(w.carriers, ["telecom"]);
        assert_eq!(w.cities, ["pudong"]);
        assert_eq!(w.strategy, Strategy::LeastActive);
        assert_eq!(
            w.sticky,
            Some(Sticky {
                param: "session".into(),
                session_ttl: Duration::from_secs(300),
                idle_timeout: Duration::from_secs(60),
                max_ttl: Duration::from_secs(900),
            })
        );
        assert_eq!(
            w.retry,
            RetryBudget {
                max_attempts: 2,
                deadline: Duration::from_secs(4)
            }
        );
        assert!(s.visible_to("edge"));
        assert!(!s.visible_to("other"), "gateway groups restrict visibility");
    }

    #[test]
    fn a_loaded_config_reaches_the_control_plane_in_match_order() {
        let c = proxy_pool_api::config::load_yaml(
            r#"
upstreams: [{name: u, ttl: 1m, quarantine: 0s, maxSize: 5, source: {static: {proxies: ["192.0.2.1:1"]}}}]
routings:
  - {name: late, priority: 5, upstreams: [u]}
  - name: early
    priority: -1
    upstreams: [u]
    usernameParams: {country: []}
    retry: {maxAttempts: 1}
"#,
        )
        .expect("valid");
        let cp = control_plane_config(&c);
        let names: Vec<&str> = cp
            .routings
            .iter()
            .map(|r| r.routing.name.as_str())
            .collect();
        assert_eq!(names, ["early", "late"]);
        let early = &cp.routings[0].routing;
        assert_eq!(early.retry.max_attempts, 1);
        assert_eq!(early.matcher.username_params[0].key, "country");
        assert!(early.matcher.username_params[0].values.is_empty());
        assert_eq!(cp.routings[1].routing.retry, RetryBudget::default());
        // Sessions are on by default.
        assert_eq!(cp.routings[1].routing.sticky, Some(Sticky::default()));
        assert!(cp.routings.iter().all(|r| r.visible_to("any")));
        assert_eq!(cp.ownership.upstreams.len(), 1);
    }
}
