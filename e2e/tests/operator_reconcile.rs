//! Operator reconcile e2e against a real etcd + kube-apiserver + kube-controller-manager
//! (built by `scripts/k8s-bins.sh --with-controller-manager`) and the real kubectl and
//! helm (`scripts/helm-bin.sh`): the chart installs (after a server-side dry run), the
//! examples apply, the reconcilers run in-process under leader election and must
//! produce the controller config (no Secret values in it), the gateway Deployment +
//! Service with owner references, Ready statuses, Degraded on bad references, nothing
//! changed by a second reconcile, and garbage-collected gateways when a Routing goes.
//!
//! kube-controller-manager runs so that deletion is checked the way a cluster does it:
//! the operator sets owner references and no finalizer, and the garbage collector
//! removes the owned objects (the operator never deletes them itself).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, Secret, Service, VolumeProjection};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use proxy_pool_e2e::k8s::{K8sBins, KubeApiServer};
use proxy_pool_gateway::snapshot::ClientCredential;
use proxy_pool_operator::crd::{
    DistributionClient, GatewayGroup, HasConditions, Routing, Upstream,
};
use proxy_pool_operator::identity::{CaParams, IdentityOptions, IdentityService, IssuerConfig};
use proxy_pool_operator::reconcile::hash_key::{self, HashKey};
use proxy_pool_operator::reconcile::{
    self, Context, ControllerTls, GatewayPodSettings, GatewayTemplate, LeaderSettings, Metrics,
    OperatorConfig,
};

const NS: &str = "proxy-pool";
const RELEASE: &str = "proxy-pool";
const CONTROLLER: &str = "proxy-pool-controller";
const CONFIG_MAP: &str = "proxy-pool-controller-config";
/// The example GatewayGroup `edge`'s gateway objects (it serves the example Routing).
const GATEWAY: &str = "edge-gateway";
const GATEWAY_CLIENTS: &str = "edge-gateway-clients";
const CONTROLLER_TLS: &str = "proxy-pool-controller-tls";
const TRUST_BUNDLE: &str = "proxy-pool-trust-bundle";
const HELM_ENV: &str = "PROXY_POOL_HELM_BIN";

/// The controller admin listener the operator reads Upstream status from: a fake on
/// loopback serving an inventory document the test sets (the controller does not run).
static ADMIN: OnceLock<FakeAdmin> = OnceLock::new();

#[derive(Debug)]
struct FakeAdmin {
    url: String,
    document: Arc<Mutex<serde_json::Value>>,
}

impl FakeAdmin {
    async fn start() -> Self {
        let document = Arc::new(Mutex::new(inventory(None)));
        let doc = document.clone();
        let app = axum::Router::new().route(
            "/api/v1/inventory",
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc.lock().unwrap().clone()) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, document }
    }

    fn set(&self, fetch_error: Option<&str>) {
        *self.document.lock().unwrap() = inventory(fetch_error);
    }

    /// `vendor-sim` fetched and held back until `until` (a new pool generation).
    fn set_held(&self, until: &str) {
        let mut doc = inventory(None);
        doc["upstreams"][0]["available"] = 0.into();
        doc["upstreams"][0]["quarantinedUntil"] = until.into();
        *self.document.lock().unwrap() = doc;
    }
}

/// The controller's inventory document: `vendor-sim` fetched, or failing with `reason`.
fn inventory(fetch_error: Option<&str>) -> serde_json::Value {
    serde_json::json!({"upstreams": [{
        "name": "vendor-sim",
        "managed": 7,
        "unextracted": 7,
        "available": 3,
        "availableSlots": 12,
        "lastFetchTime": "2026-01-01T00:00:00Z",
        "fetchError": fetch_error.map(|r| serde_json::json!({
            "reason": r, "at": "2026-01-01T00:00:09Z", "consecutiveFailures": 3
        })),
    }]})
}
/// Values in the example Secrets that must never reach a ConfigMap.
const SECRET_VALUES: [&str; 4] = [
    "example-vendor-api-key",
    "proxypass",
    "example-client-api-key-change-me",
    "example-password-change-me",
];

fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

/// kubectl that must succeed without warnings.
async fn kubectl_ok(cluster: &KubeApiServer, args: &[&str], stdin: Option<&str>) -> String {
    cluster
        .kubectl_ok(args, stdin)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `check` until it returns `Some`, for at most `secs` seconds.
async fn eventually<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A kind of object that lives in a namespace and is read typed.
trait Namespaced:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// The object `name` in the test namespace, which must exist.
async fn get<K: Namespaced>(client: &kube::Client, name: &str) -> K {
    Api::<K>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get {} {name}: {e}", K::kind(&())))
}

/// The object `name` in the test namespace once it exists (within `secs` seconds).
async fn created<K: Namespaced>(client: &kube::Client, name: &str, secs: u64) -> K {
    let api = Api::<K>::namespaced(client.clone(), NS);
    eventually(&format!("{} {name}", K::kind(&())), secs, || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok()? }
    })
    .await
}

/// The resource version of the object `name` in the test namespace.
async fn resource_version<K: Namespaced>(client: &kube::Client, name: &str) -> String {
    get::<K>(client, name)
        .await
        .resource_version()
        .unwrap_or_default()
}

/// The sources of the pod's projected volume `name`.
fn projected_sources(pod: &PodSpec, name: &str) -> Vec<VolumeProjection> {
    pod.volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .and_then(|v| v.projected.as_ref())
        .and_then(|p| p.sources.clone())
        .unwrap_or_else(|| panic!("no projected volume {name}"))
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn helm() -> PathBuf {
    let path = std::env::var_os(HELM_ENV).unwrap_or_else(|| {
        panic!("{HELM_ENV} is not set: build helm with `scripts/helm-bin.sh` and export {HELM_ENV}=<the path it prints> (scripts/test.sh does both)")
    });
    PathBuf::from(path)
}

/// `helm template` of the chart into the test namespace with the values it requires,
/// then `extra` arguments; the rendered manifests.
async fn helm_template(extra: &[&str]) -> String {
    let mut args = sets(REQUIRED_VALUES);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let out = helm_chart(&["template", RELEASE], &args).await;
    assert!(
        out.status.success(),
        "helm template {extra:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 manifests")
}

/// `helm <command> charts/proxy-pool --namespace <test namespace> <args>`.
async fn helm_chart(command: &[&str], args: &[String]) -> std::process::Output {
    tokio::process::Command::new(helm())
        .args(command)
        .arg(repo_path("charts/proxy-pool"))
        .args(["--namespace", NS])
        .args(args)
        .output()
        .await
        .expect("run helm")
}

/// `--set` arguments for `values`.
fn sets(values: &[&str]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| ["--set".to_owned(), (*v).to_owned()])
        .collect()
}

/// Asserts that `helm template` with `values` fails with an error that `says` so.
async fn assert_template_refused(values: &[&str], says: &str) {
    let out = helm_chart(&["template", RELEASE], &sets(values)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(says),
        "helm template {values:?} must fail saying {says:?}:\n{stderr}"
    );
}

/// The documents of a rendering.
fn documents(manifests: &str) -> Vec<String> {
    manifests.split("\n---").map(str::to_owned).collect()
}

