//! Exclusive extraction: fulfilment, filters, eligibility, reserve, budget, idempotency,
//! concurrency.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::*;
use activity_pool::{ConflictReason, PoolError};

use super::*;

/// Partial returns what is eligible; all-or-nothing short changes nothing.
pub async fn partial_and_all_or_nothing(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 3, 60).await;
    let mut r = req("c", 5);
    r.fulfillment = Fulfillment::AllOrNothing;
    match h.pool.extract(&r).await.unwrap() {
        ExtractOutcome::Insufficient { eligible } => assert_eq!(eligible, 3),
        other => panic!("{other:?}"),
    }
    for id in ["p-0", "p-1", "p-2"] {
        assert_eq!(h.state(id).await, Some(ProxyState::Available));
    }
    assert_eq!(h.inventory("vendor-a").await.unextracted, 3);
    // A failed all-or-nothing stores nothing: the same key may succeed later.
    let got = h.extract(&req("c", 5)).await;
    assert_eq!(got.len(), 3);
    assert_eq!(got.iter().collect::<HashSet<_>>().len(), 3);
    for id in &got {
        let rec = h.record(id).await.unwrap();
        assert_eq!(rec.state, ProxyState::Extracted);
        assert_eq!(rec.extracted_at, Some(h.now()));
    }
    assert_eq!(h.inventory("vendor-a").await, UpstreamInventory::default());
    let empty = h.pool.extract(&req("c", 1)).await.unwrap();
    assert!(
        matches!(empty, ExtractOutcome::Extracted(ref e) if e.proxies.is_empty()),
        "{empty:?}"
    );
}

/// The returned proxies carry everything the API needs.
pub async fn extracted_proxy_carries_connection_details(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "d", 1, 60).await;
    let ExtractOutcome::Extracted(e) = h.pool.extract(&req("c", 1)).await.unwrap() else {
        panic!()
    };
    assert!(!e.replayed);
    assert_eq!(e.extracted_at, h.now());
    let p = &e.proxies[0];
    assert_eq!(p.id, pid("d-0"));
    assert_eq!(p.upstream, up("vendor-a"));
    assert_eq!(p.dial.protocol, Protocol::Http);
    assert_eq!(
        (p.dial.host.as_str(), p.dial.port),
        ("d-0.vendor.test", 8080)
    );
    assert_eq!(p.dial.credentials.as_ref().unwrap().username, "user-d-0");
    assert_eq!(
        p.dial.credentials.as_ref().unwrap().password.expose(),
        "s3cr3t-pass"
    );
    assert_eq!(p.labels.region, Some(label("eu")));
    assert_eq!(p.labels.carrier, Some(label("c1")));
    assert_eq!(p.expires_at.0, h.now().0 + 60_000);
}

fn labelled(id: &str, protocol: Protocol, region: &str, carrier: &str) -> Candidate {
    let mut c = cand(id, 60);
    c.dial.protocol = protocol;
    c.labels.region = Some(label(region));
    c.labels.carrier = Some(label(carrier));
    c
}

/// OR within a dimension, AND across dimensions, empty = any.
pub async fn filters_or_within_and_across(kind: Kind) {
    let h = Harness::new(kind).await;
    h.upsert(
        "vendor-a",
        vec![
            labelled("eu-http-c1", Protocol::Http, "eu", "c1"),
            labelled("us-socks-c1", Protocol::Socks5, "us", "c1"),
            labelled("us-http-c2", Protocol::Http, "us", "c2"),
            labelled("ap-socks-c2", Protocol::Socks5, "ap", "c2"),
        ],
    )
    .await;
    h.upsert(
        "vendor-b",
        vec![labelled("b-eu-socks-c1", Protocol::Socks5, "eu", "c1")],
    )
    .await;
    h.healthy(&[
        "eu-http-c1",
        "us-socks-c1",
        "us-http-c2",
        "ap-socks-c2",
        "b-eu-socks-c1",
    ])
    .await;

    let count_of = |f: Filters| {
        let h = &h;
        async move {
            let mut r = req("probe", 1000);
            r.fulfillment = Fulfillment::AllOrNothing;
            r.filters = f;
            match h.pool.extract(&r).await.unwrap() {
                ExtractOutcome::Insufficient { eligible } => eligible,
                other => panic!("{other:?}"),
            }
        }
    };
    for (filters, want) in [
        (Filters::default(), 5),
        (
            Filters {
                regions: vec![label("eu"), label("us")],
                ..Default::default()
            },
            4,
        ),
        (
            Filters {
                regions: vec![label("eu"), label("us")],
                protocols: vec![Protocol::Socks5],
                ..Default::default()
            },
            2,
        ),
        (
            Filters {
                regions: vec![label("eu"), label("us")],
                protocols: vec![Protocol::Socks5],
                upstreams: vec![up("vendor-a")],
                ..Default::default()
            },
            1,
        ),
        (
            Filters {
                carriers: vec![label("c2")],
                protocols: vec![Protocol::Http, Protocol::Socks5],
                ..Default::default()
            },
            2,
        ),
        (
            Filters {
                regions: vec![label("nowhere")],
                ..Default::default()
            },
            0,
        ),
        (
            Filters {
                upstreams: vec![up("vendor-c")],
                ..Default::default()
            },
            0,
        ),
    ] {
        assert_eq!(count_of(filters.clone()).await, want, "{filters:?}");
    }
    let mut r = req("c", 10);
    r.filters = Filters {
        regions: vec![label("us")],
        carriers: vec![label("c2")],
        ..Default::default()
    };
    assert_eq!(h.extract(&r).await, vec!["us-http-c2".to_string()]);
}

