//! Upsert, refresh, health, expiry, purge and churn.

use std::num::NonZeroU32;
use std::time::Duration;

use activity_pool::model::*;
use activity_pool::{PoolError, Timestamp};

use super::*;

/// Vendor TTL sets `expires_at`; the safety margin sets `usable_until`; past it the proxy
/// is neither extractable nor assignable; past `expires_at` it reads EXPIRED; the purge
/// deletes it.
pub async fn vendor_ttl_and_safety_margin(kind: Kind) {
    let h = Harness::new(kind).await;
    let t0 = h.now();
    h.available("vendor-a", "p", 1, 30).await;
    let r = h.record("p-0").await.expect("record");
    assert_eq!(r.expires_at, Timestamp(t0.0 + 30_000));
    assert_eq!(r.usable_until, Timestamp(t0.0 + 25_000));
    assert_eq!(r.fetched_at, t0);
    assert_eq!(r.state, ProxyState::Available);
    assert_eq!(h.assignable("vendor-a").await, vec![pid("p-0")]);

    h.advance(25.0);
    assert!(
        h.extract(&req("c", 1)).await.is_empty(),
        "past usable_until must not be extracted"
    );
    assert!(h.assignable("vendor-a").await.is_empty());
    assert_conflict(
        h.pool
            .assign(&lease_of("p-0", "w", Duration::from_secs(5)))
            .await,
        activity_pool::ConflictReason::NotAssignable,
    );
    assert_eq!(h.inventory("vendor-a").await.available_slots, 0);

    h.advance(5.0);
    assert_eq!(h.state("p-0").await, Some(ProxyState::Expired));
    h.purge_all().await;
    assert_eq!(h.record("p-0").await, None);
    assert_eq!(h.inventory("vendor-a").await, UpstreamInventory::default());
}

/// Invalid candidates are dropped with a reason; the rest are written.
pub async fn invalid_candidates_dropped_with_reason(kind: Kind) {
    let h = Harness::new(kind).await;
    let mut bad_host = cand("bad-host", 60);
    bad_host.dial.host = "not a host".into();
    let mut bad_port = cand("bad-port", 60);
    bad_port.dial.port = 0;
    let mut short = cand("short", 60);
    short.ttl = Duration::from_secs(5); // equal to the safety margin
    let mut bad_cap = cand("bad-cap", 60);
    bad_cap.max_concurrency = 0;
    let mut bad_creds = cand("bad-creds", 60);
    bad_creds.dial.credentials = Some(Credentials {
        username: String::new(),
        password: Secret::new("x"),
    });
    let dup_id = cand("good", 60);
    let mut dup_endpoint = cand("other-id", 60);
    dup_endpoint.dial.host = "good.vendor.test".into();
    dup_endpoint.dial.credentials = cand("good", 60).dial.credentials;
    let report = h
        .upsert(
            "vendor-a",
            vec![
                cand("good", 60),
                bad_host,
                bad_port,
                short,
                bad_cap,
                bad_creds,
                dup_id,
                dup_endpoint,
            ],
        )
        .await;
    assert_eq!(report.inserted, 1);
    assert_eq!(report.dropped_total(), 7);
    for (reason, n) in [
        (DropReason::InvalidHost, 1),
        (DropReason::InvalidPort, 1),
        (DropReason::TtlTooShort, 1),
        (DropReason::InvalidCapacity, 1),
        (DropReason::InvalidCredentials, 1),
        (DropReason::DuplicateInBatch, 2),
    ] {
        assert_eq!(
            report.dropped.get(&reason),
            Some(&n),
            "{reason:?} in {report:?}"
        );
    }
    assert_eq!(h.state("good").await, Some(ProxyState::Fetched));
    assert_eq!(h.record("bad-host").await, None);
}