/// The operator settings the chart passes on its command line.
fn operator_config(base_yaml: &str) -> OperatorConfig {
    OperatorConfig {
        namespace: NS.into(),
        base_config: proxy_pool_api::config::parse_yaml(base_yaml).expect("chart base config"),
        controller_deployment: CONTROLLER.into(),
        controller_container: "controller".into(),
        config_map: CONFIG_MAP.into(),
        config_dir: "/etc/proxy-pool".into(),
        gateway: GatewayTemplate {
            image: "ghcr.io/proxy-pool/proxy-pool-gateway:0.1.0".into(),
            image_pull_policy: "IfNotPresent".into(),
            service_account: "proxy-pool-gateway".into(),
            controller_address: "proxy-pool-controller.proxy-pool.svc:9443".into(),
            identity_endpoint: "https://proxy-pool-operator.proxy-pool.svc:8443".into(),
            trust_bundle_config_map: "proxy-pool-trust-bundle".into(),
            egress_deny_cidrs: vec!["10.96.0.0/12".into()],
            egress_allow_cidrs: Vec::new(),
            pod: GatewayPodSettings::default(),
        },
        instance: Some("operator-0".into()),
        controller_admin: ADMIN.get().map(|a| a.url.clone()),
        // As the chart's --controller-tls-secret / --controller-dns-names say.
        controller_tls: Some(ControllerTls {
            secret: CONTROLLER_TLS.into(),
            dns_names: vec![
                CONTROLLER.into(),
                format!("{CONTROLLER}.{NS}"),
                format!("{CONTROLLER}.{NS}.svc"),
                format!("{CONTROLLER}.{NS}.svc.cluster.local"),
            ],
            trust_domain: "proxy-pool.local".into(),
            environment: "default".into(),
            ca_secret: "proxy-pool-identity-ca".into(),
            trust_bundle_config_map: TRUST_BUNDLE.into(),
            ca: CaParams::default(),
            lifetime: Duration::from_secs(24 * 3600),
        }),
        hash_key: HashKey::new([7; 32]),
    }
}

#[path = "operator_reconcile/gateway_groups.rs"]
mod gateway_groups;

#[test]
fn chart_crds_are_the_generated_crds() {
    let generated = std::fs::read_to_string(repo_path("crds/proxy-pool.yaml")).expect("crds/");
    let chart = std::fs::read_to_string(repo_path("charts/proxy-pool/crds/proxy-pool.yaml"))
        .expect("chart crds/");
    assert!(
        generated == chart,
        "charts/proxy-pool/crds/proxy-pool.yaml differs from crds/proxy-pool.yaml: \
         cp crds/proxy-pool.yaml charts/proxy-pool/crds/"
    );
}

/// Values the chart requires (an install without them fails with a clear message).
const REQUIRED_VALUES: &[&str] = &["checker.echo=203.0.113.10:8080"];

/// Values that switch on every optional part of the chart.
const FULL_VALUES: &[&str] = &[
    "store.backend=redis",
    "redis.sentinel.masterName=mymaster",
    "redis.sentinel.addresses={redis-sentinel:26379}",
    "redis.passwordSecret.name=redis-auth",
    "postgresql.enabled=true",
    "postgresql.dsnSecret.name=pg-dsn",
    "ingress.enabled=true",
    "ingress.className=nginx",
    "controller.config.distribution.maxCountPerRequest=200",
    "egress.denyCidrs={192.168.0.0/16,fd00::/8}",
    "egress.allowCidrs={10.244.7.0/24}",
    "networkPolicy.distributionSources={198.51.100.0/24}",
    "networkPolicy.nodeCidrs={172.18.0.0/16}",
];

#[tokio::test]
async fn chart_lints_and_templates_clean() {
    let required = sets(REQUIRED_VALUES);
    let full = [required.clone(), sets(FULL_VALUES)].concat();

    // Without the echo endpoint the chart refuses to render, naming the value.
    assert_template_refused(&[], "checker.echo is required").await;

    // The memory store lives in one process: more than one replica is refused.
    assert_template_refused(
        &[REQUIRED_VALUES[0], "controller.replicas=2"],
        "controller.replicas > 1 needs store.backend=redis",
    )
    .await;
    // Three replicas on Redis: the rendered base config carries them and validates.
    let replicated = [
        required.clone(),
        sets(&[
            "store.backend=redis",
            "redis.address=redis://redis:6379/0",
            "controller.replicas=3",
        ]),
    ]
    .concat();

    for extra in [required, full, replicated] {
        for cmd in [vec!["lint", "--strict"], vec!["template", "proxy-pool"]] {
            let out = helm_chart(&cmd, &extra).await;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "helm {cmd:?} {extra:?} failed:\n{stderr}\n{stdout}"
            );
            assert!(
                stderr.trim().is_empty(),
                "helm {cmd:?} {extra:?} warned:\n{stderr}"
            );
            if cmd[0] == "lint" {
                assert!(
                    !stdout.contains("[WARNING]") && !stdout.contains("[ERROR]"),
                    "{stdout}"
                );
            } else {
                // The base config the operator starts from passes the controller's validator.
                let docs = documents(&stdout);
                let (yaml, config) = (base_yaml(&docs), base_config(&docs));
                // Fail closed: the default install refuses anonymous extraction.
                assert_eq!(
                    config.distribution.auth.mode,
                    proxy_pool_api::config::AuthMode::Any,
                    "{yaml}"
                );
                // One egress policy: the cluster's pod and service ranges are refused.
                for cidr in ["10.244.0.0/16", "10.96.0.0/12"] {
                    let ip = cidr.split('/').next().unwrap().parse().unwrap();
                    assert!(config.egress.check_ip(ip).is_err(), "{cidr}: {yaml}");
                }
                // Every component has its NetworkPolicy.
                for component in ["controller", "operator", "checker", "gateway"] {
                    let name = format!("proxy-pool-{component}");
                    assert!(
                        doc::<NetworkPolicy>(&docs, "NetworkPolicy", &name).is_some(),
                        "no NetworkPolicy for the {component}"
                    );
                }
                // The operator reads the controller's admin inventory
                // (--controller-admin-url): its pods may reach the admin port.
                let policy: NetworkPolicy = doc(&docs, "NetworkPolicy", "proxy-pool-controller")
                    .expect("controller NetworkPolicy");
                let admin = policy
                    .spec
                    .and_then(|s| s.ingress)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|rule| {
                        rule.ports
                            .iter()
                            .flatten()
                            .any(|p| p.port == Some(IntOrString::String("admin".into())))
                    })
                    .expect("an ingress rule for the admin port");
                assert!(
                    admin.from.iter().flatten().any(|peer| {
                        peer.namespace_selector.is_none()
                            && peer
                                .pod_selector
                                .as_ref()
                                .and_then(|s| s.match_labels.as_ref())
                                .and_then(|l| l.get("proxypool.io/component"))
                                .is_some_and(|c| c == "operator")
                    }),
                    "the operator cannot reach the controller's admin port: {admin:?}"
                );
            }
        }
    }
}

/// `helm template` with `values`; the rendered documents.
async fn rendered(values: &[&str]) -> Vec<String> {
    let sets: Vec<&str> = values.iter().flat_map(|v| ["--set", v]).collect();
    documents(&helm_template(&sets).await)
}

/// The one document of `kind` named `name`.
fn doc<T: serde::de::DeserializeOwned>(docs: &[String], kind: &str, name: &str) -> Option<T> {
    let (k, n) = (format!("kind: {kind}\n"), format!("  name: {name}\n"));
    docs.iter()
        .find(|d| d.contains(&k) && d.contains(&n))
        .map(|d| serde_yaml::from_str(d).unwrap_or_else(|e| panic!("{kind} {name}: {e}")))
}

/// The base config the chart gives the operator (YAML).
fn base_yaml(docs: &[String]) -> String {
    let cm: ConfigMap = doc(docs, "ConfigMap", "proxy-pool-operator-base-config").expect("base");
    cm.data.expect("data")["base.yaml"].clone()
}

