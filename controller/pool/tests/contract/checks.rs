//! Check marks (`docs/pool.md`, "Check marks"): a proxy a health check may still go
//! through is not extracted — from the moment the mark is set until the check ends or
//! its hold runs out — and a proxy already taken is not marked (its check must not run).
//! Gateway assignment does not look at marks (gateway traffic and checks may overlap).

use std::time::Duration;

use activity_pool::model::*;
use activity_pool::{PoolError, Timestamp};

use super::*;

fn start(id: &str, check: u64, hold_secs: u64) -> CheckStart {
    CheckStart {
        proxy_id: pid(id),
        check,
        hold: Duration::from_secs(hold_secs),
    }
}

fn end(id: &str, check: u64) -> CheckEnd {
    CheckEnd {
        proxy_id: pid(id),
        check,
    }
}

fn marked_until(h: &Harness, secs: u64) -> CheckMark {
    CheckMark::Marked(Timestamp(h.now().0 + secs as i64 * 1000))
}

async fn begin(h: &Harness, starts: &[CheckStart]) -> Vec<CheckMark> {
    h.pool.begin_checks(starts).await.expect("begin_checks")
}

async fn finish(h: &Harness, ends: &[CheckEnd]) -> Vec<bool> {
    h.pool.end_checks(ends).await.expect("end_checks")
}

/// Begins check `check` on `id` with a hold of `hold_secs` and asserts the mark lasts
/// exactly that long from now.
async fn assert_marked(h: &Harness, id: &str, check: u64, hold_secs: u64) {
    assert_eq!(
        begin(h, &[start(id, check, hold_secs)]).await,
        [marked_until(h, hold_secs)]
    );
}

/// Asserts that an extraction of `count` gets nothing while check `check` marks `id`,
/// that the check's end ends the mark, and that the next extraction then gets `id`.
async fn assert_freed_by_its_end(h: &Harness, id: &str, check: u64, count: u32) {
    assert!(h.extract(&req("c", count)).await.is_empty());
    assert_eq!(finish(h, &[end(id, check)]).await, [true]);
    assert_eq!(h.extract(&req("c", count)).await, vec![id.to_string()]);
}

fn all_or_nothing(count: u32) -> ExtractRequest {
    let mut r = req("c", count);
    r.fulfillment = Fulfillment::AllOrNothing;
    r
}

/// A marked proxy is skipped by every extraction (partial, all-or-nothing, filtered)
/// until its check ends; a health result applied meanwhile does not end the mark (a
/// task's checks come in one by one), the end of another check does not either.
pub async fn a_marked_proxy_is_not_extracted_until_its_check_ends(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 3, 120).await;
    let marks = begin(&h, &[start("p-2", 7, 10), start("p-0", 8, 10)]).await;
    assert_eq!(marks, vec![marked_until(&h, 10), marked_until(&h, 10)]);

    assert_eq!(
        h.pool.extract(&all_or_nothing(2)).await.unwrap(),
        ExtractOutcome::Insufficient { eligible: 1 }
    );
    let mut filtered = req("c", 3);
    filtered.filters.regions = vec![label("eu")];
    assert_eq!(h.extract(&filtered).await, vec!["p-1".to_string()]);
    assert!(h.extract(&req("c", 3)).await.is_empty());

    // A verdict written meanwhile leaves the mark; so does another check's end.
    h.advance(1.0);
    h.healthy(&["p-2"]).await;
    assert_eq!(
        finish(&h, &[end("p-2", 8), end("p-0", 7)]).await,
        [false; 2]
    );
    assert!(h.extract(&req("c", 3)).await.is_empty());

    // Its own check's end does; once.
    assert_eq!(finish(&h, &[end("p-2", 7)]).await, [true]);
    assert_eq!(finish(&h, &[end("p-2", 7)]).await, [false]);
    assert_eq!(h.extract(&req("c", 3)).await, vec!["p-2".to_string()]);
    assert_eq!(h.state("p-0").await, Some(ProxyState::Available));
}