fn in_city(id: &str, region: &str, city: Option<&str>) -> Candidate {
    let mut c = labelled(id, Protocol::Http, region, "c1");
    c.labels.city = city.map(label);
    c
}

/// The city is a dimension like the others: OR within, AND across (with the region,
/// the country), absent on a proxy without one; the extracted proxy carries it, and a
/// refresh that changes it moves the proxy.
pub async fn city_filters_select_by_city(kind: Kind) {
    let h = Harness::new(kind).await;
    h.upsert(
        "vendor-a",
        vec![
            in_city("us-boston", "us", Some("boston")),
            in_city("us-denver", "us", Some("denver")),
            in_city("us-none", "us", None),
            in_city("fr-paris", "fr", Some("paris")),
        ],
    )
    .await;
    h.healthy(&["us-boston", "us-denver", "us-none", "fr-paris"])
        .await;
    let eligible = |regions: &[&str], cities: &[&str]| {
        let mut r = req("probe", 1000);
        r.fulfillment = Fulfillment::AllOrNothing;
        r.filters.regions = regions.iter().map(|v| label(v)).collect();
        r.filters.cities = cities.iter().map(|v| label(v)).collect();
        let h = &h;
        async move {
            match h.pool.extract(&r).await.unwrap() {
                ExtractOutcome::Insufficient { eligible } => eligible,
                other => panic!("{other:?}"),
            }
        }
    };
    assert_eq!(eligible(&[], &["boston"]).await, 1);
    assert_eq!(eligible(&[], &["boston", "denver"]).await, 2);
    assert_eq!(eligible(&["us"], &["boston", "paris"]).await, 1);
    assert_eq!(eligible(&["fr"], &["paris"]).await, 1);
    assert_eq!(eligible(&["fr"], &["boston"]).await, 0);
    assert_eq!(eligible(&[], &["nowhere"]).await, 0);
    assert_eq!(eligible(&["us"], &[]).await, 3);

    let mut r = req("c", 5);
    r.filters.cities = vec![label("paris")];
    let ExtractOutcome::Extracted(e) = h.pool.extract(&r).await.unwrap() else {
        panic!()
    };
    let p = &e.proxies[0];
    assert_eq!(p.id, pid("fr-paris"));
    assert_eq!(
        (p.labels.region.clone(), p.labels.city.clone()),
        (Some(label("fr")), Some(label("paris")))
    );
    assert_eq!(
        h.record("us-boston").await.unwrap().labels.city,
        Some(label("boston"))
    );

    // The vendor moves us-boston to Denver and gives us-none a city.
    h.upsert(
        "vendor-a",
        vec![
            in_city("us-boston", "us", Some("denver")),
            in_city("us-none", "us", Some("boston")),
        ],
    )
    .await;
    assert_eq!(eligible(&[], &["denver"]).await, 2);
    let mut r = req("c", 5);
    r.filters.cities = vec![label("boston")];
    assert_eq!(h.extract(&r).await, vec!["us-none".to_string()]);
    assert_eq!(
        h.record("us-boston").await.unwrap().labels.city,
        Some(label("denver"))
    );
}