/// [`base_yaml`], through the controller's validator.
fn base_config(docs: &[String]) -> proxy_pool_api::config::Config {
    let yaml = base_yaml(docs);
    proxy_pool_api::config::load_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// Controller replicas and leadership in the chart: three replicas by default on Redis,
/// elected on a Kubernetes Lease; the leader-only control-plane Service beside the
/// every-replica Distribution Service; least-privilege RBAC for the Lease and the pod
/// label; a PodDisruptionBudget and a topology spread. One replica on the memory store
/// (and with analytics), with nothing of the above that needs an election.
#[tokio::test]
async fn chart_controller_replicas_leader_service_and_rbac() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::rbac::v1::Role;
    use proxy_pool_api::config::{KubernetesLeadership, LeadershipBackend};

    let ctl = CONTROLLER;
    let leader_service = format!("{ctl}-control-plane");
    let docs = rendered(&["store.backend=redis", "redis.address=redis://redis:6379/0"]).await;
    let config = base_config(&docs);
    assert_eq!(config.leadership.replicas, 3);
    assert_eq!(
        config.leadership.backend,
        LeadershipBackend::Kubernetes(KubernetesLeadership {
            lease_name: ctl.into(),
            label_pod: true,
        })
    );
    let deployment: Deployment = doc(&docs, "Deployment", ctl).expect("controller Deployment");
    let spec = deployment.spec.expect("spec");
    assert_eq!(spec.replicas, Some(3));
    let pod = spec.template.spec.expect("pod spec");
    assert_eq!(pod.automount_service_account_token, Some(true));
    let env = pod.containers[0].env.clone().unwrap_or_default();
    let pod_name = env
        .iter()
        .find(|e| e.name == "PROXY_POOL_POD_NAME")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    assert_eq!(pod_name.as_deref(), Some("metadata.name"));
    let spread = pod.topology_spread_constraints.expect("topology spread");
    let selects = spread[0]
        .label_selector
        .as_ref()
        .and_then(|s| s.match_labels.as_ref())
        .and_then(|l| l.get("proxypool.io/component"))
        .cloned();
    assert_eq!(selects.as_deref(), Some("controller"));

    // Distribution on every replica; the control plane on the leader alone.
    let all: Service = doc(&docs, "Service", ctl).expect("controller Service");
    let all = all.spec.expect("spec");
    assert!(
        !all.selector
            .clone()
            .unwrap()
            .contains_key("proxypool.io/leader")
    );
    let ports: Vec<_> = all.ports.unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(ports, vec![Some("distribution".to_owned())]);
    let leader: Service = doc(&docs, "Service", &leader_service).expect("control-plane Service");
    let leader = leader.spec.expect("spec");
    assert_eq!(
        leader
            .selector
            .unwrap()
            .get("proxypool.io/leader")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        leader.ports.unwrap()[0].name.as_deref(),
        Some("control-plane")
    );
    // Gateways and checkers dial it, under a name the controller's certificate holds.
    let address = format!("--controller-address={leader_service}.{NS}.svc:9443");
    assert!(docs.iter().any(|d| d.contains(&address)), "{address}");
    let names = format!("{leader_service}.{NS}.svc,");
    assert!(
        docs.iter()
            .any(|d| d.contains("--controller-dns-names=") && d.contains(&names))
    );
    let checker = format!("--controller=https://{leader_service}.{NS}.svc:9443");
    assert!(docs.iter().any(|d| d.contains(&checker)), "{checker}");

    // Least privilege: the one Lease (the chart's) by name, pod patches.
    let lease: Lease = doc(&docs, "Lease", ctl).expect("the chart's Lease");
    assert_eq!(lease.spec.unwrap_or_default().holder_identity, None);
    let role: Role = doc(&docs, "Role", &format!("{ctl}-leader")).expect("leader Role");
    let rules: Vec<_> = role
        .rules
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                r.resources.unwrap_or_default().join(","),
                r.resource_names.unwrap_or_default().join(","),
                r.verbs.join(","),
            )
        })
        .collect();
    assert_eq!(
        rules,
        vec![
            ("leases".into(), ctl.to_owned(), "get,update".into()),
            ("pods".into(), String::new(), "patch".into()),
        ]
    );
    let pdb: PodDisruptionBudget = doc(&docs, "PodDisruptionBudget", ctl).expect("PDB");
    assert_eq!(pdb.spec.unwrap().max_unavailable, Some(IntOrString::Int(1)));

    // Leader election on Redis: every replica behind the control-plane Service, no RBAC.
    let docs = rendered(&[
        "store.backend=redis",
        "redis.address=redis://redis:6379/0",
        "controller.leaderElection=redis",
    ])
    .await;
    assert_eq!(
        base_config(&docs).leadership.backend,
        LeadershipBackend::Redis
    );
    let leader: Service = doc(&docs, "Service", &leader_service).expect("control-plane Service");
    assert!(
        !leader
            .spec
            .unwrap()
            .selector
            .unwrap()
            .contains_key("proxypool.io/leader")
    );
    assert!(doc::<Role>(&docs, "Role", &format!("{ctl}-leader")).is_none());
    assert!(doc::<Lease>(&docs, "Lease", ctl).is_none());

    // Usage analytics has one writer, the leader: three replicas with it too; the
    // memory store keeps one replica.
    for (values, replicas) in [
        (&[][..], 1),
        (
            &[
                "store.backend=redis",
                "redis.address=redis://redis:6379/0",
                "postgresql.enabled=true",
                "postgresql.dsnSecret.name=pg-dsn",
            ][..],
            3,
        ),
    ] {
        let docs = rendered(values).await;
        assert_eq!(
            base_config(&docs).leadership.replicas,
            replicas,
            "{values:?}"
        );
        // (Text: serde_yaml reads the Secret volumes' octal modes as strings.)
        let deployment = docs
            .iter()
            .find(|d| d.contains("kind: Deployment\n") && d.contains(&format!("  name: {ctl}\n")))
            .expect("Deployment");
        assert!(
            deployment.contains(&format!("\nspec:\n  replicas: {replicas}\n")),
            "{values:?}"
        );
    }
    let docs = rendered(&[]).await;
    assert_eq!(
        base_config(&docs).leadership.backend,
        LeadershipBackend::Redis
    );
    let deployment: Deployment = doc(&docs, "Deployment", ctl).expect("Deployment");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert!(doc::<Role>(&docs, "Role", &format!("{ctl}-leader")).is_none());

    // A misspelt election backend is refused by the values schema, naming the value.
    assert_template_refused(
        &[
            REQUIRED_VALUES[0],
            "store.backend=redis",
            "redis.address=redis://r:6379/0",
            "controller.leaderElection=etcd",
        ],
        "at '/controller/leaderElection': value must be one of 'kubernetes', 'redis'",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_reconciles_on_a_real_cluster() {
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    ADMIN.set(FakeAdmin::start().await).expect("one fake admin");
    let cluster = KubeApiServer::start_for_test(&bins, true).await;
    let client = cluster.client();

    // CRDs with the real kubectl, then the chart (dry run first, then for real).
    let crds = repo_path("crds/proxy-pool.yaml").display().to_string();
    kubectl_ok(&cluster, &["apply", "--server-side", "-f", &crds], None).await;
    kubectl_ok(
        &cluster,
        &[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    kubectl_ok(&cluster, &["create", "namespace", NS], None).await;
    let version: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&cluster, &["version", "-o", "json"], None).await)
            .expect("version");
    let kube_version = version["serverVersion"]["gitVersion"]
        .as_str()
        .expect("gitVersion")
        .to_owned();
    let manifests = helm_template(&["--kube-version", &kube_version]).await;
    kubectl_ok(
        &cluster,
        &["apply", "--dry-run=server", "-n", NS, "-f", "-"],
        Some(&manifests),
    )
    .await;
    kubectl_ok(&cluster, &["apply", "-n", NS, "-f", "-"], Some(&manifests)).await;
    let base_cm: ConfigMap = get(&client, "proxy-pool-operator-base-config").await;
    let base_yaml = base_cm.data.expect("data")["base.yaml"].clone();
    // The key sealing the pod annotations: made once, then the same on every start.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), NS);
    let key = hash_key::ensure(&secrets, hash_key::DEFAULT_SECRET)
        .await
        .expect("hash key made");
    let again = hash_key::ensure(&secrets, hash_key::DEFAULT_SECRET)
        .await
        .expect("hash key read");
    assert_eq!(
        key, again,
        "the key survives a restart: pods do not roll for it"
    );

    // The examples.
    for f in [
        "upstream.yaml",
        "distribution-client.yaml",
        "gateway-group.yaml",
        "routing.yaml",
    ] {
        let path = repo_path(&format!("examples/{f}")).display().to_string();
        kubectl_ok(&cluster, &["apply", "-n", NS, "-f", &path], None).await;
    }

    // The identity service creates the CA and the trust bundle the controller's
    // certificate comes from (in the operator binary it starts before reconciling).
    let _identity = IdentityService::start(
        client.clone(),
        IdentityOptions::new(
            NS,
            "proxy-pool-operator",
            IssuerConfig::new("proxy-pool.local", "default"),
        ),
    )
    .await
    .expect("identity service");

    // Two replicas under leader election: only one may reconcile.
    const IDS: [&str; 2] = ["operator-0", "operator-1"];
    let metrics = [Arc::new(Metrics::new()), Arc::new(Metrics::new())];
    let mut stops = Vec::new();
    let mut handles = Vec::new();
    for (id, m) in IDS.into_iter().zip(metrics.iter().cloned()) {
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let leader = LeaderSettings {
            lease_name: "proxy-pool-operator".into(),
            identity: id.into(),
            lease_duration: Duration::from_secs(6),
        };
        let stopped = async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        };
        let fut = reconcile::run_as_leader(
            client.clone(),
            operator_config(&base_yaml),
            m,
            leader,
            stopped,
        );
        stops.push(stop_tx);
        handles.push(Some(tokio::spawn(fut)));
    }

    let config = config_map_is_rendered(&client).await;
    controller_deployment_is_pointed_at_it(&client, &config).await;
    the_mounted_files_load_in_the_controller(&client).await;
    gateway_objects_are_owned_by_the_group(&client).await;
    let clients_hash = the_gateway_clients_file_loads_in_the_gateway(&client).await;
    statuses_become_ready(&client).await;
    a_failing_vendor_degrades_its_upstream(&client).await;
    a_held_back_upstream_says_until_when(&client).await;
    let leader = only_one_replica_leads(&client, &metrics).await;
    second_reconcile_changes_nothing(&client, &base_yaml).await;
    a_lost_certificate_is_reissued_and_rolls_the_controller(&client).await;
    bad_references_degrade(&cluster, &client).await;
    a_rotated_client_password_rolls_the_gateway(&client, &clients_hash).await;
    gateway_groups::one_group_serves_many_routings(&cluster, &client, &base_yaml).await;
    deleting_the_last_routing_removes_its_groups_gateway(&client).await;

    // Failover: the leader shuts down gracefully and gives the Lease up; the standby
    // takes it and reconciles what changes next.
    let standby = 1 - leader;
    stop_replica(IDS[leader], &stops[leader], handles[leader].take()).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    eventually("the standby to take the Lease", 30, || {
        let (leases, m) = (leases.clone(), metrics[standby].clone());
        async move {
            let holder = leases
                .get("proxy-pool-operator")
                .await
                .ok()?
                .spec?
                .holder_identity?;
            (holder == IDS[standby] && is_leader(&m)).then_some(())
        }
    })
    .await;
    let late = r#"
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: after-failover}
spec:
  upstreams: [vendor-sim]
  gateway: {replicas: 1, listeners: {socks5: {port: 1080}}}
