//! The contract every [`LeaseStore`] implementation passes (called by the tests of
//! each: `MemoryLease` in unit tests, `RedisLease` on a real `redis-server` in
//! `controller/tests/leadership.rs`). `wait` lets a lease of `ttl` run out (real time
//! for Redis, advanced paused time for memory). [`hand_over`] is what two
//! [`Elector`]s on any store do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::Fence;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Elector, ElectorOptions, Leadership, LeaseStore, Role};

/// Runs the contract on a fresh store. Panics (test helper) on the first violation.
pub async fn lease_contract<W, F>(store: &dyn LeaseStore, ttl: Duration, wait: W)
where
    W: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    // Exactly one of two candidates gets the lease.
    let a = store.acquire("a", ttl).await.expect("acquire a");
    let b = store.acquire("b", ttl).await.expect("acquire b");
    let t1 = a.expect("a free lease is granted");
    assert_eq!(b, None, "a held lease is not granted to another holder");
    // The holder keeps it under the same token.
    assert_eq!(store.acquire("a", ttl).await.unwrap(), Some(t1));
    assert!(store.renew("a", t1, ttl).await.unwrap());
    assert!(
        !store.renew("b", t1, ttl).await.unwrap(),
        "only the holder renews"
    );
    assert!(
        !store.renew("a", t1 + 1, ttl).await.unwrap(),
        "only its token renews"
    );

    // Past the lease, another holder takes it under a greater token; the old holder
    // can no longer renew or release it.
    wait(ttl + ttl / 2).await;
    let t2 = take_over(store, "b", ttl, t1).await;
    assert!(!store.renew("a", t1, ttl).await.unwrap());
    store.release("a", t1).await.unwrap();
    assert_eq!(
        store.acquire("a", ttl).await.unwrap(),
        None,
        "a stale release frees nothing"
    );

    // A release by the holder frees it at once; the next grant has a greater token
    // even for the same holder.
    store.release("b", t2).await.unwrap();
    let t3 = store
        .acquire("b", ttl)
        .await
        .unwrap()
        .expect("released lease");
    assert!(t3 > t2);
    assert!(
        !store.renew("b", t2, ttl).await.unwrap(),
        "an old token stays dead"
    );
    store.release("b", t3).await.unwrap();
}

/// `holder` takes the lease another held under `before` once it ran out: granted, under
/// a greater token (returned).
pub async fn take_over(store: &dyn LeaseStore, holder: &str, ttl: Duration, before: u64) -> u64 {
    let token = store
        .acquire(holder, ttl)
        .await
        .unwrap()
        .expect("an expired lease is granted");
    assert!(token > before, "tokens grow: {token} after {before}");
    token
}

/// A running elector: its leadership, the fence it grants, and the token that stops it.
pub type Running = (Leadership, Fence, CancellationToken);

/// Spawns an elector for `holder` on `store`.
pub fn start_elector(
    store: Arc<dyn LeaseStore>,
    holder: String,
    options: ElectorOptions,
) -> Running {
    let fence = Fence::new();
    let (elector, leadership) = Elector::new(store, holder, fence.clone(), options);
    let stop = CancellationToken::new();
    tokio::spawn(elector.run(stop.clone().cancelled_owned()));
    (leadership, fence, stop)
}

/// Two electors started by `start` under `names`: the first leads and, through
/// `settle`, keeps leading (renewals keep the lease) while the second follows with no
/// token; once the first stops it holds no token and the second leads within `within`
/// (its next try, not after the lease) under a greater token. Returns both tokens; the
/// second elector keeps running.
pub async fn hand_over<S, F>(
    start: S,
    names: [&'static str; 2],
    settle: F,
    within: Duration,
) -> (u64, u64)
where
    S: Fn(&'static str) -> Running,
    F: Future<Output = ()>,
{
    let (a, fa, stop_a) = start(names[0]);
    assert!(a.elected().await);
    let (b, fb, _stop_b) = start(names[1]);
    settle.await;
    assert!(a.is_leader(), "renewals keep the lease");
    assert_eq!(b.role(), Role::Follower);
    assert_eq!(fb.token(), 0);
    let Role::Leader(t1) = a.role() else {
        panic!("{} leads", names[0])
    };
    assert_eq!(fa.token(), t1);

    stop_a.cancel();
    a.deposed().await;
    assert_eq!(fa.token(), 0, "a stopped leader holds no token");
    let t0 = Instant::now();
    assert!(b.elected().await);
    assert!(
        t0.elapsed() <= within,
        "a released lease is taken at the next try ({:?})",
        t0.elapsed()
    );
    let Role::Leader(t2) = b.role() else {
        panic!("{} leads", names[1])
    };
    assert!(t2 > t1, "{t2} > {t1}");
    assert_eq!(fb.token(), t2);
    (t1, t2)
}