/// An invalid batch fails as `InvalidInput` before anything is written.
pub async fn invalid_batch_fails_before_storage(kind: Kind) {
    let h = Harness::new(kind).await;
    let mut b = batch(
        "vendor-a",
        (0..20_001).map(|i| cand(&format!("x-{i}"), 60)).collect(),
    );
    let err = h.pool.upsert(b.clone()).await.unwrap_err();
    assert!(
        matches!(err, PoolError::InvalidInput { ref field, .. } if field == "candidates"),
        "{err:?}"
    );
    b.candidates.truncate(3);
    b.safety_margin = Duration::from_secs(48 * 3600);
    let err = h.pool.upsert(b).await.unwrap_err();
    assert!(
        matches!(err, PoolError::InvalidInput { ref field, .. } if field == "safety_margin"),
        "{err:?}"
    );
    assert_eq!(h.record("x-0").await, None);
    assert_eq!(h.inventory("vendor-a").await, UpstreamInventory::default());
}

/// `max_size` caps the un-extracted inventory of an upstream; extraction frees room.
pub async fn max_size_is_a_hard_limit(kind: Kind) {
    let h = Harness::new(kind).await;
    let mut b = batch(
        "vendor-a",
        (0..5).map(|i| cand(&format!("m-{i}"), 60)).collect(),
    );
    b.max_size = NonZeroU32::new(3).unwrap();
    let report = h.pool.upsert(b.clone()).await.unwrap();
    assert_eq!(report.inserted, 3);
    assert_eq!(report.dropped.get(&DropReason::PoolFull), Some(&2));
    assert_eq!(h.inventory("vendor-a").await.unextracted, 3);
    // Another upstream is not affected by vendor-a's cap.
    h.available("vendor-b", "other", 2, 60).await;
    h.healthy(&["m-0", "m-1", "m-2"]).await;
    let mut r = req("c", 1);
    r.filters.upstreams = vec![up("vendor-a")];
    assert_eq!(h.extract(&r).await.len(), 1);
    assert_eq!(h.inventory("vendor-a").await.unextracted, 2);
    b.operation_id = OperationId::new("op-again").unwrap();
    b.candidates = vec![cand("m-3", 60), cand("m-4", 60)];
    let report = h.pool.upsert(b).await.unwrap();
    assert_eq!(report.inserted, 1);
    assert_eq!(report.dropped.get(&DropReason::PoolFull), Some(&1));
    assert_eq!(h.inventory("vendor-a").await.unextracted, 3);
}

/// Refreshing a live proxy extends its life, keeps state, health and counters.
pub async fn duplicate_refresh_extends_life(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "r", 1, 30).await;
    let before = h.record("r-0").await.unwrap();
    h.advance(10.0);
    let mut c = cand("r-0", 60);
    c.labels.region = Some(label("us"));
    let report = h.upsert("vendor-a", vec![c]).await;
    assert_eq!((report.inserted, report.refreshed), (0, 1));
    let after = h.record("r-0").await.unwrap();
    assert_eq!(after.state, ProxyState::Available);
    assert_eq!(after.health, before.health);
    assert_eq!(after.fetched_at, before.fetched_at);
    assert_eq!(after.expires_at, Timestamp(h.now().0 + 60_000));
    assert_eq!(after.labels.region, Some(label("us")));
    assert_eq!(h.inventory("vendor-a").await.unextracted, 1);
    // Re-indexed under the new region only, with the new usable_until.
    let mut r = req("c", 1);
    r.filters.regions = vec![label("eu")];
    assert!(h.extract(&r).await.is_empty());
    h.advance(30.0); // past the old usable_until, before the new one
    r.filters.regions = vec![label("us")];
    assert_eq!(h.extract(&r).await, vec!["r-0".to_string()]);
}

