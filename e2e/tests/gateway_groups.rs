//! One gateway group serving several Routings, end to end: the operator (in-process,
//! against a real etcd + kube-apiserver) renders the controller config and the
//! GatewayGroup's Deployment from the custom resources; a real controller runs that
//! config (its Secret files written where the config names them, as the kubelet would
//! mount them) and real gateway processes run with the Deployment's `--gateway-group`
//! and the group's clients file. Requests through the group's gateways are routed by
//! the username's parameters to different Routings:
//!
//! * `crawler-pool-a` → Routing `a` (the simulator's proxies): served;
//! * `crawler-pool-b` → Routing `b` (priority 20, a dead static proxy): refused with
//!   the gateway's error — although `fallback` (priority 0, any request, live proxies)
//!   would also match: priority decides inside a group;
//! * `crawler` → `fallback`: served;
//! * within Routing `a`, the username's selection parameters narrow the proxies:
//!   `crawler-pool-a-country-<region>` is served by a proxy of that region label, a
//!   region no proxy has answers 502 `no-matching-proxy` (never another proxy);
//! * Routing `other` (priority 100, any request) belongs to another group: the group's
//!   gateways never see it (otherwise it would take `crawler-pool-b` and serve it).
//!
//! PROXY protocol through a group (`spec.proxyProtocol`, rendered as the gateway's
//! `--proxy-protocol-from`): group `lb` trusts this test's own address (127.0.0.0/8) as
//! its load balancer and allows one connection per client address. A connection with a
//! v1 or v2 header naming a made-up client is served, and that client — not the
//! connection's own peer — holds the per-source slot: while a kept-alive connection of
//! client X is open, a second connection claiming X (by the other header version) is
//! refused and counted in `proxy_pool_gateway_connections_refused_total`, while one
//! claiming a fresh client is served. A connection without a header is closed unanswered.
//! Group `lb-elsewhere` trusts another range: a header from this test is not read as
//! one, so the request it precedes is malformed (400), and plain requests are served.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Answer, basic, connect, exchange_answer, free_addr, get};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use proxy_pool_e2e::k8s::{K8sBins, KubeApiServer};
use proxy_pool_e2e::procs::{
    Procs, bin, build_packages, checker_command, fresh_test_dir, gateway_command, vendor_sim_in,
};
use proxy_pool_operator::crd::GatewayGroup;
use proxy_pool_operator::reconcile::hash_key::HashKey;
use proxy_pool_operator::reconcile::{
    self, GatewayPodSettings, GatewayTemplate, Metrics, OperatorConfig,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const NS: &str = "proxy-pool";
const CONTROLLER: &str = "proxy-pool-controller";
const CONFIG_MAP: &str = "proxy-pool-controller-config";
const VENDOR_KEY: &str = "groups-vendor-key";
const USER: &str = "crawler";
const PASSWORD: &str = "groups-e2e-password";
const READY_WITHIN: Duration = Duration::from_secs(120);

/// The custom resources and Secrets; `{sim}` is the simulator's API, `{dead}` a port
/// nothing listens on.
const RESOURCES: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: sim-key}
stringData: {apiKey: "{vendor_key}"}
---
apiVersion: v1
kind: Secret
metadata: {name: crawler-basic}
stringData: {username: "{user}", password: "{password}"}
---
apiVersion: proxypool.io/v1alpha1
kind: Upstream
metadata: {name: sim}
spec:
  protocol: http
  ttl: 10m
  quarantine: 0s
  maxSize: 12
  maxConcurrencyPerProxy: 16
  fetchInterval: 2s
  source:
    vendorApi:
      url: "http://{sim}/v1/proxies?count=4&protocol=http"
      format: json
      credentialsSecretRef: {name: sim-key}
---
apiVersion: proxypool.io/v1alpha1
kind: Upstream
metadata: {name: dead}
spec:
  protocol: http
  ttl: 10m
  quarantine: 0s
  maxSize: 1
  source:
    static: {proxies: ["{dead}"]}
---
apiVersion: proxypool.io/v1alpha1
kind: DistributionClient
metadata: {name: crawler}
spec:
  permissions: [gateway:connect]
  auth: {basic: {secretRef: {name: crawler-basic}}}