"#;
    kubectl_ok(&cluster, &["apply", "-n", NS, "-f", "-"], Some(late)).await;
    gateway_pods_become_ready(&client, "after-failover-gateway").await;
    let _: Routing = wait_ready(&client, "after-failover", "True").await;

    // Graceful shutdown of the last replica releases the Lease.
    stop_replica(IDS[standby], &stops[standby], handles[standby].take()).await;
    let lease: Lease = get(&client, "proxy-pool-operator").await;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "the Lease is released"
    );
}

async fn stop_replica(
    id: &str,
    stop: &tokio::sync::watch::Sender<bool>,
    handle: Option<tokio::task::JoinHandle<Result<(), reconcile::Error>>>,
) {
    stop.send(true).expect("stop");
    let handle = handle.expect("replica still running");
    let result = tokio::time::timeout(Duration::from_secs(30), handle)
        .await
        .unwrap_or_else(|_| panic!("{id} did not stop within 30s"))
        .expect("join");
    result.unwrap_or_else(|e| panic!("{id}: {e}"));
}

fn is_leader(m: &Metrics) -> bool {
    m.encode()
        .lines()
        .any(|l| l == "proxy_pool_operator_leader 1")
}

/// The controller ConfigMap the operator rendered and its `config.yaml`, once `ready`
/// holds for that config (within `secs` seconds).
async fn config_when(
    client: &kube::Client,
    what: &str,
    secs: u64,
    ready: impl Fn(&str) -> bool,
) -> (ConfigMap, String) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    eventually(what, secs, || {
        let api = api.clone();
        let ready = &ready;
        async move {
            let cm = api.get_opt(CONFIG_MAP).await.ok()??;
            let text = cm.data.as_ref()?.get("config.yaml")?.clone();
            ready(&text).then_some((cm, text))
        }
    })
    .await
}

