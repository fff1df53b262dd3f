//! Proxy Pool the way its users run it, on a real single-node Kubernetes cluster
//! (`scripts/cluster-up.sh`: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler, kubelet over containerd/runc, kube-proxy, CoreDNS, Skipper):
//!
//! - `helm install` → every pod Ready, under Pod Security `restricted` (enforced);
//! - `kubectl apply` of the example Upstream (the in-cluster vendor simulator), Routing
//!   and DistributionClient → config rendered, gateway pods Ready with identities the
//!   operator issued against kubelet-projected ServiceAccount tokens;
//! - from a client pod: HTTP, HTTPS through CONNECT and SOCKS5 through the gateway
//!   Service, out through at least two simulator proxies; wrong credentials → 407;
//! - from the host: the extract API through the Ingress (TLS) with the client's key;
//!   two calls are disjoint; no key → 401;
//! - `kubectl get` columns; the guard (routes, nftables counters) holds;
//! - `helm test`; `helm upgrade` rolls the controller and the gateways under counted
//!   traffic; a deleted controller pod is replaced while the gateways keep serving and
//!   extraction resumes;
//! - the chart's Redis mode: three controller replicas, one leader (Kubernetes Lease,
//!   its pod labelled, alone behind the control-plane Service); the leader pod deleted
//!   under gateway traffic and extraction: a new leader within the bound, gateway
//!   failures counted, extraction resumes, no proxy handed out twice;
//! - `helm uninstall` leaves no object of the release;
//! - `scripts/cluster-down.sh` leaves the host as it was.
//!
//! One test (one cluster): the steps run in order. Needs root and
//! `scripts/test.d/cluster.sh`; fails under CI without them, skips otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use activity_pool::testkit::RedisServer;
use base64::Engine as _;
use proxy_pool_e2e::cluster::LocalCluster;
use proxy_pool_e2e::k8s::{CLIENT_COLUMNS, ROUTING_COLUMNS, UPSTREAM_COLUMNS, kubectl_table};
use proxy_pool_e2e::procs::succeeded;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "proxy-pool";
const RELEASE: &str = "proxy-pool";
/// The example GatewayGroup `edge`'s gateway Deployment and Service.
const GATEWAY: &str = "edge-gateway";
const CONTROLLER: &str = "proxy-pool-controller";
const CLIENT_POD: &str = "e2e-client";
/// The simulator's echo server as its proxies see it (their own loopback).
const ECHO_HTTP: &str = "http://localhost:8901";
/// On 443: the Routing's `localhost` target is TARGET-checked there.
const ECHO_HTTPS: &str = "https://localhost";
/// Routing parameters the example Routing matches.
const PARAMS: &str = "-region-shanghai";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_pool_on_a_real_cluster() {
    if !LocalCluster::prepared("proxy_pool_on_a_real_cluster") {
        return;
    }
    let host_before = host_state().await;
    let c = LocalCluster::up().await;
    eprintln!("cluster-up.sh: {:.0}s\n{}", c.up_seconds, c.up_stdout);

    every_pod_is_ready_under_restricted(&c).await;
    the_operator_renders_and_gateways_get_issued_identities(&c).await;
    kubectl_get_shows_the_columns(&c).await;
    routing_readiness_follows_its_gateway_pods(&c).await;
    start_client_pod(&c).await;
    traffic_from_a_pod_through_the_gateway(&c).await;
    extract_through_the_ingress(&c).await;
    the_guard_holds(&c).await;
    helm_test_passes(&c).await;
    helm_upgrade_rolls_controller_and_gateways(&c).await;
    a_gateway_roll_loses_no_request(&c).await;
    a_deleted_controller_pod_is_replaced(&c).await;
    gateways_serve_from_their_snapshot_without_a_controller(&c).await;
    let redis = three_replicas_on_redis_and_the_leader_pod_deleted(&c).await;
    the_guard_holds(&c).await;
    helm_uninstall_leaves_no_release_object(&c).await;
    drop(redis);

    let node_ip = c.setting("CLUSTER_NODE_IP").to_owned();
    let bridge = c.setting("CLUSTER_BRIDGE").to_owned();
    let table = c.setting("CLUSTER_NFT_TABLE").to_owned();
    let started = Instant::now();
    let out = c.down().await;
    eprintln!(
        "cluster-down.sh: {:.0}s\n{}",
        started.elapsed().as_secs_f64(),
        out.stderr
    );
    the_host_is_left_clean(&node_ip, &bridge, &table).await;
    assert_eq!(
        host_state().await,
        host_before,
        "the host's routes, addresses, nftables tables, iptables rules, sysctls and paths \
         differ from before the cluster"
    );
}

/// What the cluster may change on the host and must put back.
async fn host_state() -> Vec<String> {
    let mut state = Vec::new();
    for args in [
        &["ip", "-4", "route", "show", "table", "main"][..],
        &["ip", "-4", "-o", "addr", "show"],
        &["ip", "-o", "link", "show"],
        &["nft", "list", "tables"],
    ] {
        state.push(host(args).await);
    }
    let iptables = host(&["iptables-save"]).await;
    state.push(
        iptables
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(" [").next().unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    for name in [
        "vm/overcommit_memory",
        "vm/panic_on_oom",
        "kernel/panic",
        "kernel/panic_on_oops",
        "kernel/keys/root_maxkeys",
        "kernel/keys/root_maxbytes",
        "net/ipv4/ip_forward",
        "net/ipv4/conf/all/route_localnet",
    ] {
        let v = std::fs::read_to_string(format!("/proc/sys/{name}")).unwrap_or_default();
        state.push(format!("{name}={}", v.trim()));
    }
    for path in [
        "/var/lib/kubelet",
        "/run/containerd",
        "/var/lib/cni",
        "/var/log/pods",
    ] {
        state.push(format!("{path}: {}", std::path::Path::new(path).exists()));
    }
    state
}

// --- steps --------------------------------------------------------------------------------

async fn every_pod_is_ready_under_restricted(c: &LocalCluster) {
    let ns = c.kubectl_json(&["get", "namespace", NS]).await;
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted",
        "{ns}"
    );
    let pods = c.kubectl_json(&["-n", NS, "get", "pods"]).await;
    let mut names = Vec::new();
    for pod in pods["items"].as_array().expect("pods") {
        let name = pod["metadata"]["name"].as_str().expect("name").to_owned();
        assert!(is_ready(pod), "pod {name} is not Ready:\n{}", pod["status"]);
        names.push(name);
    }
    for component in ["operator", "controller", "checker", "vendor-sim", GATEWAY] {
        assert!(
            names.iter().any(|n| n.contains(component)),
            "no {component} pod among {names:?}"
        );
    }
    // Enforced, not just labelled: a pod without the restricted settings (no
    // securityContext at all) is refused by admission.
    let out = c
        .kubectl(
            &[
                "-n",
                NS,
                "run",
                "psa-probe",
                "--image=localhost/proxy-pool-cluster/pause:1",
                "--image-pull-policy=Never",
                "--restart=Never",
                "--dry-run=server",
            ],
            Duration::from_secs(60),
        )
        .await;
    assert!(
        !out.success && out.stderr.contains("violates PodSecurity \"restricted"),
        "a pod outside Pod Security restricted must be refused:\n{}\n{}",
        out.stdout,
        out.stderr
    );
}

