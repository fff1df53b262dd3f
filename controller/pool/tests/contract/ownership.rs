//! Worker leases: assign, renew, drain, acknowledge, expire; assign vs extract.

use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::*;
use activity_pool::{ConflictReason, PoolError};

use super::*;

const LEASE: Duration = Duration::from_secs(10);

/// Assign takes the proxy out of extraction; renew caps at usable_until and must match
/// worker and epoch; epochs only grow.
pub async fn assign_and_renew(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "o", 3, 30).await; // usable_until = now + 25 s
    let a = h.pool.assign(&lease_of("o-0", "w1", LEASE)).await.unwrap();
    assert_eq!(a.worker_id, wid("w1"));
    assert_eq!(a.upstream, up("vendor-a"));
    assert_eq!(a.lease_expires_at.0, h.now().0 + 10_000);
    assert!(!a.draining);
    assert!(
        a.epoch >= (h.now().0 as u64) * 1000,
        "epoch derived from time: {}",
        a.epoch
    );
    assert_eq!(h.pool.get(&pid("o-0")).await.unwrap(), Some(a.clone()));
    assert_eq!(h.record("o-0").await.unwrap().owner, Some(a.clone()));
    assert_eq!(h.record("o-0").await.unwrap().state, ProxyState::Available);

    assert_conflict(
        h.pool.assign(&lease_of("o-0", "w2", LEASE)).await,
        ConflictReason::NotAssignable,
    );
    assert_eq!(
        h.pool
            .assign(&lease_of("nope", "w2", LEASE))
            .await
            .unwrap_err(),
        PoolError::NotFound
    );
    let got = h.extract(&req("c", 10)).await;
    assert_eq!(got.len(), 2);
    assert!(!got.contains(&"o-0".to_string()));
    h.available("vendor-a", "n", 2, 30).await;
    let b = h.pool.assign(&lease_of("n-0", "w1", LEASE)).await.unwrap();
    assert!(b.epoch > a.epoch);
    let c = h.pool.assign(&lease_of("n-1", "w2", LEASE)).await.unwrap();
    assert!(c.epoch > b.epoch);

    h.advance(8.0);
    assert_conflict(
        h.pool.renew(&claim("o-0", "w2", a.epoch), LEASE).await,
        ConflictReason::NotOwner,
    );
    assert_conflict(
        h.pool.renew(&claim("o-0", "w1", a.epoch + 1), LEASE).await,
        ConflictReason::EpochMismatch,
    );
    let renewed = h
        .pool
        .renew(&claim("o-0", "w1", a.epoch), LEASE)
        .await
        .unwrap();
    assert_eq!(renewed.lease_expires_at.0, h.now().0 + 10_000);
    assert_eq!(renewed.epoch, a.epoch);
    h.advance(8.0);
    let capped = h
        .pool
        .renew(&claim("o-0", "w1", a.epoch), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        capped.lease_expires_at,
        h.record("o-0").await.unwrap().usable_until,
        "capped at usable_until"
    );
    // A lease that ran out cannot be renewed.
    assert_conflict(
        h.pool.renew(&claim("n-1", "w2", c.epoch), LEASE).await,
        ConflictReason::LeaseExpired,
    );
}

/// Drain: begin is idempotent; acknowledge only when not busy; then extractable.
pub async fn drain_and_acknowledge(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "d", 1, 60).await;
    let a = h.pool.assign(&lease_of("d-0", "w1", LEASE)).await.unwrap();
    assert_conflict(
        h.pool
            .acknowledge_drain(&drain_ack("d-0", "w1", a.epoch, 0, 0))
            .await,
        ConflictReason::NotDraining,
    );
    assert_conflict(
        h.pool.begin_drain(&claim("d-0", "w2", a.epoch)).await,
        ConflictReason::NotOwner,
    );
    let d1 = h
        .pool
        .begin_drain(&claim("d-0", "w1", a.epoch))
        .await
        .unwrap();
    assert!(d1.draining);
    let d2 = h
        .pool
        .begin_drain(&claim("d-0", "w1", a.epoch))
        .await
        .unwrap();
    assert_eq!(d1, d2, "idempotent per assignment");
    assert_eq!(h.state("d-0").await, Some(ProxyState::Draining));
    assert_eq!(h.inventory("vendor-a").await.managed, 1);
    assert!(h.extract(&req("c", 1)).await.is_empty());
    for (epoch, active, reserved, reason) in [
        (a.epoch, 1, 0, ConflictReason::Busy),
        (a.epoch, 0, 2, ConflictReason::Busy),
        (a.epoch + 1, 0, 0, ConflictReason::EpochMismatch),
    ] {
        assert_conflict(
            h.pool
                .acknowledge_drain(&drain_ack("d-0", "w1", epoch, active, reserved))
                .await,
            reason,
        );
    }
    assert_eq!(h.pool.get(&pid("d-0")).await.unwrap(), Some(d1));
    h.pool
        .acknowledge_drain(&drain_ack("d-0", "w1", a.epoch, 0, 0))
        .await
        .unwrap();
    assert_eq!(h.pool.get(&pid("d-0")).await.unwrap(), None);
    assert_eq!(h.state("d-0").await, Some(ProxyState::Available));
    assert_eq!(h.extract(&req("c", 1)).await, vec!["d-0".to_string()]);
}