---
apiVersion: proxypool.io/v1alpha1
kind: GatewayGroup
metadata: {name: edge}
spec:
  replicas: 2
  listeners: {http: {port: 3128}}
  limits: {maxConnections: 500, handshakeTimeout: 5s, writeTimeout: 20s, maxRequestHeaders: 80}
---
apiVersion: proxypool.io/v1alpha1
kind: GatewayGroup
metadata: {name: core}
spec:
  replicas: 1
  listeners: {http: {port: 3128}}
---
apiVersion: proxypool.io/v1alpha1
kind: GatewayGroup
metadata: {name: lb}
spec:
  replicas: 1
  listeners: {http: {port: 3128}}
  proxyProtocol: {trustedSources: ["127.0.0.0/8"]}
  limits: {maxConnectionsPerSource: 1, clientIdleTimeout: 10m}
---
apiVersion: proxypool.io/v1alpha1
kind: GatewayGroup
metadata: {name: lb-elsewhere}
spec:
  replicas: 1
  listeners: {http: {port: 3128}}
  proxyProtocol: {trustedSources: ["192.0.2.0/24"]}
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: behind-lb}
spec:
  gatewayGroup: lb
  upstreams: [sim]
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: lb-elsewhere}
spec:
  gatewayGroup: lb-elsewhere
  upstreams: [sim]
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: a}
spec:
  priority: 10
  gatewayGroup: edge
  match: {usernameParams: {pool: a}}
  upstreams: [sim]
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: b}
spec:
  priority: 20
  gatewayGroup: edge
  match: {usernameParams: {pool: b}}
  upstreams: [dead]
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: fallback}
spec:
  gatewayGroup: edge
  upstreams: [sim]
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: other}
spec:
  priority: 100
  gatewayGroup: core
  upstreams: [sim]
"#;

/// The chart installs the controller Deployment the config reconciler writes to; no
/// kubelet runs it here (the controller runs as a process).
const CONTROLLER_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: proxy-pool-controller}
spec:
  replicas: 0
  selector: {matchLabels: {app: controller}}
  template:
    metadata: {labels: {app: controller}}
    spec:
      containers: [{name: controller, image: proxy-pool-controller:test}]
"#;

fn operator_config(base: &str, config_dir: &Path) -> OperatorConfig {
    OperatorConfig {
        namespace: NS.into(),
        base_config: proxy_pool_api::config::parse_yaml(base).expect("base config"),
        controller_deployment: CONTROLLER.into(),
        controller_container: "controller".into(),
        config_map: CONFIG_MAP.into(),
        config_dir: config_dir.display().to_string(),
        gateway: GatewayTemplate {
            image: "proxy-pool-gateway:test".into(),
            image_pull_policy: "IfNotPresent".into(),
            service_account: "proxy-pool-gateway".into(),
            controller_address: "unused:0".into(),
            identity_endpoint: "https://unused:8443".into(),
            trust_bundle_config_map: "proxy-pool-trust-bundle".into(),
            egress_deny_cidrs: Vec::new(),
            egress_allow_cidrs: Vec::new(),
            pod: GatewayPodSettings::default(),
        },
        instance: Some("operator-0".into()),
        controller_tls: None,
        hash_key: HashKey::new([9; 32]),
        controller_admin: None,
    }
}

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

/// Waits until `GET path` on `addr` answers 200.
async fn up(what: &str, addr: SocketAddr, path: &str) {
    eventually(what, READY_WITHIN.as_secs(), || async move {
        (get(addr, path, "").await.0 == 200).then_some(())
    })
    .await;
}

/// A forwarded GET through gateway `gw` as `user`.
async fn forward(gw: SocketAddr, echo: SocketAddr, user: &str, path: &str) -> Answer {
    let auth = basic(user, PASSWORD);
    let request = format!(
        "GET http://{echo}{path} HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    );
    match connect(gw).await {
        Ok(s) => exchange_answer(s, &request).await.unwrap_or(Answer {
            status: 0,
            head: String::new(),
            body: String::new(),
        }),
        Err(e) => Answer {
            status: 0,
            head: format!("connect: {e}"),
            body: String::new(),
        },
    }
}

/// Writes `value` at `<dir>/secrets/<secret>/<key>`, as the kubelet mounts Secret keys.
fn secret_file(dir: &Path, secret: &str, key: &str, value: &str) {
    let path = dir.join("secrets").join(secret).join(key);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, value).expect("secret file");
}

