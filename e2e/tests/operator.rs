//! Operator e2e against a real etcd + kube-apiserver (built by `scripts/k8s-bins.sh`):
//! the generated CRDs install with the real kubectl, the examples apply and read back
//! as the Rust types, invalid resources are rejected with clear messages, printer
//! columns show, and ServiceAccount TokenRequest + TokenReview work for the
//! `proxy-pool-identity` audience the worker identity issuer will use.
//!
//! One control plane serves every step (starting one costs tens of seconds on a
//! small machine); each step is its own function so a failure names it.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use proxy_pool_e2e::k8s::{
    CLIENT_COLUMNS, GROUP_COLUMNS, K8sBins, KubeApiServer, ROUTING_COLUMNS, UPSTREAM_COLUMNS,
    Workloads, kubectl_table,
};
use proxy_pool_operator::crd::{
    DistributionClient, GatewayGroup, ObservedConditions, Routing, StaticSource, Upstream,
    UpstreamInventory, UpstreamSource, UpstreamSpec, UpstreamStatus,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const NS: &str = "default";
const FIELD_MANAGER: &str = "proxy-pool-e2e";
const IDENTITY_AUDIENCE: &str = "proxy-pool-identity";

fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

/// Runs kubectl (at most 60 s); returns (success, stdout, stderr).
async fn kubectl(
    cluster: &KubeApiServer,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let out = cluster
        .run_kubectl(args, stdin, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (out.success, out.stdout, out.stderr)
}

/// kubectl that must succeed without warnings (deprecated fields, unknown formats, …).
async fn kubectl_ok(cluster: &KubeApiServer, args: &[&str]) -> String {
    cluster
        .kubectl_ok(args, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Documents of one kind in an example file, as that kind's Rust type.
fn example<T: DeserializeOwned>(file: &str, kind: &str) -> T {
    let text =
        std::fs::read_to_string(repo_path(&format!("examples/{file}"))).expect("read example");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("example YAML"))
        .find(|v| v["kind"] == kind)
        .map(|v| serde_json::from_value(v).expect("example deserialises"))
        .unwrap_or_else(|| panic!("{file} has a {kind}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_crds_on_a_real_apiserver() {
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = KubeApiServer::start_for_test(&bins, false).await;

    install_crds(&cluster).await;
    examples_apply_and_read_back(&cluster).await;
    server_applies_schema_defaults(&cluster).await;
    invalid_resources_are_rejected(&cluster).await;
    server_side_apply_and_printer_columns(&cluster).await;
    token_request_and_review_for_identity_audience(&cluster).await;
}

async fn install_crds(cluster: &KubeApiServer) {
    let crds = repo_path("crds/proxy-pool.yaml");
    let (ok, out, err) =
        kubectl(cluster, &["apply", "-f", &crds.display().to_string()], None).await;
    assert!(ok, "kubectl apply of the CRDs failed:\n{err}\n{out}");
    // The API server warns about schema problems it tolerates; the CRDs must have none.
    assert!(
        err.trim().is_empty(),
        "kubectl apply of the CRDs warned:\n{err}"
    );
    for name in [
        "upstreams",
        "routings",
        "distributionclients",
        "gatewaygroups",
    ] {
        assert!(
            out.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{name}.proxypool.io created"
            )),
            "{out}"
        );
    }
    let api: Api<CustomResourceDefinition> = Api::all(cluster.client());
    for name in [
        "upstreams.proxypool.io",
        "routings.proxypool.io",
        "distributionclients.proxypool.io",
        "gatewaygroups.proxypool.io",
    ] {
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not Established within 60s"))
        .expect("watch CRD");
    }
    // Discovery catches up with the CRDs a moment after they are Established.
    for _ in 0..40 {
        let (ok, _, _) = kubectl(
            cluster,
            &[
                "get",
                "upstreams,routings,distributionclients,gatewaygroups",
            ],
            None,
        )
        .await;
        if ok {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the new kinds never appeared in kubectl's discovery");
}

async fn examples_apply_and_read_back(cluster: &KubeApiServer) {
    for (file, created) in [
        (
            "upstream.yaml",
            [
                "secret/vendor-sim-credentials created",
                "upstream.proxypool.io/vendor-sim created",
            ],
        ),
        (
            "gateway-group.yaml",
            [
                "gatewaygroup.proxypool.io/edge created",
                "gatewaygroup.proxypool.io/edge created",
            ],
        ),
        (
            "routing.yaml",
            [
                "routing.proxypool.io/shanghai-crawler created",
                "routing.proxypool.io/shanghai-crawler created",
            ],
        ),
        (
            "distribution-client.yaml",
            [
                "secret/team-crawler-credentials created",
                "distributionclient.proxypool.io/team-crawler created",
            ],
        ),
    ] {
        let path = repo_path(&format!("examples/{file}")).display().to_string();
        let out = kubectl_ok(cluster, &["apply", "-f", &path]).await;
        for line in created {
            assert!(
                out.contains(line),
                "kubectl apply {file}: expected {line:?} in:\n{out}"
            );
        }
    }

    let client = cluster.client();
    let (got, local) = read_back::<Upstream>(&client, "vendor-sim", "upstream.yaml").await;
    assert_eq!(
        got.spec, local.spec,
        "Upstream read back differs from examples/upstream.yaml"
    );
    let (got, local) = read_back::<Routing>(&client, "shanghai-crawler", "routing.yaml").await;
    assert_eq!(
        got.spec, local.spec,
        "Routing read back differs from examples/routing.yaml"
    );
    let (got, local) = read_back::<GatewayGroup>(&client, "edge", "gateway-group.yaml").await;
    assert_eq!(
        got.spec, local.spec,
        "GatewayGroup read back differs from examples/gateway-group.yaml"
    );
    let (got, local) =
        read_back::<DistributionClient>(&client, "team-crawler", "distribution-client.yaml").await;
    assert_eq!(
        got.spec, local.spec,
        "DistributionClient read back differs from the example"
    );
}

/// The object `name` of kind `K` as the API server has it, and as the example `file`
/// holds it.
async fn read_back<K>(client: &kube::Client, name: &str, file: &str) -> (K, K)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    let got = Api::<K>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get {kind} {name}: {e}"));
    (got, example(file, &kind))
}

fn minimal_upstream(name: &str) -> Upstream {
    Upstream::new(
        name,
        UpstreamSpec {
            source: UpstreamSource {
                vendor_api: None,
                static_list: Some(StaticSource {
                    proxies: vec!["127.0.0.1:18080".into()],
                    credentials_secret_ref: None,
                }),
            },
            protocol: proxy_pool_operator::crd::Protocol::Socks5,
            labels: None,
            ttl: "60s".into(),
            quarantine: None,
            safety_margin: "5s".into(),
            max_concurrency_per_proxy: 1,
            max_size: 10,
            fetch_interval: "10s".into(),
            fetch_budget: None,
            health: None,
        },
    )
}

async fn server_applies_schema_defaults(cluster: &KubeApiServer) {
    // Only the required fields: the API server fills in the schema defaults, which must
    // equal the serde defaults the Rust types use.
    let raw = json!({
        "apiVersion": "proxypool.io/v1alpha1",
        "kind": "Upstream",
        "metadata": {"name": "defaults"},
        "spec": {"source": {"static": {"proxies": ["127.0.0.1:18081"]}}, "protocol": "http", "ttl": "1m", "maxSize": 5, "health": {}}
    });
    let (ok, out, err) = kubectl(cluster, &["apply", "-f", "-"], Some(&raw.to_string())).await;
    assert!(ok, "minimal Upstream rejected:\n{err}{out}");
    let got = Api::<Upstream>::namespaced(cluster.client(), NS)
        .get("defaults")
        .await
        .expect("get defaults");
    let local: Upstream = serde_json::from_value(raw).expect("local deserialise");
    assert_eq!(
        got.spec, local.spec,
        "server defaults differ from serde defaults"
    );
    assert_eq!(got.spec.safety_margin, "5s");
    assert_eq!(
        got.spec.health.as_ref().map(|h| h.interval.as_str()),
        Some("15s")
    );
}

/// Applies `doc` with kubectl and asserts the API server refuses it with all of `expected`.
async fn assert_rejected(cluster: &KubeApiServer, doc: Value, expected: &[&str]) {
    let (ok, out, err) = kubectl(cluster, &["apply", "-f", "-"], Some(&doc.to_string())).await;
    assert!(
        !ok,
        "API server accepted an invalid resource:\n{doc}\n{out}"
    );
    for want in expected {
        assert!(
            err.contains(want),
            "rejection of {doc} lacks {want:?}; kubectl said:\n{err}"
        );
    }
}

fn upstream_doc(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "Upstream", "metadata": {"name": name}, "spec": spec})
}

async fn invalid_resources_are_rejected(cluster: &KubeApiServer) {
    let base = json!({"source": {"static": {"proxies": ["127.0.0.1:18082"]}}, "protocol": "http", "ttl": "30s", "maxSize": 5});
    let with = |patch: Value| {
        let mut spec = base.clone();
        if let (Some(s), Some(p)) = (spec.as_object_mut(), patch.as_object()) {
            s.extend(p.clone());
        }
        spec
    };

    // CEL cross-field rule, through the typed client: a 422 with the rule's message.
    let mut bad = minimal_upstream("bad-margin");
    bad.spec.ttl = "30s".into();
    bad.spec.safety_margin = "30s".into();
    let err = Api::<Upstream>::namespaced(cluster.client(), NS)
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("safetyMargin == ttl must be rejected");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status
                    .message
                    .contains("safetyMargin must be shorter than ttl"),
                "{}",
                status.message
            );
            assert!(
                status.message.contains("spec.safetyMargin"),
                "{}",
                status.message
            );
        }
        other => panic!("expected an API rejection, got {other}"),
    }

    // The same rule through kubectl, with a longer margin than ttl.
    assert_rejected(
        cluster,
        upstream_doc("bad-margin2", with(json!({"safetyMargin": "1m"}))),
        &["safetyMargin must be shorter than ttl"],
    )
    .await;
    // Enum.
    assert_rejected(
        cluster,
        upstream_doc("bad-protocol", with(json!({"protocol": "ftp"}))),
        &[
            "spec.protocol",
            "Unsupported value: \"ftp\"",
            "\"http\"",
            "\"socks5\"",
        ],
    )
    .await;
    // Duration pattern.
    assert_rejected(
        cluster,
        upstream_doc("bad-duration", with(json!({"ttl": "5 minutes"}))),
        &["spec.ttl", "should match"],
    )
    .await;
    // Range.
    assert_rejected(
        cluster,
        upstream_doc("bad-size", with(json!({"maxSize": 0}))),
        &["spec.maxSize", "should be greater than or equal to 1"],
    )
    .await;
    // Exactly one source.
    assert_rejected(
        cluster,
        upstream_doc(
            "two-sources",
            with(json!({"source": {"static": {"proxies": ["127.0.0.1:1"]}, "vendorApi": {"url": "http://vendor.example/v1", "format": "json"}}})),
        ),
        &["source needs exactly one of vendorApi or static"],
    )
    .await;
    // DistributionClient without any credential, and with an unknown permission.
    assert_rejected(
        cluster,
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "DistributionClient", "metadata": {"name": "no-auth"},
               "spec": {"auth": {}, "permissions": ["distribution:extract"]}}),
        &["auth needs at least one of apiKey, basic, bearer or serviceAccounts"],
    )
    .await;
    // An empty ServiceAccount list is no credential either; a non-empty one is.
    assert_rejected(
        cluster,
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "DistributionClient", "metadata": {"name": "no-sa"},
               "spec": {"auth": {"serviceAccounts": []}, "permissions": ["distribution:extract"]}}),
        &["auth needs at least one of apiKey, basic, bearer or serviceAccounts"],
    )
    .await;
    assert_rejected(
        cluster,
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "DistributionClient", "metadata": {"name": "bad-sa"},
               "spec": {"auth": {"serviceAccounts": ["Not_A_Name"]}, "permissions": ["distribution:extract"]}}),
        &["spec.auth.serviceAccounts[0]", "should match"],
    )
    .await;
    let sa_client = json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "DistributionClient", "metadata": {"name": "by-sa"},
           "spec": {"auth": {"serviceAccounts": ["crawler"]}, "permissions": ["distribution:extract"]}});
    let (ok, out, err) =
        kubectl(cluster, &["apply", "-f", "-"], Some(&sa_client.to_string())).await;
    assert!(
        ok,
        "a ServiceAccount-only client was refused:\n{out}\n{err}"
    );
    let got = kubectl_ok(
        cluster,
        &[
            "get",
            "distributionclient",
            "by-sa",
            "-o",
            "jsonpath={.spec.auth.serviceAccounts}",
        ],
    )
    .await;
    assert_eq!(got.trim(), r#"["crawler"]"#);
    kubectl_ok(cluster, &["delete", "distributionclient", "by-sa"]).await;
    assert_rejected(
        cluster,
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "DistributionClient", "metadata": {"name": "bad-perm"},
               "spec": {"auth": {"bearer": {"secretRef": {"name": "s", "key": "token"}}}, "permissions": ["distribution:everything"]}}),
        &["spec.permissions[0]", "Unsupported value"],
    )
    .await;
    // Routing whose listeners share a port.
    assert_rejected(
        cluster,
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "Routing", "metadata": {"name": "same-port"},
               "spec": {"gateway": {"listeners": {"http": {"port": 3128}, "socks5": {"port": 3128}}}}}),
        &["spec.gateway.listeners", "http.port and gateway.listeners.socks5.port must differ"],
    )
    .await;
    // Routing with both the inline gateway and a group, and with neither.
    let listeners = json!({"listeners": {"http": {"port": 3128}}});
    assert_rejected(
        cluster,
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "Routing", "metadata": {"name": "both"},
               "spec": {"gatewayGroup": "edge", "gateway": listeners}}),
        &["spec.gateway (deprecated) and spec.gatewayGroup are mutually exclusive"],
    )
    .await;
    assert_rejected(
        cluster,
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "Routing", "metadata": {"name": "neither"},
               "spec": {"priority": 1}}),
        &["spec.gatewayGroup (or the deprecated spec.gateway) is required"],
    )
    .await;
    // GatewayGroups: exposure fields that need another Service type, bad CIDRs, an
    // inverted autoscaling range, a budget with both bounds.
    let group = |name: &str, extra: Value| {
        let mut spec = listeners.clone();
        for (k, v) in extra.as_object().expect("object") {
            spec[k] = v.clone();
        }
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "GatewayGroup", "metadata": {"name": name}, "spec": spec})
    };
    for (name, extra, says) in [
        (
            "etp-clusterip",
            json!({"service": {"externalTrafficPolicy": "Local"}}),
            "service.externalTrafficPolicy needs service.type NodePort or LoadBalancer",
        ),
        (
            "ranges-nodeport",
            json!({"service": {"type": "NodePort", "loadBalancerSourceRanges": ["10.0.0.0/8"]}}),
            "service.loadBalancerSourceRanges needs service.type LoadBalancer",
        ),
        (
            "bad-cidr",
            json!({"service": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/33"]}}),
            "service.loadBalancerSourceRanges holds CIDRs",
        ),
        (
            "bad-proxy-protocol",
            json!({"proxyProtocol": {"trustedSources": ["lb.example.com"]}}),
            "proxyProtocol.trustedSources holds CIDRs",
        ),
        (
            "inverted",
            json!({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}),
            "autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
        ),
        (
            "two-bounds",
            json!({"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}}),
            "podDisruptionBudget takes minAvailable or maxUnavailable, not both",
        ),
        (
            "short-write",
            json!({"limits": {"writeTimeout": "500ms"}}),
            "limits.writeTimeout must be 1s to 24h",
        ),
        (
            "many-headers",
            json!({"limits": {"maxRequestHeaders": 300}}),
            "spec.limits.maxRequestHeaders",
        ),
    ] {
        assert_rejected(cluster, group(name, extra), &[says]).await;
    }
    // Defaults: a ClusterIP Service, 2 replicas; autoscaling's minimum and CPU target.
    let minimal = group(
        "defaults",
        json!({"autoscaling": {"maxReplicas": 4}, "service": {}}),
    );
    let (ok, out, err) = kubectl(cluster, &["apply", "-f", "-"], Some(&minimal.to_string())).await;
    assert!(ok, "minimal GatewayGroup rejected:\n{err}{out}");
    let got = Api::<GatewayGroup>::namespaced(cluster.client(), NS)
        .get("defaults")
        .await
        .expect("get defaults");
    let local: GatewayGroup = serde_json::from_value(minimal).expect("local deserialise");
    assert_eq!(
        got.spec, local.spec,
        "server defaults differ from serde defaults"
    );
    let a = got.spec.autoscaling.as_ref().expect("autoscaling");
    assert_eq!(
        (
            got.spec.replicas,
            a.min_replicas,
            a.target_cpu_utilization_percentage
        ),
        (2, 2, 80)
    );
    assert_eq!(
        got.spec.service.as_ref().map(|s| s.type_),
        Some(proxy_pool_operator::crd::ServiceType::ClusterIP)
    );
    kubectl_ok(cluster, &["delete", "gatewaygroup", "defaults"]).await;
    let names = kubectl_ok(
        cluster,
        &["get", "upstreams,routings,gatewaygroups", "-o", "name"],
    )
    .await;
    assert!(
        !names.contains("bad-") && !names.contains("two-sources"),
        "a rejected Upstream exists:\n{names}"
    );
}

/// `kubectl get` output: the header's columns and the rows' cells.
#[derive(Debug)]
struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn parse(text: &str) -> Self {
        let mut rows = kubectl_table(text);
        let columns = rows.remove(0);
        Self { columns, rows }
    }

    fn row(&self, name: &str) -> &[String] {
        self.rows
            .iter()
            .find(|r| r.first().is_some_and(|n| n == name))
            .unwrap_or_else(|| panic!("no row {name} in {self:?}"))
    }
}

async fn server_side_apply_and_printer_columns(cluster: &KubeApiServer) {
    let api = Api::<Upstream>::namespaced(cluster.client(), NS);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    // Server-side apply of the typed object: fails if any None serialises as null.
    let mut up = minimal_upstream("ssa");
    api.patch("ssa", &pp, &Patch::Apply(&up))
        .await
        .expect("server-side apply of an Upstream");
    up.spec.max_size = 20;
    let got = api
        .patch("ssa", &pp, &Patch::Apply(&up))
        .await
        .expect("second apply");
    assert_eq!(got.spec.max_size, 20);

    let status = UpstreamStatus {
        observed: ObservedConditions {
            observed_generation: got.metadata.generation,
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "InventoryAvailable".into(),
                message: "42 proxies managed".into(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
                observed_generation: got.metadata.generation,
            }],
        },
        inventory: Some(UpstreamInventory {
            managed: 42,
            available: 40,
            available_slots: 320,
            quarantined_until: None,
        }),
        last_fetch_time: None,
    };
    let patch =
        json!({"apiVersion": "proxypool.io/v1alpha1", "kind": "Upstream", "status": status});
    let got = api
        .patch_status("ssa", &pp, &Patch::Apply(&patch))
        .await
        .expect("status apply");
    assert_eq!(
        got.status.and_then(|s| s.inventory).map(|i| i.managed),
        Some(42)
    );

    let table = Table::parse(&kubectl_ok(cluster, &["get", "upstreams"]).await);
    assert_eq!(table.columns, UPSTREAM_COLUMNS, "{table:?}");
    assert_eq!(
        table.row("ssa")[..6],
        ["ssa", "socks5", "", "42", "40", "True"],
        "{table:?}"
    );
    assert_eq!(
        table.row("vendor-sim")[..3],
        ["vendor-sim", "http", "shanghai"],
        "{table:?}"
    );

    for (kind, columns) in [
        ("routings", ROUTING_COLUMNS.as_slice()),
        ("distributionclients", CLIENT_COLUMNS.as_slice()),
        ("gatewaygroups", GROUP_COLUMNS.as_slice()),
    ] {
        let table = Table::parse(&kubectl_ok(cluster, &["get", kind]).await);
        assert_eq!(table.columns, columns, "{table:?}");
    }
    let routing = Table::parse(&kubectl_ok(cluster, &["get", "routings"]).await);
    // The group column comes from the status (no operator runs here).
    assert_eq!(
        routing.row("shanghai-crawler")[..4],
        ["shanghai-crawler", "powerOfTwoChoices", "10", ""],
        "{routing:?}"
    );
    let groups = Table::parse(&kubectl_ok(cluster, &["get", "gwg"]).await);
    assert_eq!(groups.row("edge")[..2], ["edge", "ClusterIP"], "{groups:?}");
    let clients = Table::parse(&kubectl_ok(cluster, &["get", "distributionclients"]).await);
    assert_eq!(
        clients.row("team-crawler")[..3],
        [
            "team-crawler",
            r#"["distribution:extract","gateway:connect"]"#,
            "20"
        ],
        "{clients:?}"
    );
    let all = kubectl_ok(cluster, &["get", "proxypool", "-o", "name"]).await;
    assert!(
        all.contains("upstream.proxypool.io/vendor-sim")
            && all.contains("routing.proxypool.io/shanghai-crawler")
            && all.contains("gatewaygroup.proxypool.io/edge"),
        "{all}"
    );
}

async fn token_request_and_review_for_identity_audience(cluster: &KubeApiServer) {
    let client = cluster.client();
    let pp = PostParams::default();
    // No kubelet runs here: the Pod is only an object, which is all token binding needs.
    let workloads = Workloads::new(client.clone(), NS);
    workloads.create_service_account("gateway").await;
    let pod = workloads.create_pod("gateway-0", "gateway", None).await;
    let pod_uid = pod.uid.clone();
    let token = workloads.token_for(&pod, IDENTITY_AUDIENCE).await;
    assert!(!token.is_empty());

    let reviews = Api::<TokenReview>::all(client);
    let review = |audience: &str| TokenReview {
        spec: TokenReviewSpec {
            token: token.clone(),
            audiences: Some(vec![audience.to_owned()]),
        },
        ..Default::default()
    };
    let ok = reviews
        .create(&pp, &review(IDENTITY_AUDIENCE))
        .await
        .expect("TokenReview")
        .status
        .expect("review status");
    assert_eq!(ok.authenticated, Some(true), "{ok:?}");
    assert_eq!(
        ok.audiences.as_deref(),
        Some([IDENTITY_AUDIENCE.to_owned()].as_slice())
    );
    let user = ok.user.expect("reviewed user");
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:gateway")
    );
    let extra = user.extra.expect("token extras");
    assert_eq!(
        extra.get("authentication.kubernetes.io/pod-name"),
        Some(&vec!["gateway-0".to_owned()]),
        "{extra:?}"
    );
    assert_eq!(
        extra.get("authentication.kubernetes.io/pod-uid"),
        Some(&vec![pod_uid]),
        "{extra:?}"
    );

    // The same token is not valid for another audience (e.g. the API server's own).
    let other = reviews
        .create(&pp, &review("some-other-audience"))
        .await
        .expect("TokenReview")
        .status
        .expect("status");
    assert_ne!(
        other.authenticated,
        Some(true),
        "token accepted for a foreign audience: {other:?}"
    );
}

/// With kube-controller-manager running, objects owned through ownerReferences (as the
/// operator's gateway Deployments and ConfigMaps will be) are garbage-collected when
/// their owner goes (the harness already waited for the ServiceAccount controller).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_manager_collects_owned_objects() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::DeleteParams;

    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = KubeApiServer::start_for_test(&bins, true).await;

    let cms = Api::<ConfigMap>::namespaced(cluster.client(), NS);
    let pp = PostParams::default();
    let cm = |name: &str, owner: Option<OwnerReference>| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        ..Default::default()
    };
    let owner = cms
        .create(&pp, &cm("owner", None))
        .await
        .expect("create owner");
    let reference = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().expect("owner uid"),
        ..Default::default()
    };
    cms.create(&pp, &cm("owned", Some(reference)))
        .await
        .expect("create owned");
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");

    let mut gone = false;
    for _ in 0..240 {
        if cms.get_opt("owned").await.expect("get owned").is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        gone,
        "the garbage collector did not delete the owned ConfigMap within 60s\n{}",
        cluster.logs()
    );
}
