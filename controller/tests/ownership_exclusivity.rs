//! Exclusivity and drain on demand in the ownership manager, through real gRPC on the
//! memory pool and a real `redis-server`: snapshots carry each lease's end (the worker
//! stops there), a restarted control plane adopts the live leases instead of letting
//! them lapse under a worker that still uses them, and extraction demand drains the
//! least loaded gateway-owned proxies, spread over the workers.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::time::Duration;

use activity_pool::model::{Filters, Label};
use controlplane_support::*;
use proxy_pool_controller::controlplane::ControlPlaneConfig;
use proxy_pool_controller::demand::{Demand, DrainDemand};

on_both!(
    snapshots_carry_the_lease_end_and_renewals_extend_it,
    a_worker_s_leases_are_renewed_together,
    a_restarted_control_plane_adopts_the_live_leases,
    extraction_demand_drains_the_least_loaded_proxies_across_workers,
    drains_released_in_one_pass_wake_waiting_extractions_once,
    unmet_demand_keeps_fresh_proxies_from_assignment,
);

/// Registers, watches, applies the first snapshot and ACKs it.
/// A demand for `count` proxies of any filter with `min_ttl_secs` of life left.
fn demand(count: u32, min_ttl_secs: u64) -> Demand {
    Demand {
        filters: Filters::default(),
        count,
        min_remaining_ttl: Duration::from_secs(min_ttl_secs),
    }
}

async fn worker(h: &Harness, id: &str) -> Worker {
    let mut w = Worker::register(h, id).await;
    h.pass().await;
    w.watch().await;
    w.apply_next().await;
    w.ack(true).await.expect("ack");
    w
}

async fn snapshots_carry_the_lease_end_and_renewals_extend_it(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("p", 2, 600).await;
    let mut w = worker(&h, "gw-0").await;
    assert_eq!(w.state.len(), 2);
    for p in w.state.proxies() {
        let a = h.pool.get(&pid(&p.id)).await.unwrap().expect("owned");
        assert_eq!(
            p.lease_expires_at_ms,
            a.lease_expires_at.millis(),
            "{}",
            p.id
        );
        assert!(p.lease_expires_at_ms > 0);
    }
    let first: Vec<i64> = w.state.proxies().map(|p| p.lease_expires_at_ms).collect();
    // Inside renew_before (20 s of a 60 s lease): the pass renews, the delta carries it.
    h.advance(25);
    w.ack(true).await.expect("session kept alive");
    h.advance(20);
    w.ack(true).await.expect("session kept alive");
    h.pass().await;
    assert!(w.apply_next().await, "a delta");
    for (p, before) in w.state.proxies().zip(first) {
        let a = h.pool.get(&pid(&p.id)).await.unwrap().expect("owned");
        assert_eq!(p.lease_expires_at_ms, a.lease_expires_at.millis());
        assert!(
            p.lease_expires_at_ms > before,
            "renewed: {} <= {before}",
            p.lease_expires_at_ms
        );
    }
}

/// Once a worker's earliest lease is due, all its leases are renewed in the same pass
/// (their ends line up: the worker's snapshot changes for renewals once per period, not
/// in every pass).
async fn a_worker_s_leases_are_renewed_together(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("p", 1, 3_600).await;
    let mut w = worker(&h, "gw-0").await;
    // 25 s later a second proxy comes: its lease ends 25 s after the first one's.
    h.advance(25);
    w.ack(true).await.expect("session kept alive");
    h.available("q", 1, 3_600).await;
    h.pass().await;
    let first = h.pool.get(&pid("p-0")).await.unwrap().expect("owned");
    let second = h.pool.get(&pid("q-0")).await.unwrap().expect("owned");
    assert_eq!(second.worker_id, first.worker_id);
    assert!(second.lease_expires_at > first.lease_expires_at);
    // 20 s on, the first lease has 15 s left (inside renew_before, 20 s), the second
    // 40 s: both are renewed, to the same end.
    h.advance(20);
    w.ack(true).await.expect("session kept alive");
    h.pass().await;
    let a = h.pool.get(&pid("p-0")).await.unwrap().expect("owned");
    let b = h.pool.get(&pid("q-0")).await.unwrap().expect("owned");
    assert!(a.lease_expires_at > first.lease_expires_at, "renewed");
    assert_eq!(a.lease_expires_at, b.lease_expires_at, "renewed together");
}