async fn config_map_is_rendered(client: &kube::Client) -> String {
    let (cm, text) = config_when(
        client,
        "the controller ConfigMap with every example",
        90,
        |text| {
            text.contains("vendor-sim")
                && text.contains("team-crawler")
                && text.contains("shanghai-crawler")
        },
    )
    .await;
    // The controller's own loader accepts it.
    let config = proxy_pool_api::config::load_yaml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.upstreams.len(), 1);
    assert_eq!(config.routings.len(), 1);
    assert_eq!(config.clients.len(), 1);
    // Every Routing field of the example reaches the config.
    let r = &config.routings[0];
    assert_eq!(
        (
            r.username_params[0].key.as_str(),
            r.username_params[0].values.as_slice()
        ),
        ("region", ["shanghai".to_owned()].as_slice())
    );
    assert_eq!(r.target_hosts, ["localhost", "*.example.com"]);
    assert_eq!(
        (r.regions.as_slice(), r.carriers.as_slice()),
        (
            ["shanghai".to_owned()].as_slice(),
            ["telecom".to_owned()].as_slice()
        )
    );
    let sticky = r.sticky.as_ref().expect("sticky sessions");
    assert_eq!(
        (sticky.session_ttl, sticky.idle_timeout),
        (Duration::from_secs(600), Duration::from_secs(120))
    );
    assert_eq!(
        (r.retry.max_attempts, r.retry.deadline),
        (3, Duration::from_secs(10))
    );
    assert_eq!(
        r.gateway_groups,
        ["edge"],
        "its GatewayGroup's gateways see it"
    );
    // And every Upstream field.
    let u = &config.upstreams[0];
    assert_eq!(u.health.interval, Duration::from_secs(15));
    assert_eq!(u.health.timeout, Duration::from_secs(3));
    assert_eq!(u.health.failure_threshold.get(), 2);
    assert!(u.health.egress);
    assert_eq!(u.health.targets, ["https://localhost/"]);
    let proxy_pool_api::config::SourceConfig::VendorApi(v) = &u.source else {
        panic!("vendor API upstream")
    };
    assert_eq!(v.max_proxies_per_fetch.map(|n| n.get()), Some(50));
    assert_eq!(v.max_requests_per_minute, 30);
    // Client credentials are mounted files, not even hashes.
    let c = &config.clients[0];
    assert!(c.api_keys.is_empty() && c.basic.is_none());
    let files: Vec<String> = c
        .secret_files
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    let dir = "/etc/proxy-pool/secrets/team-crawler-credentials";
    assert_eq!(
        files,
        [
            format!("{dir}/apiKey"),
            format!("{dir}/username"),
            format!("{dir}/password")
        ]
    );
    // The control plane runs with the operator-issued certificate.
    let cp = config.control_plane.as_ref().expect("control plane on");
    let proxy_pool_api::config::ControlPlaneTransport::Mtls(tls) = &cp.transport else {
        panic!("mTLS control plane: {:?}", cp.transport)
    };
    assert_eq!(
        tls.cert_file.display().to_string(),
        "/etc/proxy-pool/tls/tls.crt"
    );
    assert_eq!(
        tls.key_file.display().to_string(),
        "/etc/proxy-pool/tls/tls.key"
    );
    assert_eq!(
        tls.client_ca_file.display().to_string(),
        "/etc/proxy-pool/trust/ca.crt"
    );
    assert_eq!(
        (tls.trust_domain.as_str(), tls.environment.as_str()),
        ("proxy-pool.local", "default")
    );
    for value in SECRET_VALUES {
        assert!(
            !text.contains(value),
            "secret value {value:?} in the ConfigMap:\n{text}"
        );
        let whole = serde_json::to_string(&cm).expect("json");
        assert!(
            !whole.contains(value),
            "secret value {value:?} in the ConfigMap object"
        );
    }
    assert!(
        text.contains("/etc/proxy-pool/secrets/vendor-sim-credentials/password")
            && text.contains("/etc/proxy-pool/secrets/vendor-sim-credentials/username")
            && !text.contains("proxyuser"),
        "{text}"
    );
    assert_owned_by_the_controller(&cm);
    cm.annotations()["proxypool.io/config-hash"].clone()
}

/// Asserts that the operator manages `obj` and that the controller Deployment owns it.
fn assert_owned_by_the_controller(obj: &impl Resource) {
    let owner = &obj.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", CONTROLLER)
    );
    assert_eq!(
        obj.labels()["app.kubernetes.io/managed-by"],
        "proxy-pool-operator"
    );
}

async fn controller_deployment_is_pointed_at_it(client: &kube::Client, hash: &str) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let d = eventually("the controller Deployment's config-hash", 30, || {
        let api = api.clone();
        async move {
            let d = api.get(CONTROLLER).await.ok()?;
            let annotations = d
                .spec
                .as_ref()?
                .template
                .metadata
                .as_ref()?
                .annotations
                .clone()?;
            (annotations
                .get("proxypool.io/config-hash")
                .map(String::as_str)
                == Some(hash))
            .then_some(d)
        }
    })
    .await;
    let pod = d.spec.expect("spec").template.spec.expect("pod");
    let sources = projected_sources(&pod, "proxy-pool-config");
    assert_eq!(
        sources[0].config_map.as_ref().expect("configMap").name,
        CONFIG_MAP
    );
    let secret = sources
        .iter()
        .filter_map(|s| s.secret.as_ref())
        .find(|s| s.name == "vendor-sim-credentials")
        .expect("vendor Secret projected");
    let keys: Vec<&str> = secret
        .items
        .iter()
        .flatten()
        .map(|i| i.key.as_str())
        .collect();
    assert_eq!(keys, ["apiKey", "password", "username"]);
    let items = |name: &str| -> Vec<(String, String)> {
        sources
            .iter()
            .find_map(|s| {
                s.secret
                    .as_ref()
                    .filter(|x| x.name == name)
                    .and_then(|x| x.items.clone())
                    .or_else(|| {
                        s.config_map
                            .as_ref()
                            .filter(|x| x.name == name)
                            .and_then(|x| x.items.clone())
                    })
            })
            .unwrap_or_else(|| panic!("{name} projected"))
            .into_iter()
            .map(|i| (i.key, i.path))
            .collect()
    };
    let pair = |k: &str, p: &str| (k.to_owned(), p.to_owned());
    assert_eq!(
        items("team-crawler-credentials"),
        [
            pair("apiKey", "secrets/team-crawler-credentials/apiKey"),
            pair("password", "secrets/team-crawler-credentials/password"),
            pair("username", "secrets/team-crawler-credentials/username"),
        ]
    );
    assert_eq!(
        items(CONTROLLER_TLS),
        [
            pair("tls.crt", "tls/tls.crt"),
            pair("tls.key", "tls/tls.key")
        ]
    );
    assert_eq!(items(TRUST_BUNDLE), [pair("ca.crt", "trust/ca.crt")]);
    // The TLS Secret is the operator's, owned by the controller Deployment.
    let secret: Secret = get(client, CONTROLLER_TLS).await;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_owned_by_the_controller(&secret);
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == "controller")
        .expect("container");
    // The chart's fields survive next to the operator's.
    assert!(
        container
            .image
            .as_deref()
            .is_some_and(|i| i.contains("proxy-pool-controller"))
    );
    let mounts = container.volume_mounts.as_ref().expect("mounts");
    assert!(
        mounts
            .iter()
            .any(|m| m.name == "proxy-pool-config" && m.mount_path == "/etc/proxy-pool")
    );
}

async fn gateway_objects_are_owned_by_the_group(client: &kube::Client) {
    let group: GatewayGroup = get(client, "edge").await;
    let d: Deployment = created(client, GATEWAY, 60).await;
    let owner = &d.owner_references()[0];
    assert_eq!(owner.uid, group.uid().expect("uid"));
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("GatewayGroup", Some(true))
    );
    assert_eq!(
        d.labels()["app.kubernetes.io/managed-by"],
        "proxy-pool-operator"
    );
    assert_eq!(d.labels()["proxypool.io/component"], "gateway");
    let spec = d.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.expect("pod");
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("proxy-pool-gateway")
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
    let token = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .find_map(|s| s.service_account_token.as_ref())
        .expect("projected token");
    assert_eq!(token.audience.as_deref(), Some("proxy-pool-identity"));
    let c = &pod.containers[0];
    let ports: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
    assert_eq!(ports, [3128, 1080, 9090]);
    assert_eq!(c.resources, group.spec.resources);
    assert!(
        c.args.iter().flatten().any(|a| a == "--gateway-group=edge"),
        "{:?}",
        c.args
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let s: Service = created(client, GATEWAY, 30).await;
    assert_eq!(s.owner_references()[0].uid, group.uid().expect("uid"));
    let spec = s.spec.expect("spec");
    let ports: Vec<i32> = spec.ports.iter().flatten().map(|p| p.port).collect();
    assert_eq!(ports, [3128, 1080]);
    let selector = spec.selector.expect("selector");
    assert_eq!(Some(&selector), spec_selector(&deployments).await.as_ref());
}

