//! Shared fixtures of the control-plane tests: a pool (memory or a real redis-server)
//! on a `ManualClock`, the control plane served on `127.0.0.1:0`, and a worker that
//! behaves as a gateway does (session, local snapshot state, ACKs, reports).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::*;
use activity_pool::ports::ActivityPool;
use activity_pool::testkit::RedisServer;
use activity_pool::{
    ManualClock, MemoryPool, PoolOptions, RedisConnector, RedisOptions, RedisPool,
};
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport, connect};
use proxy_pool_api::controlplane::model::{
    CheckTask, CheckTier, Delta, Protocol as ApiProtocol, ProxyEndpoint, Routing, Snapshot,
};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_api::controlplane::state::SnapshotState;
use proxy_pool_controller::controlplane::{
    ControlPlane, ControlPlaneConfig, ControlPlanePorts, MemoryCheckerBackend, OutcomeQueue,
    OwnershipConfig, RoutingSpec, Transport, WorkerOutcome, serve,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

/// Runs each named `async fn(Kind)` of the calling test file as two tests, one on
/// the memory pool (`memory::<name>`) and one on a real redis-server (`redis::<name>`).
#[allow(unused_macros)]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::controlplane_support::Kind::Memory).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::controlplane_support::Kind::Redis).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Redis,
}

pub struct Harness {
    pub pool: Arc<dyn ActivityPool>,
    pub clock: ManualClock,
    pub cp: Arc<ControlPlane>,
    pub checker: Arc<MemoryCheckerBackend>,
    pub observations:
        mpsc::Receiver<proxy_pool_controller::controlplane::checker::CheckerObservation>,
    pub outcomes_rx: mpsc::Receiver<WorkerOutcome>,
    pub endpoint: String,
    pub stop: Option<oneshot::Sender<()>>,
    pub server_task: Option<
        tokio::task::JoinHandle<Result<(), proxy_pool_controller::controlplane::ServeError>>,
    >,
    _redis: Option<RedisServer>,
}

pub fn config() -> ControlPlaneConfig {
    ControlPlaneConfig {
        session_ttl: Duration::from_secs(30),
        runtime_report_ttl: Duration::from_secs(30),
        ownership: OwnershipConfig {
            interval: Duration::from_secs(3600),
            lease: Duration::from_secs(60),
            renew_before: Duration::from_secs(20),
            target_slots_per_worker: 8,
            upstreams: vec![up("vendor-a")],
            ..OwnershipConfig::default()
        },
        routings: vec![RoutingSpec {
            routing: Routing {
                name: "default".into(),
                upstreams: vec!["vendor-a".into()],
                ..Routing::default()
            },
            gateway_groups: vec![],
        }],
        ..ControlPlaneConfig::default()
    }
}

pub async fn pool_of(
    kind: Kind,
    clock: &ManualClock,
) -> (Arc<dyn ActivityPool>, Option<RedisServer>) {
    match kind {
        Kind::Memory => (
            Arc::new(MemoryPool::with_clock(
                PoolOptions::default(),
                Arc::new(clock.clone()),
            )),
            None,
        ),
        Kind::Redis => {
            let server = RedisServer::start();
            let connector = RedisConnector::direct(&server.url()).expect("connector");
            let options = RedisOptions {
                clock_override: Some(Arc::new(clock.clone())),
                ..RedisOptions::default()
            };
            let pool = RedisPool::new(connector, options)
                .await
                .expect("redis pool");
            (Arc::new(pool), Some(server))
        }
    }
}

impl Harness {
    pub async fn new(kind: Kind) -> Self {
        Self::with(kind, config(), 1024).await
    }

    pub async fn with(kind: Kind, config: ControlPlaneConfig, outcome_capacity: usize) -> Self {
        Self::serving(kind, config, outcome_capacity, None).await
    }