async fn the_operator_renders_and_gateways_get_issued_identities(c: &LocalCluster) {
    let cm = c
        .kubectl_json(&[
            "-n",
            NS,
            "get",
            "configmap",
            &format!("{CONTROLLER}-config"),
        ])
        .await;
    let config = cm["data"]["config.yaml"].as_str().expect("config.yaml");
    for name in ["vendor-sim", "shanghai-crawler", "team-crawler"] {
        assert!(config.contains(name), "{name} not rendered:\n{config}");
    }
    let d = c
        .kubectl_json(&["-n", NS, "get", "deployment", GATEWAY])
        .await;
    assert_eq!(d["status"]["readyReplicas"], 2, "{}", d["status"]);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["terminationGracePeriodSeconds"], 5 + 30 + 5);
    let c0 = &pod["containers"][0];
    assert_eq!(c0["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c0["securityContext"]["capabilities"]["drop"][0], "ALL");
    let token = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find_map(|v| {
            v["projected"]["sources"][0]["serviceAccountToken"]
                .as_object()
                .cloned()
        })
        .expect("a projected ServiceAccount token volume");
    assert_eq!(token["audience"], "proxy-pool-identity");
    let pdb = c.kubectl_json(&["-n", NS, "get", "pdb", GATEWAY]).await;
    assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{pdb}");
    // Each gateway pod got its certificate from the operator's issuer with the token the
    // kubelet projected (the pods have no other credential), then registered.
    for name in pod_names(c, "proxypool.io/component=gateway").await {
        let logs = c.kubectl_ok(&["-n", NS, "logs", &name]).await;
        let id = format!("spiffe://proxy-pool.local/default/worker/{name}");
        assert!(
            logs.contains("workload certificate issued") && logs.contains(&id),
            "{name} has no issued identity {id}:\n{logs}"
        );
        assert!(
            logs.contains("registered with the control plane"),
            "{name}:\n{logs}"
        );
    }
}

async fn kubectl_get_shows_the_columns(c: &LocalCluster) {
    for (kind, columns, first) in [
        (
            "upstreams",
            UPSTREAM_COLUMNS.as_slice(),
            ["vendor-sim", "http", "shanghai"].as_slice(),
        ),
        (
            "routings",
            ROUTING_COLUMNS.as_slice(),
            [
                "shanghai-crawler",
                "powerOfTwoChoices",
                "10",
                "edge",
                "2",
                "True",
            ]
            .as_slice(),
        ),
    ] {
        let rows = table(c, kind).await;
        assert_eq!(rows[0], columns);
        assert_eq!(rows[1][..first.len()], *first, "{rows:?}");
    }
    upstream_status_shows_the_controllers_inventory(c).await;
    let rows = table(c, "distributionclients").await;
    assert_eq!(rows[0], CLIENT_COLUMNS);
    let d = &rows[1];
    assert_eq!(
        (&*d[0], &*d[2], &*d[3]),
        ("team-crawler", "20", "True"),
        "{rows:?}"
    );
    assert!(
        d[1].contains("distribution:extract") && d[1].contains("gateway:connect"),
        "{rows:?}"
    );
}

/// The Upstream's status is the controller's inventory (the operator reads its admin
/// API): MANAGED counts the simulator's proxies, AVAILABLE is filled, READY is True only once
/// the controller has fetched the vendor, and `lastFetchTime` is a recent fetch.
async fn upstream_status_shows_the_controllers_inventory(c: &LocalCluster) {
    let count = |cell: &str| cell.parse::<u64>().unwrap_or(0);
    eventually(c, "the Upstream's inventory columns", 90, || async {
        let rows = table(c, "upstreams").await;
        rows.get(1)
            .is_some_and(|u| count(&u[3]) > 0 && u[4].parse::<u64>().is_ok() && u[5] == "True")
    })
    .await;
    let up = c
        .kubectl_json(&["-n", NS, "get", "upstream", "vendor-sim"])
        .await;
    let status = &up["status"];
    let managed = status["inventory"]["managed"].as_u64().unwrap_or(0);
    // AVAILABLE counts the unowned usable proxies: the gateways own most of the pool
    // (extractionReserve 0), so it may well be 0.
    let available = status["inventory"]["available"].as_u64();
    assert!(
        managed > 0 && available.is_some_and(|a| a <= managed),
        "0 < managed, available ≤ managed: {status}"
    );
    let fetched = status["lastFetchTime"]
        .as_str()
        .and_then(rfc3339)
        .unwrap_or_else(|| panic!("lastFetchTime: {status}"));
    let age = SystemTime::now()
        .duration_since(fetched)
        .unwrap_or(Duration::ZERO);
    assert!(
        age < Duration::from_secs(120),
        "the last fetch is {age:?} old: {status}"
    );
    let ready = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .unwrap_or_else(|| panic!("no Ready condition: {status}"));
    assert_eq!(ready["status"], "True", "{status}");
}

/// A Routing is Ready only when all its group's gateway pods are: one more replica of
/// the GatewayGroup turns it `Ready=False` (`GatewayPodsNotReady`) until the new pod
/// is Ready; back to two, it is Ready again.
async fn routing_readiness_follows_its_gateway_pods(c: &LocalCluster) {
    let scale = |replicas: u32| async move {
        let patch = serde_json::json!({"spec": {"replicas": replicas}});
        c.kubectl_ok(&[
            "-n",
            NS,
            "patch",
            "gatewaygroup",
            "edge",
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ])
        .await;
    };
    let ready_condition = || async {
        let r = c
            .kubectl_json(&["-n", NS, "get", "routing", "shanghai-crawler"])
            .await;
        let cond = r["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
            .unwrap_or(Value::Null);
        (
            cond["status"].as_str().unwrap_or("").to_owned(),
            cond["reason"].as_str().unwrap_or("").to_owned(),
            r["status"]["readyReplicas"].as_i64().unwrap_or(0),
        )
    };
    scale(3).await;
    // The new pod needs seconds (sandbox, identity, registration, a usable snapshot):
    // the Routing must say so meanwhile.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let mut not_ready = false;
    while Instant::now() < deadline && !not_ready {
        let now = ready_condition().await;
        not_ready = now.0 == "False" && now.1 == "GatewayPodsNotReady";
        seen.push(now);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        not_ready,
        "a third gateway replica did not turn the Routing Ready=False \
         (GatewayPodsNotReady): {seen:?}"
    );
    eventually(c, "the Routing Ready with 3 gateway pods", 180, || async {
        let (status, _, ready) = ready_condition().await;
        status == "True" && ready == 3
    })
    .await;
    scale(2).await;
    eventually(
        c,
        "the gateway Deployment back at 2 replicas",
        120,
        || async {
            rolled_out(c, GATEWAY).await
                && pod_names(c, "proxypool.io/component=gateway").await.len() == 2
        },
    )
    .await;
    eventually(c, "the Routing Ready with 2 gateway pods", 60, || async {
        let (status, _, ready) = ready_condition().await;
        status == "True" && ready == 2
    })
    .await;
}

async fn start_client_pod(c: &LocalCluster) {
    // The simulator's echo CA, so HTTPS through the tunnel is verified end to end.
    let info = sim_info(c).await;
    let ca = info["caPem"].as_str().expect("caPem");
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "e2e-echo-ca", "namespace": NS},
        "data": {"ca.pem": ca},
    });
    apply(c, &cm).await;
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": CLIENT_POD, "namespace": NS},
        "spec": {
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "client", "image": "localhost/proxy-pool-cluster/e2e-client:1",
                "imagePullPolicy": "Never",
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "ca", "mountPath": "/etc/e2e-ca", "readOnly": true}],
            }],
            "volumes": [{"name": "ca", "configMap": {"name": "e2e-echo-ca"}}],
        },
    });
    apply(c, &pod).await;
    c.kubectl_ok(&[
        "-n",
        NS,
        "wait",
        "--for=condition=Ready",
        "--timeout=120s",
        &format!("pod/{CLIENT_POD}"),
    ])
    .await;
}