/// Duplicate or too many filter values are refused, naming the field; nothing changes.
pub async fn invalid_filters_are_refused(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "f", 1, 60).await;
    let mut r = req("c", 1);
    r.filters.regions = vec![label("eu"), label("us"), label("eu")];
    let err = h.pool.extract(&r).await.unwrap_err();
    assert!(
        matches!(err, PoolError::InvalidInput { ref field, .. } if field == "filters.regions[2]"),
        "{err:?}"
    );
    let mut r = req("c", 1);
    r.filters.cities = vec![label("paris"), label("paris")];
    let err = h.pool.extract(&r).await.unwrap_err();
    assert!(
        matches!(err, PoolError::InvalidInput { ref field, .. } if field == "filters.cities[1]"),
        "{err:?}"
    );
    let mut r = req("c", 1);
    r.filters.carriers = (0..65).map(|i| label(&format!("c{i}"))).collect();
    let err = h.pool.extract(&r).await.unwrap_err();
    assert!(
        matches!(err, PoolError::InvalidInput { ref field, .. } if field == "filters.carriers"),
        "{err:?}"
    );
    let mut r = req("c", 1);
    r.count = NonZeroU32::new(1001).unwrap();
    assert!(matches!(
        h.pool.extract(&r).await,
        Err(PoolError::InvalidInput { .. })
    ));
    assert_eq!(h.state("f-0").await, Some(ProxyState::Available));
}

/// `min_remaining_ttl` and `max_health_check_age` narrow eligibility.
pub async fn remaining_ttl_and_health_freshness(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "short", 2, 20).await;
    h.available("vendor-a", "long", 2, 120).await;
    let mut r = req("c", 10);
    r.min_remaining_ttl = Duration::from_secs(30);
    r.fulfillment = Fulfillment::AllOrNothing;
    assert!(matches!(
        h.pool.extract(&r).await.unwrap(),
        ExtractOutcome::Insufficient { eligible: 2 }
    ));

    h.advance(10.0);
    h.healthy(&["long-1"]).await; // checked now; long-0 was checked 10 s ago
    let mut r = req("c", 10);
    r.max_health_check_age = Some(Duration::from_secs(5));
    assert_eq!(h.extract(&r).await, vec!["long-1".to_string()]);
    let mut r = req("c", 10);
    r.max_health_check_age = Some(Duration::from_secs(10));
    r.min_remaining_ttl = Duration::from_secs(30);
    assert_eq!(h.extract(&r).await, vec!["long-0".to_string()]);
    // Never checked at all: not fresh.
    h.upsert("vendor-a", vec![cand("unchecked", 60)]).await;
    let mut r = req("c", 10);
    r.max_health_check_age = Some(Duration::from_secs(3600));
    assert_eq!(
        h.extract(&r).await.len(),
        2,
        "only the two short ones qualify"
    );
}

/// `reserve_for_gateway` eligible proxies are kept back.
pub async fn reserve_for_gateway_is_kept_back(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "g", 5, 60).await;
    let mut r = req("c", 3);
    r.reserve_for_gateway = 3;
    r.fulfillment = Fulfillment::AllOrNothing;
    assert!(matches!(
        h.pool.extract(&r).await.unwrap(),
        ExtractOutcome::Insufficient { eligible: 2 }
    ));
    r.fulfillment = Fulfillment::Partial;
    assert_eq!(h.extract(&r).await.len(), 2);
    let mut next = req("c", 3);
    next.reserve_for_gateway = 3;
    assert_eq!(h.extract(&next).await.len(), 0);
    assert_eq!(h.extract(&req("c", 3)).await.len(), 3);
}

/// When the scan budget runs out before the answer is certain: "temporarily
/// unavailable", never "insufficient", and nothing changes.
pub async fn scan_budget_exhausted_is_unavailable(kind: Kind) {
    let h = Harness::with_options(kind, |o| o.extract_scan_budget = 4).await;
    h.available("vendor-a", "s", 10, 60).await;
    h.advance(20.0);
    h.healthy(&["s-0"]).await; // only s-0 is freshly checked
    let mut r = req("c", 1);
    r.max_health_check_age = Some(Duration::from_secs(5));
    let mut all = r.clone();
    all.fulfillment = Fulfillment::AllOrNothing;
    // s-0 is scanned last (lowest member among equal scores), beyond the budget.
    assert_eq!(
        h.pool.extract(&r).await.unwrap_err(),
        PoolError::ScanBudgetExhausted
    );
    assert_eq!(
        h.pool.extract(&all).await.unwrap_err(),
        PoolError::ScanBudgetExhausted
    );
    assert!(PoolError::ScanBudgetExhausted.is_retryable());
    for i in 0..10 {
        assert_eq!(
            h.state(&format!("s-{i}")).await,
            Some(ProxyState::Available)
        );
    }
    // Within budget the answer is certain.
    assert_eq!(h.extract(&req("c", 2)).await.len(), 2);
    // A narrower driver index fits the budget: region filter with 1 member.
    h.upsert(
        "vendor-a",
        vec![labelled("lonely", Protocol::Http, "ap", "c1")],
    )
    .await;
    h.healthy(&["lonely"]).await;
    let mut r = req("c", 1);
    r.filters.regions = vec![label("ap")];
    assert_eq!(h.extract(&r).await, vec!["lonely".to_string()]);
}