async fn spec_selector(api: &Api<Deployment>) -> Option<BTreeMap<String, String>> {
    api.get(GATEWAY).await.ok()?.spec?.selector.match_labels
}

/// Waits until `name` of kind `K` reports Ready with the given status; returns it.
async fn wait_ready<K>(client: &kube::Client, name: &str, want: &str) -> K
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + HasConditions,
{
    let api: Api<K> = Api::namespaced(client.clone(), NS);
    eventually(&format!("{} {name} Ready={want}", K::kind(&())), 90, || {
        let api = api.clone();
        async move {
            let obj = api.get_opt(name).await.ok()??;
            let generation = obj.meta().generation;
            let ready = condition(obj.conditions(), "Ready")?;
            (ready.status == want && obj.observed_generation() == generation).then_some(obj)
        }
    })
    .await
}

async fn statuses_become_ready(client: &kube::Client) {
    let u: Upstream = wait_ready(client, "vendor-sim", "True").await;
    let degraded = condition(u.conditions(), "Degraded").expect("Degraded condition");
    assert_eq!(degraded.status, "False");
    // MANAGED / AVAILABLE and the last fetch come from the controller's inventory.
    let status = u.status.as_ref().expect("status");
    let inv = status.inventory.as_ref().expect("inventory in the status");
    assert_eq!(
        (inv.managed, inv.available, inv.available_slots),
        (7, 3, 12)
    );
    assert!(status.last_fetch_time.is_some(), "{status:?}");
    let _: DistributionClient = wait_ready(client, "team-crawler", "True").await;
    // In the config and applied is not Ready: its gateway pods are not ready yet.
    let r: Routing = wait_ready(client, "shanghai-crawler", "False").await;
    let ready = condition(r.conditions(), "Ready").expect("Ready");
    assert_eq!(ready.reason, "GatewayPodsNotReady", "{ready:?}");
    let degraded = condition(r.conditions(), "Degraded").expect("Degraded");
    assert_eq!(degraded.status, "False", "waiting for pods is not Degraded");
    gateway_pods_become_ready(client, GATEWAY).await;
    let r: Routing = wait_ready(client, "shanghai-crawler", "True").await;
    assert_eq!(
        r.status.as_ref().and_then(|s| s.service.as_deref()),
        Some(GATEWAY)
    );
    let g: GatewayGroup = wait_ready(client, "edge", "True").await;
    let status = g.status.expect("status");
    assert_eq!(status.routings, ["shanghai-crawler"]);
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.service.as_deref()
        ),
        (Some(2), Some(2), Some(GATEWAY))
    );
}

/// What a kubelet would do: marks the Deployment's pods Running and Ready, until the
/// Deployment counts them all ready (kube-controller-manager runs in this test).
async fn gateway_pods_become_ready(client: &kube::Client, deployment: &str) {
    use kube::api::{Patch, PatchParams};
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(&format!("the pods of {deployment} ready"), 120, || {
        let (deployments, pods) = (deployments.clone(), pods.clone());
        async move {
            let d = deployments.get(deployment).await.ok()?;
            let spec = d.spec.as_ref()?;
            let want = spec.replicas.unwrap_or(1);
            let selector = spec
                .selector
                .match_labels
                .as_ref()?
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            for p in pods
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?
                .items
            {
                let is_ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                if !is_ready {
                    let patch = serde_json::json!({"status": {
                        "phase": "Running",
                        "conditions": [
                            {"type": "Ready", "status": "True", "lastTransitionTime": now},
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                        ],
                    }});
                    let _ = pods
                        .patch_status(&p.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            }
            let ready = d.status.as_ref()?.ready_replicas.unwrap_or(0);
            (ready >= want).then_some(())
        }
    })
    .await;
}

/// A vendor answering 401 shows on its Upstream: Degraded with the reason, not Ready;
/// fixed, it is Ready again.
async fn a_failing_vendor_degrades_its_upstream(client: &kube::Client) {
    let admin = ADMIN.get().expect("fake admin");
    admin.set(Some("unauthorized"));
    let api: Api<Upstream> = Api::namespaced(client.clone(), NS);
    let u = eventually("vendor-sim Degraded by its vendor", 60, || {
        let api = api.clone();
        async move {
            let u = api.get("vendor-sim").await.ok()?;
            let d = condition(u.conditions(), "Degraded")?;
            (d.status == "True" && d.reason == "VendorUnauthorized").then_some(u)
        }
    })
    .await;
    let ready = condition(u.conditions(), "Ready").expect("Ready");
    assert_eq!(ready.status, "False");
    assert!(ready.message.contains("unauthorized"), "{ready:?}");
    admin.set(None);
    let _: Upstream = wait_ready(client, "vendor-sim", "True").await;
}

/// An upstream held back by a new pool generation says until when: in its inventory
/// status and its Ready message; once the hold ends, neither.
async fn a_held_back_upstream_says_until_when(client: &kube::Client) {
    let admin = ADMIN.get().expect("fake admin");
    let until = "2026-01-01T00:01:00Z";
    admin.set_held(until);
    let api: Api<Upstream> = Api::namespaced(client.clone(), NS);
    let u = eventually("vendor-sim showing its hold-back", 60, || {
        let api = api.clone();
        async move {
            let u = api.get("vendor-sim").await.ok()?;
            let held = u
                .status
                .as_ref()?
                .inventory
                .as_ref()?
                .quarantined_until
                .clone()?;
            Some((u, held))
        }
    })
    .await;
    assert_eq!(u.1.0.to_string(), until);
    let ready = condition(u.0.conditions(), "Ready").expect("Ready");
    assert!(
        ready
            .message
            .contains("held back until 2026-01-01T00:01:00Z"),
        "{ready:?}"
    );
    admin.set(None);
    eventually("vendor-sim without a hold-back", 60, || {
        let api = api.clone();
        async move {
            let u = api.get("vendor-sim").await.ok()?;
            let inv = u.status.as_ref()?.inventory.as_ref()?;
            inv.quarantined_until.is_none().then_some(())
        }
    })
    .await;
}

async fn only_one_replica_leads(client: &kube::Client, metrics: &[Arc<Metrics>; 2]) -> usize {
    let lease: Lease = get(client, "proxy-pool-operator").await;
    let dump = serde_json::to_string(&lease).expect("json");
    let holder = lease.spec.and_then(|s| s.holder_identity).expect("holder");
    let leading: Vec<bool> = metrics.iter().map(|m| is_leader(m)).collect();
    assert_eq!(
        leading.iter().filter(|l| **l).count(),
        1,
        "exactly one leader: {leading:?}, lease {dump}"
    );
    let index = usize::from(holder == "operator-1");
    assert!(
        leading[index],
        "the Lease holder {holder} is the one reconciling"
    );
    assert!(
        metrics[index]
            .encode()
            .contains("proxy_pool_operator_reconciles_total{kind=\"Routing\"}")
    );
    index
}

/// Resource versions (or generations, for Deployments whose status the
/// kube-controller-manager keeps updating) of everything the operator writes.
async fn versions(client: &kube::Client) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "ConfigMap".to_owned(),
            resource_version::<ConfigMap>(client, CONFIG_MAP).await,
        ),
        (
            "Service".to_owned(),
            resource_version::<Service>(client, GATEWAY).await,
        ),
    ];
    for name in [GATEWAY, CONTROLLER] {
        let d: Deployment = get(client, name).await;
        out.push((
            format!("Deployment {name} generation"),
            format!("{:?}", d.meta().generation),
        ));
    }
    out.extend([
        (
            "Upstream".to_owned(),
            resource_version::<Upstream>(client, "vendor-sim").await,
        ),
        (
            "Routing".to_owned(),
            resource_version::<Routing>(client, "shanghai-crawler").await,
        ),
        (
            "GatewayGroup".to_owned(),
            resource_version::<GatewayGroup>(client, "edge").await,
        ),
        (
            "DistributionClient".to_owned(),
            resource_version::<DistributionClient>(client, "team-crawler").await,
        ),
    ]);
    out
}