async fn traffic_from_a_pod_through_the_gateway(c: &LocalCluster) {
    let user = format!("{}{PARAMS}", c.credentials.gateway_username);
    let pass = c.credentials.gateway_password.expose();
    let http_proxy = format!("http://{user}:{pass}@{GATEWAY}:3128");
    let socks_proxy = format!("socks5h://{user}:{pass}@{GATEWAY}:1080");
    let mut egress = BTreeSet::new();
    // Plain HTTP (absolute URI), rotating per request: a bounded number of requests.
    for i in 0..12 {
        let echo = echo_in_pod(c, &["-x", &http_proxy, &format!("{ECHO_HTTP}/http-{i}")]).await;
        assert_eq!(echo["path"], format!("/http-{i}"));
        egress.insert(remote_ip(&echo));
    }
    assert!(
        egress.len() >= 2,
        "HTTP through the gateway left by one proxy only: {egress:?}"
    );
    // HTTPS through a CONNECT tunnel, certificate verified.
    let echo = echo_in_pod(
        c,
        &[
            "--cacert",
            "/etc/e2e-ca/ca.pem",
            "-x",
            &http_proxy,
            &format!("{ECHO_HTTPS}/connect"),
        ],
    )
    .await;
    assert_eq!(
        (&echo["tls"], &echo["path"]),
        (&Value::Bool(true), &Value::from("/connect"))
    );
    egress.insert(remote_ip(&echo));
    // SOCKS5, the name resolved by the proxy (socks5h).
    let echo = echo_in_pod(c, &["-x", &socks_proxy, &format!("{ECHO_HTTP}/socks5")]).await;
    assert_eq!(echo["path"], "/socks5");
    egress.insert(remote_ip(&echo));
    // Wrong credentials: 407 from the gateway.
    let wrong = format!("http://{user}:not-the-password@{GATEWAY}:3128");
    let code = curl_in_pod(
        c,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-x",
            &wrong,
            &format!("{ECHO_HTTP}/wrong"),
        ],
    )
    .await;
    assert_eq!(code.trim(), "407");
    eprintln!(
        "pod traffic left by {} simulator proxies: {egress:?}",
        egress.len()
    );
}

async fn extract_through_the_ingress(c: &LocalCluster) {
    let first = extract(c, Some(c.credentials.client_api_key.expose()), "e2e-a").await;
    assert_eq!(first.0, 200, "{}", first.1);
    let second = extract(c, Some(c.credentials.client_api_key.expose()), "e2e-b").await;
    assert_eq!(second.0, 200, "{}", second.1);
    let a = proxy_ids(&first.1);
    let b = proxy_ids(&second.1);
    assert!(!a.is_empty() && !b.is_empty(), "{}\n{}", first.1, second.1);
    assert!(a.is_disjoint(&b), "two extracts share proxies: {a:?} {b:?}");
    let none = extract(c, None, "e2e-c").await;
    assert_eq!(none.0, 401, "{}", none.1);
}

async fn the_guard_holds(c: &LocalCluster) {
    // Pods route only to the cluster's ranges: no default route.
    let routes = curl_in_pod(c, &["file:///proc/net/route"]).await;
    let mut dests = Vec::new();
    for line in routes.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let dest = hex_ip(f[1]);
        let mask = hex_ip(f[7]);
        assert_ne!(mask, [0, 0, 0, 0], "a pod has a default route:\n{routes}");
        dests.push(format!(
            "{}/{}",
            dotted(dest),
            u32::from_be_bytes(mask).count_ones()
        ));
    }
    let allowed = [
        c.setting("CLUSTER_POD_SUBNET").to_owned(),
        c.setting("CLUSTER_SERVICE_CIDR").to_owned(),
        format!("{}/32", c.setting("CLUSTER_NODE_IP")),
    ];
    for d in &dests {
        assert!(allowed.contains(d), "pod route {d} outside {allowed:?}");
    }
    // Every cluster range is unreachable beyond its specific routes.
    let unreachable = host(&["ip", "-4", "route", "show", "type", "unreachable"]).await;
    for range in [
        "CLUSTER_NODE_RANGE",
        "CLUSTER_POD_RANGE",
        "CLUSTER_SERVICE_RANGE",
    ] {
        assert!(
            unreachable.contains(c.setting(range)),
            "no unreachable route for {range}:\n{unreachable}"
        );
    }
    // The guard's counters never moved: nothing was dropped on its way off the machine.
    let table = c.setting("CLUSTER_NFT_TABLE");
    let counters = host(&["nft", "-j", "list", "counters", "table", "inet", table]).await;
    let json: Value = serde_json::from_str(&counters).expect("nft JSON");
    let mut seen = 0;
    for item in json["nftables"].as_array().expect("nftables") {
        if let Some(counter) = item.get("counter") {
            seen += 1;
            assert_eq!(
                counter["packets"], 0,
                "guard counter {}: {counters}",
                counter["name"]
            );
        }
    }
    assert_eq!(seen, 2, "{counters}");
}

async fn helm_test_passes(c: &LocalCluster) {
    let out = c
        .helm(
            &["test", RELEASE, "-n", NS, "--timeout", "3m"],
            Duration::from_secs(240),
        )
        .await;
    assert!(
        out.success && out.stdout.contains("Succeeded"),
        "helm test:\n{}\n{}\n{}",
        out.stdout,
        out.stderr,
        c.logs()
    );
}

