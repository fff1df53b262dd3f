//! The leader lease port on a real `redis-server`: the shared contract
//! (`leadership::contract`, also run on `MemoryLease`), and two electors racing for
//! it; and a control plane that does not lead refusing every call with `UNAVAILABLE
//! not_leader`. Never skipped: a missing binary fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::sync::Arc;
use std::time::Duration;

use activity_pool::testkit::RedisServer;
use activity_pool::{Fence, RedisConnector, RedisOptions, RedisPool};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::checker_control_plane_client::CheckerControlPlaneClient;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_controller::controlplane::{
    ControlPlane, MemoryCheckerBackend, OutcomeQueue, Transport, serve,
};
use proxy_pool_controller::leadership::{
    Elector, ElectorOptions, LeaseStore, RedisLease, contract,
};
use proxy_pool_controller::leadership::{Leadership, MemoryLease};
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
    let start = |name: &'static str| contract::start_elector(store.clone(), name.into(), options);
    let settle = async { tokio::time::sleep(Duration::from_secs(3)).await };
    contract::hand_over(start, ["a", "b"], settle, options.lease).await;
}

#[tokio::test]
async fn a_control_plane_that_does_not_lead_refuses_every_call_not_leader() {
    use controlplane_support::{Kind, checker_req, config, pool_of, ports_of, register_req};
    let clock = activity_pool::ManualClock::starting_now();
    let (pool, _redis) = pool_of(Kind::Memory, &clock).await;
    let (checker, _obs) = MemoryCheckerBackend::new(8, 8, Arc::new(clock.clone()));
    let (outcomes, _rx) = OutcomeQueue::bounded(8);
    // Another replica holds the lease: this one stays a follower until it is released.
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLease::new());
    let other = store
        .acquire("other", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let (elector, leadership): (Elector, Leadership) = Elector::new(
        store.clone(),
        "me".into(),
        Fence::new(),
        ElectorOptions {
            lease: Duration::from_secs(3),
            renew_every: Duration::from_secs(1),
            retry_every: Duration::from_millis(50),
        },
    );
    let stop = CancellationToken::new();
    tokio::spawn(elector.run(stop.clone().cancelled_owned()));
    let cp = Arc::new(
        ControlPlane::new(
            config(),
            ports_of(pool, clock.clone()),
            Arc::new(checker),
            outcomes,
        )
        .with_leadership(leadership.clone()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        Transport::LoopbackFixture,
        cp,
        stop.clone().cancelled_owned(),
    ));
    let mut worker = WorkerControlPlaneClient::connect(endpoint.clone())
        .await
        .unwrap();
    let mut checker = CheckerControlPlaneClient::connect(endpoint).await.unwrap();
    let not_leader = |s: tonic::Status| {
        assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
        assert_eq!(s.message(), "not_leader");
        assert!(proxy_pool_api::controlplane::client::is_not_leader(&s));
    };
    not_leader(
        worker
            .register_worker(register_req("gw-1", "i-1"))
            .await
            .unwrap_err(),
    );
    not_leader(
        worker
            .watch_snapshots(pb::WatchSnapshotsRequest {
                worker_id: "gw-1".into(),
                session_id: "s".into(),
                last_version: 0,
                last_checksum: Vec::new(),
            })
            .await
            .unwrap_err(),
    );
    not_leader(
        checker
            .register_checker(checker_req("chk-0", 1, &[pb::CheckTier::Basic]))
            .await
            .unwrap_err(),
    );
    // The other replica gives the lease up: this one leads and answers.
    store.release("other", other).await.unwrap();
    assert!(leadership.elected().await);
    worker
        .register_worker(register_req("gw-1", "i-1"))
        .await
        .expect("the leader answers");
    stop.cancel();
}

/// A `DrainDemand` that records what it is asked.
#[derive(Debug)]
struct Recorder {
    got: std::sync::Mutex<Vec<proxy_pool_controller::demand::Demand>>,
    released: tokio::sync::watch::Sender<u64>,
}

impl proxy_pool_controller::demand::DrainDemand for Recorder {
    fn request(&self, demand: proxy_pool_controller::demand::Demand) -> bool {
        self.got.lock().unwrap().push(demand);
        true
    }
    fn released(&self) -> tokio::sync::watch::Receiver<u64> {
        self.released.subscribe()
    }
}

#[tokio::test]
async fn a_followers_extraction_demand_reaches_the_leader_through_redis() {
    use activity_pool::model::{Filters, UpstreamId};
    use proxy_pool_controller::demand::relay::{RoutedDemand, take};
    use proxy_pool_controller::demand::{Demand, DrainDemand};
    let server = RedisServer::start();
    let pool = pool(&server).await;
    // The follower: its local manager must not see the demand, the leader's must.
    let follower_local = Arc::new(Recorder {
        got: Default::default(),
        released: tokio::sync::watch::channel(0).0,
    });
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLease::new());
    store
        .acquire("leader", Duration::from_secs(60))
        .await
        .unwrap();
    let (_elector, follower) = Elector::new(
        store,
        "follower".into(),
        Fence::new(),
        ElectorOptions {
            lease: Duration::from_secs(3),
            renew_every: Duration::from_secs(1),
            retry_every: Duration::from_secs(1),
        },
    );
    let stop = CancellationToken::new();
    let routed = RoutedDemand::new(follower, follower_local.clone(), pool.clone(), stop.clone());
    let demand = Demand {
        filters: Filters {
            upstreams: vec![UpstreamId::new("sim-http").unwrap()],
            ..Filters::default()
        },
        count: 2,
        min_remaining_ttl: Duration::from_secs(10),
    };
    assert!(routed.request(demand.clone()));
    // The leader takes it (its writes fenced by its own token).
    let leader_fence = Fence::new();
    let token = match pool
        .leader_acquire("leader-redis", Duration::from_secs(30))
        .await
        .unwrap()
    {
        activity_pool::LeaderGrant::Granted(t) => t,
        activity_pool::LeaderGrant::Held => panic!("held"),
    };
    leader_fence.grant(token);
    let leader_local = Arc::new(Recorder {
        got: Default::default(),
        released: tokio::sync::watch::channel(0).0,
    });
    tokio::spawn(take(
        pool.fenced(leader_fence),
        leader_local.clone(),
        stop.clone(),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while leader_local.got.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the leader never got the demand"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(*leader_local.got.lock().unwrap(), vec![demand]);
    assert!(follower_local.got.lock().unwrap().is_empty());
    stop.cancel();
}
