use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const OPTIONS: ElectorOptions = ElectorOptions {
    lease: Duration::from_secs(9),
    renew_every: Duration::from_secs(3),
    retry_every: Duration::from_secs(1),
};

#[tokio::test(start_paused = true)]
async fn memory_lease_passes_the_contract() {
    let store = MemoryLease::new();
    contract::lease_contract(&store, Duration::from_secs(10), tokio::time::sleep).await;
}

/// A store whose renewals can be made to fail (the leader cut off from it).
#[derive(Debug, Default)]
struct Flaky {
    inner: MemoryLease,
    down: AtomicBool,
}

#[async_trait]
impl LeaseStore for Flaky {
    async fn acquire(&self, holder: &str, ttl: Duration) -> Result<Option<u64>, LeaseError> {
        self.inner.acquire(holder, ttl).await
    }
    async fn renew(&self, holder: &str, token: u64, ttl: Duration) -> Result<bool, LeaseError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LeaseError("down".into()));
        }
        self.inner.renew(holder, token, ttl).await
    }
    async fn release(&self, holder: &str, token: u64) -> Result<(), LeaseError> {
        self.inner.release(holder, token).await
    }
}

fn start(store: Arc<dyn LeaseStore>, name: &str) -> contract::Running {
    contract::start_elector(store, name.into(), OPTIONS)
}

#[tokio::test(start_paused = true)]
async fn one_leader_then_a_clean_hand_over() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLease::new());
    let settle = async { tokio::time::sleep(Duration::from_secs(30)).await };
    let start = |name: &'static str| start(store.clone(), name);
    contract::hand_over(start, ["a", "b"], settle, OPTIONS.retry_every).await;
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_stops_before_the_lease_runs_out() {
    let store = Arc::new(Flaky::default());
    let (a, fa, _stop) = start(store.clone(), "a");
    assert!(a.elected().await);
    let before = Instant::now();
    store.down.store(true, Ordering::SeqCst);
    a.deposed().await;
    assert!(before.elapsed() <= OPTIONS.lease, "{:?}", before.elapsed());
    assert_eq!(fa.token(), 0);
    // It never leads again in this process, even once the store is back.
    store.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(OPTIONS.lease * 3).await;
    assert_eq!(a.role(), Role::Deposed);
    // Someone else can: the lease ran out.
    let (b, _fb, _s) = start(store.clone(), "b");
    assert!(b.elected().await);
}

#[tokio::test(start_paused = true)]
async fn a_fenced_write_deposes_the_leader_at_once() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLease::new());
    let (a, fa, _stop) = start(store, "a");
    assert!(a.elected().await);
    let t0 = Instant::now();
    fa.revoke();
    a.deposed().await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

#[test]
fn holder_names_are_unique_and_valid() {
    let a = holder_name(Some("controller-0"));
    let b = holder_name(Some("controller-0"));
    assert_ne!(a, b);
    assert!(a.starts_with("controller-0-"));
    assert!(holder_name(Some("bad|name")).starts_with("controller-"));
    assert!(a.len() <= 128);
}