/// The incumbent upstream of an endpoint's current lifetime wins over another vendor's
/// duplicate; after the lifetime ends the other vendor may insert it.
pub async fn cross_vendor_incumbent_wins(kind: Kind) {
    let h = Harness::new(kind).await;
    h.upsert("vendor-a", vec![cand("a-1", 30)]).await;
    let mut dup = cand("b-1", 60);
    dup.dial.host = "a-1.vendor.test".into();
    dup.dial.credentials = cand("a-1", 30).dial.credentials;
    let report = h.upsert("vendor-b", vec![dup.clone()]).await;
    assert_eq!(
        report.dropped.get(&DropReason::IncumbentOtherUpstream),
        Some(&1)
    );
    // Same ID offered by another vendor is refused too.
    let report = h.upsert("vendor-b", vec![cand("a-1", 60)]).await;
    assert_eq!(
        report.dropped.get(&DropReason::IncumbentOtherUpstream),
        Some(&1)
    );
    // Same endpoint under a new ID from the same vendor is an ID conflict.
    let mut renamed = dup.clone();
    renamed.id = pid("a-renamed");
    let report = h.upsert("vendor-a", vec![renamed]).await;
    assert_eq!(report.dropped.get(&DropReason::IdConflict), Some(&1));
    assert_eq!(h.record("a-1").await.unwrap().upstream, up("vendor-a"));
    assert_eq!(h.inventory("vendor-b").await.unextracted, 0);

    h.advance(31.0);
    let report = h.upsert("vendor-b", vec![dup]).await;
    assert_eq!(report.inserted, 1, "{report:?}");
    assert_eq!(h.record("b-1").await.unwrap().upstream, up("vendor-b"));
    assert_eq!(h.inventory("vendor-a").await.unextracted, 0);
    assert_eq!(h.inventory("vendor-b").await.unextracted, 1);
}

/// An EXTRACTED (or REMOVED) proxy never re-enters through a refresh in its lifetime.
pub async fn extracted_never_reenters(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "e", 2, 60).await;
    let got = h.extract(&req("c", 1)).await;
    assert_eq!(got.len(), 1);
    let taken = got[0].clone();
    let report = h.upsert("vendor-a", vec![cand(&taken, 120)]).await;
    assert_eq!(report.dropped.get(&DropReason::AlreadyExtracted), Some(&1));
    assert_eq!(h.state(&taken).await, Some(ProxyState::Extracted));
    let other = if taken == "e-0" { "e-1" } else { "e-0" };
    assert_eq!(
        h.pool
            .remove(&up("vendor-a"), &[pid(other), pid("nope")])
            .await
            .unwrap(),
        vec![RemoveResult::Removed, RemoveResult::NotFound]
    );
    assert_eq!(
        h.pool.remove(&up("vendor-a"), &[pid(other)]).await.unwrap(),
        vec![RemoveResult::Ignored]
    );
    let report = h.upsert("vendor-a", vec![cand(other, 120)]).await;
    assert_eq!(report.dropped.get(&DropReason::AlreadyRemoved), Some(&1));
    assert_eq!(h.inventory("vendor-a").await.unextracted, 0);
    assert!(h.extract(&req("c", 5)).await.is_empty());
}

/// A retried upsert with the same operation ID returns the first report and changes nothing.
pub async fn upsert_retry_with_same_operation_is_idempotent(kind: Kind) {
    let h = Harness::new(kind).await;
    let b = batch(
        "vendor-a",
        (0..300).map(|i| cand(&format!("o-{i}"), 60)).collect(),
    );
    let first = h.pool.upsert(b.clone()).await.unwrap();
    assert_eq!(first.inserted, 300);
    let second = h.pool.upsert(b).await.unwrap();
    assert_eq!(second, first);
    assert_eq!(h.inventory("vendor-a").await.unextracted, 300);
}

