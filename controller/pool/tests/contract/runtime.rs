//! Worker sessions, runtime reports and inventory figures.

use std::time::Duration;

use activity_pool::model::*;
use activity_pool::{ConflictReason, PoolError};

use super::*;

const TTL: Duration = Duration::from_secs(30);

fn registration(worker: &str, instance: &str, session: &str) -> SessionRegistration {
    SessionRegistration {
        worker_id: wid(worker),
        instance_id: InstanceId::new(instance).unwrap(),
        session_id: SessionId::new(session).unwrap(),
        ttl: TTL,
    }
}

fn report(
    worker: &str,
    session: &str,
    seq: u64,
    version: u64,
    epoch: u64,
    entries: Vec<RuntimeEntry>,
) -> RuntimeReport {
    RuntimeReport {
        header: ReportHeader {
            worker_id: wid(worker),
            session_id: SessionId::new(session).unwrap(),
            sequence: seq,
            snapshot_version: version,
            epoch,
        },
        entries,
        ttl: TTL,
    }
}

fn entry(id: &str, epoch: u64, active: u32, reserved: u32) -> RuntimeEntry {
    RuntimeEntry {
        proxy_id: pid(id),
        epoch,
        active,
        reserved,
        draining: false,
    }
}

fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

/// `worker`'s session `session` ACKs (`version`, `epoch`) for `ttl`.
fn snapshot_ack(
    worker: &str,
    session: &str,
    version: u64,
    epoch: u64,
    ttl: Duration,
) -> SnapshotAck {
    SnapshotAck {
        worker_id: wid(worker),
        session_id: sid(session),
        version,
        epoch,
        ttl,
    }
}

/// Leases `proxy` to `worker` for a minute.
async fn assign(h: &Harness, proxy: &str, worker: &str) -> Assignment {
    h.pool
        .assign(&lease_of(proxy, worker, Duration::from_secs(60)))
        .await
        .unwrap()
}

/// Registers session `session` of instance `instance` for `worker`.
async fn register(h: &Harness, worker: &str, instance: &str, session: &str) -> WorkerSession {
    h.pool
        .register(&registration(worker, instance, session))
        .await
        .unwrap()
}

/// A positive ACK of (`version`, `epoch`) by `worker`'s session `session`, for `TTL`.
async fn ack(
    h: &Harness,
    worker: &str,
    session: &str,
    version: u64,
    epoch: u64,
) -> activity_pool::PoolResult<WorkerSession> {
    h.pool
        .acknowledge(&snapshot_ack(worker, session, version, epoch, TTL))
        .await
}

/// Registers worker `w1`'s session `s1` (instance `i1`) and binds it to (`version`,
/// `epoch`) by a positive ACK.
async fn bound_w1(h: &Harness, version: u64, epoch: u64) {
    register(h, "w1", "i1", "s1").await;
    ack(h, "w1", "s1", version, epoch).await.unwrap();
}

/// Writes `w1`'s report `seq` under session `s1`, bound to (`version`, `epoch`).
async fn write_w1(
    h: &Harness,
    seq: u64,
    version: u64,
    epoch: u64,
    entries: Vec<RuntimeEntry>,
) -> activity_pool::PoolResult<ReportAck> {
    h.pool
        .write_report(&report("w1", "s1", seq, version, epoch, entries))
        .await
}

/// Sequence rules: increasing accepted, same+same replayed, same+other and lower refused.
pub async fn report_sequence_rules(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "r", 1, 120).await;
    let a = assign(&h, "r-0", "w1").await;
    bound_w1(&h, 7, a.epoch).await;
    let r1 = report("w1", "s1", 1, 7, a.epoch, vec![entry("r-0", a.epoch, 1, 0)]);
    assert_eq!(h.pool.write_report(&r1).await.unwrap(), ReportAck::Accepted);
    assert_eq!(h.pool.write_report(&r1).await.unwrap(), ReportAck::Replayed);
    let r1b = report("w1", "s1", 1, 7, a.epoch, vec![entry("r-0", a.epoch, 2, 0)]);
    assert_conflict(
        h.pool.write_report(&r1b).await,
        ConflictReason::SequenceReplayMismatch,
    );
    let r2 = report("w1", "s1", 2, 7, a.epoch, vec![entry("r-0", a.epoch, 3, 1)]);
    assert_eq!(h.pool.write_report(&r2).await.unwrap(), ReportAck::Accepted);
    assert_conflict(
        h.pool.write_report(&r1).await,
        ConflictReason::SequenceRegression,
    );
    let rt = h.pool.runtime(&wid("w1")).await.unwrap().unwrap();
    assert_eq!(
        (
            rt.header.sequence,
            rt.header.snapshot_version,
            rt.header.epoch
        ),
        (2, 7, a.epoch)
    );
    assert_eq!(rt.entries, vec![entry("r-0", a.epoch, 3, 1)]);
    // Duplicate proxies in one report are invalid input.
    let dup = report(
        "w1",
        "s1",
        3,
        7,
        a.epoch,
        vec![entry("r-0", a.epoch, 1, 0), entry("r-0", a.epoch, 1, 0)],
    );
    assert!(matches!(
        h.pool.write_report(&dup).await,
        Err(PoolError::InvalidInput { .. })
    ));
}