async fn second_reconcile_changes_nothing(client: &kube::Client, base_yaml: &str) {
    // Let the running operator settle, then reconcile everything once more directly.
    let before = eventually("a settled state", 30, || async {
        let a = versions(client).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let b = versions(client).await;
        (a == b).then_some(b)
    })
    .await;
    let ctx = Arc::new(Context::new(
        client.clone(),
        operator_config(base_yaml),
        Arc::new(Metrics::new()),
    ));
    let controller: Deployment = get(client, CONTROLLER).await;
    reconcile::config::reconcile(Arc::new(controller), ctx.clone())
        .await
        .expect("config reconcile");
    let r: Routing = get(client, "shanghai-crawler").await;
    reconcile::gateway::reconcile(Arc::new(r), ctx.clone())
        .await
        .expect("routing reconcile");
    let g: GatewayGroup = get(client, "edge").await;
    reconcile::gateway::reconcile_group(Arc::new(g), ctx.clone())
        .await
        .expect("group reconcile");
    let u: Upstream = get(client, "vendor-sim").await;
    reconcile::resources::reconcile_upstream(Arc::new(u), ctx.clone())
        .await
        .expect("upstream reconcile");
    let c: DistributionClient = get(client, "team-crawler").await;
    reconcile::resources::reconcile_client(Arc::new(c), ctx)
        .await
        .expect("client reconcile");
    let after = versions(client).await;
    assert_eq!(before, after, "a second reconcile changed something");
}

async fn bad_references_degrade(cluster: &KubeApiServer, client: &kube::Client) {
    // A Routing naming an Upstream that does not exist.
    let orphan = r#"
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: orphan}
spec:
  upstreams: [does-not-exist]
  gateway: {replicas: 1, listeners: {http: {port: 3128}}}
"#;
    kubectl_ok(cluster, &["apply", "-n", NS, "-f", "-"], Some(orphan)).await;
    let r: Routing = wait_ready(client, "orphan", "False").await;
    let degraded = condition(r.conditions(), "Degraded").expect("Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "UnknownUpstream")
    );
    assert!(
        degraded.message.contains("does-not-exist"),
        "{}",
        degraded.message
    );
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    eventually("a Warning event on the orphan Routing", 30, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("orphan")
                    && e.reason.as_deref() == Some("UnknownUpstream")
                    && e.type_.as_deref() == Some("Warning")
            })
        }
    })
    .await;

    // A client whose Secret is missing: Degraded, then Ready once the Secret appears.
    let ghost = r#"
apiVersion: proxypool.io/v1alpha1
kind: DistributionClient
metadata: {name: ghost}
spec:
  auth: {bearer: {secretRef: {name: ghost-token, key: token}}}
  permissions: [distribution:extract]
"#;
    kubectl_ok(cluster, &["apply", "-n", NS, "-f", "-"], Some(ghost)).await;
    let c: DistributionClient = wait_ready(client, "ghost", "False").await;
    let degraded = condition(c.conditions(), "Degraded").expect("Degraded");
    assert_eq!(degraded.reason, "SecretNotFound");
    kubectl_ok(
        cluster,
        &[
            "create",
            "secret",
            "generic",
            "ghost-token",
            "-n",
            NS,
            "--from-literal=token=ghost-bearer-token-value",
        ],
        None,
    )
    .await;
    let _: DistributionClient = wait_ready(client, "ghost", "True").await;
    // Neither broke the config: the good resources are still in it, the orphan is not.
    let (_, text) = config_when(client, "ghost in the config", 30, |text| {
        text.contains("ghost")
    })
    .await;
    assert!(!text.contains("orphan"), "{text}");
    assert!(!text.contains("ghost-bearer-token-value"), "{text}");
    assert!(text.contains("shanghai-crawler"), "{text}");
}

/// The example group loses its only Routing: the operator removes the group's
/// gateway (the group stays, `NoRoutings`).
async fn deleting_the_last_routing_removes_its_groups_gateway(client: &kube::Client) {
    let routings: Api<Routing> = Api::namespaced(client.clone(), NS);
    routings
        .delete("shanghai-crawler", &DeleteParams::default())
        .await
        .expect("delete");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    eventually("the operator to remove the group's gateway", 90, || {
        let (d, s, c) = (deployments.clone(), services.clone(), config_maps.clone());
        async move {
            let gone = d.get_opt(GATEWAY).await.ok()?.is_none()
                && s.get_opt(GATEWAY).await.ok()?.is_none()
                && c.get_opt(GATEWAY_CLIENTS).await.ok()?.is_none();
            gone.then_some(())
        }
    })
    .await;
    config_when(client, "the routing to leave the config", 30, |text| {
        !text.contains("shanghai-crawler")
    })
    .await;
    let g: GatewayGroup = wait_ready(client, "edge", "False").await;
    let ready = condition(g.conditions(), "Ready").expect("Ready");
    assert_eq!(ready.reason, "NoRoutings", "{ready:?}");
    assert!(g.status.expect("status").routings.is_empty());
}

/// Writes a projected volume's files under `root` from the API objects it names, as
/// the kubelet would.
async fn materialize(
    client: &kube::Client,
    sources: Vec<k8s_openapi::api::core::v1::VolumeProjection>,
    root: &std::path::Path,
) {
    let _ = std::fs::remove_dir_all(root);
    for source in sources {
        // One Secret or ConfigMap per source (a token or downward API source has no
        // object to read).
        let (items, data): (_, BTreeMap<String, Vec<u8>>) = if let Some(s) = source.secret {
            let data = get::<Secret>(client, &s.name).await.data;
            let data = data.into_iter().flatten().map(|(k, v)| (k, v.0)).collect();
            (s.items, data)
        } else if let Some(c) = source.config_map {
            let data = get::<ConfigMap>(client, &c.name).await.data;
            let data = data
                .into_iter()
                .flatten()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            (c.items, data)
        } else {
            continue;
        };
        for i in items.unwrap_or_default() {
            let path = root.join(i.path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, data.get(&i.key).expect("projected key")).expect("write");
        }
    }
}

