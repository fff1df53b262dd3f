//! The Kubernetes leadership backend on a real kube-apiserver + etcd and a real
//! `redis-server`: `KubeLease` passes the same lease contract as the Redis and memory
//! leases; its fencing tokens come from Redis, so a leader whose Lease was taken over
//! has every leader-only write refused; an elector on it hands over cleanly; the
//! leader's pod label follows its role; and the binary refuses to start without API
//! access or without the pod name it would label. Never skipped: a missing binary fails the test
//! (`PROXY_POOL_K8S_BIN_DIR`, `PROXY_POOL_REDIS_SERVER`; `scripts/test.sh` sets both).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{
    Candidate, Dial, FetchedBatch, Labels, OperationId, Protocol, ProxyId, UpstreamId,
};
use activity_pool::ports::Upserter;
use activity_pool::testkit::RedisServer;
use activity_pool::{Fence, PoolError, RedisConnector, RedisOptions, RedisPool};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use proxy_pool_api::config::LEADER_POD_LABEL;
use proxy_pool_controller::leadership::{
    ElectorOptions, KubeLease, LeaseStore, PodLabel, contract,
};
use proxy_pool_e2e::k8s::{KubeApiServer, Workloads};
use proxy_pool_e2e::procs::{controller_config_head, terminate_async};

const NS: &str = "leadership";

struct Env {
    redis: RedisServer,
    cluster: KubeApiServer,
    client: kube::Client,
    pool: RedisPool,
}

async fn env() -> Env {
    let redis = RedisServer::start();
    let pool = RedisPool::new(
        RedisConnector::direct(&redis.url()).unwrap(),
        RedisOptions::default(),
    )
    .await
    .unwrap();
    let (cluster, client) = common::kube::apiserver_with(NS, &[]).await;
    Env {
        redis,
        cluster,
        client,
        pool,
    }
}

fn lease(env: &Env, name: &str) -> KubeLease {
    KubeLease::new(
        Api::namespaced(env.client.clone(), NS),
        name,
        env.pool.clone(),
    )
}

fn batch(op: &str, id: &str) -> FetchedBatch {
    FetchedBatch {
        upstream: UpstreamId::new("vendor-a").unwrap(),
        operation_id: OperationId::new(op).unwrap(),
        safety_margin: Duration::from_secs(5),
        max_size: NonZeroU32::new(100).unwrap(),
        quarantine: Duration::ZERO,
        candidates: vec![Candidate {
            id: ProxyId::new(id).unwrap(),
            dial: Dial {
                protocol: Protocol::Http,
                host: format!("{id}.vendor.test"),
                port: 8080,
                credentials: None,
            },
            labels: Labels::default(),
            ttl: Duration::from_secs(600),
            max_concurrency: 4,
        }],
    }
}

async fn label_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name)
        .await
        .unwrap()
        .metadata
        .labels
        .and_then(|l| l.get(LEADER_POD_LABEL).cloned())
}

async fn wait_label(pods: &Api<Pod>, name: &str, want: &str) {
    for _ in 0..100 {
        if label_of(pods, name).await.as_deref() == Some(want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("pod {name}: {LEADER_POD_LABEL} never became {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_lease_with_redis_tokens_on_a_real_apiserver() {
    let env = env().await;

    // 1. The contract every lease store passes (Lease durations are whole seconds).
    let store = lease(&env, "contract");
    contract::lease_contract(&store, Duration::from_secs(2), tokio::time::sleep).await;

    // 2. The token is Redis's: a leader whose Lease ran out and was taken over is
    // fenced inside Redis, whatever it still believes.
    let store = lease(&env, "fencing");
    let ttl = Duration::from_secs(1);
    let t1 = store.acquire("a", ttl).await.unwrap().expect("free Lease");
    let old = Fence::new();
    old.grant(t1);
    env.pool
        .fenced(old.clone())
        .upsert(batch("op-1", "p1"))
        .await
        .expect("the leader writes");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let t2 = contract::take_over(&store, "b", ttl, t1).await;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), NS);
    let l = leases.get("fencing").await.unwrap();
    assert_eq!(l.spec.and_then(|s| s.holder_identity).as_deref(), Some("b"));
    assert_eq!(
        l.metadata
            .annotations
            .and_then(|a| a.get(proxy_pool_lease::TOKEN_ANNOTATION).cloned()),
        Some(t2.to_string()),
        "the tenure carries its Redis token"
    );
    assert_eq!(
        env.pool
            .fenced(old)
            .upsert(batch("op-2", "p2"))
            .await
            .unwrap_err(),
        PoolError::Fenced,
        "the deposed leader's write is refused"
    );
    let new = Fence::new();
    new.grant(t2);
    env.pool
        .fenced(new)
        .upsert(batch("op-3", "p3"))
        .await
        .expect("the new leader writes");

    // 3. Two electors on the Lease, the leader's pod labelled; a clean stop hands
    // over at the follower's next try and moves the label.
    let workloads = Workloads::new(env.client.clone(), NS);
    workloads.create_service_account("controller").await;
    for pod in ["ctl-a", "ctl-b"] {
        workloads.create_pod(pod, "controller", None).await;
    }
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let store: Arc<dyn LeaseStore> = Arc::new(lease(&env, "proxy-pool-controller"));
    let options = ElectorOptions {
        lease: Duration::from_secs(3),
        renew_every: Duration::from_secs(1),
        retry_every: Duration::from_millis(200),
    };
    let start = |pod: &'static str| {
        let running = contract::start_elector(store.clone(), format!("{pod}-1"), options);
        let label = PodLabel::new(pods.clone(), pod);
        tokio::spawn(label.follow(running.0.clone()));
        running
    };
    let settle = async {
        wait_label(&pods, "ctl-a", "true").await;
        wait_label(&pods, "ctl-b", "false").await;
        // Renewals keep the Lease past its duration.
        tokio::time::sleep(Duration::from_secs(4)).await;
    };
    contract::hand_over(start, ["ctl-a", "ctl-b"], settle, options.lease).await;
    wait_label(&pods, "ctl-b", "true").await;
    wait_label(&pods, "ctl-a", "false").await;

    // 4. The controller process: SIGTERM releases the Lease before the process exits
    // (a Lease left held would keep every other replica from leading for a whole lease).
    sigterm_releases_the_lease(&env).await;
}