/// FETCHED → AVAILABLE by health; SUSPECT / UNHEALTHY / EXTRACTED / EXPIRED / REMOVED
/// leave every AVAILABLE index (no filter, any filter, assignable, inventory slots).
pub async fn health_moves_proxies_in_and_out_of_every_index(kind: Kind) {
    let h = Harness::new(kind).await;
    h.upsert("vendor-a", vec![cand("h-0", 60)]).await;
    assert_eq!(h.state("h-0").await, Some(ProxyState::Fetched));
    assert!(
        h.extract(&req("c", 1)).await.is_empty(),
        "FETCHED is not extractable"
    );
    assert_eq!(h.inventory("vendor-a").await.managed, 1);

    let results = h
        .pool
        .apply_health(&[
            health("h-0", HealthVerdict::Available),
            health("missing", HealthVerdict::Available),
        ])
        .await
        .unwrap();
    assert_eq!(
        results,
        vec![
            HealthResult::Applied(ProxyState::Available),
            HealthResult::NotFound
        ]
    );
    assert_eq!(visible(&h).await, vec![1, 1, 1, 1, 1, 1, 4]);
    let r = h.record("h-0").await.unwrap();
    assert_eq!(r.health.last_check_at, Some(h.now()));
    assert_eq!(r.health.last_success_at, Some(h.now()));
    assert_eq!(r.health.latency_ms, Some(42));

    for verdict in [
        HealthVerdict::Suspect,
        HealthVerdict::Unhealthy,
        HealthVerdict::Checking,
    ] {
        h.verdict("h-0", verdict).await;
        assert_eq!(visible(&h).await, vec![0; 7], "{verdict:?}");
        assert_eq!(
            h.record("h-0").await.unwrap().health.failure,
            Some(label("connect_refused"))
        );
        h.healthy(&["h-0"]).await;
        assert_eq!(visible(&h).await, vec![1, 1, 1, 1, 1, 1, 4]);
    }
    assert_eq!(h.inventory("vendor-a").await.managed, 1);
    h.verdict("h-0", HealthVerdict::Unhealthy).await;
    assert_eq!(
        h.inventory("vendor-a").await.managed,
        0,
        "UNHEALTHY is not managed"
    );
    assert_eq!(h.inventory("vendor-a").await.unextracted, 1);
    h.healthy(&["h-0"]).await;

    // REMOVED leaves every index.
    h.pool.remove(&up("vendor-a"), &[pid("h-0")]).await.unwrap();
    assert_eq!(visible(&h).await, vec![0; 7]);
    assert_eq!(
        h.verdict("h-0", HealthVerdict::Available).await,
        HealthResult::Ignored(ProxyState::Removed)
    );

    // EXTRACTED leaves every index.
    h.available("vendor-a", "x", 1, 60).await;
    assert_eq!(h.extract(&req("c", 1)).await, vec!["x-0".to_string()]);
    assert_eq!(visible(&h).await, vec![0; 7]);
    assert_eq!(
        h.verdict("x-0", HealthVerdict::Available).await,
        HealthResult::Ignored(ProxyState::Extracted)
    );

    // EXPIRED leaves every index.
    h.available("vendor-a", "y", 1, 20).await;
    assert_eq!(visible(&h).await[0], 1);
    h.advance(21.0);
    assert_eq!(h.state("y-0").await, Some(ProxyState::Expired));
    assert_eq!(visible(&h).await, vec![0; 7]);
    assert_eq!(
        h.verdict("y-0", HealthVerdict::Available).await,
        HealthResult::NotFound
    );
}