/// What a group's gateway pod runs, as this test can run it: waits for the group's
/// Deployment, and gives its `--gateway-group`, its flags but for the addresses and
/// files that differ outside a pod (the group's limits and PROXY protocol sources must
/// be flags the gateway takes), and the group's clients file written under `dir` with
/// the Secret files it names, as the kubelet would mount them.
async fn group_pods(
    client: &kube::Client,
    dir: &Path,
    group: &str,
) -> (String, Vec<String>, std::path::PathBuf) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let name = format!("{group}-gateway");
    let d = eventually(&format!("the {group} group's Deployment"), 60, || {
        let api = deployments.clone();
        let name = name.clone();
        async move { api.get_opt(&name).await.ok()? }
    })
    .await;
    let args = d.spec.expect("spec").template.spec.expect("pod").containers[0]
        .args
        .clone()
        .expect("args");
    let group_flag = args
        .iter()
        .find_map(|a| a.strip_prefix("--gateway-group="))
        .expect("--gateway-group")
        .to_owned();
    let pod_args: Vec<String> = args
        .iter()
        .filter(|a| {
            ![
                "--http-listen=",
                "--socks5-listen=",
                "--admin-listen=",
                "--controller=",
                "--clients-file=",
            ]
            .iter()
            .any(|p| a.starts_with(p))
        })
        .cloned()
        .collect();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let clients_cm = config_maps
        .get(&format!("{group}-gateway-clients"))
        .await
        .expect("clients ConfigMap");
    let gateway_dir = dir.join(format!("gateway-{group}"));
    let clients = clients_cm.data.expect("data")["clients.json"].replace(
        "/etc/proxy-pool-gateway",
        &gateway_dir.display().to_string(),
    );
    secret_file(&gateway_dir, "crawler-basic", "username", USER);
    secret_file(&gateway_dir, "crawler-basic", "password", PASSWORD);
    let clients_file = gateway_dir.join("clients.json");
    std::fs::write(&clients_file, clients).expect("clients file");
    (group_flag, pod_args, clients_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gateway_group_serves_several_routings() {
    build_packages(&[
        "proxy-pool-e2e",
        "proxy-pool-controller",
        "proxy-pool-checker",
        "proxy-pool-gateway",
    ]);
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = KubeApiServer::start_for_test(&bins, false).await;
    let client = cluster.client();
    let dir = fresh_test_dir("gateway-groups");
    let mut procs = Procs::new(&dir);

    // The vendor simulator.
    let (sim, echo, echo_tls) = (free_addr(), free_addr(), free_addr());
    procs.start(
        "vendor-sim",
        &mut vendor_sim_in(
            &dir,
            bin("vendor-sim"),
            [sim, echo, echo_tls],
            VENDOR_KEY,
            (300, 600),
        ),
    );
    up("vendor simulator", sim, "/healthz").await;

    // CRDs, the namespace, the controller Deployment and the resources.
    let crds = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crds/proxy-pool.yaml")
        .display()
        .to_string();
    let kubectl = |args: Vec<String>, stdin: Option<String>| {
        let cluster = &cluster;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cluster
                .kubectl_ok(&args, stdin.as_deref())
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let owned = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    kubectl(owned(&["apply", "--server-side", "-f", &crds]), None).await;
    kubectl(
        owned(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ]),
        None,
    )
    .await;
    kubectl(owned(&["create", "namespace", NS]), None).await;
    kubectl(
        owned(&["apply", "-n", NS, "-f", "-"]),
        Some(CONTROLLER_DEPLOYMENT.to_owned()),
    )
    .await;
    let dead = free_addr();
    let resources = RESOURCES
        .replace("{vendor_key}", VENDOR_KEY)
        .replace("{user}", USER)
        .replace("{password}", PASSWORD)
        .replace("{sim}", &sim.to_string())
        .replace("{dead}", &dead.to_string());
    kubectl(owned(&["apply", "-n", NS, "-f", "-"]), Some(resources)).await;

    // The operator, in-process, with a base config for a controller on this machine;
    // two proxies (32 slots) a gateway, so each of the four gets some.
    let (dist, admin, cp) = (free_addr(), free_addr(), free_addr());
    let base = format!(
        "store: {{backend: memory}}\n\
         distribution: {{listen: '{dist}', auth: {{mode: any, methods: [{{type: basic}}]}}}}\n\
         admin: {{listen: '{admin}'}}\n\
         controlPlane: {{enabled: true, listen: '{cp}', loopbackPlaintext: true, reportInterval: 1s, targetSlotsPerWorker: 32}}\n\
         egress: {{allowCidrs: [127.0.0.0/8]}}\n"
    );
    let config_dir = dir.join("controller");
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let operator = tokio::spawn(reconcile::run(
        client.clone(),
        operator_config(&base, &config_dir),
        Arc::new(Metrics::new()),
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    ));

    // The config: every Routing, each naming its group, the group's in priority order.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let text = eventually("the controller config with every Routing", 90, || {
        let api = config_maps.clone();
        async move {
            let cm = api.get_opt(CONFIG_MAP).await.ok()??;
            let text = cm.data?.get("config.yaml")?.clone();
            ["fallback", "other", "behind-lb", "lb-elsewhere"]
                .iter()
                .all(|r| text.contains(r))
                .then_some(text)
        }
    })
    .await;
    let config = proxy_pool_api::config::parse_yaml(&text).expect("config");
    let groups: BTreeMap<&str, Vec<String>> = config
        .routings
        .iter()
        .map(|r| (r.name.as_str(), r.gateway_groups.clone()))
        .collect();
    assert_eq!(groups["a"], ["edge"]);
    assert_eq!(groups["b"], ["edge"]);
    assert_eq!(groups["fallback"], ["edge"]);
    assert_eq!(groups["other"], ["core"]);
    assert_eq!(groups["behind-lb"], ["lb"]);
    assert_eq!(groups["lb-elsewhere"], ["lb-elsewhere"]);
    std::fs::create_dir_all(&config_dir).expect("mkdir");
    std::fs::write(config_dir.join("config.yaml"), &text).expect("config file");
    secret_file(&config_dir, "sim-key", "apiKey", VENDOR_KEY);
    secret_file(&config_dir, "crawler-basic", "username", USER);
    secret_file(&config_dir, "crawler-basic", "password", PASSWORD);

    // One Deployment for the three Routings of `edge`; its gateways' group and clients.
    let (group, pod_args, clients_file) = group_pods(&client, &dir, "edge").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    for name in ["a-gateway", "b-gateway", "fallback-gateway"] {
        assert!(deployments.get_opt(name).await.expect("get").is_none());
    }
    assert_eq!(group, "edge");
    for want in ["--max-connections=500", "--handshake-timeout-seconds=5"] {
        assert!(
            pod_args.iter().any(|a| a == want),
            "{want} not in {pod_args:?}"
        );
    }
    let groups_api: Api<GatewayGroup> = Api::namespaced(client.clone(), NS);
    let status = eventually("the edge group's status", 30, || {
        let api = groups_api.clone();
        async move { api.get("edge").await.ok()?.status }
    })
    .await;
    assert_eq!(status.routings, ["b", "a", "fallback"], "match order");

    // The controller, a checker and the group's gateways (its two replicas).
    procs.start(
        "controller",
        std::process::Command::new(bin("proxy-pool-controller"))
            .args(["run", "--config"])
            .arg(config_dir.join("config.yaml")),
    );
    up("controller", admin, "/healthz").await;
    let cp_url = format!("http://{cp}");
    procs.start(
        "checker",
        &mut checker_command(&cp_url, "groups-checker", echo),
    );
    let gateways: Vec<(SocketAddr, SocketAddr)> =
        (0..2).map(|_| (free_addr(), free_addr())).collect();
    for (i, (http, admin)) in gateways.iter().enumerate() {
        procs.start(
            &format!("gateway-{i}"),
            gateway_command(
                [*http, free_addr(), *admin],
                &cp_url,
                &format!("edge-gateway-{i}"),
                &clients_file,
            )
            .args(&pod_args),
        );
    }
    // The PROXY protocol groups' gateways, one each.
    let mut behind = BTreeMap::new();
    for group in ["lb", "lb-elsewhere"] {
        let (flag, args, clients) = group_pods(&client, &dir, group).await;
        assert_eq!(flag, group);
        let (http, admin) = (free_addr(), free_addr());
        procs.start(
            &format!("{group}-gateway"),
            gateway_command(
                [http, free_addr(), admin],
                &cp_url,
                &format!("{group}-gateway-0"),
                &clients,
            )
            .args(&args),
        );
        behind.insert(group, (http, admin));
    }
    for (i, (_, admin)) in gateways.iter().enumerate() {
        up(&format!("gateway {i} snapshot"), *admin, "/readyz").await;
    }
    for (group, (_, admin)) in &behind {
        up(&format!("{group} gateway snapshot"), *admin, "/readyz").await;
    }

    // Routing `a` and `fallback` serve through both gateways once proxies are checked.
    for (http, _) in &gateways {
        for user in [format!("{USER}-pool-a"), USER.to_owned()] {
            let gw = *http;
            eventually(&format!("{user} served through {gw}"), 150, || {
                let user = user.clone();
                async move { (forward(gw, echo, &user, "/groups").await.status == 200).then_some(()) }
            })
            .await;
        }
    }
    // Routing `b` (higher priority than `fallback`, and `other` of another group not
    // visible): refused by the gateway, every time.
    for (http, _) in &gateways {
        for _ in 0..3 {
            let a = forward(*http, echo, &format!("{USER}-pool-b"), "/groups").await;
            assert!(
                a.status >= 400 && a.header("X-Proxy-Pool-Error").is_some(),
                "crawler-pool-b must go to Routing b (no usable proxy), not to fallback or \
                 other: {} {}",
                a.head,
                a.body
            );
        }
        let a = forward(*http, echo, &format!("{USER}-pool-a"), "/groups").await;
        assert_eq!(a.status, 200, "{} {}", a.head, a.body);
    }
    // Selection by username parameters through the group's endpoint: a region label no
    // proxy holds is refused, never served by another proxy…
    for (http, _) in &gateways {
        let a = forward(
            *http,
            echo,
            &format!("{USER}-pool-a-country-mars"),
            "/groups",
        )
        .await;
        assert_eq!(a.status, 502, "{} {}", a.head, a.body);
        assert_eq!(
            a.header("X-Proxy-Pool-Error"),
            Some("no-matching-proxy"),
            "{}",
            a.head
        );
    }
    // …and a region the simulator's proxies carry is served (which of its regions the
    // pool holds now is up to the vendor: one of them is).
    let gw = gateways[0].0;
    eventually("a proxy selected by its region", 60, || async move {
        for region in ["shanghai", "beijing", "guangzhou", "shenzhen"] {
            let user = format!("{USER}-pool-a-country-{region}");
            if forward(gw, echo, &user, "/groups").await.status == 200 {
                return Some(());
            }
        }
        None
    })
    .await;

    proxy_protocol_through_groups(behind["lb"], behind["lb-elsewhere"], echo).await;

    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), operator).await;
    procs.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A PROXY protocol v1 header naming `client` as the source, sent to `gw`.
