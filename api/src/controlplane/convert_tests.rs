//! Tests of `convert.rs`.

use super::*;

#[test]
fn unknown_enum_values_are_refused() {
    let mut p = pb::SnapshotProxy {
        id: "p1".into(),
        upstream: "u".into(),
        protocol: 99,
        host: "h".into(),
        port: 1,
        ..Default::default()
    };
    assert_eq!(
        SnapshotProxy::try_from(p.clone()).unwrap_err().field,
        "proxy.protocol"
    );
    p.protocol = 0;
    assert!(SnapshotProxy::try_from(p.clone()).is_err());
    p.protocol = pb::UpstreamProtocol::Socks5 as i32;
    assert!(SnapshotProxy::try_from(p).is_ok());
    let o = pb::Outcome {
        proxy_id: "p".into(),
        stage: 42,
        ..Default::default()
    };
    assert!(Outcome::try_from(o).is_err());
}

#[test]
fn routing_round_trips() {
    let r = Routing {
        name: "r1".into(),
        matcher: RoutingMatch {
            username_params: vec![UsernameParam::new("region", ["shanghai"])],
            clients: vec!["c".into()],
            target_hosts: vec!["*.example.com".into()],
        },
        upstreams: vec!["u1".into()],
        regions: vec![],
        carriers: vec!["telecom".into()],
        cities: vec!["pudong".into(), "minhang".into()],
        strategy: Strategy::PowerOfTwoChoices,
        sticky: Some(Sticky {
            param: "session".into(),
            session_ttl: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(10),
            ..Sticky::default()
        }),
        retry: RetryBudget::default(),
        connect_ports: crate::egress::PortRanges::parse(&["22".into(), "8000-8100".into()])
            .expect("ports"),
        selectors: Some(vec![
            Selector::new("cc", Dimension::Region),
            Selector::new("via", Dimension::Upstream),
        ]),
    };
    assert_eq!(pb::Routing::from(&r).cities, ["pudong", "minhang"]);
    assert_eq!(Routing::try_from(pb::Routing::from(&r)).unwrap(), r);
    // Selectors: absent (the defaults) and declared empty (none) stay apart.
    for selectors in [None, Some(vec![])] {
        let r = Routing {
            selectors,
            ..r.clone()
        };
        assert_eq!(Routing::try_from(pb::Routing::from(&r)).unwrap(), r);
    }
    let mut wire = pb::Routing::from(&r);
    if let Some(s) = wire.selectors.as_mut() {
        s.items[0].dimension = "planet".into();
    }
    assert!(Routing::try_from(wire).is_err());
    // An older controller sends no ports: the default allow-list (443, 80) applies.
    let mut wire = pb::Routing::from(&r);
    wire.connect_ports.clear();
    assert_eq!(
        Routing::try_from(wire).unwrap().connect_ports,
        crate::egress::PortRanges::default()
    );
    let mut wire = pb::Routing::from(&r);
    wire.connect_ports = vec![pb::PortRange {
        first: 70_000,
        last: 70_001,
    }];
    assert!(Routing::try_from(wire).is_err());
}

#[test]
fn retry_budgets_outside_the_rule_are_refused() {
    let r = Routing {
        name: "r1".into(),
        ..Routing::default()
    };
    let budget = |max_attempts, deadline_ms| {
        let mut wire = pb::Routing::from(&r);
        wire.retry = Some(pb::RetryBudget {
            max_attempts,
            deadline_ms,
        });
        Routing::try_from(wire).map(|r| r.retry)
    };
    assert_eq!(
        budget(10, 500).unwrap(),
        RetryBudget {
            max_attempts: 10,
            deadline: Duration::from_millis(500)
        }
    );
    assert_eq!(budget(0, 500).unwrap().max_attempts, 1);
    assert_eq!(
        budget(11, 500).unwrap_err().field,
        "routing.retry.max_attempts"
    );
    assert_eq!(budget(3, 0).unwrap_err().field, "routing.retry.deadline_ms");
}

#[test]
fn snapshot_proxy_labels_round_trip_with_the_city() {
    let p = crate::controlplane::state::tests::proxy("p-1", 3);
    assert_eq!(p.labels.city.as_deref(), Some("pudong"));
    let wire = pb::SnapshotProxy::from(&p);
    assert_eq!(
        (
            wire.region.as_str(),
            wire.carrier.as_str(),
            wire.city.as_str()
        ),
        ("sh", "", "pudong")
    );
    assert_eq!(SnapshotProxy::try_from(wire.clone()).unwrap(), p);
    // An older controller sends no city: the proxy has none (proto3 empty = unset).
    let mut old = wire;
    old.city.clear();
    assert_eq!(SnapshotProxy::try_from(old).unwrap().labels.city, None);
}

#[test]
fn cities_enter_the_routings_digest_only_when_set() {
    use crate::controlplane::checksum::routings_digest;
    let plain = Routing {
        name: "r1".into(),
        regions: vec!["us".into()],
        ..Routing::default()
    };
    let mut city = plain.clone();
    city.cities = vec!["boston".into()];
    let mut other = plain.clone();
    other.cities = vec!["denver".into()];
    let d = |r: &Routing| routings_digest(std::slice::from_ref(r));
    assert_ne!(d(&plain), d(&city));
    assert_ne!(d(&city), d(&other));
    // A routing without cities digests as the encoding before the dimension existed
    // (its fields end with the CONNECT ports), so an older worker computes the same.
    assert_eq!(
        hex::encode(d(&plain)),
        "2e76e22afb7c0f7d2a179e559b1f1f9cf234980a9d7a10cc1db00b91f81f3dfc"
    );
}
