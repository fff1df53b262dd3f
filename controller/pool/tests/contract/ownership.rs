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

/// A batch of assignments judges each request alone, in input order, each under its
/// own new epoch; a batch of renewals likewise. Every proxy moved is out of extraction,
/// the refused ones change nothing, and an oversized batch is refused whole.
pub async fn batches_judge_each_entry_alone(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "b", 4, 30).await; // usable_until = now + 25 s
    h.available("vendor-b", "c", 2, 60).await;
    let before = h.pool.assign(&lease_of("b-3", "w0", LEASE)).await.unwrap();
    let requests = vec![
        lease_of("b-0", "w1", LEASE),
        lease_of("nope", "w1", LEASE),
        lease_of("c-0", "w2", LEASE),
        lease_of("b-3", "w1", LEASE),                   // already owned
        lease_of("b-1", "w1", Duration::from_secs(60)), // capped at usable_until
        lease_of("b-0", "w2", LEASE),                   // taken earlier in this batch
    ];
    let got = h.pool.assign_many(&requests).await.unwrap();
    assert_eq!(got.len(), requests.len());
    let a0 = got[0].clone().unwrap();
    assert_eq!(got[1].clone().unwrap_err(), PoolError::NotFound);
    let a2 = got[2].clone().unwrap();
    assert_conflict(got[3].clone(), ConflictReason::NotAssignable);
    let a4 = got[4].clone().unwrap();
    assert_conflict(got[5].clone(), ConflictReason::NotAssignable);
    assert_eq!(
        (a0.worker_id.clone(), a2.worker_id.clone()),
        (wid("w1"), wid("w2"))
    );
    assert_eq!(a2.upstream, up("vendor-b"));
    assert_eq!(a0.lease_expires_at.0, h.now().0 + 10_000);
    assert_eq!(
        a4.lease_expires_at,
        h.record("b-1").await.unwrap().usable_until
    );
    assert!(before.epoch < a0.epoch && a0.epoch < a2.epoch && a2.epoch < a4.epoch);
    for a in [&a0, &a2, &a4] {
        assert_eq!(h.pool.get(&a.proxy_id).await.unwrap().as_ref(), Some(a));
    }
    assert_eq!(h.pool.get(&pid("b-3")).await.unwrap(), Some(before.clone()));
    // Only b-2 and c-1 are left for extraction.
    let mut left = h.extract(&req("c", 10)).await;
    left.sort();
    assert_eq!(left, vec!["b-2".to_string(), "c-1".to_string()]);
    let later = h.pool.assign(&lease_of("b-2", "w3", LEASE)).await;
    assert_eq!(
        later.unwrap_err(),
        PoolError::Conflict(ConflictReason::NotAssignable)
    );

    h.advance(8.0);
    let claims = vec![
        claim("b-0", "w1", a0.epoch),
        claim("c-0", "w1", a2.epoch),     // not its owner
        claim("b-1", "w1", a4.epoch + 1), // wrong epoch
        claim("nope", "w1", 1),
        claim("b-1", "w1", a4.epoch),
        claim("b-3", "w0", before.epoch),
    ];
    let renewed = h.pool.renew_many(&claims, LEASE).await.unwrap();
    assert_eq!(renewed.len(), claims.len());
    let r0 = renewed[0].clone().unwrap();
    assert_eq!(
        (r0.epoch, r0.lease_expires_at.0),
        (a0.epoch, h.now().0 + 10_000)
    );
    assert_conflict(renewed[1].clone(), ConflictReason::NotOwner);
    assert_conflict(renewed[2].clone(), ConflictReason::EpochMismatch);
    assert_eq!(renewed[3].clone().unwrap_err(), PoolError::NotFound);
    let r4 = renewed[4].clone().unwrap();
    assert_eq!(r4.lease_expires_at.0, h.now().0 + 10_000);
    assert_eq!(h.pool.get(&pid("b-0")).await.unwrap(), Some(r0));
    // c-0's lease (not renewed: wrong worker) runs out; b-0's does not.
    h.advance(3.0);
    let expired = h.pool.expire(100).await.unwrap();
    let mut gone: Vec<String> = expired
        .released
        .iter()
        .map(|a| a.proxy_id.to_string())
        .collect();
    gone.sort();
    assert_eq!(gone, vec!["c-0".to_string()]);
    assert_conflict(
        h.pool
            .renew_many(&[claim("c-0", "w2", a2.epoch)], LEASE)
            .await
            .unwrap()
            .remove(0),
        ConflictReason::NotOwner,
    );

    assert!(h.pool.assign_many(&[]).await.unwrap().is_empty());
    assert!(h.pool.renew_many(&[], LEASE).await.unwrap().is_empty());
    let too_many: Vec<LeaseRequest> = (0..=activity_pool::options::MAX_UPDATE_BATCH)
        .map(|i| lease_of(&format!("z-{i}"), "w1", LEASE))
        .collect();
    assert!(matches!(
        h.pool.assign_many(&too_many).await,
        Err(PoolError::InvalidInput { .. })
    ));
    let too_many: Vec<Claim> = (0..=activity_pool::options::MAX_UPDATE_BATCH)
        .map(|i| claim(&format!("z-{i}"), "w1", 1))
        .collect();
    assert!(matches!(
        h.pool.renew_many(&too_many, LEASE).await,
        Err(PoolError::InvalidInput { .. })
    ));
}

