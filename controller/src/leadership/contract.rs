//! The contract every [`LeaseStore`] implementation passes (called by the tests of
//! each: `MemoryLease` in unit tests, `RedisLease` on a real `redis-server` in
//! `controller/tests/leadership.rs`). `wait` lets a lease of `ttl` run out (real time
//! for Redis, advanced paused time for memory).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use super::LeaseStore;

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
    let t2 = store
        .acquire("b", ttl)
        .await
        .unwrap()
        .expect("an expired lease is granted");
    assert!(t2 > t1, "tokens grow: {t2} after {t1}");
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
