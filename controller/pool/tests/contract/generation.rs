//! Pool generations and the quarantine (`docs/pool.md`, "Pool generations"): after a
//! new generation begins, an upstream's proxies are neither extractable nor assignable
//! until `generation start + its quarantine`, so a proxy handed out before a data loss
//! and offered again by its vendor is not handed out a second time.

use std::time::Duration;

use activity_pool::model::*;
use activity_pool::{ConflictReason, PoolError, Timestamp};

use super::*;

const LEASE: Duration = Duration::from_secs(10);

/// Upserts `ids` (TTL `ttl` s) for `upstream` with `quarantine` and makes them AVAILABLE.
async fn held_batch(
    h: &Harness,
    upstream: &str,
    ids: &[&str],
    ttl: u64,
    quarantine: Duration,
) -> UpsertReport {
    let mut b = batch(upstream, ids.iter().map(|id| cand(id, ttl)).collect());
    b.quarantine = quarantine;
    let report = h.pool.upsert(b).await.expect("upsert");
    assert_eq!(report.inserted as usize, ids.len(), "{report:?}");
    h.healthy(ids).await;
    report
}

/// The first upsert of a new store begins its generation; until the end of an
/// upstream's quarantine its proxies are not extracted (partial: none; all-or-nothing:
/// insufficient), not listed as assignable and not assigned, and its inventory says
/// so; another upstream's quarantine is its own; a proxy first added late in the
/// window only waits out the rest of it; at the end everything is extractable.
pub async fn a_new_generation_holds_back_each_upstream_for_its_quarantine(kind: Kind) {
    let h = Harness::new(kind).await;
    let g = h.now();
    let q = Duration::from_secs(60);
    let first = held_batch(&h, "vendor-a", &["a-0", "a-1", "a-2"], 120, q).await;
    let until = Timestamp(g.0 + 60_000);
    assert_eq!(first.generation_started, Some(g), "{first:?}");
    assert_eq!(first.held_until, Some(until), "{first:?}");
    assert_eq!(h.pool.generation().await.unwrap(), Some(g));

    // Held back: nothing extractable, assignable or assigned.
    assert!(h.extract(&req("c", 2)).await.is_empty());
    let mut aon = req("c", 1);
    aon.fulfillment = Fulfillment::AllOrNothing;
    assert_eq!(
        h.pool.extract(&aon).await.unwrap(),
        ExtractOutcome::Insufficient { eligible: 0 }
    );
    assert!(h.assignable("vendor-a").await.is_empty());
    assert_conflict(
        h.pool.assign(&lease_of("a-0", "w1", LEASE)).await,
        ConflictReason::NotAssignable,
    );
    let inv = h.inventory("vendor-a").await;
    assert_eq!(
        (inv.unextracted, inv.available, inv.available_slots),
        (3, 0, 0),
        "{inv:?}"
    );
    assert_eq!(inv.quarantined_until, Some(until));
    for id in ["a-0", "a-1", "a-2"] {
        assert_eq!(h.state(id).await, Some(ProxyState::Available));
    }

    // Later upserts do not begin another generation; another upstream with no
    // quarantine is extractable at once, beside the held one.
    let b = held_batch(&h, "vendor-b", &["b-0"], 120, Duration::ZERO).await;
    assert_eq!((b.generation_started, b.held_until), (None, None));
    assert_eq!(h.extract(&req("c", 5)).await, vec!["b-0".to_string()]);
    assert_eq!(h.inventory("vendor-b").await.quarantined_until, None);

    // Late in the window: a brand-new proxy waits only for the rest of it.
    h.advance(50.0);
    let late = held_batch(&h, "vendor-a", &["a-3"], 120, q).await;
    assert_eq!(late.generation_started, None);
    assert_eq!(late.held_until, Some(until));
    assert!(h.extract(&req("c", 5)).await.is_empty());
    h.advance(9.9);
    assert!(h.extract(&req("c", 5)).await.is_empty());
    assert_eq!(h.inventory("vendor-a").await.quarantined_until, Some(until));

    // The hold ends at generation start + quarantine.
    h.advance(0.1);
    assert_eq!(h.now(), until);
    let inv = h.inventory("vendor-a").await;
    assert_eq!((inv.available, inv.quarantined_until), (4, None), "{inv:?}");
    assert_eq!(h.assignable("vendor-a").await.len(), 4);
    h.pool.assign(&lease_of("a-0", "w1", LEASE)).await.unwrap();
    let mut got = h.extract(&req("c", 5)).await;
    got.sort();
    assert_eq!(got, vec!["a-1", "a-2", "a-3"]);
    assert_eq!(h.pool.generation().await.unwrap(), Some(g));
}

/// A quarantine above the pool's maximum TTL is refused before storage.
pub async fn quarantine_above_the_maximum_ttl_is_refused(kind: Kind) {
    let h = Harness::new(kind).await;
    let mut b = batch("vendor-a", vec![cand("a-0", 60)]);
    b.quarantine = PoolOptions::default().max_ttl + Duration::from_secs(1);
    match h.pool.upsert(b).await {
        Err(PoolError::InvalidInput { field, .. }) => assert_eq!(field, "quarantine"),
        other => panic!("expected InvalidInput(quarantine), got {other:?}"),
    }
    assert_eq!(h.record("a-0").await, None);
    assert_eq!(h.inventory("vendor-a").await.unextracted, 0);
}