async fn a_restarted_control_plane_adopts_the_live_leases(kind: Kind) {
    let mut h = Harness::new(kind).await;
    h.available("p", 2, 3_600).await;
    let w = worker(&h, "gw-0").await;
    let before: Vec<(String, u64)> = w
        .state
        .proxies()
        .map(|p| (p.id.clone(), p.assignment_epoch))
        .collect();
    assert_eq!(before.len(), 2);
    drop(w);

    // The controller restarts; fresh proxies wait in the pool too.
    h.restart(config()).await;
    h.available("q", 4, 3_600).await;
    // The worker re-registers with the new process and gets the same proxies, under the
    // same epochs, in its first snapshot (nothing is assigned over them).
    let mut w = Worker::joined(&h, "gw-0").await;
    let after: Vec<(String, u64)> = w
        .state
        .proxies()
        .map(|p| (p.id.clone(), p.assignment_epoch))
        .collect();
    assert_eq!(after, before, "adopted, not dropped");
    w.ack(true).await.expect("ack");
    // Adopted leases are renewed like any other: past the old lease end they still
    // belong to the worker.
    for _ in 0..6 {
        h.advance(15);
        w.ack(true).await.expect("session kept alive");
        h.pass().await;
        while let Ok(Ok(Some(u))) = tokio::time::timeout(
            Duration::from_millis(200),
            w.stream.as_mut().expect("watching").message(),
        )
        .await
        {
            let _ = u;
        }
    }
    for (id, epoch) in &before {
        let a = h.pool.get(&pid(id)).await.unwrap().expect("still owned");
        assert_eq!((a.worker_id.as_str(), a.epoch), ("gw-0", *epoch), "{id}");
    }
}

async fn extraction_demand_drains_the_least_loaded_proxies_across_workers(kind: Kind) {
    let h = Harness::with(
        kind,
        ControlPlaneConfig {
            ownership: proxy_pool_controller::controlplane::OwnershipConfig {
                target_slots_per_worker: 16,
                ..config().ownership
            },
            ..config()
        },
        1024,
    )
    .await;
    h.available("p", 8, 600).await;
    let mut a = worker(&h, "gw-a").await;
    let mut b = worker(&h, "gw-b").await;
    assert_eq!((a.state.len(), b.state.len()), (4, 4));
    assert!(
        extracted(&h.pool, 1).await.is_empty(),
        "everything is owned"
    );

    // Loads: each worker's least loaded proxy is the one to go.
    let ids = |w: &Worker| w.proxy_ids();
    let (a_ids, b_ids) = (ids(&a), ids(&b));
    let a_loads: Vec<(&str, u32)> = a_ids
        .iter()
        .zip([3, 0, 2, 1])
        .map(|(i, n)| (i.as_str(), n))
        .collect();
    let b_loads: Vec<(&str, u32)> = b_ids
        .iter()
        .zip([2, 2, 1, 3])
        .map(|(i, n)| (i.as_str(), n))
        .collect();
    let a_loads: Vec<(&str, u32)> = a_loads.into_iter().filter(|(_, n)| *n > 0).collect();
    let b_loads: Vec<(&str, u32)> = b_loads.into_iter().filter(|(_, n)| *n > 0).collect();
    a.report(&a_loads).await.expect("report a");
    b.report(&b_loads).await.expect("report b");

    let manager = h.cp.ownership_handle();
    let mut released = manager.released();
    assert!(manager.request(demand(2, 30)));
    h.pass().await;
    a.apply_next().await;
    b.apply_next().await;
    let draining = |w: &Worker| -> Vec<String> {
        w.state
            .proxies()
            .filter(|p| p.draining)
            .map(|p| p.id.clone())
            .collect()
    };
    // One from each worker (the spread), each the least loaded of its worker.
    assert_eq!(draining(&a), vec![a_ids[1].clone()]);
    assert_eq!(draining(&b), vec![b_ids[2].clone()]);
    // b's drained proxy is still busy; a's is idle.
    a.ack(true).await.expect("ack a");
    b.ack(true).await.expect("ack b");
    a.report(&a_loads).await.expect("report a");
    b.report(&b_loads).await.expect("report b");
    h.pass().await;
    assert_eq!(h.owner(&a_ids[1]).await, None, "idle: released");
    assert_eq!(
        h.owner(&b_ids[2]).await.as_deref(),
        Some("gw-b"),
        "busy: kept"
    );
    assert!(
        released.has_changed().expect("open"),
        "waiting extractions are told"
    );
    released.mark_unchanged();
    assert_eq!(extracted(&h.pool, 5).await, vec![a_ids[1].clone()]);
    let idle: Vec<(&str, u32)> = b_loads
        .iter()
        .copied()
        .filter(|(id, _)| *id != b_ids[2])
        .collect();
    b.report(&idle).await.expect("report b idle");
    h.pass().await;
    assert_eq!(h.owner(&b_ids[2]).await, None);
    assert!(released.has_changed().expect("open"));
    assert_eq!(extracted(&h.pool, 5).await, vec![b_ids[2].clone()]);
    // A demand nothing matches drains nothing.
    assert!(manager.request(Demand {
        filters: Filters {
            regions: vec![Label::new("nowhere").unwrap()],
            ..Filters::default()
        },
        count: 3,
        min_remaining_ttl: Duration::ZERO,
    }));
    h.pass().await;
    for id in a_ids
        .iter()
        .chain(&b_ids)
        .filter(|i| **i != a_ids[1] && **i != b_ids[2])
    {
        assert!(h.owner(id).await.is_some(), "{id}");
    }
}