/// Batches racing each other, single assignments and extractions for the same
/// proxies: every proxy goes to exactly one of them, and no two assignments share an
/// epoch.
pub async fn concurrent_batches_assign_each_proxy_once(kind: Kind) {
    let h = Arc::new(Harness::new(kind).await);
    let ids = h.available("vendor-a", "r", 200, 60).await;
    let mut tasks = Vec::new();
    for w in 0..4 {
        let h = h.clone();
        let mut requests: Vec<LeaseRequest> = ids
            .iter()
            .map(|id| lease_of(id, &format!("w{w}"), LEASE))
            .collect();
        if w % 2 == 1 {
            requests.reverse();
        }
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for chunk in requests.chunks(50) {
                for r in h.pool.assign_many(chunk).await.unwrap() {
                    match r {
                        Ok(a) => won.push(a),
                        Err(e) => assert_eq!(e, PoolError::Conflict(ConflictReason::NotAssignable)),
                    }
                }
            }
            won
        }));
    }
    let single = {
        let h = h.clone();
        let ids = ids.clone();
        tokio::spawn(async move {
            let mut won = Vec::new();
            for id in ids.iter().step_by(7) {
                if let Ok(a) = h.pool.assign(&lease_of(id, "single", LEASE)).await {
                    won.push(a);
                }
            }
            won
        })
    };
    let extracted = h.extract(&req("c", 20)).await;
    let mut all: Vec<Assignment> = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.extend(single.await.unwrap());
    let mut owners = std::collections::BTreeMap::new();
    for a in &all {
        assert!(
            owners.insert(a.proxy_id.to_string(), a.clone()).is_none(),
            "{} assigned twice",
            a.proxy_id
        );
        assert_eq!(h.pool.get(&a.proxy_id).await.unwrap().as_ref(), Some(a));
    }
    for id in &extracted {
        assert!(!owners.contains_key(id), "{id} assigned and extracted");
    }
    assert_eq!(owners.len() + extracted.len(), ids.len());
    let mut epochs: Vec<u64> = all.iter().map(|a| a.epoch).collect();
    epochs.sort_unstable();
    epochs.dedup();
    assert_eq!(epochs.len(), all.len(), "epochs are never shared");
}

/// The change feed names every record write after a cursor (insert, health, drain,
/// extraction, removal, purge) in order, pages by `limit`, leaves out the lease
/// writes that keep the record as it is (assign, renew), and reports a cursor it
/// cannot continue from as lost.
pub async fn change_feed_follows_record_writes(kind: Kind) {
    let h = Harness::new(kind).await;
    let start = h.pool.changes(None, 10).await.unwrap();
    assert!(start.lost && start.ids.is_empty() && !start.more);
    let follow = |since: u64, limit: u32| {
        let pool = h.pool.clone();
        async move {
            let page = pool.changes(Some(since), limit).await.unwrap();
            assert!(!page.lost, "{page:?}");
            page
        }
    };
    let names =
        |page: &ChangePage| -> Vec<String> { page.ids.iter().map(ToString::to_string).collect() };
    let nothing = follow(start.next, 10).await;
    assert!(nothing.ids.is_empty() && !nothing.more);
    assert_eq!(nothing.next, start.next);

    h.upsert(
        "vendor-a",
        vec![cand("f-0", 20), cand("f-1", 60), cand("f-2", 60)],
    )
    .await;
    let inserted = follow(start.next, 10).await;
    assert_eq!(names(&inserted), ["f-0", "f-1", "f-2"]);
    assert!(!inserted.more);
    // Paged: two, then the third.
    let first = follow(start.next, 2).await;
    assert_eq!(names(&first), ["f-0", "f-1"]);
    assert!(first.more);
    let second = follow(first.next, 2).await;
    assert_eq!(names(&second), ["f-2"]);
    assert_eq!(second.next, inserted.next);

    h.healthy(&["f-1", "f-2"]).await;
    let healthy = follow(inserted.next, 10).await;
    assert_eq!(names(&healthy), ["f-1", "f-2"]);
    let a = h.pool.assign(&lease_of("f-1", "w1", LEASE)).await.unwrap();
    let renewed = h
        .pool
        .renew_many(&[claim("f-1", "w1", a.epoch)], LEASE)
        .await
        .unwrap();
    assert!(renewed[0].is_ok());
    assert!(
        follow(healthy.next, 10).await.ids.is_empty(),
        "lease writes keep the record"
    );
    h.pool
        .begin_drain(&claim("f-1", "w1", a.epoch))
        .await
        .unwrap();
    let drained = follow(healthy.next, 10).await;
    assert_eq!(names(&drained), ["f-1"]);
    assert_eq!(h.extract(&req("c", 1)).await, ["f-2"]);
    let extracted = follow(drained.next, 10).await;
    assert_eq!(names(&extracted), ["f-2"]);
    h.pool.remove(&up("vendor-a"), &[pid("f-1")]).await.unwrap();
    let removed = follow(extracted.next, 10).await;
    assert!(
        !removed.ids.is_empty() && names(&removed).iter().all(|n| n == "f-1"),
        "{removed:?}"
    );
    h.advance(21.0); // f-0 past its hard expiry
    h.purge_all().await;
    let purged = follow(removed.next, 10).await;
    assert!(names(&purged).contains(&"f-0".to_string()), "{purged:?}");

    // A cursor past the newest change (a store that was reset) is lost.
    let ahead = h.pool.changes(Some(purged.next + 1_000), 10).await.unwrap();
    assert!(ahead.lost && ahead.ids.is_empty());
    assert_eq!(ahead.next, purged.next);
    assert!(matches!(
        h.pool.changes(Some(purged.next), 0).await,
        Err(PoolError::InvalidInput { .. })
    ));
}