/// Expire releases at most `limit` expired leases per call and says whether more remain.
pub async fn expire_is_bounded(kind: Kind) {
    let h = Harness::new(kind).await;
    let ids = h.available("vendor-a", "e", 5, 60).await;
    for id in &ids {
        h.pool.assign(&lease_of(id, "w1", LEASE)).await.unwrap();
    }
    let none = h.pool.expire(10).await.unwrap();
    assert!(none.released.is_empty() && !none.more);
    h.advance(10.0);
    let first = h.pool.expire(2).await.unwrap();
    assert_eq!(first.released.len(), 2);
    assert!(first.more);
    let rest = h.pool.expire(10).await.unwrap();
    assert_eq!(rest.released.len(), 3);
    assert!(!rest.more);
    for id in &ids {
        assert_eq!(h.pool.get(&pid(id)).await.unwrap(), None);
    }
    assert_eq!(
        h.extract(&req("c", 10)).await.len(),
        5,
        "released proxies are AVAILABLE again"
    );
    assert!(matches!(
        h.pool.expire(100_000).await,
        Err(PoolError::InvalidInput { .. })
    ));
}

/// Assign and Extract racing for the same proxy: exactly one wins, every round.
pub async fn assign_vs_extract_exactly_one_wins(kind: Kind) {
    let h = Arc::new(Harness::new(kind).await);
    for round in 0..100 {
        let id = format!("race-{round}");
        h.available("vendor-a", &id, 1, 60).await;
        let proxy = format!("{id}-0");
        let ha = h.clone();
        let pa = proxy.clone();
        let assign = tokio::spawn(async move { ha.pool.assign(&lease_of(&pa, "w1", LEASE)).await });
        let hb = h.clone();
        let extract = tokio::spawn(async move { hb.extract(&req("c", 1)).await });
        let assigned = assign.await.unwrap();
        let extracted = extract.await.unwrap();
        match (&assigned, extracted.as_slice()) {
            (Ok(_), []) => assert_eq!(h.state(&proxy).await, Some(ProxyState::Available)),
            (Err(PoolError::Conflict(ConflictReason::NotAssignable)), [one]) if one == &proxy => {
                assert_eq!(h.state(&proxy).await, Some(ProxyState::Extracted))
            }
            other => panic!("round {round}: {other:?}"),
        }
        // Clean up so the next round's extract sees only its own proxy.
        if let Ok(a) = assigned {
            h.pool
                .begin_drain(&claim(&proxy, "w1", a.epoch))
                .await
                .unwrap();
            h.pool
                .remove(&up("vendor-a"), &[pid(&proxy)])
                .await
                .unwrap();
        }
    }
}

/// A purged record takes its assignment with it.
pub async fn hard_expiry_ends_the_assignment(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "x", 1, 20).await;
    h.pool
        .assign(&lease_of("x-0", "w1", Duration::from_secs(60)))
        .await
        .unwrap();
    h.advance(21.0);
    assert_eq!(h.pool.get(&pid("x-0")).await.unwrap(), None);
    h.purge_all().await;
    assert!(h.pool.expire(10).await.unwrap().released.is_empty());
    assert_eq!(h.inventory("vendor-a").await, UpstreamInventory::default());
}

/// Walking the lease pages returns every live assignment (a restarted controller
/// adopts them) and none whose lease ended; a foreign cursor is refused.
pub async fn leases_page_through_live_assignments(kind: Kind) {
    let h = Harness::new(kind).await;
    let ids = h.available("vendor-a", "l", 7, 60).await;
    let mut want = std::collections::BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let (worker, lease) = if i % 2 == 0 {
            ("w1", LEASE)
        } else {
            ("w2", LEASE * 3)
        };
        let a = h.pool.assign(&lease_of(id, worker, lease)).await.unwrap();
        want.insert(id.clone(), a);
    }
    let a0 = want[&ids[0]].clone();
    let drained = h
        .pool
        .begin_drain(&claim(&ids[0], "w1", a0.epoch))
        .await
        .unwrap();
    want.insert(ids[0].clone(), drained);
    let walk = |h: &Harness| {
        let pool = h.pool.clone();
        async move {
            let mut got = std::collections::BTreeMap::new();
            let mut cursor: Option<String> = None;
            for _ in 0..100 {
                let page = pool.leases(cursor.as_deref(), 2).await.unwrap();
                for a in page.leases {
                    got.insert(a.proxy_id.to_string(), a);
                }
                match page.next {
                    Some(n) => cursor = Some(n),
                    None => return got,
                }
            }
            panic!("the walk did not end");
        }
    };
    assert_eq!(walk(&h).await, want);
    // Past the short leases only the long ones are live (not yet expired by a sweep).
    h.advance(11.0);
    let long: std::collections::BTreeMap<_, _> = want
        .into_iter()
        .filter(|(_, a)| a.worker_id == wid("w2"))
        .collect();
    assert_eq!(walk(&h).await, long);
    assert!(matches!(
        h.pool.leases(Some("not a cursor"), 10).await,
        Err(PoolError::InvalidInput { .. })
    ));
    assert!(matches!(
        h.pool.leases(None, 0).await,
        Err(PoolError::InvalidInput { .. })
    ));
}
