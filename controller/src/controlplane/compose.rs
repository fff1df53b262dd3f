//! Mapping the controller's validated configuration (`api::config`) into control-plane
//! settings, for the composition root. Pure functions; no I/O.

use activity_pool::model::UpstreamId;
use proxy_pool_api::config::{Config, RoutingConfig, Strategy as ConfigStrategy};
use proxy_pool_api::controlplane::model::{Routing, RoutingMatch, Strategy};

use super::config::{ControlPlaneConfig, OwnershipConfig, RoutingSpec};

/// A configured routing as the control plane publishes it (visible to every gateway
/// group until the config names groups).
pub fn routing_spec(r: &RoutingConfig) -> RoutingSpec {
    RoutingSpec {
        routing: Routing {
            name: r.name.clone(),
            matcher: RoutingMatch {
                clients: r.clients.clone(),
                ..RoutingMatch::default()
            },
            upstreams: r.upstreams.clone(),
            regions: r.regions.clone(),
            strategy: match r.strategy {
                ConfigStrategy::RoundRobin => Strategy::RoundRobin,
                ConfigStrategy::LeastActive => Strategy::LeastActive,
                ConfigStrategy::PowerOfTwoChoices => Strategy::PowerOfTwoChoices,
            },
            ..Routing::default()
        },
        gateway_groups: Vec::new(),
    }
}

/// Control-plane settings from the controller config: the routings in match order
/// and every valid upstream name; everything else at its default.
pub fn control_plane_config(config: &Config) -> ControlPlaneConfig {
    ControlPlaneConfig {
        routings: config.routings.iter().map(routing_spec).collect(),
        ownership: OwnershipConfig {
            upstreams: config
                .upstreams
                .iter()
                .filter_map(|u| UpstreamId::new(&u.name).ok())
                .collect(),
            ..OwnershipConfig::default()
        },
        ..ControlPlaneConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routings_keep_order_and_fields() {
        let r = RoutingConfig {
            name: "r1".into(),
            priority: 1,
            clients: vec!["c".into()],
            upstreams: vec!["u".into()],
            regions: vec!["sh".into()],
            strategy: ConfigStrategy::LeastActive,
        };
        let s = routing_spec(&r);
        assert_eq!(s.routing.name, "r1");
        assert_eq!(s.routing.matcher.clients, vec!["c".to_string()]);
        assert_eq!(s.routing.strategy, Strategy::LeastActive);
        assert!(s.visible_to("any-group"));
    }
}