fn v1_header(client: Ipv4Addr, gw: SocketAddr) -> Vec<u8> {
    format!("PROXY TCP4 {client} {} 40001 {}\r\n", gw.ip(), gw.port()).into_bytes()
}

/// A PROXY protocol v2 header (PROXY command, TCP over IPv4) naming `client`.
fn v2_header(client: Ipv4Addr, gw: SocketAddr) -> Vec<u8> {
    let SocketAddr::V4(gw) = gw else {
        panic!("an IPv4 gateway address: {gw}")
    };
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11]);
    h.extend_from_slice(&12u16.to_be_bytes());
    h.extend_from_slice(&client.octets());
    h.extend_from_slice(&gw.ip().octets());
    h.extend_from_slice(&40002u16.to_be_bytes());
    h.extend_from_slice(&gw.port().to_be_bytes());
    h
}

/// A kept-alive forwarded GET through `gw` as the plain client.
fn keep_alive_get(echo: SocketAddr, path: &str) -> Vec<u8> {
    let auth = basic(USER, PASSWORD);
    format!(
        "GET http://{echo}{path} HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
    )
    .into_bytes()
}

/// Sends `bytes` on `s` and reads one response (head and `Content-Length` body): its
/// status, or `None` when the gateway closes the connection without one.
async fn one_response(s: &mut TcpStream, bytes: &[u8]) -> Option<u16> {
    s.write_all(bytes).await.ok()?;
    let read = async {
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while raw.len() < head_end + length {
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            raw.extend_from_slice(&buf[..n]);
        }
        Some(status)
    };
    tokio::time::timeout(common::EXCHANGE, read).await.ok()?
}