/// A config of the controller binary on the Kubernetes backend with `kubernetes` as its
/// `leadership.kubernetes`, in a fresh directory (removed by the caller).
fn controller_config(redis: &str, tag: &str, kubernetes: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("leadership-kube-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("controller.yaml");
    let free = proxy_pool_e2e::ports::free_addr;
    let auth = "{mode: any, methods: [{type: apiKey}]}";
    std::fs::write(
        &config,
        format!(
            r#"{head}leadership:
  replicas: 2
  backend: kubernetes
  kubernetes: {kubernetes}
shutdown: {{gracePeriod: 5s}}
"#,
            head = controller_config_head(redis, free(), auth, free()),
        ),
    )
    .unwrap();
    config
}

/// The controller binary on `config`, `env` set, never the pod's in-cluster API.
fn controller(
    config: &std::path::Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_proxy-pool-controller"));
    c.arg("run")
        .arg("--config")
        .arg(config)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("PROXY_POOL_POD_NAME")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    c
}

/// Runs `command` to its end (within 30 s) and requires a failed start whose output
/// says `why`.
async fn refuses_to_start(mut command: tokio::process::Command, why: &str) {
    let out = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("the controller refuses to start, it does not run")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(why), "`{why}` not in:\n{text}");
}

/// Fails closed: on the Kubernetes backend a controller without Kubernetes API access
/// (no kubeconfig, no mounted ServiceAccount) refuses to start and says why; it never
/// runs, let alone leads, on another lease.
#[tokio::test]
async fn without_kubernetes_api_access_the_kubernetes_backend_refuses_to_start() {
    let redis = RedisServer::start();
    let config = controller_config(&redis.url(), "no-api", "{labelPod: false}");
    let dir = config.parent().unwrap().to_owned();
    let missing = dir.join("no-such-kubeconfig");
    let command = controller(
        &config,
        &[
            ("KUBECONFIG", missing.as_os_str()),
            // No `~/.kube/config` either.
            ("HOME", dir.as_os_str()),
        ],
    );
    refuses_to_start(command, "leadership: Kubernetes API access").await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the controller binary on the Kubernetes backend (the Lease in the kubeconfig's
/// namespace, `default`): without its pod's name it refuses to label a pod, so refuses
/// to start; with `labelPod: false` it takes the Lease, and SIGTERM then requires a
/// clean exit with the Lease's holder cleared.
async fn sigterm_releases_the_lease(env: &Env) {
    let kubeconfig = env.cluster.kubeconfig().as_os_str();
    let config = controller_config(&env.redis.url(), "label", "{labelPod: true}");
    refuses_to_start(
        controller(&config, &[("KUBECONFIG", kubeconfig)]),
        "leadership: labelPod needs the pod's name",
    )
    .await;
    let _ = std::fs::remove_dir_all(config.parent().unwrap());

    let config = controller_config(
        &env.redis.url(),
        "sigterm",
        "{leaseName: sigterm-release, labelPod: false}",
    );
    let dir = config.parent().unwrap().to_owned();
    let mut child = controller(&config, &[("KUBECONFIG", kubeconfig)])
        .spawn()
        .expect("controller binary");
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "default");
    let holder = || async {
        leases
            .get_opt("sigterm-release")
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    };
    let mut held = None;
    for _ in 0..150 {
        if let Some(h) = holder().await {
            held = Some(h);
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the controller exited before leading: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = held.expect("the controller took the Lease within 15 s");
    assert!(held.starts_with("controller-"), "holder {held}");
    let status = terminate_async(&mut child, Duration::from_secs(15))
        .await
        .expect("the controller exits within its grace period");
    assert!(status.success(), "clean exit after SIGTERM: {status}");
    assert_eq!(
        holder().await,
        None,
        "the Lease is released before the process exits (still held by {held})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