/// A new session replaces the old and fences the old instance's writes.
pub async fn new_session_fences_the_old_instance(kind: Kind) {
    let h = Harness::new(kind).await;
    bound_w1(&h, 1, 5).await;
    write_w1(&h, 1, 1, 5, vec![]).await.unwrap();
    let s2 = register(&h, "w1", "i2", "s2").await;
    assert_eq!(s2.acked_version, None);
    assert!(s2.fence_open);
    assert_eq!(
        h.pool.runtime(&wid("w1")).await.unwrap(),
        None,
        "the old instance's counts died with it"
    );
    assert_conflict(
        write_w1(&h, 2, 1, 5, vec![]).await,
        ConflictReason::StaleSession,
    );
    assert_conflict(
        ack(&h, "w1", "s1", 2, 5).await,
        ConflictReason::StaleSession,
    );
    // The new session must ACK before it can report.
    assert_conflict(
        h.pool
            .write_report(&report("w1", "s2", 1, 1, 5, vec![]))
            .await,
        ConflictReason::BoundMismatch,
    );
    ack(&h, "w1", "s2", 2, 6).await.unwrap();
    assert_conflict(
        h.pool
            .write_report(&report("w1", "s2", 1, 1, 5, vec![]))
            .await,
        ConflictReason::BoundMismatch,
    );
    assert_eq!(
        h.pool
            .write_report(&report("w1", "s2", 1, 2, 6, vec![]))
            .await
            .unwrap(),
        ReportAck::Accepted
    );
    let s = h.pool.session(&wid("w1")).await.unwrap().unwrap();
    assert_eq!(
        (
            s.session_id,
            s.instance_id.as_str(),
            s.acked_version,
            s.acked_epoch
        ),
        (sid("s2"), "i2", Some(2), Some(6))
    );
}

/// A negative ACK closes the runtime write fence until the next positive ACK.
pub async fn negative_ack_closes_the_fence(kind: Kind) {
    let h = Harness::new(kind).await;
    bound_w1(&h, 1, 5).await;
    let s = h
        .pool
        .reject_snapshot(&SnapshotReject {
            worker_id: wid("w1"),
            session_id: sid("s1"),
            ttl: TTL,
        })
        .await
        .unwrap();
    assert!(!s.fence_open);
    assert_conflict(
        write_w1(&h, 1, 1, 5, vec![]).await,
        ConflictReason::FenceClosed,
    );
    ack(&h, "w1", "s1", 2, 5).await.unwrap();
    assert_eq!(
        write_w1(&h, 1, 2, 5, vec![]).await.unwrap(),
        ReportAck::Accepted
    );
}

/// Non-zero counts must match the proxy's owner, worker and epoch, and never claim an
/// epoch beyond the report's bound.
pub async fn epoch_isolation(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "e", 2, 120).await;
    let a = assign(&h, "e-0", "w1").await;
    let b = assign(&h, "e-1", "w2").await;
    bound_w1(&h, 1, a.epoch).await;
    // Someone else's proxy.
    assert_conflict(
        write_w1(&h, 1, 1, a.epoch, vec![entry("e-1", b.epoch, 1, 0)]).await,
        ConflictReason::OwnershipMismatch,
    );
    // Own proxy under a wrong epoch.
    assert_conflict(
        write_w1(&h, 1, 1, a.epoch, vec![entry("e-0", a.epoch - 1, 1, 0)]).await,
        ConflictReason::OwnershipMismatch,
    );
    // Zero counts for anything are fine (sparse reports may list idle proxies).
    assert_eq!(
        write_w1(&h, 1, 1, a.epoch, vec![entry("e-1", b.epoch, 0, 0)])
            .await
            .unwrap(),
        ReportAck::Accepted
    );
    // A report bound to an epoch below the assignment's cannot claim it.
    ack(&h, "w1", "s1", 2, a.epoch - 1).await.unwrap();
    assert_conflict(
        write_w1(&h, 2, 2, a.epoch - 1, vec![entry("e-0", a.epoch, 1, 0)]).await,
        ConflictReason::OwnershipMismatch,
    );
    assert_eq!(h.state("e-0").await, Some(ProxyState::Available));
}

