use super::*;
use crate::capacity::CapacityRegistry;
use crate::clock::now_ms;
use crate::metrics::Breakdown;
use crate::snapshot::fixture;
use crate::snapshot::{ClientCredential, SnapshotInput};
use proxy_pool_api::controlplane::model::{
    RoutingMatch, SnapshotProxy, Sticky, Strategy, UsernameParam,
};
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime};

fn proxy(id: &str, region: &str, max: u32) -> SnapshotProxy {
    let mut p = fixture::proxy(id, max);
    p.labels.region = Some(region.into());
    p
}

fn build(s: SnapshotInput) -> LiveSnapshot {
    let far = SystemTime::now() + Duration::from_secs(600);
    LiveSnapshot::build(s, &CapacityRegistry::default(), &Breakdown::default(), far).unwrap()
}

fn snapshot() -> LiveSnapshot {
    let mut sh = fixture::routing("shanghai");
    sh.matcher = RoutingMatch {
        username_params: vec![UsernameParam::new("region", ["shanghai"])],
        ..RoutingMatch::default()
    };
    sh.regions = vec!["shanghai".into()];
    sh.sticky = Some(Sticky {
        param: "session".into(),
        session_ttl: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(30),
        ..Sticky::default()
    });
    let mut only_b = fixture::routing("team-b");
    only_b.matcher.clients = vec!["team-b".into()];
    only_b.strategy = Strategy::LeastActive;
    let mut rest = fixture::routing("rest");
    rest.matcher.target_hosts = vec!["*.example.com".into(), "192.0.2.1".into()];
    let mut s = fixture::input(
        1,
        vec![sh, only_b, rest],
        vec![
            proxy("sh1", "shanghai", 1),
            proxy("sh2", "shanghai", 1),
            proxy("bj1", "beijing", 5),
        ],
    );
    s.clients = vec![
        ClientCredential::from_password("team-a", "alice", "pw-a"),
        ClientCredential::from_password("team-b", "bob", "pw-b"),
    ];
    build(s)
}

fn creds<'a>(u: &'a str, p: &'a str) -> Option<Credentials<'a>> {
    Some(Credentials {
        username: u.as_bytes(),
        password: p.as_bytes(),
    })
}

const WWW: Host<'static> = Host::Domain("www.example.com");

#[test]
fn authentication_is_required_and_checked() {
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    let err = router.admit(Some(&snap), None, &WWW, now_ms()).unwrap_err();
    assert!(matches!(err, GatewayError::AuthRequired));
    let err = router
        .admit(Some(&snap), creds("alice", "wrong"), &WWW, now_ms())
        .unwrap_err();
    assert!(matches!(err, GatewayError::AuthFailed));
    let err = router
        .admit(Some(&snap), creds("mallory", "pw-a"), &WWW, now_ms())
        .unwrap_err();
    assert!(matches!(err, GatewayError::AuthFailed));
    assert!(
        router
            .admit(Some(&snap), creds("alice", "pw-a"), &WWW, now_ms())
            .is_ok()
    );
    let open = Router::new(AuthMode::Open, 100);
    assert!(open.admit(Some(&snap), None, &WWW, now_ms()).is_ok());
}

/// A routing's `cities` keeps only proxies in one of them (AND with its regions; a
/// proxy without a city is in none).
#[test]
fn a_routing_city_filter_keeps_only_its_cities() {
    let in_city = |id: &str, region: &str, city: Option<&str>| {
        let mut p = proxy(id, region, 1);
        p.labels.city = city.map(Into::into);
        p
    };
    let mut pudong = fixture::routing("pudong");
    pudong.cities = vec!["pudong".into(), "minhang".into()];
    let mut sh_pudong = fixture::routing("sh-pudong");
    sh_pudong.regions = vec!["shanghai".into()];
    sh_pudong.cities = vec!["pudong".into()];
    let s = build(fixture::input(
        1,
        vec![pudong, sh_pudong],
        vec![
            in_city("a", "shanghai", Some("pudong")),
            in_city("b", "shanghai", Some("minhang")),
            in_city("c", "shanghai", None),
            in_city("d", "beijing", Some("pudong")),
        ],
    ));
    let ids = |name: &str| -> Vec<String> {
        let r = s.routing(name).unwrap();
        r.all()
            .candidates
            .iter()
            .map(|c| s.proxies[c.idx as usize].id.to_string())
            .collect()
    };
    assert_eq!(ids("pudong"), ["a", "b", "d"]);
    assert_eq!(ids("sh-pudong"), ["a"]);
}