/// Same idempotency key + same body → the first result again; other body → conflict.
pub async fn idempotent_replay_and_conflict(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "i", 6, 60).await;
    let mut r = req("c", 2);
    r.idempotency_key = Some(IdempotencyKey::new("key-1").unwrap());
    let ExtractOutcome::Extracted(first) = h.pool.extract(&r).await.unwrap() else {
        panic!()
    };
    assert!(!first.replayed);
    h.advance(1.0);
    let mut retry = r.clone();
    retry.request_id = RequestId::new("another-request").unwrap();
    let ExtractOutcome::Extracted(again) = h.pool.extract(&retry).await.unwrap() else {
        panic!()
    };
    assert!(again.replayed);
    assert_eq!(again.proxies, first.proxies);
    assert_eq!(again.extracted_at, first.extracted_at);
    assert_eq!(h.inventory("vendor-a").await.unextracted, 4);

    let mut other = r.clone();
    other.request_digest = RequestDigest::of(b"another body");
    assert_eq!(
        h.pool.extract(&other).await.unwrap_err(),
        PoolError::Conflict(ConflictReason::IdempotencyKeyReused)
    );
    // Keys are per client.
    let mut other_client = r.clone();
    other_client.client_id = ClientId::new("someone-else").unwrap();
    let ExtractOutcome::Extracted(theirs) = h.pool.extract(&other_client).await.unwrap() else {
        panic!()
    };
    assert!(!theirs.replayed);
    assert_eq!(h.inventory("vendor-a").await.unextracted, 2);
}

/// Without a client key, the request ID still guards one low-level retry.
pub async fn request_id_does_not_replay(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "q", 4, 60).await;
    // The same request ID without an idempotency key: two extractions.
    let r = req("c", 2);
    let first = h.extract(&r).await;
    let ExtractOutcome::Extracted(again) = h.pool.extract(&r).await.unwrap() else {
        panic!()
    };
    assert!(!again.replayed);
    let second: Vec<String> = again.proxies.iter().map(|p| p.id.to_string()).collect();
    assert_eq!((first.len(), second.len()), (2, 2));
    assert!(
        first.iter().all(|id| !second.contains(id)),
        "{first:?} {second:?}"
    );
    assert_eq!(h.inventory("vendor-a").await.unextracted, 0);
}

/// The stored result expires no later than the earliest returned proxy.
pub async fn stored_result_expires_with_earliest_proxy(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "short", 1, 20).await;
    h.available("vendor-a", "long", 1, 120).await;
    let mut r = req("c", 2);
    r.idempotency_key = Some(IdempotencyKey::new("key-ttl").unwrap());
    let first = h.extract(&r).await;
    assert_eq!(first.len(), 2);
    h.advance(19.0);
    let ExtractOutcome::Extracted(again) = h.pool.extract(&r).await.unwrap() else {
        panic!()
    };
    assert!(again.replayed);
    h.advance(1.5);
    h.available("vendor-a", "fresh", 1, 120).await;
    let ExtractOutcome::Extracted(after) = h.pool.extract(&r).await.unwrap() else {
        panic!()
    };
    assert!(
        !after.replayed,
        "the stored result must not outlive the earliest proxy"
    );
    assert_eq!(after.proxies.len(), 1);
    assert_eq!(after.proxies[0].id, pid("fresh-0"));

    // And it never outlives idempotency_ttl.
    h.available("vendor-a", "t", 1, 120).await;
    let mut r = req("c", 1);
    r.idempotency_key = Some(IdempotencyKey::new("key-short").unwrap());
    r.idempotency_ttl = Duration::from_secs(10);
    h.extract(&r).await;
    h.advance(10.5);
    assert_eq!(
        h.extract(&r).await.len(),
        0,
        "a new extraction, and nothing left"
    );
}