/// `helm upgrade` of the release with the test cluster's values and each of `sets` as a
/// `--set`, waiting for it (5 minutes at most); panics with `what`, helm's output and the
/// cluster's logs when it fails.
async fn helm_upgrade(c: &LocalCluster, what: &str, sets: &[&str]) {
    let mut args = vec![
        "upgrade",
        RELEASE,
        "charts/proxy-pool",
        "-n",
        NS,
        "--values",
        "scripts/cluster/values.yaml",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(["--wait", "--timeout", "5m"]);
    let out = c.helm(&args, Duration::from_secs(360)).await;
    assert!(
        out.success,
        "{what}:\n{}\n{}\n{}",
        out.stdout,
        out.stderr,
        c.logs()
    );
}

/// `helm upgrade` with the `e2e-rollout` pod annotation of the controller and of the
/// gateways set to `rollout`, then waits (4 minutes at most) until the gateway
/// Deployment has rolled out a template other than `gateway_rs`; how long that took.
async fn upgrade_and_roll_gateways(
    c: &LocalCluster,
    [controller, gateway]: [&str; 2],
    gateway_rs: &str,
) -> Duration {
    let started = Instant::now();
    helm_upgrade(
        c,
        "helm upgrade",
        &[
            &format!("controller.podAnnotations.e2e-rollout={controller}"),
            &format!("gateway.podAnnotations.e2e-rollout={gateway}"),
        ],
    )
    .await;
    eventually(c, "the gateway Deployment to roll", 240, || async {
        template_hash(c, GATEWAY).await != gateway_rs && rolled_out(c, GATEWAY).await
    })
    .await;
    started.elapsed()
}

async fn helm_upgrade_rolls_controller_and_gateways(c: &LocalCluster) {
    let controller_rs = template_hash(c, CONTROLLER).await;
    let gateway_rs = template_hash(c, GATEWAY).await;
    let traffic = Traffic::start(c).await;
    // The operator rolls (new gateway pod settings), then the gateways roll.
    let roll = upgrade_and_roll_gateways(c, ["2", "2"], &gateway_rs).await;
    assert_ne!(
        template_hash(c, CONTROLLER).await,
        controller_rs,
        "the controller rolled"
    );
    assert!(rolled_out(c, CONTROLLER).await);
    // With the chart's memory store a new controller starts with an empty pool: the
    // gateways take its (empty) snapshot and refuse until it has fetched and checked
    // proxies again. Traffic must come back.
    let recovered = traffic.recovered_within(Duration::from_secs(180)).await;
    let report = traffic.stop().await;
    eprintln!(
        "helm upgrade roll: controller and gateways rolled in {:.0}s; {} requests through \
         the gateway, {} failed {:?}; traffic back {:.0}s after the roll",
        roll.as_secs_f64(),
        report.total,
        report.failed,
        report.failures,
        recovered.map_or(f64::NAN, |r| r.saturating_sub(roll).as_secs_f64())
    );
    assert!(report.total >= 20, "{report:?}");
    assert!(
        recovered.is_some(),
        "traffic did not recover after the roll: {report:?}\n{}",
        c.logs()
    );
}

/// Only the gateways roll (a gateway value changes): each old pod turns unready on
/// SIGTERM and keeps serving for the shutdown delay while the endpoints drop it, then
/// drains; the new pods get their proxies from the running controller. No request
/// through the Service may fail.
async fn a_gateway_roll_loses_no_request(c: &LocalCluster) {
    let controller_rs = template_hash(c, CONTROLLER).await;
    let gateway_rs = template_hash(c, GATEWAY).await;
    // Steady traffic first, so the count below is the roll's own.
    let traffic = Traffic::steady(c, Duration::from_secs(120), "before the gateway roll").await;
    let roll = upgrade_and_roll_gateways(c, ["2", "3"], &gateway_rs).await;
    // The old pods' termination (shutdown delay + drain) overlaps the end of the roll.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let report = traffic.stop().await;
    assert_eq!(
        template_hash(c, CONTROLLER).await,
        controller_rs,
        "the controller did not roll"
    );
    eprintln!(
        "gateway-only roll ({:.0}s): {} requests through the gateway, {} failed {:?}",
        roll.as_secs_f64(),
        report.total,
        report.failed,
        report.failures
    );
    assert!(report.total >= 20, "{report:?}");
    assert_eq!(report.failed, 0, "a gateway roll lost requests: {report:?}");
}

async fn a_deleted_controller_pod_is_replaced(c: &LocalCluster) {
    let before = pod_names(c, "proxypool.io/component=controller").await;
    let traffic = Traffic::start(c).await;
    let started = Instant::now();
    let deleted_at = SystemTime::now();
    c.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "pod",
        "-l",
        "proxypool.io/component=controller",
        "--wait=false",
    ])
    .await;
    eventually(c, "a new controller pod Ready", 180, || async {
        let now = pod_names(c, "proxypool.io/component=controller").await;
        now.iter().all(|n| !before.contains(n)) && rolled_out(c, CONTROLLER).await
    })
    .await;
    let replaced = started.elapsed();
    // Until the new pod turned Ready (its Ready condition's transition time) no
    // controller served: the gateways served from their snapshots alone.
    let ready_at = pods(c, "proxypool.io/component=controller")
        .await
        .iter()
        .filter_map(|p| p["status"]["conditions"].as_array())
        .flatten()
        .filter(|c| c["type"] == "Ready" && c["status"] == "True")
        .filter_map(|c| c["lastTransitionTime"].as_str())
        .filter_map(rfc3339)
        .max()
        .expect("the new pod's Ready time");
    // Extraction resumes through the Ingress with the new pod.
    let mut resumed = None;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut last = (0, String::new());
    let mut i = 0;
    while Instant::now() < deadline {
        i += 1;
        last = extract(
            c,
            Some(c.credentials.client_api_key.expose()),
            &format!("e2e-resume-{i}"),
        )
        .await;
        if last.0 == 200 && !proxy_ids(&last.1).is_empty() {
            resumed = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let resumed =
        resumed.unwrap_or_else(|| panic!("extraction did not resume: {last:?}\n{}", c.logs()));
    let recovered = traffic.recovered_within(Duration::from_secs(180)).await;
    let gap = traffic.between(deleted_at, ready_at);
    let report = traffic.stop().await;
    eprintln!(
        "controller pod deleted: replacement Ready after {:.0}s, extraction resumed after \
         {:.0}s, gateway traffic back after {:.0}s; until the replacement was Ready: {} requests, \
         {} failed; overall {} requests, {} failed {:?}",
        replaced.as_secs_f64(),
        resumed.as_secs_f64(),
        recovered.map_or(f64::NAN, |r| r.as_secs_f64()),
        gap.total,
        gap.failed,
        report.total,
        report.failed,
        report.failures
    );
    assert_eq!(
        gap.failed, 0,
        "gateways must serve from their snapshot until the new controller is there: {gap:?}"
    );
    assert!(
        recovered.is_some(),
        "gateway traffic did not recover: {report:?}\n{}",
        c.logs()
    );
}

/// No controller at all for a while (its Deployment scaled to zero): the gateways keep
/// serving from their snapshots, every request succeeds; scaled back, extraction and
/// traffic resume.
async fn gateways_serve_from_their_snapshot_without_a_controller(c: &LocalCluster) {
    let traffic = Traffic::steady(
        c,
        Duration::from_secs(120),
        "before the controller goes away",
    )
    .await;
    // From the scale-down on, no controller publishes. A gateway serves from its last
    // snapshot until min(validUntil, maxStaleAge) past it: 30 s with the controller's
    // defaults, so 12 s without any controller must cost nothing.
    let away_from = SystemTime::now();
    c.kubectl_ok(&["-n", NS, "scale", "deployment", CONTROLLER, "--replicas=0"])
        .await;
    tokio::time::sleep(
        Duration::from_secs(12).saturating_sub(away_from.elapsed().unwrap_or_default()),
    )
    .await;
    let away = traffic.between(away_from, SystemTime::now());
    eventually(c, "no controller pod left", 120, || async {
        pod_names(c, "proxypool.io/component=controller")
            .await
            .is_empty()
    })
    .await;
    c.kubectl_ok(&["-n", NS, "scale", "deployment", CONTROLLER, "--replicas=1"])
        .await;
    eventually(c, "the controller back", 180, || async {
        rolled_out(c, CONTROLLER).await
    })
    .await;
    let back = Instant::now();
    let mut resumed = None;
    let mut i = 0;
    while back.elapsed() < Duration::from_secs(180) {
        i += 1;
        let (code, body) = extract(
            c,
            Some(c.credentials.client_api_key.expose()),
            &format!("e2e-back-{i}"),
        )
        .await;
        if code == 200 && !proxy_ids(&body).is_empty() {
            resumed = Some(back.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let recovered = traffic.recovered_within(Duration::from_secs(180)).await;
    let report = traffic.stop().await;
    eprintln!(
        "no controller for 12 s: {} requests through the gateway, {} failed; after it came \
         back, extraction resumed in {:.0}s; overall {} requests, {} failed {:?}",
        away.total,
        away.failed,
        resumed.map_or(f64::NAN, |r| r.as_secs_f64()),
        report.total,
        report.failed,
        report.failures
    );
    assert!(away.total >= 40, "too little traffic measured: {away:?}");
    assert_eq!(
        away.failed, 0,
        "gateways must serve from their snapshot while no controller runs: {away:?}"
    );
    assert!(resumed.is_some(), "extraction did not resume\n{}", c.logs());
    assert!(
        recovered.is_some(),
        "gateway traffic did not recover: {report:?}\n{}",
        c.logs()
    );
}

/// The Redis of the chart's Redis mode: the pool's test `redis-server` (no persistence,
/// stopped when dropped), also bound to the node's address, where a managed Redis outside
/// the cluster would be (pods reach the node's address). Its URL as the pods see it.
fn host_redis(node_ip: &str) -> (RedisServer, String) {
    let redis = RedisServer::start_with(vec!["--bind".into(), "127.0.0.1".into(), node_ip.into()]);
    let address = format!("redis://{node_ip}:{}/0", redis.port());
    (redis, address)
}

/// The controller pods labelled leader, with whether each is Ready.
async fn leader_pods(c: &LocalCluster) -> Vec<(String, bool)> {
    pods(
        c,
        "proxypool.io/component=controller,proxypool.io/leader=true",
    )
    .await
    .iter()
    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
    .map(|p| {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (name, is_ready(p))
    })
    .collect()
}

/// The ready endpoints' pod names behind a Service.
async fn endpoint_pods(c: &LocalCluster, service: &str) -> Vec<String> {
    let label = format!("kubernetes.io/service-name={service}");
    let slices = c
        .kubectl_json(&["-n", NS, "get", "endpointslices", "-l", &label])
        .await;
    let mut pods: Vec<String> = slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] != Value::Bool(false))
        .filter_map(|e| e["targetRef"]["name"].as_str().map(str::to_owned))
        .collect();
    pods.sort();
    pods
}

/// What one extraction loop saw: when each call was sent, its status and proxy IDs.
type ExtractLog = Arc<parking_lot::Mutex<Vec<(SystemTime, u16, BTreeSet<String>)>>>;

/// The pace of the extraction during the leader change: 2 proxies every 6 s, half of
/// what the simulator's upstream supplies (10 every 15 s), so extraction does not drain
/// the gateways bare by itself (it has priority over them, `docs/control-plane.md`, "Drain
/// on demand") and a gateway refusal would be the leader change's. At 2 every 4 s (three
/// quarters of the supply) a run of 2026-12-03 saw the demand that piled up in the
/// leaderless seconds drain a gateway bare, while the leases of a gateway pod replaced
/// by the Redis roll still held proxies (`docs/reliability.md`).
const EXTRACT_EVERY: Duration = Duration::from_secs(6);

/// Three controller replicas in the chart's Redis mode, the leader elected on a
/// Kubernetes Lease; the leader pod deleted under gateway traffic and extraction.
async fn three_replicas_on_redis_and_the_leader_pod_deleted(c: &LocalCluster) -> RedisServer {
    let (redis, address) = host_redis(c.setting("CLUSTER_NODE_IP"));
    let address = format!("redis.address={address}");
    helm_upgrade(
        c,
        "helm upgrade to Redis",
        &["store.backend=redis", &address],
    )
    .await;
    // The chart's default on Redis: three replicas, every one Ready.
    eventually(c, "three controller replicas Ready", 300, || async {
        let d = c
            .kubectl_json(&["-n", NS, "get", "deployment", CONTROLLER])
            .await;
        d["spec"]["replicas"] == 3 && rolled_out(c, CONTROLLER).await
    })
    .await;
    // The operator re-renders the config for the new store: the controller and the
    // gateways roll again. Measure on a settled installation: both rolled out and
    // unchanged for 30 s.
    let started = Instant::now();
    let mut last = (String::new(), String::new());
    let mut stable_since = Instant::now();
    loop {
        let now = (
            template_hash(c, CONTROLLER).await,
            template_hash(c, GATEWAY).await,
        );
        let done = rolled_out(c, CONTROLLER).await && rolled_out(c, GATEWAY).await;
        if now != last || !done {
            last = now;
            stable_since = Instant::now();
        } else if stable_since.elapsed() >= Duration::from_secs(30) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the installation did not settle on Redis\n{}",
            c.logs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "Redis mode: settled {:.0}s after the upgrade",
        started.elapsed().as_secs_f64()
    );
    // Exactly one leads: one pod labelled, the Lease's holder, alone behind the
    // control-plane Service (the Distribution Service has all three).
    let control_plane = format!("{CONTROLLER}-control-plane");
    eventually(
        c,
        "exactly one leader pod, alone behind the control-plane Service",
        120,
        || async {
            let leaders = leader_pods(c).await;
            let [(leader, true)] = &leaders[..] else {
                return false;
            };
            endpoint_pods(c, &control_plane).await == vec![leader.clone()]
        },
    )
    .await;
    let leader = leader_pods(c).await[0].0.clone();
    let lease = c
        .kubectl_json(&["-n", NS, "get", "lease", CONTROLLER])
        .await;
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default();
    assert!(
        holder.starts_with(&format!("{leader}-")),
        "Lease holder {holder}, leader pod {leader}"
    );
    assert!(
        lease["metadata"]["annotations"]["proxypool.io/fencing-token"].is_string(),
        "the tenure carries its Redis fencing token: {lease}"
    );
    assert_eq!(
        endpoint_pods(c, CONTROLLER).await.len(),
        3,
        "Distribution on every replica"
    );

    // Load: gateway traffic (the new pool filled, the gateways registered with the
    // leader) and extraction through the Ingress, spread by the Service over the three.
    let traffic = Traffic::steady(c, Duration::from_secs(240), "on the Redis store").await;
    let extracted: ExtractLog = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let extraction = {
        let (log, stop) = (extracted.clone(), stop.clone());
        let (ingress, key) = (
            Ingress::of(c),
            c.credentials.client_api_key.expose().to_owned(),
        );
        tokio::spawn(async move {
            for i in 0..600 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let at = SystemTime::now();
                let (code, body) = extract_at(&ingress, Some(&key), &format!("e2e-ha-{i}")).await;
                log.lock().push((at, code, proxy_ids(&body)));
                tokio::time::sleep(EXTRACT_EVERY).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(8)).await;

    let deleted_at = SystemTime::now();
    let started = Instant::now();
    c.kubectl_ok(&["-n", NS, "delete", "pod", &leader, "--wait=false"])
        .await;
    let mut new_leader = None;
    while started.elapsed() < Duration::from_secs(120) {
        if let [(name, true)] = &leader_pods(c).await[..]
            && *name != leader
            && endpoint_pods(c, &control_plane).await == vec![name.clone()]
        {
            new_leader = Some((name.clone(), started.elapsed()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (new_leader, took) = new_leader.unwrap_or_else(|| {
        panic!(
            "no new leader after the leader pod's deletion\n{}",
            c.logs()
        )
    });
    // Load goes on past the change; extraction must be served again after it, and the
    // gateway traffic must come back.
    tokio::time::sleep(Duration::from_secs(15)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = extraction.await;
    let recovered = traffic.recovered_within(Duration::from_secs(120)).await;
    let during = traffic.between(deleted_at, SystemTime::now());
    let window = traffic.failure_window(deleted_at);
    if during.failed > 0 {
        // What the gateways and the controllers said across the change.
        for selector in [
            "app.kubernetes.io/name=proxy-pool-gateway",
            "proxypool.io/component=controller",
        ] {
            let out = c
                .kubectl(
                    &[
                        "-n",
                        NS,
                        "logs",
                        "-l",
                        selector,
                        "--prefix",
                        "--since=120s",
                        "--tail=150",
                    ],
                    Duration::from_secs(30),
                )
                .await;
            eprintln!("--- logs of {selector} ---\n{}{}", out.stdout, out.stderr);
        }
    }
    let report = traffic.stop().await;

    let log = extracted.lock().clone();
    let mut seen = BTreeSet::new();
    let mut twice = BTreeSet::new();
    for id in log.iter().flat_map(|(_, _, ids)| ids) {
        if !seen.insert(id.clone()) {
            twice.insert(id.clone());
        }
    }
    let served = |from: SystemTime| {
        log.iter()
            .filter(|(at, code, ids)| *at >= from && *code == 200 && !ids.is_empty())
            .count()
    };
    let errors: Vec<_> = log
        .iter()
        .filter(|(_, code, _)| *code != 200 && *code != 409)
        .map(|(at, code, _)| {
            (
                at.duration_since(deleted_at)
                    .map_or(-0.0, |d| d.as_secs_f64()),
                *code,
            )
        })
        .collect();
    let after_change = deleted_at + took;
    eprintln!(
        "three replicas on Redis, leader pod {leader} deleted: new leader {new_leader} labelled \
         and alone behind the control-plane Service after {:.1}s (bound: lease 10s + retry 2s); \
         gateway requests from the delete on: {} sent, {} failed {:?} (overall {} sent, {} failed); \
         extraction: {} calls, {} served ({} after the new leader), {} proxies, {} handed out \
         twice; errors (s after the delete, status): {errors:?}; gateway failures from \
         {window:?} s after the delete; gateway traffic back: {recovered:?} after the start \
         of its run",
        took.as_secs_f64(),
        during.total,
        during.failed,
        during.failures,
        report.total,
        report.failed,
        log.len(),
        served(UNIX_EPOCH),
        served(after_change),
        seen.len(),
        twice.len(),
    );
    assert!(
        took <= Duration::from_secs(15),
        "a new leader within the failover bound (12 s, +3 s for the label and the poll): {took:?}"
    );
    assert!(twice.is_empty(), "proxies handed out twice: {twice:?}");
    assert!(
        served(after_change) > 0,
        "extraction did not resume\n{}",
        c.logs()
    );
    assert!(
        during.total >= 40,
        "too little gateway traffic measured: {during:?}"
    );
    assert!(
        recovered.is_some(),
        "gateway traffic did not recover after the leader change: {report:?}\n{}",
        c.logs()
    );
    // The gateways serve from their snapshots across the change and are back with the
    // new leader before a lease of theirs runs out (docs/reliability.md, "Leader change
    // and gateway leases").
    assert_eq!(
        during.failed, 0,
        "gateway requests failed across the leader change: {during:?}"
    );
    redis
}

#[test]
fn kubernetes_times_parse() {
    let at = |s| rfc3339(s).map(|t| t.duration_since(UNIX_EPOCH).expect("after").as_secs());
    assert_eq!(at("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(at("2026-12-01T16:28:05Z"), Some(1_796_142_485));
    assert_eq!(at("2024-02-29T23:59:59Z"), Some(1_709_251_199));
    assert_eq!(at("2024-02-29T23:59:59+01:00"), None);
}

/// An RFC 3339 UTC time as Kubernetes writes it (`2026-12-01T16:28:05Z`).
fn rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 20 || b[19] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, sec) = (n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + mi * 60 + sec).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

async fn helm_uninstall_leaves_no_release_object(c: &LocalCluster) {
    c.kubectl_ok(&["-n", NS, "delete", "pod", CLIENT_POD, "--wait=false"])
        .await;
    let out = c
        .helm(
            &["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m"],
            Duration::from_secs(240),
        )
        .await;
    assert!(
        out.success,
        "helm uninstall:\n{}\n{}",
        out.stdout, out.stderr
    );
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    let kinds = c
        .kubectl_ok(&["api-resources", "--verbs=list", "-o", "name"])
        .await;
    let kinds: Vec<&str> = kinds
        .lines()
        .filter(|k| !k.is_empty() && *k != "events" && *k != "events.events.k8s.io")
        .collect();
    let joined = kinds.join(",");
    eventually(c, "every object of the release to go", 120, || async {
        let left = c
            .kubectl_ok(&["get", &joined, "-A", "-l", &selector, "-o", "name"])
            .await;
        if !left.trim().is_empty() {
            eprintln!("still there: {left}");
        }
        left.trim().is_empty()
    })
    .await;
    // What the release's operator made for itself goes with it too.
    for (kind, name) in [
        ("secret", "proxy-pool-identity-ca"),
        ("configmap", "proxy-pool-trust-bundle"),
        ("secret", "proxy-pool-controller-tls"),
        ("configmap", "proxy-pool-controller-config"),
    ] {
        eventually(c, &format!("{kind}/{name} to go"), 60, || async {
            let out = c
                .kubectl(&["-n", NS, "get", kind, name], Duration::from_secs(30))
                .await;
            !out.success && out.stderr.contains("NotFound")
        })
        .await;
    }
    // The CRDs stay (documented policy: deleting them deletes every custom resource).
    for crd in [
        "upstreams.proxypool.io",
        "routings.proxypool.io",
        "distributionclients.proxypool.io",
    ] {
        c.kubectl_ok(&["get", "crd", crd]).await;
    }
}

async fn the_host_is_left_clean(node_ip: &str, bridge: &str, table: &str) {
    let routes = host(&["ip", "-4", "route", "show", "type", "unreachable"]).await;
    for range in ["10.250.0.0/24", "10.244.0.0/16", "10.96.0.0/16"] {
        assert!(!routes.contains(range), "{range} still routed: {routes}");
    }
    let addrs = host(&["ip", "-4", "-o", "addr", "show", "dev", "lo"]).await;
    assert!(!addrs.contains(node_ip), "{addrs}");
    let link = tokio::process::Command::new("ip")
        .args(["link", "show", bridge])
        .output()
        .await
        .expect("ip");
    assert!(!link.status.success(), "bridge {bridge} left behind");
    let nft = tokio::process::Command::new("nft")
        .args(["list", "table", "inet", table])
        .output()
        .await
        .expect("nft");
    assert!(!nft.status.success(), "nft table {table} left behind");
    for save in ["iptables-save", "ip6tables-save"] {
        let rules = host(&[save]).await;
        assert!(
            !rules.contains("KUBE-"),
            "Kubernetes rules left behind:\n{rules}"
        );
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    assert!(
        !mounts.contains("proxy-pool-cluster"),
        "mounts left behind:\n{mounts}"
    );
}

// --- helpers ------------------------------------------------------------------------------

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The pods (objects) matching `selector` in the test namespace, terminating ones
/// included.
async fn pods(c: &LocalCluster, selector: &str) -> Vec<Value> {
    let list = c
        .kubectl_json(&["-n", NS, "get", "pods", "-l", selector])
        .await;
    list["items"].as_array().cloned().expect("a pod list")
}

async fn pod_names(c: &LocalCluster, selector: &str) -> Vec<String> {
    pods(c, selector)
        .await
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().expect("name").to_owned())
        .collect()
}

async fn table(c: &LocalCluster, kind: &str) -> Vec<Vec<String>> {
    let text = c.kubectl_ok(&["-n", NS, "get", kind]).await;
    let rows = kubectl_table(&text);
    assert!(rows.len() >= 2, "kubectl get {kind}:\n{text}");
    rows
}

async fn apply(c: &LocalCluster, object: &Value) {
    let dir = std::env::temp_dir().join(format!("pp-cluster-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!(
        "{}.json",
        object["metadata"]["name"].as_str().expect("name")
    ));
    std::fs::write(&file, object.to_string()).expect("write manifest");
    c.kubectl_ok(&["apply", "-f", &file.display().to_string()])
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// curl inside the client pod (retried on transport errors: the first connection to a
/// new Service can race kube-proxy); its stdout.
async fn curl_in_pod(c: &LocalCluster, args: &[&str]) -> String {
    let mut all = vec![
        "-n",
        NS,
        "exec",
        CLIENT_POD,
        "--",
        "curl",
        "-sS",
        "--max-time",
        "10",
    ];
    all.extend_from_slice(args);
    let mut last = None;
    for _ in 0..5 {
        let out = c.kubectl(&all, Duration::from_secs(60)).await;
        if out.success {
            return out.stdout;
        }
        last = Some(out);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let out = last.expect("one attempt");
    // The target only: the other arguments hold the proxy password.
    let target = args.last().copied().unwrap_or_default();
    panic!(
        "curl … {target} in the client pod:\n{}\n{}",
        out.stdout, out.stderr
    )
}

/// curl in the client pod until the simulator's echo server answers (JSON); the
/// gateway's refusals (`no-capacity` while the controller assigns fresh proxies) are
/// retried a bounded number of times.
async fn echo_in_pod(c: &LocalCluster, args: &[&str]) -> Value {
    let mut last = String::new();
    for _ in 0..20 {
        last = curl_in_pod(c, args).await;
        if let Ok(v) = serde_json::from_str::<Value>(&last) {
            return v;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The target only: the other arguments hold the proxy password.
    let target = args.last().copied().unwrap_or_default();
    panic!(
        "no echo answer through the gateway for {target}; last answer: {last}\n{}",
        c.logs()
    )
}

fn remote_ip(echo: &Value) -> String {
    let remote = echo["remote"].as_str().expect("remote").to_owned();
    remote
        .rsplit_once(':')
        .map_or(remote.clone(), |(ip, _)| ip.to_owned())
}

/// The simulator's `/v1/sim/info`, from the host straight to its pod.
async fn sim_info(c: &LocalCluster) -> Value {
    let pods = pods(c, "app.kubernetes.io/name=vendor-sim").await;
    let ip = pods[0]["status"]["podIP"]
        .as_str()
        .expect("podIP")
        .to_owned();
    let out = host(&[
        "curl",
        "-fsS",
        "--max-time",
        "10",
        "-H",
        &format!("X-API-Key: {}", c.credentials.vendor_api_key.expose()),
        &format!("http://{ip}:8080/v1/sim/info"),
    ])
    .await;
    serde_json::from_str(&out).expect("sim info JSON")
}

/// POST the extract API through the Ingress (TLS, the cluster CA); status and body.
async fn extract(c: &LocalCluster, key: Option<&str>, idempotency: &str) -> (u16, String) {
    extract_at(&Ingress::of(c), key, idempotency).await
}

/// Where the extract API is reached from the host: the Ingress host name, the node's
/// address it resolves to, and the cluster CA.
#[derive(Clone)]
struct Ingress {
    host_name: String,
    node_ip: String,
    ca: String,
}

impl Ingress {
    fn of(c: &LocalCluster) -> Self {
        Self {
            host_name: c.setting("CLUSTER_INGRESS_HOST").to_owned(),
            node_ip: c.setting("CLUSTER_NODE_IP").to_owned(),
            ca: c.ca_file().display().to_string(),
        }
    }
}

async fn extract_at(ingress: &Ingress, key: Option<&str>, idempotency: &str) -> (u16, String) {
    let (host_name, node_ip, ca) = (&ingress.host_name, &ingress.node_ip, &ingress.ca);
    let resolve = format!("{host_name}:443:{node_ip}");
    let url = format!("https://{host_name}/api/v1/proxies/extract");
    let idem = format!("Idempotency-Key: {idempotency}");
    let mut args = vec![
        "-sS",
        "--max-time",
        "10",
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
        "-X",
        "POST",
        &url,
        "-H",
        "Content-Type: application/json",
        "-H",
        &idem,
        "-d",
        r#"{"count": 2}"#,
        "-w",
        "\n%{http_code}",
    ];
    let header;
    if let Some(k) = key {
        header = format!("X-API-Key: {k}");
        args.extend_from_slice(&["-H", &header]);
    }
    // Not `host()`: a failed call (no route to a pod that just went away) is an
    // answer here (status 0 and curl's message), and the arguments hold the key.
    let out = tokio::process::Command::new("curl")
        .args(&args)
        .output()
        .await
        .expect("run curl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    match stdout.rsplit_once('\n') {
        Some((body, code)) if out.status.success() => {
            (code.trim().parse().unwrap_or(0), body.to_owned())
        }
        _ => (0, String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

fn proxy_ids(body: &str) -> BTreeSet<String> {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v["proxies"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn host(args: &[&str]) -> String {
    let out = tokio::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let out = succeeded(out, &format!("{args:?}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn hex_ip(hex: &str) -> [u8; 4] {
    // /proc/net/route prints addresses as little-endian hex.
    u32::from_str_radix(hex, 16)
        .expect("hex address")
        .to_le_bytes()
}

fn dotted(ip: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])
}

async fn template_hash(c: &LocalCluster, deployment: &str) -> String {
    let d = c
        .kubectl_json(&["-n", NS, "get", "deployment", deployment])
        .await;
    d["spec"]["template"].to_string()
}

async fn rolled_out(c: &LocalCluster, deployment: &str) -> bool {
    let d = c
        .kubectl_json(&["-n", NS, "get", "deployment", deployment])
        .await;
    let (spec, status) = (&d["spec"], &d["status"]);
    let want = spec["replicas"].as_i64().unwrap_or(1);
    status["observedGeneration"] == d["metadata"]["generation"]
        && status["updatedReplicas"].as_i64() == Some(want)
        && status["readyReplicas"].as_i64() == Some(want)
        && status["replicas"].as_i64() == Some(want)
}

async fn eventually<F, Fut>(c: &LocalCluster, what: &str, secs: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("timed out after {secs}s waiting for {what}\n{}", c.logs());
}

// --- traffic through the gateway Service, from the host -------------------------------------

/// Requests through the gateway Service, one fresh connection each (so kube-proxy
/// spreads them over the gateway pods), about ten a second, until stopped; bounded in
/// count and time.
/// When each request was sent, and how it ended.
type TrafficLog = Arc<parking_lot::Mutex<Vec<(SystemTime, Result<(), String>)>>>;

struct Traffic {
    stop: Arc<AtomicBool>,
    log: TrafficLog,
    started: Instant,
    task: tokio::task::JoinHandle<()>,
}

/// What a traffic run saw.
#[derive(Debug, Clone, Default)]
struct TrafficReport {
    total: usize,
    failed: usize,
    /// Failures by kind, with counts.
    failures: Vec<(String, usize)>,
}

const TRAFFIC_MAX_REQUESTS: usize = 6000;
const TRAFFIC_MAX_TIME: Duration = Duration::from_secs(600);

impl Traffic {
    /// [`Traffic::start`], once requests succeed (within `within`); `what` says when,
    /// for the failure message.
    async fn steady(c: &LocalCluster, within: Duration, what: &str) -> Self {
        let traffic = Self::start(c).await;
        assert!(
            traffic.recovered_within(within).await.is_some(),
            "traffic through the gateway {what}\n{}",
            c.logs()
        );
        traffic
    }

    async fn start(c: &LocalCluster) -> Self {
        let ip = c
            .kubectl_ok(&[
                "-n",
                NS,
                "get",
                "service",
                GATEWAY,
                "-o",
                "jsonpath={.spec.clusterIP}",
            ])
            .await;
        let addr: SocketAddr = format!("{}:3128", ip.trim())
            .parse()
            .expect("gateway address");
        let auth = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}{PARAMS}:{}",
            c.credentials.gateway_username,
            c.credentials.gateway_password.expose()
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (s, l) = (stop.clone(), log.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut n = 0usize;
            while !s.load(Ordering::Relaxed)
                && n < TRAFFIC_MAX_REQUESTS
                && started.elapsed() < TRAFFIC_MAX_TIME
            {
                n += 1;
                let at = SystemTime::now();
                let r = gateway_get(addr, &auth, n).await;
                l.lock().push((at, r));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self {
            stop,
            log,
            started: Instant::now(),
            task,
        }
    }

    /// What the requests sent in `[from, to)` saw.
    fn between(&self, from: SystemTime, to: SystemTime) -> TrafficReport {
        let log = self.log.lock();
        let part: Vec<Result<(), String>> = log
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, r)| r.clone())
            .collect();
        report(&part)
    }

    /// The first and the last failure at or after `from`, in seconds after it.
    fn failure_window(&self, from: SystemTime) -> Option<(f64, f64)> {
        let log = self.log.lock();
        let offsets: Vec<f64> = log
            .iter()
            .filter(|(at, r)| *at >= from && r.is_err())
            .map(|(at, _)| at.duration_since(from).map_or(0.0, |d| d.as_secs_f64()))
            .collect();
        Some((*offsets.first()?, *offsets.last()?))
    }

    /// Waits (at most `limit`) until the last ten requests succeeded; how long after
    /// the start of this run that was.
    async fn recovered_within(&self, limit: Duration) -> Option<Duration> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let ok = {
                let log = self.log.lock();
                log.len() >= 10 && log[log.len() - 10..].iter().all(|(_, r)| r.is_ok())
            };
            if ok {
                return Some(self.started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        None
    }

    async fn stop(self) -> TrafficReport {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let log = self.log.lock();
        let all: Vec<Result<(), String>> = log.iter().map(|(_, r)| r.clone()).collect();
        report(&all)
    }
}

fn report(log: &[Result<(), String>]) -> TrafficReport {
    let mut failures: Vec<(String, usize)> = Vec::new();
    for e in log.iter().filter_map(|r| r.as_ref().err()) {
        match failures.iter_mut().find(|(k, _)| k == e) {
            Some((_, n)) => *n += 1,
            None => failures.push((e.clone(), 1)),
        }
    }
    TrafficReport {
        total: log.len(),
        failed: log.iter().filter(|r| r.is_err()).count(),
        failures,
    }
}

/// One plain-HTTP request through the gateway (absolute URI, Basic credentials) to
/// the simulator's echo server; `Err` names the kind of failure.
async fn gateway_get(addr: SocketAddr, auth: &str, n: usize) -> Result<(), String> {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {}", e.kind()))?;
        let req = format!(
            "GET {ECHO_HTTP}/traffic-{n} HTTP/1.1\r\nHost: localhost:8901\r\n\
             Proxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write: {}", e.kind()))?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)
            .await
            .map_err(|e| format!("read: {}", e.kind()))?;
        let text = String::from_utf8_lossy(&buf);
        let status = text.split_whitespace().nth(1).unwrap_or("none").to_owned();
        if status == "200" && text.contains(&format!("/traffic-{n}")) {
            Ok(())
        } else {
            // The gateway's refusals name their reason in the body (`no-capacity`, …).
            let reason = text
                .split("\r\n\r\n")
                .nth(1)
                .and_then(|b| b.split_whitespace().next())
                .filter(|r| r.len() <= 40)
                .unwrap_or("");
            Err(format!("HTTP {status} {reason}").trim_end().to_owned())
        }
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .unwrap_or_else(|_| Err("timeout".into()))
}