async fn unmet_demand_keeps_fresh_proxies_from_assignment(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("p", 2, 600).await;
    let w = worker(&h, "gw-0").await;
    assert_eq!(w.state.len(), 2);
    let owned = w.proxy_ids();
    // The worker wants 8 slots (2 proxies of 4): it has them. A demand for 3 more
    // than anyone has unowned...
    // (The demand wants more life than the owned proxies have left: none is drained.)
    let manager = h.cp.ownership_handle();
    manager.request(demand(3, 700));
    // ...and a second worker arrives while 3 fresh proxies come in: they stay for
    // extraction instead of going to the new worker.
    h.available("q", 3, 3_600).await;
    let w2 = worker(&h, "gw-1").await;
    h.pass().await;
    assert_eq!(w2.state.len(), 0, "held for the demand");
    for id in &owned {
        assert_eq!(
            h.owner(id).await.as_deref(),
            Some("gw-0"),
            "not drained: {id}"
        );
    }
    let got = extracted(&h.pool, 3).await;
    assert_eq!(got.len(), 3, "{got:?}");
}

/// A request waiting for drains takes what is unowned when it wakes, and a partial
/// answer with proxies is final: the drains begun for one demand must reach it
/// together, so the pass tells waiting extractions once, after its last release.
async fn drains_released_in_one_pass_wake_waiting_extractions_once(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("p", 2, 600).await;
    let mut w = worker(&h, "gw-0").await;
    assert_eq!(w.state.len(), 2);
    let ids = w.proxy_ids();
    let manager = h.cp.ownership_handle();
    let mut released = manager.released();
    let before = *released.borrow_and_update();
    assert!(manager.request(demand(2, 30)));
    h.pass().await;
    w.apply_next().await;
    assert_eq!(w.state.proxies().filter(|p| p.draining).count(), 2);
    w.ack(true).await.expect("ack");
    w.report(&[]).await.expect("report idle");
    h.pass().await;
    for id in &ids {
        assert_eq!(h.owner(id).await, None, "released: {id}");
    }
    assert_eq!(
        *released.borrow_and_update() - before,
        1,
        "one wake-up for the pass that released both"
    );
    assert_eq!(extracted(&h.pool, 5).await.len(), 2);
}