/// Managed / Available Slots: unowned count max; owned count max − active − reserved
/// from a fresh consistent report, zero when unknown or expired (fail closed); an empty
/// report clears counts.
pub async fn inventory_figures_and_fail_closed(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "v", 3, 120).await; // capacity 4 each
    h.upsert("vendor-a", vec![cand("fetched", 120)]).await;
    h.available("vendor-b", "other", 2, 120).await;
    let inv = h.inventory("vendor-a").await;
    assert_eq!(
        (
            inv.unextracted,
            inv.managed,
            inv.available,
            inv.available_slots
        ),
        (4, 4, 3, 12)
    );
    assert_eq!(h.inventory("vendor-b").await.available_slots, 8);
    assert_eq!(h.inventory("vendor-b").await.available, 2);

    let a = assign(&h, "v-0", "w1").await;
    let inv = h.inventory("vendor-a").await;
    assert_eq!(
        inv.available_slots, 8,
        "owned with unknown runtime contributes zero"
    );
    assert_eq!(inv.available, 2, "owned is not available for extraction");
    bound_w1(&h, 1, a.epoch).await;
    write_w1(&h, 1, 1, a.epoch, vec![entry("v-0", a.epoch, 1, 1)])
        .await
        .unwrap();
    assert_eq!(h.inventory("vendor-a").await.available_slots, 10);
    write_w1(&h, 2, 1, a.epoch, vec![]).await.unwrap();
    assert_eq!(
        h.inventory("vendor-a").await.available_slots,
        12,
        "empty report clears counts"
    );
    write_w1(&h, 3, 1, a.epoch, vec![entry("v-0", a.epoch, 4, 0)])
        .await
        .unwrap();
    assert_eq!(h.inventory("vendor-a").await.available_slots, 8);

    // Report expiry (pool time) fails closed.
    h.pool
        .acknowledge(&snapshot_ack(
            "w1",
            "s1",
            1,
            a.epoch,
            Duration::from_secs(300),
        ))
        .await
        .unwrap();
    h.advance(31.0);
    assert_eq!(h.pool.runtime(&wid("w1")).await.unwrap(), None);
    assert_eq!(h.inventory("vendor-a").await.available_slots, 8);
    // Session expiry fails closed as well.
    write_w1(&h, 4, 1, a.epoch, vec![]).await.unwrap();
    assert_eq!(h.inventory("vendor-a").await.available_slots, 12);
    h.advance(301.0 - 31.0);
    assert_eq!(h.pool.session(&wid("w1")).await.unwrap(), None);
    assert_eq!(h.pool.runtime(&wid("w1")).await.unwrap(), None);
    h.purge_all().await;
    assert_eq!(
        h.inventory("vendor-a").await,
        UpstreamInventory::default(),
        "everything expired"
    );

    // Draining is managed but has no free slots.
    let h = Harness::new(kind).await;
    h.available("vendor-a", "d", 2, 120).await;
    let a = assign(&h, "d-0", "w1").await;
    h.pool
        .begin_drain(&claim("d-0", "w1", a.epoch))
        .await
        .unwrap();
    let inv = h.inventory("vendor-a").await;
    assert_eq!((inv.managed, inv.available_slots), (2, 4));
}

/// Available Slots fails closed when the upstream's indexes exceed the scan budget.
pub async fn inventory_over_budget_fails_closed(kind: Kind) {
    let h = Harness::with_options(kind, |o| o.inventory_scan_budget = 3).await;
    h.available("vendor-a", "b", 3, 120).await;
    h.available("vendor-b", "c", 5, 120).await;
    assert_eq!(
        h.inventory("vendor-a").await.available_slots,
        12,
        "other upstreams do not count"
    );
    assert_eq!(
        h.pool.inventory(&up("vendor-b")).await.unwrap_err(),
        PoolError::ScanBudgetExhausted
    );
    h.available("vendor-a", "more", 1, 120).await;
    assert_eq!(
        h.pool.inventory(&up("vendor-a")).await.unwrap_err(),
        PoolError::ScanBudgetExhausted
    );
}

/// Expired sessions and reports are purged by maintenance.
pub async fn sessions_expire_by_pool_time(kind: Kind) {
    let h = Harness::new(kind).await;
    register(&h, "w1", "i1", "s1").await;
    h.advance(29.0);
    assert!(h.pool.session(&wid("w1")).await.unwrap().is_some());
    h.advance(1.0);
    assert!(h.pool.session(&wid("w1")).await.unwrap().is_none());
    assert_conflict(
        ack(&h, "w1", "s1", 1, 1).await,
        ConflictReason::StaleSession,
    );
    let purged = h.pool.purge_expired(10).await.unwrap();
    assert_eq!(purged.sessions_purged, 1);
    assert!(!purged.more);
}
