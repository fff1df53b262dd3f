//! A Routing's config entry, or why it cannot have one (an Upstream or client it
//! names is not usable).

use std::collections::BTreeSet;

use proxy_pool_api::config::raw::{RawRetry, RawRouting, RawStickySession};

use super::model::{Problem, name};
use crate::crd::Routing;

/// A Routing's config entry, or why it cannot have one.
pub(super) fn routing(
    r: &Routing,
    upstreams: &BTreeSet<&str>,
    clients: &BTreeSet<&str>,
) -> Result<RawRouting, Problem> {
    let unknown = not_in(&r.spec.upstreams, upstreams);
    if !unknown.is_empty() {
        return Err(Problem::new(
            "UnknownUpstream",
            format!("upstream(s) {unknown:?} not found or not usable (see their status)"),
        ));
    }
    let match_clients = r
        .spec
        .match_
        .as_ref()
        .map(|m| m.clients.clone())
        .unwrap_or_default();
    let unknown = not_in(&match_clients, clients);
    if !unknown.is_empty() {
        return Err(Problem::new(
            "UnknownClient",
            format!("DistributionClient(s) {unknown:?} not found or not usable (see their status)"),
        ));
    }
    // The CRD's empty list means "any upstream"; the config wants them named.
    let names: Vec<String> = if r.spec.upstreams.is_empty() {
        upstreams.iter().map(|s| (*s).to_owned()).collect()
    } else {
        r.spec.upstreams.clone()
    };
    if names.is_empty() {
        return Err(Problem::new(
            "NoUpstreams",
            "no usable Upstream exists in this namespace",
        ));
    }
    let labels = r.spec.labels.clone().unwrap_or_default();
    let matcher = r.spec.match_.clone().unwrap_or_default();
    Ok(RawRouting {
        selectors: r.spec.selectors.as_ref().map(|m| {
            m.iter()
                .map(|(param, d)| (param.clone(), d.as_str().to_owned()))
                .collect()
        }),
        name: name(r),
        // The CRD runs the highest priority first, the config the lowest.
        priority: -r.spec.priority,
        clients: match_clients,
        upstreams: names,
        regions: labels.regions,
        carriers: labels.carriers,
        cities: labels.cities,
        // The CRD's `usernameParams` map requires each key to equal one value.
        username_params: matcher
            .username_params
            .into_iter()
            .map(|(k, v)| (k, vec![v]))
            .collect(),
        target_hosts: matcher.target_hosts,
        target_check_port: None,
        sticky_session: r.spec.sticky_session.as_ref().map(|s| RawStickySession {
            ttl: Some(s.ttl.clone()),
            idle_timeout: Some(s.idle_timeout.clone()),
            param: None,
            max_ttl: s.max_ttl.clone(),
            enabled: Some(s.enabled),
        }),
        retry: r.spec.retry.as_ref().map(|x| RawRetry {
            max_attempts: Some(x.max_attempts),
            deadline: Some(x.deadline.clone()),
        }),
        // The gateways of its group see it: a GatewayGroup's (`spec.gatewayGroup`), or
        // the Routing's own inline gateway, whose group is the Routing's name. Their
        // pods register with it (`--gateway-group`).
        gateway_groups: vec![r.group_name()],
        connect_ports: r.spec.connect_ports.clone(),
        strategy: Some(r.spec.strategy.as_str().to_owned()),
    })
}

/// The names not in `known`, in order.
fn not_in<'a>(names: &'a [String], known: &BTreeSet<&str>) -> Vec<&'a str> {
    names
        .iter()
        .map(String::as_str)
        .filter(|n| !known.contains(n))
        .collect()
}
