//! The `proxy-pool-operator` binary's metrics, on a real etcd + kube-apiserver (binaries
//! from `scripts/k8s-bins.sh`, named by `PROXY_POOL_K8S_BIN_DIR`): a standby replica
//! (another identity holds the leader Lease) serves exactly the metrics the Operator
//! table of `docs/operations.md` lists (names and types), with no reserved label; its
//! identity issuer counts a refused and a granted request and reports the expiry of its
//! CA and of its own serving certificate; without `RUST_LOG` it logs at `info`, as JSON
//! on standard output with `PROXY_POOL_LOG_FORMAT=json`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use proxy_pool_e2e::k8s::{K8sBins, KubeApiServer, Workloads};
use proxy_pool_e2e::ports::free_addr;
use proxy_pool_e2e::procs::{fresh_test_dir, terminate};
use proxy_pool_identity_client::{ClientConfig, ClientError, IdentityClient};
use proxy_pool_operator::identity::wire::DEFAULT_AUDIENCE;
use proxy_pool_runtime::telemetry::metrics::{
    documented, exported, reference_doc, reserved_labels_used,
};

const BIN: &str = env!("CARGO_BIN_EXE_proxy-pool-operator");
const NS: &str = "proxy-pool";
const GATEWAY_SA: &str = "proxy-pool-gateway";
const SERVICE: &str = "proxy-pool-operator";

/// `GET path` on `addr`: the status code and the body (`None` when nothing answers).
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// The value of the sample line `series` (name and labels, as exported).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Now as the API server's MicroTime.
fn micro_time_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"])
        .output()
        .expect("date");
    String::from_utf8(out.stdout)
        .expect("date")
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_operator_exports_the_documented_metrics() {
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = KubeApiServer::start_for_test(&bins, false).await;
    let kube = cluster.client();
    Workloads::create_namespace(&kube, NS).await;
    let workloads = Workloads::new(kube.clone(), NS);
    workloads.create_service_account(GATEWAY_SA).await;
    // Another replica leads: this one only serves its ops listener and the issuer.
    let now = micro_time_now();
    let lease = format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: proxy-pool-operator, namespace: {NS}}}\nspec: {{holderIdentity: other-replica, leaseDurationSeconds: 86400, acquireTime: \"{now}\", renewTime: \"{now}\"}}\n"
    );
    cluster
        .kubectl_ok(&["apply", "-f", "-"], Some(&lease))
        .await
        .unwrap_or_else(|e| panic!("leader Lease: {e}"));

    let dir = fresh_test_dir("operator-metrics");
    let base = dir.join("base.yaml");
    std::fs::write(&base, "distribution: {auth: {mode: any}}\n").unwrap();
    let log = dir.join("operator.log");
    let (ops, identity) = (free_addr(), free_addr());
    let mut child = Command::new(BIN)
        .env("KUBECONFIG", cluster.kubeconfig())
        .env_remove("RUST_LOG")
        .env("PROXY_POOL_LOG_FORMAT", "json")
        .args(["--namespace", NS, "--pod-name", "operator-standby"])
        .arg("--base-config")
        .arg(&base)
        .args(["--controller-deployment", "proxy-pool-controller"])
        .args(["--config-map", "proxy-pool-controller-config"])
        .args(["--gateway-image", "proxy-pool-gateway:test"])
        .args(["--gateway-service-account", GATEWAY_SA])
        .args(["--controller-address", "127.0.0.1:1"])
        .args(["--identity-endpoint", &format!("https://{identity}")])
        .args(["--ops-listen", &ops.to_string()])
        .args(["--identity-listen", &identity.to_string()])
        .args(["--identity-service", SERVICE])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    // Ready once the identity service started.
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(ops, "/readyz").map(|r| r.0) != Some(200) {
        assert!(child.try_wait().unwrap().is_none(), "exited:\n{}", logs());
        assert!(Instant::now() < deadline, "never ready:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The issuer: a token the API server rejects (refused), then a managed gateway
    // pod's token (issued).
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), NS);
    let bundle = cms
        .get("proxy-pool-trust-bundle")
        .await
        .unwrap()
        .data
        .and_then(|d| d.into_values().find(|v| v.contains("BEGIN CERTIFICATE")))
        .expect("trust bundle published");
    let bundle_file = dir.join("bundle.pem");
    std::fs::write(&bundle_file, bundle).unwrap();
    let issue = |token: &str, name: &str| {
        let token_file = dir.join(name);
        std::fs::write(&token_file, token).unwrap();
        let mut config = ClientConfig::new(
            format!("https://{identity}").parse().unwrap(),
            token_file,
            bundle_file.clone(),
        );
        config.server_name = Some(SERVICE.to_owned());
        IdentityClient::new(config)
    };
    match issue("not-a-token", "bad.token").issue().await {
        Err(ClientError::Rejected { status: 401, .. }) => {}
        other => panic!("a bad token is refused with 401: {other:?}"),
    }
    let pod = workloads.deployment_chain("gw", GATEWAY_SA, true).await;
    let token = workloads.token_for(&pod, DEFAULT_AUDIENCE).await;
    issue(&token, "gw.token")
        .issue()
        .await
        .unwrap_or_else(|e| panic!("issuing for a managed gateway pod: {e}\n{}", logs()));

    let (status, text) = get(ops, "/metrics").expect("metrics");
    let stopped = terminate(&mut child, Duration::from_secs(15)).expect("exits on SIGTERM");
    assert_eq!(status, 200, "{text}");
    assert!(stopped.success(), "{stopped}\n{}", logs());

    let doc = reference_doc().unwrap();
    let documented = documented(&doc, "operator");
    assert!(
        !documented.is_empty(),
        "docs/operations.md lists the operator's metrics"
    );
    assert_eq!(
        exported(&text),
        documented,
        "what the operator serves (left) and the Operator table of docs/operations.md (right)\n{text}"
    );
    assert_eq!(reserved_labels_used(&text), Vec::<String>::new(), "{text}");

    assert_eq!(
        sample(&text, "proxy_pool_operator_leader"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "proxy_pool_operator_identity_issued_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"proxy_pool_operator_identity_denied_total{reason="unauthenticated"}"#
        ),
        Some(1.0),
        "{text}"
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    for certificate in ["ca", "identity-endpoint"] {
        let expiry = sample(
            &text,
            &format!(
                r#"proxy_pool_operator_certificate_expiry_timestamp_seconds{{certificate="{certificate}"}}"#
            ),
        )
        .unwrap_or_else(|| panic!("{certificate} expiry:\n{text}"));
        assert!(
            expiry > now && expiry < now + 400.0 * 86400.0,
            "{certificate} expires in the future: {expiry}"
        );
    }

    // JSON lines on standard output, at info without RUST_LOG.
    let logs = logs();
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "INFO" && l["fields"]["message"] == "worker certificate issued"),
        "{logs}"
    );
}
