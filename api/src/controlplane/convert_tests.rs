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
    };
    assert_eq!(Routing::try_from(pb::Routing::from(&r)).unwrap(), r);
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