/// The gateway Deployment's clients volume, rebuilt from the API objects and loaded
/// with the gateway's own loader: exactly the example client, with the credentials of
/// its Secret; only that Secret's `username` and `password` keys are projected.
/// Returns the pod template's clients hash.
async fn gateway_clients_load(client: &kube::Client, tag: &str) -> (String, Vec<ClientCredential>) {
    let d: Deployment = get(client, GATEWAY).await;
    let template = d.spec.expect("spec").template;
    let hash = template
        .metadata
        .and_then(|m| m.annotations)
        .and_then(|a| a.get("proxypool.io/clients-hash").cloned())
        .expect("clients hash annotation");
    let pod = template.spec.expect("pod");
    let c = &pod.containers[0];
    assert!(
        c.args
            .iter()
            .flatten()
            .any(|a| a == "--clients-file=/etc/proxy-pool-gateway/clients.json"),
        "{:?}",
        c.args
    );
    assert!(
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "gateway-clients"
                && m.mount_path == "/etc/proxy-pool-gateway"
                && m.read_only == Some(true))
    );
    let sources = projected_sources(&pod, "gateway-clients");
    let secrets: Vec<(String, Vec<String>)> = sources
        .iter()
        .filter_map(|s| s.secret.as_ref())
        .map(|s| {
            let keys = s.items.iter().flatten().map(|i| i.key.clone()).collect();
            (s.name.clone(), keys)
        })
        .collect();
    assert_eq!(
        secrets,
        [(
            "team-crawler-credentials".to_owned(),
            vec!["password".to_owned(), "username".to_owned()]
        )],
        "only the client's Basic keys (not its API key)"
    );
    let root = std::env::temp_dir().join(format!(
        "proxy-pool-e2e-gateway-clients-{tag}-{}",
        std::process::id()
    ));
    materialize(client, sources, &root).await;
    let file = root.join("clients.json");
    let text = std::fs::read_to_string(&file).expect("clients.json");
    for value in SECRET_VALUES {
        assert!(!text.contains(value), "secret value in the clients file");
    }
    let text = text.replace("/etc/proxy-pool-gateway/", &format!("{}/", root.display()));
    std::fs::write(&file, text).expect("rewrite");
    let loaded = proxy_pool_gateway::clients::load(&file);
    let _ = std::fs::remove_dir_all(&root);
    (hash, loaded.unwrap_or_else(|e| panic!("{e}")))
}

async fn the_gateway_clients_file_loads_in_the_gateway(client: &kube::Client) -> String {
    let (hash, clients) = gateway_clients_load(client, "first").await;
    assert_eq!(clients.len(), 1, "{clients:?}");
    assert_eq!(
        (clients[0].client.as_str(), clients[0].username.as_str()),
        ("team-crawler", "crawlerbot")
    );
    assert!(clients[0].password.matches(b"example-password-change-me"));
    hash
}

/// A new password in the client's Secret rolls the gateway (new clients hash) and the
/// rebuilt volume loads the new credential.
async fn a_rotated_client_password_rolls_the_gateway(client: &kube::Client, before: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .patch(
            "team-crawler-credentials",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "stringData": {"password": "rotated-gateway-password"}
            })),
        )
        .await
        .expect("rotate");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    eventually("the gateway's clients hash to change", 60, || {
        let api = deployments.clone();
        async move {
            let hash = api
                .get(GATEWAY)
                .await
                .ok()?
                .spec?
                .template
                .metadata?
                .annotations?
                .get("proxypool.io/clients-hash")?
                .clone();
            (hash != before).then_some(())
        }
    })
    .await;
    let (_, clients) = gateway_clients_load(client, "rotated").await;
    assert_eq!(clients.len(), 1, "{clients:?}");
    assert_eq!(clients[0].username, "crawlerbot");
    assert!(clients[0].password.matches(b"rotated-gateway-password"));
    assert!(!clients[0].password.matches(b"example-password-change-me"));
}

/// Materialises the controller's projected config volume from the API objects it
/// names (as the kubelet would), then loads the config the way the controller does —
/// client credential files read and hashed — and checks the TLS files make a server
/// certificate gateways accept.
async fn the_mounted_files_load_in_the_controller(client: &kube::Client) {
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use x509_parser::prelude::FromDer as _;

    let d: Deployment = get(client, CONTROLLER).await;
    let pod = d.spec.and_then(|s| s.template.spec).expect("pod");
    let root = std::env::temp_dir().join(format!("proxy-pool-e2e-volume-{}", std::process::id()));
    materialize(client, projected_sources(&pod, "proxy-pool-config"), &root).await;
    let text = std::fs::read_to_string(root.join("config.yaml")).expect("config.yaml");
    let text = text.replace("/etc/proxy-pool/", &format!("{}/", root.display()));
    let loaded = proxy_pool_api::config::load_yaml_with_files(&text);
    let read = |p: &std::path::Path| std::fs::read(p).expect("TLS file");
    let result = loaded.map(|config| {
        let proxy_pool_api::config::ControlPlaneTransport::Mtls(tls) = config
            .control_plane
            .clone()
            .expect("control plane")
            .transport
        else {
            panic!("mTLS")
        };
        (
            config,
            read(&tls.cert_file),
            read(&tls.key_file),
            read(&tls.client_ca_file),
        )
    });
    let _ = std::fs::remove_dir_all(&root);
    let (config, cert_pem, key_pem, bundle_pem) = result.unwrap_or_else(|e| panic!("{e}"));
    // The vendor's proxy user name was read from its mounted file.
    let vendor = config
        .upstreams
        .iter()
        .find(|u| u.name == "vendor-sim")
        .expect("vendor-sim upstream");
    let proxy_pool_api::config::SourceConfig::VendorApi(v) = &vendor.source else {
        panic!("vendor API upstream")
    };
    assert_eq!(
        v.credentials.as_ref().map(|c| c.username.as_str()),
        Some("proxyuser")
    );
    let c = &config.clients[0];
    assert!(c.secret_files.is_empty());
    assert_eq!(c.api_keys.len(), 1, "the API key file was read and hashed");
    assert_eq!(
        c.basic.as_ref().map(|b| b.username.as_str()),
        Some("crawlerbot")
    );

    // Certificate and key belong together and make a server config.
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .expect("certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(&key_pem).expect("key PEM");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain.clone(), key)
        .expect("key matches the certificate");
    // A gateway dialling the controller Service by name accepts it with the bundle.
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&bundle_pem) {
        roots
            .add(ca.expect("bundle PEM"))
            .expect("bundle certificate");
    }
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
    let name = ServerName::try_from(format!("{CONTROLLER}.{NS}.svc")).expect("name");
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
        .expect("the controller certificate verifies for its Service name");
    let (_, x) = x509_parser::certificate::X509Certificate::from_der(&chain[0]).expect("X.509");
    let san = x
        .subject_alternative_name()
        .expect("SAN")
        .expect("SAN present");
    let uris: Vec<String> = san
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(uris, ["spiffe://proxy-pool.local/default/controller"]);
}

/// The controller's certificate is the operator's to keep: deleted, it is issued anew
/// (a new key), and the config hash on the controller's pod template changes so the
/// controller restarts with it.
async fn a_lost_certificate_is_reissued_and_rolls_the_controller(client: &kube::Client) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let hash_of = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("proxypool.io/config-hash").cloned())
    };
    let cert_of = |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("tls.crt"))
            .map(|b| b.0.clone())
    };
    let old_cert =
        cert_of(&secrets.get(CONTROLLER_TLS).await.expect("TLS Secret")).expect("tls.crt");
    let old_hash = hash_of(&deployments.get(CONTROLLER).await.expect("controller")).expect("hash");
    secrets
        .delete(CONTROLLER_TLS, &DeleteParams::default())
        .await
        .expect("delete the TLS Secret");
    let new_cert = eventually("a new controller certificate", 60, || {
        let secrets = secrets.clone();
        let old = old_cert.clone();
        async move {
            let cert = cert_of(&secrets.get_opt(CONTROLLER_TLS).await.ok()??)?;
            (cert != old).then_some(cert)
        }
    })
    .await;
    assert!(String::from_utf8_lossy(&new_cert).contains("BEGIN CERTIFICATE"));
    eventually("the controller's config hash to follow", 60, || {
        let deployments = deployments.clone();
        let old = old_hash.clone();
        async move {
            let hash = hash_of(&deployments.get(CONTROLLER).await.ok()?)?;
            (hash != old).then_some(())
        }
    })
    .await;
}