    /// Builds the pool and control plane; serves it with `transport` (default: the
    /// loopback fixture) on `127.0.0.1:0`.
    pub async fn serving(
        kind: Kind,
        config: ControlPlaneConfig,
        outcome_capacity: usize,
        transport: Option<Transport>,
    ) -> Self {
        Self::serving_with(kind, config, outcome_capacity, transport, None).await
    }

    /// Like [`Harness::serving`], with gateway usage fed into `analytics`.
    pub async fn serving_with(
        kind: Kind,
        config: ControlPlaneConfig,
        outcome_capacity: usize,
        transport: Option<Transport>,
        analytics: Option<proxy_pool_analytics::Collector>,
    ) -> Self {
        let clock = ManualClock::starting_now();
        let (pool, redis) = pool_of(kind, &clock).await;
        let ports = ports_of(pool.clone(), clock.clone());
        let (checker, observations) = MemoryCheckerBackend::new(64, 64, Arc::new(clock.clone()));
        let checker = Arc::new(checker);
        let (outcomes, outcomes_rx) = OutcomeQueue::bounded(outcome_capacity);
        let mut cp = ControlPlane::new(config, ports, checker.clone(), outcomes);
        if let Some(collector) = analytics {
            cp = cp.with_analytics(collector);
        }
        let cp = Arc::new(cp);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let scheme = if matches!(transport, Some(Transport::Mtls(_))) {
            "https"
        } else {
            "http"
        };
        let endpoint = format!("{scheme}://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let server_task = tokio::spawn(serve(
            listener,
            transport.unwrap_or(Transport::LoopbackFixture),
            cp.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        Harness {
            pool,
            clock,
            cp,
            checker,
            observations,
            outcomes_rx,
            endpoint,
            stop: Some(stop),
            server_task: Some(server_task),
            _redis: redis,
        }
    }

    /// A controller restart: the serving control plane stops, a new one (empty
    /// registry, manager and publisher; the same pool, clock and `config`) serves on a
    /// new port.
    pub async fn restart(&mut self, config: ControlPlaneConfig) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.server_task.take() {
            let _ = task.await;
        }
        let ports = ports_of(self.pool.clone(), self.clock.clone());
        let (outcomes, outcomes_rx) = OutcomeQueue::bounded(1024);
        let cp = Arc::new(ControlPlane::new(
            config,
            ports,
            self.checker.clone(),
            outcomes,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        self.endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        self.server_task = Some(tokio::spawn(serve(
            listener,
            Transport::LoopbackFixture,
            cp.clone(),
            async {
                let _ = stopped.await;
            },
        )));
        self.stop = Some(stop);
        self.cp = cp;
        self.outcomes_rx = outcomes_rx;
    }

    pub async fn channel(&self) -> Channel {
        connect(
            &self.endpoint,
            &ClientTransport::LoopbackPlaintext,
            &ClientOptions::default(),
        )
        .await
        .expect("connect")
    }

    pub async fn client(&self) -> WorkerControlPlaneClient<Channel> {
        WorkerControlPlaneClient::new(self.channel().await)
    }

    /// Inserts `n` AVAILABLE proxies `<prefix>-<i>` of `vendor-a` with `ttl` seconds.
    pub async fn available(&self, prefix: &str, n: usize, ttl: u64) -> Vec<String> {
        self.available_in("vendor-a", prefix, n, ttl).await
    }

    /// Inserts `n` AVAILABLE proxies `<prefix>-<i>` of `upstream` with `ttl` seconds.
    pub async fn available_in(
        &self,
        upstream: &str,
        prefix: &str,
        n: usize,
        ttl: u64,
    ) -> Vec<String> {
        let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
        let report = self
            .pool
            .upsert(FetchedBatch {
                quarantine: std::time::Duration::ZERO,
                upstream: up(upstream),
                operation_id: OperationId::new(format!("op-{prefix}-{}", rand_u64())).expect("op"),
                safety_margin: Duration::from_secs(5),
                max_size: NonZeroU32::new(10_000).expect("nz"),
                candidates: ids.iter().map(|id| cand(id, ttl)).collect(),
            })
            .await
            .expect("upsert");
        assert_eq!(report.inserted as usize, n, "{report:?}");
        let updates: Vec<HealthUpdate> = ids
            .iter()
            .map(|id| HealthUpdate {
                proxy_id: pid(id),
                verdict: HealthVerdict::Available,
                success: true,
                latency: Some(Duration::from_millis(10)),
                failure: None,
            })
            .collect();
        self.pool.apply_health(&updates).await.expect("health");
        ids
    }

    pub async fn pass(&self) {
        self.cp.ownership().pass().await.expect("ownership pass");
    }

    pub fn advance(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
    }

    pub async fn owner(&self, id: &str) -> Option<String> {
        self.pool
            .get(&pid(id))
            .await
            .expect("owner")
            .map(|a| a.worker_id.to_string())
    }
}

pub fn ports_of(pool: Arc<dyn ActivityPool>, clock: ManualClock) -> ControlPlanePorts {
    ControlPlanePorts::from_pool(pool, Arc::new(clock))
}

pub fn rand_u64() -> u64 {
    use rand::Rng;
    rand::rng().random()
}

pub fn pid(s: &str) -> ProxyId {
    ProxyId::new(s).expect("proxy id")
}

pub fn up(s: &str) -> UpstreamId {
    UpstreamId::new(s).expect("upstream")
}

/// The pool testkit's candidate without a carrier label.
pub fn cand(id: &str, ttl: u64) -> Candidate {
    let mut c = activity_pool::testkit::candidate(id, Duration::from_secs(ttl));
    c.labels.carrier = None;
    c
}

pub async fn extracted(pool: &Arc<dyn ActivityPool>, count: u32) -> Vec<String> {
    match pool
        .extract(&activity_pool::testkit::extract_request("client-1", count))
        .await
        .expect("extract")
    {
        ExtractOutcome::Extracted(e) => e.proxies.into_iter().map(|p| p.id.to_string()).collect(),
        ExtractOutcome::Insufficient { eligible } => panic!("insufficient {eligible}"),
    }
}

/// A worker as the gateway runs one: session, local state, report sequence.
pub struct Worker {
    pub id: String,
    pub client: WorkerControlPlaneClient<Channel>,
    pub session: String,
    pub state: SnapshotState,
    pub stream: Option<Streaming<pb::SnapshotUpdate>>,
    pub report_seq: u64,
}

impl Worker {
    pub async fn register(h: &Harness, id: &str) -> Worker {
        Self::register_on(h.client().await, id).await
    }

    pub async fn register_on(mut client: WorkerControlPlaneClient<Channel>, id: &str) -> Worker {
        let r = client
            .register_worker(register_req(id, "i-1"))
            .await
            .expect("register")
            .into_inner();
        Worker {
            id: id.into(),
            client,
            session: r.session_id,
            state: SnapshotState::new(),
            stream: None,
            report_seq: 0,
        }
    }

    /// [`Worker::watching`], then the first update (a full snapshot) applied; no ACK yet.
    pub async fn joined(h: &Harness, id: &str) -> Worker {
        let mut w = Self::watching(h, id).await;
        w.apply_next().await;
        w
    }

    /// Registers `id`, runs an ownership pass and opens the snapshot stream.
    pub async fn watching(h: &Harness, id: &str) -> Worker {
        let mut w = Self::register(h, id).await;
        h.pass().await;
        w.watch().await;
        w
    }

    /// [`Worker::joined`], then a positive ACK of the first snapshot.
    pub async fn acked(h: &Harness, id: &str) -> Worker {
        let mut w = Self::joined(h, id).await;
        w.ack(true).await.expect("ack");
        w
    }

    /// The open snapshot stream's next message within 10 s (panics when none comes).
    pub async fn stream_end(
        &mut self,
        what: &str,
    ) -> Result<Option<pb::SnapshotUpdate>, tonic::Status> {
        let s = self.stream.as_mut().expect("stream");
        tokio::time::timeout(Duration::from_secs(10), s.message())
            .await
            .expect(what)
    }

    pub async fn watch(&mut self) {
        let (v, sum) = (self.state.version(), self.state.checksum());
        self.watch_from(v, sum.0.to_vec()).await;
    }

    pub async fn watch_from(&mut self, version: u64, checksum: Vec<u8>) {
        let s = self
            .client
            .watch_snapshots(pb::WatchSnapshotsRequest {
                worker_id: self.id.clone(),
                session_id: self.session.clone(),
                last_version: version,
                last_checksum: checksum,
            })
            .await
            .expect("watch")
            .into_inner();
        self.stream = Some(s);
    }

    /// Next update from the stream (with a deadline).
    pub async fn next(&mut self) -> pb::snapshot_update::Update {
        let s = self.stream.as_mut().expect("watching");
        tokio::time::timeout(Duration::from_secs(10), s.message())
            .await
            .expect("update in time")
            .expect("stream ok")
            .expect("stream open")
            .update
            .expect("update set")
    }

    /// Applies the next update; returns whether it was a delta.
    pub async fn apply_next(&mut self) -> bool {
        let u = self.next().await;
        self.apply(u)
    }

    /// Applies one update; returns whether it was a delta.
    pub fn apply(&mut self, update: pb::snapshot_update::Update) -> bool {
        match update {
            pb::snapshot_update::Update::Full(s) => {
                let s = Snapshot::try_from(s).expect("convert");
                self.state = SnapshotState::from_snapshot(s).expect("valid full");
                false
            }
            pb::snapshot_update::Update::Delta(d) => {
                self.state
                    .apply_delta(Delta::try_from(d).expect("convert"))
                    .expect("delta applies");
                true
            }
        }
    }

    pub async fn ack(
        &mut self,
        accepted: bool,
    ) -> Result<pb::AcknowledgeSnapshotResponse, tonic::Status> {
        let h = self.state.header().expect("has snapshot");
        let req = pb::AcknowledgeSnapshotRequest {
            worker_id: self.id.clone(),
            session_id: self.session.clone(),
            version: h.version,
            ownership_epoch: h.ownership_epoch,
            checksum: self.state.checksum().0.to_vec(),
            accepted,
            reason: if accepted {
                String::new()
            } else {
                "test".into()
            },
        };
        self.client
            .acknowledge_snapshot(req)
            .await
            .map(|r| r.into_inner())
    }

    pub async fn report(
        &mut self,
        counts: &[(&str, u32)],
    ) -> Result<pb::ReportRuntimeResponse, tonic::Status> {
        self.report_seq += 1;
        let req = self.runtime_req(self.report_seq, counts);
        self.send_report(req).await
    }

    /// Sends the runtime report `req` as it is.
    pub async fn send_report(
        &mut self,
        req: pb::ReportRuntimeRequest,
    ) -> Result<pb::ReportRuntimeResponse, tonic::Status> {
        self.client
            .report_runtime(req)
            .await
            .map(|r| r.into_inner())
    }

    pub fn runtime_req(&self, seq: u64, counts: &[(&str, u32)]) -> pb::ReportRuntimeRequest {
        let h = self.state.header().expect("has snapshot");
        pb::ReportRuntimeRequest {
            worker_id: self.id.clone(),
            session_id: self.session.clone(),
            report_sequence: seq,
            snapshot_version: h.version,
            ownership_epoch: h.ownership_epoch,
            counts: counts
                .iter()
                .map(|(id, active)| pb::RuntimeCount {
                    proxy_id: (*id).into(),
                    assignment_epoch: self.state.proxy(id).map_or(1, |p| p.assignment_epoch),
                    active: *active,
                    reserved: 0,
                    draining: self.state.proxy(id).is_some_and(|p| p.draining),
                })
                .collect(),
            observed_at_ms: 0,
            usage: Vec::new(),
        }
    }

    pub fn proxy_ids(&self) -> Vec<String> {
        self.state.proxies().map(|p| p.id.clone()).collect()
    }
}

pub fn register_req(id: &str, instance: &str) -> pb::RegisterWorkerRequest {
    pb::RegisterWorkerRequest {
        worker_id: id.into(),
        instance_id: instance.into(),
        zone: "z1".into(),
        gateway_group: "default".into(),
        supported_protocol_versions: vec![1],
        build_version: "test".into(),
    }
}

/// A check task `id` of `tier` for proxy `proxy-<id>` (`protocol`, 127.0.0.1:9, of
/// `vendor-a`), due within `secs` seconds of the harness clock.
pub fn check_task(
    h: &Harness,
    id: &str,
    tier: CheckTier,
    secs: i64,
    protocol: ApiProtocol,
) -> CheckTask {
    use activity_pool::Clock;
    CheckTask {
        task_id: id.into(),
        tier,
        proxy: ProxyEndpoint {
            id: format!("proxy-{id}"),
            upstream: "vendor-a".into(),
            dial: Dial {
                protocol,
                host: "127.0.0.1".into(),
                port: 9,
                credentials: None,
            },
        },
        deadline_ms: h.clock.now().millis() + secs * 1000,
        routing: None,
        target: None,
    }
}

/// A checker's registration: `id`, instance `i-1`, protocol version 1.
pub fn checker_req(
    id: &str,
    max_concurrency: u32,
    tiers: &[pb::CheckTier],
) -> pb::RegisterCheckerRequest {
    pb::RegisterCheckerRequest {
        checker_id: id.into(),
        instance_id: "i-1".into(),
        max_concurrency,
        tiers: tiers.iter().map(|t| *t as i32).collect(),
        supported_protocol_versions: vec![1],
    }
}

pub fn stream_tasks_req(id: &str, session: &str) -> pb::StreamTasksRequest {
    pb::StreamTasksRequest {
        checker_id: id.into(),
        session_id: session.into(),
    }
}

/// [`assert_code`] for `FailedPrecondition`, the code of every protocol-rule refusal.
pub fn assert_precondition<T: std::fmt::Debug>(r: Result<T, tonic::Status>, msg: &str) {
    assert_code(r, Code::FailedPrecondition, msg);
}

pub fn assert_code<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, msg: &str) {
    match r {
        Err(s) => {
            assert_eq!(s.code(), code, "{s:?}");
            assert_eq!(s.message(), msg, "{s:?}");
        }
        Ok(v) => panic!("expected {code:?} {msg}, got {v:?}"),
    }
}

/// A real checker task loop on the control plane at `cp` (the checker crate's gRPC
/// binding, runner and network prober, every tier; TARGET checks through `echo`),
/// stopped by the returned token.
pub fn spawn_checker(
    cp: SocketAddr,
    id: &str,
    echo: SocketAddr,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    use proxy_pool_checker::{
        GrpcBinding, GrpcOptions, NetProber, ProberOptions, RunnerOptions, Tier,
    };
    let stop = CancellationToken::new();
    let tiers = vec![Tier::Basic, Tier::Egress, Tier::Target];
    let binding = GrpcBinding::start(
        GrpcOptions {
            endpoint: format!("http://{cp}"),
            transport: ClientTransport::LoopbackPlaintext,
            client: ClientOptions::default(),
            checker_id: id.into(),
            instance_id: format!("{id}-1"),
            max_concurrency: 8,
            tiers: tiers.clone(),
            idle_wait: Duration::from_millis(200),
        },
        stop.clone(),
    );
    let run = proxy_pool_checker::run(
        Arc::new(binding.clone()),
        Arc::new(binding),
        Arc::new(NetProber::new(ProberOptions {
            egress: proxy_pool_api::egress::EgressPolicy::allow_loopback(),
            ..ProberOptions::new(echo)
        })),
        RunnerOptions {
            concurrency: NonZeroUsize::new(8).expect("8"),
            tiers,
            grace: Duration::from_secs(1),
            ..RunnerOptions::default()
        },
        stop.clone(),
    );
    (stop, tokio::spawn(async move { drop(run.await) }))
}

/// Lowercase hex SHA-256 (an API key as the config names it).
pub fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

/// `POST`s JSON with `X-API-Key: api_key`; the status and the JSON answer (`Null` when
/// it is not JSON).
pub async fn post(
    addr: SocketAddr,
    api_key: &str,
    path: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {api_key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (
        status,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// A composed controller (`Controller::build` + `run`) on loopback listeners, started
/// by [`start_composed`].
pub struct Composed {
    /// The distribution API.
    pub api: SocketAddr,
    /// The admin listener.
    pub admin: SocketAddr,
    /// The control plane.
    pub cp: SocketAddr,
    pub metrics: Arc<proxy_pool_controller::metrics::Metrics>,
    stop_tx: oneshot::Sender<()>,
    running: tokio::task::JoinHandle<proxy_pool_controller::Exit>,
    /// Holds the vendor key file; removed at stop.
    dir: std::path::PathBuf,
}

/// Starts the controller whose listeners, upstreams and routings `yaml` writes, given
/// the upstream `source`: `sim`'s vendor API handing out `count` HTTP proxies a fetch,
/// its key in the temporary directory `<name>-<pid>`. One client `c` with `api_key`, a
/// 3 s grace period and loopback egress (the simulator's proxies) are added.
pub async fn start_composed(
    sim: &proxy_pool_e2e::sim::Simulator,
    name: &str,
    count: u32,
    api_key: &str,
    yaml: impl FnOnce(&str) -> String,
) -> Composed {
    use proxy_pool_controller::{Controller, Listeners};
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key_file = dir.join("vendor-key");
    std::fs::write(&key_file, sim.credentials().api_key.expose()).expect("key file");
    let source = format!(
        "{{vendorApi: {{url: '{}/v1/proxies?count={count}&protocol=http', format: json, \
         apiKeyFile: '{}'}}}}",
        sim.vendor_url(),
        key_file.display(),
    );
    let yaml = format!(
        r#"{}
clients:
  - name: c
    permissions: [distribution:extract]
    apiKeys: [{{sha256: {}}}]
shutdown: {{gracePeriod: 3s}}
# The simulator's proxies are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
"#,
        yaml(&source),
        sha256_hex(api_key),
    );
    let config = proxy_pool_api::config::load_yaml(&yaml).expect("config");
    let listeners = Listeners::bind(&config).await.expect("bind");
    let api = listeners.distribution.local_addr().expect("addr");
    let admin = listeners.admin.local_addr().expect("addr");
    let cp = listeners
        .control_plane
        .as_ref()
        .expect("control-plane listener")
        .local_addr()
        .expect("addr");
    let controller = Controller::build(config).await.expect("build");
    assert!(
        controller
            .composed()
            .and_then(|c| c.control_plane())
            .is_some()
    );
    let metrics = controller.metrics();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let running = tokio::spawn(controller.run(listeners, async {
        let _ = stop_rx.await;
    }));
    Composed {
        api,
        admin,
        cp,
        metrics,
        stop_tx,
        running,
        dir,
    }
}

impl Composed {
    /// Everything stops on the signal; the key file goes.
    pub async fn stop(self) {
        let _ = self.stop_tx.send(());
        tokio::time::timeout(Duration::from_secs(10), self.running)
            .await
            .expect("controller stopped in time")
            .expect("controller task");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