/// Sustained short-TTL churn (30 s compressed to 3 s): records stay bounded and the
/// inventory counter always equals a recount of the records.
pub async fn sustained_churn_stays_bounded_and_consistent(kind: Kind) {
    let h = Harness::new(kind).await;
    let mut all: Vec<String> = Vec::new();
    let mut extracted = 0usize;
    let mut redis_base: Option<u64> = None;
    for round in 0..120 {
        let ids: Vec<String> = (0..10).map(|i| format!("ch-{round}-{i}")).collect();
        let mut cands: Vec<Candidate> = ids
            .iter()
            .map(|id| {
                let mut c = cand(id, 3);
                c.ttl = Duration::from_millis(3000);
                c
            })
            .collect();
        // Re-offer a few live ones from the last round: refreshes, not inserts.
        if round > 0 {
            cands.extend((0..3).map(|i| {
                let mut c = cand(&format!("ch-{}-{i}", round - 1), 3);
                c.ttl = Duration::from_millis(3000);
                c
            }));
        }
        let mut b = batch("vendor-a", cands);
        b.safety_margin = Duration::from_millis(1000);
        h.pool.upsert(b).await.unwrap();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        h.pool
            .apply_health(
                &refs
                    .iter()
                    .map(|id| health(id, HealthVerdict::Available))
                    .collect::<Vec<_>>(),
            )
            .await
            .unwrap();
        extracted += h.extract(&req("churn", 3)).await.len();
        all.extend(ids);
        h.advance(0.5);
        h.pool.purge_expired(50).await.unwrap();

        if round % 10 == 9 {
            let records = h
                .pool
                .records(
                    &all.iter().map(|s| pid(s)).collect::<Vec<_>>()
                        [all.len().saturating_sub(1000)..],
                )
                .await
                .unwrap();
            let stored = records.iter().flatten().count();
            assert!(
                stored <= 10 * 8 + 10,
                "round {round}: {stored} records retained"
            );
            let recount = records
                .iter()
                .flatten()
                .filter(|r| r.state != ProxyState::Expired && r.state.is_unextracted())
                .count() as u64;
            h.purge_all().await;
            assert_eq!(
                h.inventory("vendor-a").await.unextracted,
                recount,
                "round {round}"
            );
            // Redis: the keyspace and memory stay bounded. Operation and idempotency
            // results expire by native TTL in Redis time (minutes, so they pile up in
            // this compressed run, each with its TTL checked); every other key belongs to
            // a fixed set.
            if let Some((keys, records, used)) = h.redis_footprint(Duration::from_secs(3600)).await
            {
                assert!(
                    records <= 10 * 8 + 10,
                    "round {round}: {records} records in Redis"
                );
                assert!(keys <= 30, "round {round}: {keys} structural keys");
                let base = *redis_base.get_or_insert(used);
                assert!(
                    used <= base + 4 * 1024 * 1024,
                    "round {round}: used_memory {used} from {base}"
                );
            }
        }
    }
    assert!(extracted > 100, "churn extracted {extracted}");
    h.advance(10.0);
    h.purge_all().await;
    assert_eq!(h.inventory("vendor-a").await, UpstreamInventory::default());
    let tail: Vec<ProxyId> = all.iter().rev().take(500).map(|s| pid(s)).collect();
    assert!(
        h.pool
            .records(&tail)
            .await
            .unwrap()
            .iter()
            .all(Option::is_none)
    );
}

/// How many proxies each AVAILABLE view shows: extract with no filter, by region, by
/// carrier, by protocol, by upstream (counted without consuming), assignable, and the
/// upstream's available slots.
async fn visible(h: &Harness) -> Vec<u32> {
    let base = req("probe", 1000);
    let mut variants = vec![base.clone()];
    let mut f = base.clone();
    f.filters.regions = vec![label("eu")];
    variants.push(f);
    let mut f = base.clone();
    f.filters.carriers = vec![label("c1")];
    variants.push(f);
    let mut f = base.clone();
    f.filters.protocols = vec![Protocol::Http];
    variants.push(f);
    let mut f = base.clone();
    f.filters.upstreams = vec![up("vendor-a")];
    variants.push(f);
    let mut out = vec![];
    for mut v in variants {
        v.fulfillment = Fulfillment::AllOrNothing;
        match h.pool.extract(&v).await.unwrap() {
            ExtractOutcome::Insufficient { eligible } => out.push(eligible),
            other => panic!("{other:?}"),
        }
    }
    out.push(h.assignable("vendor-a").await.len() as u32);
    out.push(h.inventory("vendor-a").await.available_slots as u32);
    out
}
