//! The leader lease port on a real `redis-server`: the shared contract
//! (`leadership::contract`, also run on `MemoryLease`), and two electors racing for
//! it. Never skipped: a missing binary fails the test.

use std::sync::Arc;
use std::time::Duration;

use activity_pool::testkit::RedisServer;
use activity_pool::{Fence, RedisConnector, RedisOptions, RedisPool};
use proxy_pool_controller::leadership::{
    Elector, ElectorOptions, LeaseStore, RedisLease, Role, contract,
};
use tokio_util::sync::CancellationToken;

async fn pool(server: &RedisServer) -> RedisPool {
    RedisPool::new(
        RedisConnector::direct(&server.url()).unwrap(),
        RedisOptions::default(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn redis_lease_passes_the_contract() {
    let server = RedisServer::start();
    let store = RedisLease::new(pool(&server).await);
    contract::lease_contract(&store, Duration::from_millis(400), tokio::time::sleep).await;
}

#[tokio::test]
async fn two_electors_on_redis_one_leader_then_the_other() {
    let server = RedisServer::start();
    let store: Arc<dyn LeaseStore> = Arc::new(RedisLease::new(pool(&server).await));
    let options = ElectorOptions {
        lease: Duration::from_millis(900),
        renew_every: Duration::from_millis(300),
        retry_every: Duration::from_millis(100),
    };
    let start = |name: &str| {
        let fence = Fence::new();
        let (e, l) = Elector::new(store.clone(), name.into(), fence.clone(), options);
        let stop = CancellationToken::new();
        tokio::spawn(e.run(stop.clone().cancelled_owned()));
        (l, fence, stop)
    };
    let (a, fa, stop_a) = start("a");
    assert!(a.elected().await);
    let (b, fb, _stop_b) = start("b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(a.is_leader(), "renewals keep the lease");
    assert_eq!(b.role(), Role::Follower);
    assert_eq!(fb.token(), 0);
    let Role::Leader(t1) = a.role() else { panic!() };
    assert_eq!(fa.token(), t1);
    stop_a.cancel();
    a.deposed().await;
    let t0 = std::time::Instant::now();
    assert!(b.elected().await);
    assert!(
        t0.elapsed() < options.lease,
        "a released lease is taken at the next try"
    );
    let Role::Leader(t2) = b.role() else { panic!() };
    assert!(t2 > t1);
}