/// Without an end, a mark lasts exactly its hold (pool time).
pub async fn a_mark_ends_by_itself_after_its_hold(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 1, 120).await;
    assert_marked(&h, "p-0", 1, 12).await;
    h.clock.advance(Duration::from_millis(11_999));
    assert!(h.extract(&req("c", 1)).await.is_empty());
    h.clock.advance(Duration::from_millis(1));
    assert_eq!(h.extract(&req("c", 1)).await, vec!["p-0".to_string()]);
}

/// A proxy already extracted or removed is not marked (the check must not run), nor a
/// missing or expired one; an extracted record is never changed by an end either.
pub async fn a_mark_on_a_taken_proxy_is_refused(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 2, 120).await;
    h.upsert("vendor-a", vec![cand("brief", 7)]).await;
    assert_eq!(h.extract(&req("c", 1)).await, vec!["p-1".to_string()]);
    h.pool.remove(&up("vendor-a"), &[pid("p-0")]).await.unwrap();
    h.advance(8.0);
    let marks = begin(
        &h,
        &[
            start("p-1", 1, 10),
            start("p-0", 2, 10),
            start("nobody", 3, 10),
            start("brief", 4, 10),
        ],
    )
    .await;
    assert_eq!(
        marks,
        vec![
            CheckMark::Refused(ProxyState::Extracted),
            CheckMark::Refused(ProxyState::Removed),
            CheckMark::NotFound,
            CheckMark::NotFound,
        ]
    );
    assert_eq!(finish(&h, &[end("p-1", 1)]).await, [false]);

    // The race the mark closes: whichever comes first wins. A mark first keeps the
    // extraction off; an extraction first refuses the mark.
    h.available("vendor-b", "q", 2, 120).await;
    assert!(matches!(
        begin(&h, &[start("q-1", 5, 10)]).await[..],
        [CheckMark::Marked(_)]
    ));
    assert_eq!(h.extract(&req("c", 2)).await, vec!["q-0".to_string()]);
    assert_eq!(
        begin(&h, &[start("q-0", 6, 10)]).await,
        [CheckMark::Refused(ProxyState::Extracted)]
    );
}

/// A mark of another check still in force is never shortened: a later check's end
/// leaves the proxy marked until the earlier one's end. The same check marked again
/// (another check of the same task) only extends its own mark.
pub async fn a_later_check_never_shortens_an_earlier_mark(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 2, 120).await;
    assert_marked(&h, "p-0", 1, 30).await;
    let until = marked_until(&h, 30);
    h.advance(1.0);
    assert_eq!(begin(&h, &[start("p-0", 2, 5)]).await, [until]);
    assert_eq!(finish(&h, &[end("p-0", 2)]).await, [true]);
    assert_eq!(finish(&h, &[end("p-0", 1)]).await, [false], "superseded");
    h.advance(28.0);
    assert_eq!(h.extract(&req("c", 2)).await, vec!["p-1".to_string()]);
    h.advance(1.0);
    assert_eq!(h.extract(&req("c", 2)).await, vec!["p-0".to_string()]);

    let h = Harness::new(kind).await;
    h.available("vendor-a", "s", 1, 120).await;
    assert_marked(&h, "s-0", 3, 5).await;
    h.advance(2.0);
    assert_marked(&h, "s-0", 3, 5).await;
    assert_eq!(
        begin(&h, &[start("s-0", 3, 1)]).await,
        [marked_until(&h, 5)]
    );
    h.advance(4.0);
    assert_freed_by_its_end(&h, "s-0", 3, 1).await;
}