/// A new connection to `gw` that sends `bytes` then one kept-alive GET: the connection
/// (left open) and the response's status, `None` when closed unanswered.
async fn open_with(gw: SocketAddr, echo: SocketAddr, header: &[u8]) -> (TcpStream, Option<u16>) {
    let mut s = connect(gw).await.expect("connect");
    let mut bytes = header.to_vec();
    bytes.extend_from_slice(&keep_alive_get(echo, "/proxy-protocol"));
    let status = one_response(&mut s, &bytes).await;
    (s, status)
}

/// The gateway's `proxy_pool_gateway_connections_refused_total`.
async fn refused(admin: SocketAddr) -> u64 {
    common::metric(admin, "proxy_pool_gateway_connections_refused_total")
        .await
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// PROXY protocol through gateway groups (see the module comment): `lb` trusts this
/// test's address and allows one connection per client, `elsewhere` trusts another
/// range.
async fn proxy_protocol_through_groups(
    (lb, lb_admin): (SocketAddr, SocketAddr),
    (elsewhere, _): (SocketAddr, SocketAddr),
    echo: SocketAddr,
) {
    let client = |last: u8| Ipv4Addr::new(198, 51, 100, last);
    // Served once the group's gateway holds checked proxies; each try claims a fresh
    // client, so no try waits for the slot of the one before. A 400 means the header
    // was read as the request: the gateway does not take PROXY protocol from here.
    let mut next = 100u8;
    eventually(
        "a request behind a v1 header served by the lb group",
        150,
        || {
            next += 1;
            let header = v1_header(client(next), lb);
            async move {
                let (_, status) = open_with(lb, echo, &header).await;
                assert_ne!(
                    status,
                    Some(400),
                    "the lb group's gateway read the PROXY header as the request"
                );
                (status == Some(200)).then_some(())
            }
        },
    )
    .await;

    // Client .7 behind a v1 header and client .8 behind a v2 header, both kept alive:
    // two connections from this one address, each holding its client's only slot.
    let (held_7, status) = open_with(lb, echo, &v1_header(client(7), lb)).await;
    assert_eq!(status, Some(200), "v1 header, client 198.51.100.7");
    let (held_8, status) = open_with(lb, echo, &v2_header(client(8), lb)).await;
    assert_eq!(
        status,
        Some(200),
        "v2 header, client 198.51.100.8: refused as a second connection of the peer?"
    );
    // The same clients again, by the other header version: over their cap, closed
    // unanswered and counted as refused.
    let before = refused(lb_admin).await;
    let (_, status) = open_with(lb, echo, &v2_header(client(7), lb)).await;
    assert_eq!(
        status, None,
        "a second connection of 198.51.100.7 (v2 header)"
    );
    let (_, status) = open_with(lb, echo, &v1_header(client(8), lb)).await;
    assert_eq!(
        status, None,
        "a second connection of 198.51.100.8 (v1 header)"
    );
    assert!(
        refused(lb_admin).await >= before + 2,
        "refusals not counted: {before} before"
    );
    // Another made-up client is served meanwhile (the refusals were per client).
    let (_, status) = open_with(lb, echo, &v2_header(client(9), lb)).await;
    assert_eq!(status, Some(200), "v2 header, client 198.51.100.9");
    // From the trusted load balancer a header is required: without one, the connection
    // is closed unanswered.
    let (_, status) = open_with(lb, echo, b"").await;
    assert_eq!(
        status, None,
        "a request without a PROXY header from a trusted source"
    );
    drop((held_7, held_8));

    // A group that does not trust this address never reads a header: the header line
    // is the start of a malformed request; plain requests are served.
    eventually(
        "a plain request served by the lb-elsewhere group",
        150,
        || async move {
            let (_, status) = open_with(elsewhere, echo, b"").await;
            (status == Some(200)).then_some(())
        },
    )
    .await;
    for header in [
        v1_header(client(7), elsewhere),
        v2_header(client(7), elsewhere),
    ] {
        let (_, status) = open_with(elsewhere, echo, &header).await;
        assert_eq!(
            status,
            Some(400),
            "a PROXY header from an untrusted source: {:?}",
            String::from_utf8_lossy(&header)
        );
    }
}