#[test]
fn first_matching_routing_wins() {
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    let admit = |user: &str, password: &str, host: &Host<'_>| {
        router
            .admit(Some(&snap), creds(user, password), host, now_ms())
            .map(|(t, p)| (t.routing.to_string(), p.entry().id.clone()))
    };
    let (routing, proxy) = admit("alice-region-shanghai", "pw-a", &WWW).unwrap();
    assert_eq!(routing, "shanghai");
    assert!(proxy.as_str().starts_with("sh"));
    let cases = [
        ("bob", "pw-b", Host::Domain("other.org"), Some("team-b")),
        (
            "alice",
            "pw-a",
            Host::V4(Ipv4Addr::new(192, 0, 2, 1)),
            Some("rest"),
        ),
        ("alice", "pw-a", Host::Domain("other.org"), None),
        // A suffix needs a subdomain.
        ("alice", "pw-a", Host::Domain("example.com"), None),
    ];
    for (user, password, host, want) in cases {
        match (admit(user, password, &host), want) {
            (Ok((routing, _)), Some(want)) => assert_eq!(routing, want, "{host:?}"),
            (Err(err), None) => assert!(matches!(err, GatewayError::NoRouting), "{host:?}"),
            (got, want) => panic!("{user} to {host:?}: {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn sticky_sessions_stay_then_move_when_full_or_failed() {
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    let user = "alice-region-shanghai-session-s1";
    let (ticket, first) = router
        .admit(Some(&snap), creds(user, "pw-a"), &WWW, now_ms())
        .unwrap();
    assert!(ticket.is_sticky());
    assert_eq!(first.moved, None);
    let bound = first.entry().id.clone();
    drop(first);
    let (_, again) = router
        .admit(Some(&snap), creds(user, "pw-a"), &WWW, now_ms())
        .unwrap();
    assert_eq!(again.entry().id, bound, "kept");
    // Its proxy is full (max 1, still held): the session moves and says so.
    let (_, moved) = router
        .admit(Some(&snap), creds(user, "pw-a"), &WWW, now_ms())
        .unwrap();
    assert_ne!(moved.entry().id, bound);
    assert_eq!(moved.moved, Some(MoveReason::ProxyFull));
    let now_bound = moved.entry().id.clone();
    drop((again, moved));
    let retry = router
        .reselect(
            Some(&snap),
            &ticket,
            now_ms(),
            std::slice::from_ref(&now_bound),
        )
        .unwrap();
    assert_eq!(retry.moved, Some(MoveReason::ProxyFailed));
    assert_ne!(retry.entry().id, now_bound);
}

#[test]
fn stale_and_missing_snapshots_refuse() {
    let snap = snapshot();
    let router = Router::new(AuthMode::Open, 100);
    let err = router.admit(None, None, &WWW, now_ms()).unwrap_err();
    assert!(matches!(err, GatewayError::NoSnapshot));
    let later = now_ms() + 3_600_000;
    let err = router.admit(Some(&snap), None, &WWW, later).unwrap_err();
    assert!(matches!(err, GatewayError::Stale));
}

#[test]
fn no_room_is_no_capacity() {
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    let c = creds("alice-region-shanghai", "pw-a");
    let a = router.admit(Some(&snap), c, &WWW, now_ms()).unwrap();
    let b = router.admit(Some(&snap), c, &WWW, now_ms()).unwrap();
    let err = router.admit(Some(&snap), c, &WWW, now_ms()).unwrap_err();
    assert!(matches!(err, GatewayError::NoCapacity));
    drop((a, b));
}

#[test]
fn targets_the_egress_policy_refuses_are_403_before_any_slot_is_taken() {
    use proxy_pool_api::egress::{EgressDenied, EgressPolicy};
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    let c = creds("bob", "pw-b");
    for (target, why) in [
        (
            Host::V4(Ipv4Addr::new(169, 254, 169, 254)),
            EgressDenied::LinkLocal,
        ),
        (Host::V4(Ipv4Addr::LOCALHOST), EgressDenied::Loopback),
        (
            Host::V6(std::net::Ipv6Addr::LOCALHOST),
            EgressDenied::Loopback,
        ),
        (
            Host::V6("::ffff:127.0.0.1".parse().expect("ip")),
            EgressDenied::Loopback,
        ),
        (Host::Domain("localhost"), EgressDenied::LocalName),
        (Host::V4(Ipv4Addr::UNSPECIFIED), EgressDenied::Reserved),
    ] {
        let err = router.admit(Some(&snap), c, &target, now_ms()).unwrap_err();
        assert!(
            matches!(err, GatewayError::EgressDenied(w) if w == why),
            "{target}: {err:?}"
        );
        assert_eq!(err.http_status(), 403);
        assert_eq!(err.socks_reply(), crate::parse::socks5::reply::NOT_ALLOWED);
    }
    // Unauthenticated callers learn nothing about the policy.
    let err = router
        .admit(Some(&snap), None, &Host::V4(Ipv4Addr::LOCALHOST), now_ms())
        .unwrap_err();
    assert!(matches!(err, GatewayError::AuthRequired));
    // An internal range is refused once configured; loopback once opted in is not.
    let policy =
        EgressPolicy::parse(&["10.96.0.0/12".into()], &["127.0.0.0/8".into()]).expect("policy");
    let router = Router::with(
        AuthMode::Required,
        SessionTable::new(100),
        policy,
        ThrottleConfig::default(),
    );
    let err = router
        .admit(
            Some(&snap),
            c,
            &Host::V4(Ipv4Addr::new(10, 100, 0, 1)),
            now_ms(),
        )
        .unwrap_err();
    assert!(matches!(
        err,
        GatewayError::EgressDenied(EgressDenied::Internal)
    ));
    assert!(
        router
            .admit(Some(&snap), c, &Host::V4(Ipv4Addr::LOCALHOST), now_ms())
            .is_ok()
    );
}

#[test]
fn connect_ports_are_an_allow_list_per_routing() {
    use proxy_pool_api::egress::{EgressDenied, PortRanges};
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    let req = |port| Request {
        creds: creds("bob", "pw-b"),
        target: &WWW,
        connect_port: Some(port),
        source: None,
        held: None,
    };
    for port in [443, 80] {
        assert!(
            router
                .admit_request(Some(&snap), &req(port), now_ms())
                .is_ok()
        );
    }
    for port in [22, 25, 6379, 8080] {
        let err = router
            .admit_request(Some(&snap), &req(port), now_ms())
            .unwrap_err();
        assert!(
            matches!(err, GatewayError::EgressDenied(EgressDenied::Port)),
            "{port}: {err:?}"
        );
    }
    // A routing that lists its own ports.
    let mut r = fixture::routing("ssh");
    r.connect_ports = PortRanges::parse(&["22".into(), "8000-8999".into()]).expect("ports");
    let mut s = fixture::input(1, vec![r], vec![proxy("p", "x", 5)]);
    s.clients = vec![ClientCredential::from_password("team-b", "bob", "pw-b")];
    let snap = build(s);
    assert!(
        router
            .admit_request(Some(&snap), &req(22), now_ms())
            .is_ok()
    );
    assert!(
        router
            .admit_request(Some(&snap), &req(8500), now_ms())
            .is_ok()
    );
    assert!(
        router
            .admit_request(Some(&snap), &req(443), now_ms())
            .is_err()
    );
}

#[test]
fn failed_logins_are_throttled_per_source_and_per_user() {
    let snap = snapshot();
    let router = Router::with(
        AuthMode::Required,
        SessionTable::new(100),
        proxy_pool_api::egress::EgressPolicy::default(),
        ThrottleConfig {
            burst: 3,
            refill: Duration::from_secs(600),
            capacity: 1024,
            trust_for: Duration::from_secs(600),
        },
    );
    let at = |ip: [u8; 4], u: &'static str, p: &'static str| Request {
        creds: creds(u, p),
        target: &WWW,
        connect_port: None,
        source: Some(IpAddr::from(ip)),
        held: None,
    };
    // Alice works from her usual address first.
    assert!(
        router
            .admit_request(Some(&snap), &at([192, 0, 2, 10], "alice", "pw-a"), now_ms())
            .is_ok()
    );
    let guesser = [198, 51, 100, 7];
    for i in 0..4 {
        let err = router
            .admit_request(
                Some(&snap),
                &at(guesser, "alice-region-x", "nope"),
                now_ms(),
            )
            .unwrap_err();
        assert!(
            matches!(err, GatewayError::AuthFailed),
            "attempt {i}: {err:?}"
        );
    }
    // The right password from the guesser's address is not judged any more.
    let err = router
        .admit_request(Some(&snap), &at(guesser, "alice", "pw-a"), now_ms())
        .unwrap_err();
    assert!(matches!(err, GatewayError::AuthThrottled));
    assert_eq!(err.http_status(), 429);
    // Nor from another address that never worked as alice...
    let err = router
        .admit_request(
            Some(&snap),
            &at([203, 0, 113, 1], "alice", "pw-a"),
            now_ms(),
        )
        .unwrap_err();
    assert!(matches!(err, GatewayError::AuthThrottled));
    // ...but alice's own address keeps working: no remote lockout.
    assert!(
        router
            .admit_request(Some(&snap), &at([192, 0, 2, 10], "alice", "pw-a"), now_ms())
            .is_ok()
    );
    // And bob is unaffected.
    assert!(
        router
            .admit_request(Some(&snap), &at([203, 0, 113, 1], "bob", "pw-b"), now_ms())
            .is_ok()
    );
}

#[test]
fn parameters_in_the_password_and_escaped_values_route() {
    let mut east = fixture::routing("us-east");
    east.matcher = RoutingMatch {
        username_params: vec![UsernameParam::new("region", ["us-east"])],
        ..RoutingMatch::default()
    };
    east.regions = vec!["us-east".into()];
    let mut s = fixture::input(
        1,
        vec![east, fixture::routing("rest")],
        vec![proxy("e1", "us-east", 5), proxy("w1", "us-west", 5)],
    );
    s.clients = vec![ClientCredential::from_password("team-a", "alice", "pw-a")];
    let snap = build(s);
    let router = Router::new(AuthMode::Required, 100);
    let admit = |user: &str, password: &str| {
        router
            .admit(Some(&snap), creds(user, password), &WWW, now_ms())
            .map(|(t, p)| (t.routing.to_string(), p.entry().id.to_string()))
            .map_err(|e| e.to_string())
    };
    let east = Ok(("us-east".to_owned(), "e1".to_owned()));
    let auth_failed = Err(GatewayError::AuthFailed.to_string());
    // `-` inside a value is escaped; values compare case-insensitively.
    assert_eq!(admit("alice-region-us%2Deast", "pw-a"), east);
    assert_eq!(admit("alice-REGION-US%2deast", "pw-a"), east);
    // The password form: the password is `pw-a`, the parameters follow the first `_`.
    assert_eq!(admit("alice", "pw-a_region-us%2Deast"), east);
    // A password form with a wrong password fails; so does a bare wrong password.
    for (user, password) in [("alice", "pw-b_region-us%2Deast"), ("alice", "pw-a_")] {
        assert_eq!(admit(user, password), auth_failed, "{password}");
    }
    // Parameters in the username: the password is taken whole (no second split).
    assert_eq!(
        admit("alice-region-us%2Deast", "pw-a_region-x"),
        auth_failed
    );
    // An unescaped `us-east` is the parameter `us` followed by a key without a value.
    assert_eq!(admit("alice-region-us-east", "pw-a"), auth_failed);
    assert_eq!(admit("alice", "pw-a").unwrap().0, "rest");
}

#[test]
fn sesstime_sets_the_session_lifetime_within_the_routing_maximum() {
    let sticky = Sticky {
        session_ttl: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(120),
        max_ttl: Duration::from_secs(1800),
        ..Sticky::default()
    };
    let policy = |user: &str| {
        session_policy(&sticky, &parse_username(user.as_bytes()).unwrap())
            .map(|p| (p.ttl.as_secs(), p.idle_timeout.as_secs()))
            .map_err(|e| e.to_string())
    };
    assert_eq!(policy("u-session-a"), Ok((600, 120)));
    assert_eq!(policy("u-session-a-sesstime-30"), Ok((1800, 120)));
    // A lifetime shorter than the idle timeout caps it.
    assert_eq!(policy("u-session-a-sesstime-1"), Ok((60, 60)));
    let bad = Err(GatewayError::BadParameter("sesstime").to_string());
    for user in [
        "u-sesstime-31",
        "u-sesstime-0",
        "u-sesstime-abc",
        "u-session-a-sesstime-1441",
    ] {
        assert_eq!(policy(user), bad, "{user}");
    }
}

#[test]
fn an_out_of_bounds_sesstime_is_refused_before_any_slot_is_taken() {
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    // The `shanghai` routing's sessions allow a client lifetime of up to 30 minutes…
    let ok = router.admit(
        Some(&snap),
        creds("alice-region-shanghai-session-s1-sesstime-1", "pw-a"),
        &WWW,
        now_ms(),
    );
    assert!(ok.is_ok(), "{ok:?}");
    drop(ok);
    // …31 are refused.
    let err = router
        .admit(
            Some(&snap),
            creds("alice-region-shanghai-session-s2-sesstime-31", "pw-a"),
            &WWW,
            now_ms(),
        )
        .unwrap_err();
    assert!(
        matches!(err, GatewayError::BadParameter("sesstime")),
        "{err:?}"
    );
    assert!(
        snap.proxies.iter().all(|p| p.state.counts() == (0, 0)),
        "no slot was taken"
    );
}

/// A catch-all routing over proxies in two countries and three cities, with the default
/// selectors (`country`/`region` → region, `city`, `carrier`).
fn geo_snapshot() -> LiveSnapshot {
    let geo = |id: &str, region: &str, city: Option<&str>| {
        let mut p = proxy(id, region, 5);
        p.labels.city = city.map(str::to_owned);
        p
    };
    let mut s = fixture::input(
        1,
        vec![fixture::routing("all")],
        vec![
            geo("ny1", "us", Some("new_york")),
            geo("ny2", "us", Some("new_york")),
            geo("la1", "us", Some("los_angeles")),
            geo("us1", "us", None),
            geo("be1", "us-east", Some("boston")),
            geo("de1", "de", Some("berlin")),
        ],
    );
    s.clients = vec![ClientCredential::from_password("team-a", "alice", "pw-a")];
    build(s)
}

#[test]
fn username_parameters_select_within_the_routing() {
    let snap = geo_snapshot();
    let router = Router::new(AuthMode::Required, 100);
    // Every proxy a user can get, over enough picks to see each.
    let reach = |user: &str| -> Result<Vec<String>, String> {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..60 {
            let (_, pick) = router
                .admit(Some(&snap), creds(user, "pw-a"), &WWW, now_ms())
                .map_err(|e| e.reason().to_owned())?;
            seen.insert(pick.entry().id.to_string());
        }
        Ok(seen.into_iter().collect())
    };
    assert_eq!(reach("alice").unwrap().len(), 6);
    assert_eq!(
        reach("alice-country-us").unwrap(),
        ["la1", "ny1", "ny2", "us1"]
    );
    assert_eq!(
        reach("alice-region-US").unwrap(),
        ["la1", "ny1", "ny2", "us1"]
    );
    assert_eq!(reach("alice-city-new_york").unwrap(), ["ny1", "ny2"]);
    assert_eq!(reach("alice-country-us-city-los_angeles").unwrap(), ["la1"]);
    // A label holding `-`, escaped; the same through the password form.
    assert_eq!(reach("alice-country-us%2Deast").unwrap(), ["be1"]);
    let (_, pick) = router
        .admit(
            Some(&snap),
            creds("alice", "pw-a_country-de_session-s1"),
            &WWW,
            now_ms(),
        )
        .unwrap();
    assert_eq!(pick.entry().id.as_str(), "de1");
    // Parameters that are not selectors do not narrow.
    assert_eq!(reach("alice-tier-gold").unwrap().len(), 6);
    // No proxy holds the value, or the combination: an error, never another proxy.
    for user in [
        "alice-country-fr",
        "alice-country-de-city-new_york",
        "alice-city-paris",
    ] {
        assert_eq!(reach(user), Err("no-matching-proxy".to_owned()), "{user}");
    }
    // Two parameters naming one dimension must agree.
    assert_eq!(
        reach("alice-country-us-region-de"),
        Err("bad-parameter".to_owned())
    );
    assert_eq!(reach("alice-country-us-region-US").unwrap().len(), 4);
}

#[test]
fn routings_declare_their_selectors() {
    use proxy_pool_api::controlplane::model::{Dimension, Selector};
    let mut s = fixture::input(
        1,
        vec![fixture::routing("all")],
        vec![proxy("a", "us", 5), proxy("b", "de", 5)],
    );
    s.clients = vec![ClientCredential::from_password("team-a", "alice", "pw-a")];
    // `cc` selects the region; `country` is then an ordinary parameter.
    s.snapshot.routings[0].selectors = Some(vec![Selector::new("cc", Dimension::Region)]);
    let snap = build(s.clone());
    let router = Router::new(AuthMode::Required, 100);
    let admit = |snap: &LiveSnapshot, user: &str| {
        router
            .admit(Some(snap), creds(user, "pw-a"), &WWW, now_ms())
            .map(|(_, p)| p.entry().id.to_string())
            .map_err(|e| e.reason())
    };
    for _ in 0..4 {
        assert_eq!(admit(&snap, "alice-cc-de").as_deref(), Ok("b"));
    }
    assert_eq!(admit(&snap, "alice-cc-fr"), Err("no-matching-proxy"));
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        seen.insert(admit(&snap, "alice-country-fr").unwrap());
    }
    assert_eq!(seen.len(), 2, "country is no selector here");
    // No selectors at all: nothing narrows.
    s.snapshot.routings[0].selectors = Some(vec![]);
    let snap = build(s);
    assert!(admit(&snap, "alice-cc-fr").is_ok());
    assert_eq!(snap.routings[0].selection.sets(), 0);
}

#[test]
fn a_value_no_proxy_holds_is_no_matching_proxy_but_an_empty_routing_is_no_capacity() {
    let snap = snapshot();
    let router = Router::new(AuthMode::Required, 100);
    // The `rest` Routing holds proxies (any region): a region none of them has is the
    // client's error.
    let err = router
        .admit(
            Some(&snap),
            creds("bob-region-mars", "pw-b"),
            &WWW,
            now_ms(),
        )
        .unwrap_err();
    assert!(matches!(err, GatewayError::NoMatchingProxy), "{err:?}");

    // Every proxy draining: the Routing has no candidate at all, so the same request is
    // refused for capacity (503, worth a retry), not as a bad parameter.
    let mut s = fixture::input(
        2,
        vec![fixture::routing("rest")],
        vec![proxy("sh1", "shanghai", 1), proxy("bj1", "beijing", 5)],
    );
    for p in &mut s.snapshot.proxies {
        p.draining = true;
    }
    s.clients = vec![ClientCredential::from_password("team-b", "bob", "pw-b")];
    let empty = build(s);
    for user in ["bob-region-mars", "bob-region-shanghai"] {
        let err = router
            .admit(Some(&empty), creds(user, "pw-b"), &WWW, now_ms())
            .unwrap_err();
        assert!(matches!(err, GatewayError::NoCapacity), "{user}: {err:?}");
    }
}