/// 100 rounds of 16 concurrent extractions: results pairwise disjoint and
/// extracted + remaining = inserted.
pub async fn concurrent_extracts_are_disjoint(kind: Kind) {
    let h = Arc::new(Harness::new(kind).await);
    for round in 0..100 {
        let inserted = 40;
        h.available("vendor-a", &format!("cc{round}"), inserted, 60)
            .await;
        let mut tasks = Vec::new();
        for c in 0..16 {
            let h = h.clone();
            tasks.push(tokio::spawn(async move {
                let mut r = req(&format!("client-{c}"), 3);
                if c % 4 == 0 {
                    r.fulfillment = Fulfillment::AllOrNothing;
                }
                match h.pool.extract(&r).await.unwrap() {
                    ExtractOutcome::Extracted(e) => {
                        e.proxies.into_iter().map(|p| p.id.to_string()).collect()
                    }
                    ExtractOutcome::Insufficient { .. } => Vec::new(),
                }
            }));
        }
        let mut seen = HashSet::new();
        let mut total = 0;
        for t in tasks {
            for id in t.await.unwrap() {
                assert!(id.starts_with(&format!("cc{round}-")));
                assert!(
                    seen.insert(id.clone()),
                    "round {round}: {id} handed out twice"
                );
                total += 1;
            }
        }
        let remaining = h.inventory("vendor-a").await.unextracted as usize;
        assert_eq!(total + remaining, inserted, "round {round}");
        // Drain the rest so every round starts empty.
        let rest = h.extract(&req("drain", 1000)).await.len();
        assert_eq!(rest, remaining);
    }
}

/// A filtered extraction walks the matching combinations one after the other, freshest
/// first within each, starting where the request's own order starts: one extraction's
/// proxies come from one combination while it has enough, and consecutive requests
/// start at different combinations (spreading over upstreams).
pub async fn filtered_extraction_walks_combinations_in_turn(kind: Kind) {
    let h = Harness::new(kind).await;
    let ttls = [100u64, 200, 300, 400, 500];
    for u in ["a", "b", "c", "d"] {
        let mut cands: Vec<Candidate> =
            ttls.iter().map(|t| cand(&format!("{u}-{t}"), *t)).collect();
        let mut us = cand(&format!("{u}-us"), 900);
        us.labels.region = Some(label("us"));
        cands.push(us);
        let ids: Vec<String> = cands.iter().map(|c| c.id.to_string()).collect();
        h.upsert(&format!("vendor-{u}"), cands).await;
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        h.healthy(&refs).await;
    }
    let eu = |id: &str, count: u32| {
        let mut r = req("walker", count);
        r.request_id = RequestId::new(id).unwrap();
        r.filters.regions = vec![label("eu")];
        r
    };
    let upstream = |id: &str| id.split('-').next().unwrap_or_default().to_owned();
    let ttl = |id: &str| {
        id.rsplit('-')
            .next()
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap()
    };

    // Two from one combination, freshest (longest-lived) first.
    let first = h.extract(&eu("walk-0", 2)).await;
    assert_eq!(first.len(), 2, "{first:?}");
    let u0 = upstream(&first[0]);
    assert_eq!(first, vec![format!("{u0}-500"), format!("{u0}-400")]);

    // Single extractions start at different combinations: not all from one upstream,
    // each the freshest left in its upstream.
    let mut starts = HashSet::new();
    for i in 1..=6 {
        let got = h.extract(&eu(&format!("walk-{i}"), 1)).await;
        assert_eq!(got.len(), 1);
        starts.insert(upstream(&got[0]));
    }
    assert!(starts.len() >= 2, "every request started at {starts:?}");

    // Everything left in `eu`: grouped by combination (each group contiguous), freshest
    // first within each group; nothing from `us`.
    let rest = h.extract(&eu("walk-all", 100)).await;
    assert_eq!(rest.len(), 20 - 2 - 6, "{rest:?}");
    let mut seen: Vec<String> = Vec::new();
    for w in rest.windows(2) {
        if upstream(&w[0]) == upstream(&w[1]) {
            assert!(ttl(&w[0]) > ttl(&w[1]), "not freshest first: {rest:?}");
        }
    }
    for id in &rest {
        assert!(!id.ends_with("-us"), "{rest:?}");
        let u = upstream(id);
        if seen.last() != Some(&u) {
            assert!(!seen.contains(&u), "combination {u} walked twice: {rest:?}");
            seen.push(u);
        }
    }
    // The `us` proxies are all still there.
    let mut us = req("walker", 10);
    us.filters.regions = vec![label("us")];
    assert_eq!(h.extract(&us).await.len(), 4);
}