/// Marks concern extraction only: a marked proxy is still listed as assignable and
/// assigned to a gateway, and an owned proxy can be marked (its check may still run
/// when the gateway lets it go).
pub async fn gateway_assignment_ignores_marks(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 2, 120).await;
    let lease = Duration::from_secs(5);
    begin(&h, &[start("p-0", 1, 30)]).await;
    assert_eq!(h.assignable("vendor-a").await, vec![pid("p-1"), pid("p-0")]);
    h.pool.assign(&lease_of("p-0", "w1", lease)).await.unwrap();
    let a = h.pool.assign(&lease_of("p-1", "w1", lease)).await.unwrap();
    assert!(matches!(
        begin(&h, &[start("p-1", 2, 30)]).await[..],
        [CheckMark::Marked(_)]
    ));
    // Released by the gateway while the check may still run: not extracted.
    h.pool
        .begin_drain(&claim("p-1", "w1", a.epoch))
        .await
        .unwrap();
    h.pool
        .acknowledge_drain(&drain_ack("p-1", "w1", a.epoch, 0, 0))
        .await
        .unwrap();
    assert_freed_by_its_end(&h, "p-1", 2, 2).await;
}

/// Holds of 1 ms to an hour, at most 1,000 entries a call.
pub async fn invalid_marks_are_refused(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 1, 120).await;
    let invalid = |r: activity_pool::PoolResult<Vec<CheckMark>>| {
        matches!(r, Err(PoolError::InvalidInput { .. }))
    };
    let mut zero = start("p-0", 1, 0);
    assert!(invalid(h.pool.begin_checks(&[zero.clone()]).await));
    zero.hold = Duration::from_secs(3601);
    assert!(invalid(h.pool.begin_checks(&[zero]).await));
    let many: Vec<CheckStart> = (0..1001).map(|i| start("p-0", i, 1)).collect();
    assert!(invalid(h.pool.begin_checks(&many).await));
    let ends: Vec<CheckEnd> = (0..1001).map(|i| end("p-0", i)).collect();
    assert!(matches!(
        h.pool.end_checks(&ends).await,
        Err(PoolError::InvalidInput { .. })
    ));
    // Nothing was marked.
    assert_eq!(h.extract(&req("c", 1)).await, vec!["p-0".to_string()]);
}

/// The field an `InvalidInput` names; any other answer fails the test.
fn invalid_field<T: std::fmt::Debug>(r: activity_pool::PoolResult<T>) -> String {
    match r {
        Err(PoolError::InvalidInput { field, .. }) => field,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// Bad input names the offending field, and a call refused for it changes nothing: not
/// the valid entries before the bad one, nor a mark an oversized batch of ends names.
/// The bounds themselves (1 ms, an hour) are accepted.
pub async fn invalid_marks_name_their_field_and_change_nothing(kind: Kind) {
    let h = Harness::new(kind).await;
    h.available("vendor-a", "p", 2, 120).await;
    assert_marked(&h, "p-1", 9, 30).await;

    for bad in [0, 3601] {
        let starts = [start("p-0", 1, 10), start("p-0", 2, bad)];
        assert_eq!(
            invalid_field(h.pool.begin_checks(&starts).await),
            "starts[1].hold"
        );
    }
    let many: Vec<CheckStart> = (0..1001).map(|i| start("p-0", i, 10)).collect();
    assert_eq!(invalid_field(h.pool.begin_checks(&many).await), "starts");
    let mut ends = vec![end("p-1", 9)];
    ends.extend((0..1000).map(|i| end("p-0", i)));
    assert_eq!(invalid_field(h.pool.end_checks(&ends).await), "ends");

    // p-0 was not marked; p-1's mark is still its check's.
    assert_eq!(h.extract(&req("c", 2)).await, vec!["p-0".to_string()]);
    assert_eq!(finish(&h, &[end("p-1", 9)]).await, [true]);

    // The bounds.
    let h = Harness::new(kind).await;
    h.available("vendor-a", "b", 2, 120).await;
    let mut shortest = start("b-0", 1, 0);
    shortest.hold = Duration::from_millis(1);
    assert_eq!(
        begin(&h, &[shortest, start("b-1", 2, 3600)]).await,
        [
            CheckMark::Marked(Timestamp(h.now().0 + 1)),
            marked_until(&h, 3600)
        ]
    );
}
