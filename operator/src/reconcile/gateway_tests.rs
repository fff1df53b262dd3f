//! Tests of the gateway workload and clients-file renderers.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use serde_json::json;

use super::*;
use crate::crd::GatewayGroup;
use crate::reconcile::gateway_pod::GatewayPodSettings;
use crate::reconcile::render::GatewayClient;
use crate::reconcile::settings::GatewayTemplate;

fn example(file: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(file),
    )
    .expect("example")
}

/// The example Routing with the deprecated inline gateway instead of its group (the
/// spec a Routing written before gateway groups has).
fn routing() -> Routing {
    let mut r: Routing = serde_yaml::from_str(&example("routing.yaml")).expect("Routing");
    r.meta_mut().namespace = Some("proxy".into());
    r.meta_mut().uid = Some("0000-1111".into());
    r.spec.gateway_group = None;
    r.spec.gateway = Some(
        serde_yaml::from_str(
            "replicas: 2\nlisteners: {http: {port: 3128}, socks5: {port: 1080}}\n\
             resources: {requests: {cpu: 250m, memory: 128Mi}, limits: {memory: 512Mi}}\n",
        )
        .expect("GatewaySpec"),
    );
    r
}

/// The implicit group of a Routing's inline gateway.
fn wl(r: &Routing) -> Workload {
    Workload::of_routing(r)
        .expect("named")
        .expect("inline gateway")
}

/// The example GatewayGroup.
fn group() -> GatewayGroup {
    let mut g: GatewayGroup =
        serde_yaml::from_str(&example("gateway-group.yaml")).expect("GatewayGroup");
    g.meta_mut().namespace = Some("proxy".into());
    g.meta_mut().uid = Some("2222-3333".into());
    g
}

fn group_wl(g: &GatewayGroup) -> Workload {
    Workload::of_group(g).expect("named")
}

fn template() -> GatewayTemplate {
    GatewayTemplate {
        image: "proxy-pool-gateway:test".into(),
        image_pull_policy: "IfNotPresent".into(),
        service_account: "proxy-pool-gateway".into(),
        controller_address: "proxy-pool-controller:9443".into(),
        identity_endpoint: "https://proxy-pool-operator:8443".into(),
        trust_bundle_config_map: "proxy-pool-trust-bundle".into(),
        egress_deny_cidrs: vec!["10.96.0.0/12".into(), "10.244.0.0/16".into()],
        egress_allow_cidrs: Vec::new(),
        pod: GatewayPodSettings::default(),
    }
}

/// The pod template of `r`'s gateway Deployment (no clients).
fn gateway_pod(r: &Routing, t: &GatewayTemplate) -> k8s_openapi::api::core::v1::PodSpec {
    let d = deployment(&wl(r), t, &no_clients());
    d.spec.expect("spec").template.spec.expect("pod")
}

/// The port numbers of a container's or a Service's `ports`.
fn numbers<T>(ports: &Option<Vec<T>>, number: impl Fn(&T) -> i32) -> Vec<i32> {
    ports.as_ref().expect("ports").iter().map(number).collect()
}

/// Asserts the container is started with each of `want` among its arguments.
fn assert_args_include(c: &k8s_openapi::api::core::v1::Container, want: &[&str]) {
    let args = c.args.as_ref().expect("args");
    for arg in want {
        assert!(args.iter().any(|a| a == arg), "{arg} not in {args:?}");
    }
}

#[test]
fn gateway_pods_get_the_egress_policy_and_tight_secret_modes() {
    let pod = gateway_pod(&routing(), &template());
    let env = pod.containers[0].env.clone().expect("env");
    let deny = env
        .iter()
        .find(|e| e.name == "PROXY_POOL_EGRESS_DENY_CIDRS")
        .and_then(|e| e.value.clone());
    assert_eq!(deny.as_deref(), Some("10.96.0.0/12,10.244.0.0/16"));
    assert!(
        !env.iter()
            .any(|e| e.name == "PROXY_POOL_EGRESS_ALLOW_CIDRS")
    );
    for v in pod.volumes.expect("volumes") {
        if let Some(p) = v.projected {
            assert_eq!(p.default_mode, Some(0o440), "{}", v.name);
        }
    }
    assert_eq!(
        pod.security_context.and_then(|s| s.fs_group),
        Some(GATEWAY_FS_GROUP)
    );
}

fn no_clients() -> GatewayClients {
    gateway_clients(None, &BTreeMap::new())
}

fn available() -> BTreeMap<String, GatewayClient> {
    let c = |secret: &str, digest: &str| GatewayClient {
        secret: secret.into(),
        digest: digest.into(),
        limits: None,
    };
    BTreeMap::from([
        (
            "team-crawler".to_owned(),
            c("team-crawler-credentials", "d1"),
        ),
        ("team-search".to_owned(), c("team-search-basic", "d2")),
    ])
}

#[test]
fn every_gateway_client_unless_the_routing_names_some() {
    let mut r = routing();
    r.spec.match_ = None;
    let all = gateway_clients(wanted_clients([&r]).as_ref(), &available());
    assert_eq!(all.names, ["team-crawler", "team-search"]);
    let file: serde_json::Value = serde_json::from_str(&all.file).expect("JSON");
    assert_eq!(
        file,
        json!([
            {"client": "team-crawler",
             "usernameFile": "/etc/proxy-pool-gateway/secrets/team-crawler-credentials/username",
             "passwordFile": "/etc/proxy-pool-gateway/secrets/team-crawler-credentials/password"},
            {"client": "team-search",
             "usernameFile": "/etc/proxy-pool-gateway/secrets/team-search-basic/username",
             "passwordFile": "/etc/proxy-pool-gateway/secrets/team-search-basic/password"},
        ])
    );
    assert_eq!(all.mounts.len(), 2);
    // match.clients narrows the list, and only that client's Secret is mounted.
    r.spec.match_ = Some(crate::crd::RoutingMatch {
        clients: vec!["team-search".into()],
        ..Default::default()
    });
    let one = gateway_clients(wanted_clients([&r]).as_ref(), &available());
    assert_eq!(one.names, ["team-search"]);
    assert_eq!(
        one.mounts,
        BTreeMap::from([(
            "team-search-basic".to_owned(),
            BTreeSet::from(["password".to_owned(), "username".to_owned()])
        )])
    );
    assert_ne!(one.hash, all.hash);
    // A credential rotation (another digest) changes the hash, the file does not.
    let mut rotated = available();
    if let Some(c) = rotated.get_mut("team-search") {
        c.digest = "d3".into();
    }
    let again = gateway_clients(wanted_clients([&r]).as_ref(), &rotated);
    assert_eq!(again.file, one.file);
    assert_ne!(again.hash, one.hash);
}

#[test]
fn deployment_mounts_the_clients_file_and_only_its_secrets() {
    let mut r = routing();
    r.spec.match_ = Some(crate::crd::RoutingMatch {
        clients: vec!["team-crawler".into()],
        ..Default::default()
    });
    let clients = gateway_clients(wanted_clients([&r]).as_ref(), &available());
    let d = deployment(&wl(&r), &template(), &clients);
    let t = d.spec.expect("spec").template;
    assert_eq!(
        t.metadata.expect("meta").annotations.expect("annotations")[CLIENTS_HASH_ANNOTATION],
        clients.hash
    );
    let pod = t.spec.expect("pod");
    let mount = pod.containers[0]
        .volume_mounts
        .as_ref()
        .expect("mounts")
        .iter()
        .find(|m| m.name == "gateway-clients")
        .expect("clients mount");
    assert_eq!(mount.mount_path, CLIENTS_DIR);
    assert_eq!(mount.read_only, Some(true));
    let volume = pod
        .volumes
        .expect("volumes")
        .into_iter()
        .find(|v| v.name == "gateway-clients")
        .expect("clients volume");
    let sources = volume
        .projected
        .expect("projected")
        .sources
        .expect("sources");
    assert_eq!(sources.len(), 2, "{sources:?}");
    let cm = sources[0].config_map.as_ref().expect("ConfigMap");
    assert_eq!(cm.name, "shanghai-crawler-gateway-clients");
    let secret = sources[1].secret.as_ref().expect("Secret");
    assert_eq!(secret.name, "team-crawler-credentials");
    let paths: Vec<(&str, &str)> = secret
        .items
        .as_ref()
        .expect("items")
        .iter()
        .map(|i| (i.key.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            ("password", "secrets/team-crawler-credentials/password"),
            ("username", "secrets/team-crawler-credentials/username"),
        ]
    );
    let map = clients_config_map(&wl(&r), &clients);
    assert_eq!(
        map.metadata.name.as_deref(),
        Some("shanghai-crawler-gateway-clients")
    );
    assert_eq!(
        map.metadata.owner_references.expect("owner")[0].kind,
        "Routing"
    );
    assert_eq!(map.data.expect("data")[CLIENTS_KEY], clients.file);
}

#[test]
fn gateway_pods_get_the_chart_hardening_scheduling_and_shutdown_timing() {
    let mut r = routing();
    if let Some(g) = r.spec.gateway.as_mut() {
        g.resources = None;
    }
    let mut t = template();
    t.pod = GatewayPodSettings::from_yaml(
        "imagePullSecrets: [{name: regcred}]\n\
         podSecurityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}\n\
         securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}\n\
         resources: {requests: {cpu: 100m, memory: 64Mi}}\n\
         podAnnotations: {team: crawl}\n\
         nodeSelector: {pool: gateways}\n\
         tolerations: [{key: dedicated, operator: Equal, value: gateways, effect: NoSchedule}]\n\
         priorityClassName: proxy-critical\n\
         shutdownDelaySeconds: 7\ndrainGraceSeconds: 20\n",
    )
    .expect("settings");
    let d = deployment(&wl(&r), &t, &no_clients());
    let tmpl = d.spec.expect("spec").template;
    let annotations = tmpl
        .metadata
        .expect("meta")
        .annotations
        .expect("annotations");
    assert_eq!(annotations["team"], "crawl");
    assert!(annotations.contains_key(CLIENTS_HASH_ANNOTATION));
    let pod = tmpl.spec.expect("pod");
    assert_eq!(
        pod.image_pull_secrets.expect("pull secrets")[0].name,
        "regcred"
    );
    let psc = pod.security_context.expect("pod security context");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(pod.termination_grace_period_seconds, Some(7 + 20 + 5));
    assert_eq!(
        pod.node_selector.expect("node selector")["pool"],
        "gateways"
    );
    assert_eq!(
        pod.tolerations.expect("tolerations")[0].key.as_deref(),
        Some("dedicated")
    );
    assert_eq!(pod.priority_class_name.as_deref(), Some("proxy-critical"));
    let spread = pod.topology_spread_constraints.expect("spread");
    assert_eq!(
        spread[0]
            .label_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone()),
        Some(selector(&wl(&r)))
    );
    let c = &pod.containers[0];
    let sc = c
        .security_context
        .as_ref()
        .expect("container security context");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .map(|q| q["cpu"].0.clone()),
        Some("100m".to_owned()),
        "the chart's default resources when the Routing sets none"
    );
    assert_args_include(
        c,
        &["--shutdown-delay-seconds=7", "--drain-grace-seconds=20"],
    );
    // A Routing's own resources win over the default.
    let pod = gateway_pod(&routing(), &t);
    assert_eq!(pod.containers[0].resources, wl(&routing()).spec.resources);
}

#[test]
fn the_pod_disruption_budget_selects_the_gateway_pods_unless_turned_off() {
    let r = routing();
    let mut t = template();
    let pdb = pod_disruption_budget(&wl(&r), &t).expect("enabled by default");
    let spec = pdb.spec.expect("spec");
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        Some(selector(&wl(&r)))
    );
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(
        pdb.metadata.owner_references.expect("owner")[0].kind,
        "Routing"
    );
    t.pod.pod_disruption_budget.enabled = false;
    assert!(pod_disruption_budget(&wl(&r), &t).is_none());
}

#[test]
fn names_fit_a_service() {
    assert_eq!(object_name("shanghai-crawler"), "shanghai-crawler-gateway");
    let long = "a".repeat(60);
    assert!(object_name(&long).starts_with("gateway-"));
    assert!(object_name("with.dots").starts_with("gateway-"));
    assert_eq!(object_name("x.y"), object_name("x.y"));
}

#[test]
fn deployment_has_labels_owner_token_and_ports() {
    let r = routing();
    let d = deployment(&wl(&r), &template(), &no_clients());
    let labels = d.metadata.labels.as_ref().expect("labels");
    assert_eq!(
        labels["app.kubernetes.io/managed-by"],
        "proxy-pool-operator"
    );
    assert_eq!(labels["proxypool.io/component"], "gateway");
    let owner = &d.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("Routing", Some(true))
    );
    let spec = d.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().expect("pod");
    assert_eq!(pod.automount_service_account_token, Some(false));
    let token = pod.volumes.as_ref().expect("volumes")[0]
        .projected
        .as_ref()
        .and_then(|p| p.sources.as_ref())
        .and_then(|s| s[0].service_account_token.as_ref())
        .expect("token projection");
    assert_eq!(token.audience.as_deref(), Some(IDENTITY_AUDIENCE));
    let c = &pod.containers[0];
    assert_eq!(
        numbers(&c.ports, |p| p.container_port),
        vec![3128, 1080, 9090]
    );
    assert_eq!(c.resources, wl(&r).spec.resources);
    let args = c.args.as_ref().expect("args");
    assert_eq!(
        args,
        &[
            "--http-listen=0.0.0.0:3128",
            "--socks5-listen=0.0.0.0:1080",
            "--admin-listen=0.0.0.0:9090",
            "--controller=https://proxy-pool-controller:9443",
            "--gateway-group=shanghai-crawler",
            "--clients-file=/etc/proxy-pool-gateway/clients.json",
            "--shutdown-delay-seconds=5",
            "--drain-grace-seconds=30",
        ]
    );
    assert!(c.readiness_probe.is_some() && c.liveness_probe.is_some());
}

#[test]
fn gateway_pods_mount_the_trust_bundle_config_map_they_are_told() {
    // Two operators in one namespace (two chart releases) publish their bundles under
    // different names: each one's gateways mount its own, for Routings and groups.
    let t = GatewayTemplate {
        trust_bundle_config_map: "canary-proxy-pool-trust-bundle".into(),
        ..template()
    };
    let pods = [
        deployment(&wl(&routing()), &t, &no_clients()),
        deployment(&group_wl(&group()), &t, &no_clients()),
    ]
    .map(|d| d.spec.expect("spec").template.spec.expect("pod"));
    for pod in pods {
        let volumes = pod.volumes.as_ref().expect("volumes");
        let bundle = volumes
            .iter()
            .find(|v| v.name == "trust-bundle")
            .and_then(|v| v.config_map.as_ref())
            .expect("trust-bundle ConfigMap volume");
        assert_eq!(bundle.name, "canary-proxy-pool-trust-bundle");
        let others: Vec<_> = volumes
            .iter()
            .filter_map(|v| v.config_map.as_ref())
            .filter(|c| c.name.contains("trust-bundle") && c.name != bundle.name)
            .collect();
        assert!(others.is_empty(), "{others:?}");
        let c = &pod.containers[0];
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "trust-bundle")
            .expect("trust-bundle mount");
        assert_eq!(mount.mount_path, TRUST_BUNDLE_DIR);
        let file = c
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "PROXY_POOL_TRUST_BUNDLE_FILE")
            .and_then(|e| e.value.clone());
        assert_eq!(file, Some(format!("{TRUST_BUNDLE_DIR}/ca.crt")));
    }
}

#[test]
fn an_absent_listener_binds_loopback_and_admin_avoids_listener_ports() {
    let mut r = routing();
    let g = r.spec.gateway.as_mut().expect("inline");
    g.listeners.http = None;
    if let Some(s) = g.listeners.socks5.as_mut() {
        s.port = 9090;
    }
    let pod = gateway_pod(&r, &template());
    assert_args_include(
        &pod.containers[0],
        &["--http-listen=127.0.0.1:0", "--admin-listen=0.0.0.0:9091"],
    );
}

#[test]
fn service_selects_the_deployment_pods() {
    let r = routing();
    let s = service(&wl(&r));
    let d = deployment(&wl(&r), &template(), &no_clients());
    let spec = s.spec.as_ref().expect("spec");
    assert_eq!(
        spec.selector,
        d.spec.as_ref().expect("spec").selector.match_labels
    );
    assert_eq!(numbers(&spec.ports, |p| p.port), vec![3128, 1080]);
}

#[test]
fn a_group_has_its_own_names_selector_owner_and_flags() {
    let g = group();
    let w = group_wl(&g);
    let d = deployment(&w, &template(), &no_clients());
    assert_eq!(d.metadata.name.as_deref(), Some("edge-gateway"));
    let owner = &d.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("GatewayGroup", "edge", Some(true))
    );
    let spec = d.spec.as_ref().expect("spec");
    assert_eq!(
        spec.selector.match_labels,
        Some(BTreeMap::from([
            ("proxypool.io/component".to_owned(), "gateway".to_owned()),
            (GROUP_LABEL.to_owned(), "edge-gateway".to_owned()),
        ]))
    );
    assert_eq!(spec.replicas, Some(2));
    let c = &spec.template.spec.as_ref().expect("pod").containers[0];
    assert_args_include(
        c,
        &[
            "--gateway-group=edge",
            "--write-timeout-seconds=30",
            "--request-body-timeout-seconds=120",
        ],
    );
    let args = c.args.as_ref().expect("args");
    assert!(
        !args.iter().any(|a| a.starts_with("--proxy-protocol-from")),
        "no PROXY protocol flag unless asked for: {args:?}"
    );
    assert_eq!(
        clients_config_map(&w, &no_clients())
            .metadata
            .name
            .as_deref(),
        Some("edge-gateway-clients")
    );
    // PROXY protocol sources become one flag each; a duration rounds up to seconds.
    let mut g = group();
    g.spec.proxy_protocol = Some(crate::crd::ProxyProtocol {
        trusted_sources: vec!["10.0.0.0/8".into(), "2001:db8::/32".into()],
    });
    g.spec.limits = Some(crate::crd::GatewayLimits {
        write_timeout: Some("1500ms".into()),
        max_connections: Some(5000),
        max_connections_per_source: Some(100),
        handshake_timeout: Some("5s".into()),
        client_idle_timeout: Some("2m".into()),
        idle_timeout: Some("1h".into()),
        max_request_head_bytes: Some(32768),
        max_request_headers: Some(100),
        ..Default::default()
    });
    let pod = deployment(&group_wl(&g), &template(), &no_clients())
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod");
    assert_args_include(
        &pod.containers[0],
        &[
            "--proxy-protocol-from=10.0.0.0/8",
            "--proxy-protocol-from=2001:db8::/32",
            "--write-timeout-seconds=2",
            "--max-connections=5000",
            "--max-connections-per-source=100",
            "--handshake-timeout-seconds=5",
            "--client-idle-timeout-seconds=120",
            "--io-idle-timeout-seconds=3600",
            "--max-request-head-bytes=32768",
            "--max-request-headers=100",
        ],
    );
    let args = pod.containers[0].args.clone().expect("args");
    assert!(!args.iter().any(|a| a.starts_with("--request-body-timeout")));
}

#[test]
fn an_inline_gateway_keeps_its_routing_selector() {
    let r = routing();
    let d = deployment(&wl(&r), &template(), &no_clients());
    assert_eq!(
        d.spec.expect("spec").selector.match_labels,
        Some(BTreeMap::from([
            ("proxypool.io/component".to_owned(), "gateway".to_owned()),
            (
                ROUTING_LABEL.to_owned(),
                "shanghai-crawler-gateway".to_owned()
            ),
        ])),
        "a Deployment's selector cannot change: an inline gateway keeps today's"
    );
    assert!(
        Workload::of_routing(&grouped("x", 0))
            .expect("named")
            .is_none()
    );
}

#[test]
fn the_service_is_exposed_as_the_group_says() {
    let g = group();
    let s = service(&group_wl(&g));
    let spec = s.spec.expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.external_traffic_policy, None);
    assert_eq!(s.metadata.annotations, None);
    let mut g = group();
    g.spec.service = Some(
        serde_yaml::from_str(
            "type: LoadBalancer\n\
             annotations: {service.beta.kubernetes.io/aws-load-balancer-type: nlb}\n\
             externalTrafficPolicy: Local\n\
             loadBalancerSourceRanges: [203.0.113.0/24]\n\
             nodePorts: {socks5: 31080}\n",
        )
        .expect("service"),
    );
    let s = service(&group_wl(&g));
    assert_eq!(
        s.metadata.annotations.expect("annotations")["service.beta.kubernetes.io/aws-load-balancer-type"],
        "nlb"
    );
    let spec = s.spec.expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(
        spec.load_balancer_source_ranges,
        Some(vec!["203.0.113.0/24".to_owned()])
    );
    let node_ports: Vec<Option<i32>> = spec
        .ports
        .expect("ports")
        .iter()
        .map(|p| p.node_port)
        .collect();
    assert_eq!(node_ports, [None, Some(31080)]);
}

#[test]
fn autoscaling_renders_an_hpa_and_leaves_replicas_alone() {
    let g = group();
    assert!(
        autoscaler(&group_wl(&g)).is_none(),
        "no autoscaling, no HPA"
    );
    let mut g = group();
    g.spec.autoscaling = Some(
        serde_yaml::from_str(
            "{minReplicas: 3, maxReplicas: 10, targetCPUUtilizationPercentage: 60}",
        )
        .expect("autoscaling"),
    );
    let w = group_wl(&g);
    let d = deployment(&w, &template(), &no_clients());
    assert_eq!(
        d.spec.expect("spec").replicas,
        None,
        "the autoscaler owns replicas: the operator must not apply them"
    );
    let hpa = autoscaler(&w).expect("HPA");
    assert_eq!(hpa.metadata.name.as_deref(), Some("edge-gateway"));
    let spec = hpa.spec;
    assert_eq!(
        (
            spec.scale_target_ref.kind.as_str(),
            spec.scale_target_ref.name.as_str(),
            spec.min_replicas,
            spec.max_replicas
        ),
        ("Deployment", "edge-gateway", Some(3), 10)
    );
    let metric = &spec.metrics.expect("metrics")[0];
    let target = &metric.resource.as_ref().expect("resource").target;
    assert_eq!(
        (
            metric.type_.as_str(),
            target.type_.as_str(),
            target.average_utilization
        ),
        ("Resource", "Utilization", Some(60))
    );
}

#[test]
fn the_group_budget_and_spread_win_over_the_chart() {
    let mut t = template();
    t.pod.pod_disruption_budget.enabled = false;
    let mut g = group();
    g.spec.pod_disruption_budget = None;
    assert!(pod_disruption_budget(&group_wl(&g), &t).is_none());
    g.spec.pod_disruption_budget = Some(crate::crd::DisruptionBudget {
        min_available: Some(IntOrString::String("50%".into())),
        max_unavailable: None,
    });
    let w = group_wl(&g);
    let spec = pod_disruption_budget(&w, &t)
        .expect("the group's")
        .spec
        .expect("spec");
    assert_eq!(
        (spec.min_available, spec.max_unavailable),
        (Some(IntOrString::String("50%".into())), None)
    );
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        Some(selector(&w))
    );
    // The chart's default spread, with the group's selector, unless it sets its own.
    let spread = |g: &GatewayGroup| {
        deployment(&group_wl(g), &template(), &no_clients())
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.topology_spread_constraints)
            .expect("spread")
    };
    let default = spread(&g);
    assert_eq!(default[0].topology_key, "kubernetes.io/hostname");
    g.spec.topology_spread_constraints = vec![
        serde_yaml::from_str(
            "{maxSkew: 2, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}",
        )
        .expect("constraint"),
    ];
    let own = spread(&g);
    assert_eq!(own.len(), 1);
    assert_eq!(
        (own[0].topology_key.as_str(), own[0].max_skew),
        ("topology.kubernetes.io/zone", 2)
    );
    assert_eq!(
        own[0]
            .label_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone()),
        Some(selector(&w))
    );
}

/// A Routing of group `edge` with this name and priority.
fn grouped(name: &str, priority: i32) -> Routing {
    let mut r = routing();
    r.meta_mut().name = Some(name.into());
    r.spec.gateway = None;
    r.spec.gateway_group = Some("edge".into());
    r.spec.priority = priority;
    r
}

#[test]
fn a_group_serves_its_routings_in_priority_order_and_their_clients() {
    let mut other = grouped("other-group", 50);
    other.spec.gateway_group = Some("core".into());
    let mut all = vec![
        grouped("b", 1),
        grouped("a", 1),
        other,
        routing(),
        grouped("z", 7),
    ];
    let names = |all: &[Routing]| -> Vec<String> {
        super::routings_of(all, "edge")
            .iter()
            .map(|r| r.meta().name.clone().unwrap_or_default())
            .collect()
    };
    assert_eq!(names(&all), ["z", "a", "b"]);
    // Clients: the union of what they name, or everyone when one names none.
    let served = super::routings_of(&all, "edge");
    assert_eq!(
        wanted_clients(served.iter().copied()),
        Some(BTreeSet::from(["team-crawler".to_owned()]))
    );
    if let Some(m) = all[0].spec.match_.as_mut() {
        m.clients = vec!["team-search".into()];
    }
    let served = super::routings_of(&all, "edge");
    let wanted = wanted_clients(served.iter().copied());
    assert_eq!(
        wanted,
        Some(BTreeSet::from([
            "team-crawler".to_owned(),
            "team-search".to_owned()
        ]))
    );
    assert_eq!(
        gateway_clients(wanted.as_ref(), &available()).names,
        ["team-crawler", "team-search"]
    );
    all[1].spec.match_ = None;
    let served = super::routings_of(&all, "edge");
    assert_eq!(wanted_clients(served.iter().copied()), None);
}

#[test]
fn replicas_ownership_is_read_from_managed_fields() {
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "edge-gateway", "managedFields": [
            {"manager": "proxy-pool-operator", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {}}},
        ]},
    }))
    .expect("Deployment");
    assert!(super::owns_replicas(&d, "proxy-pool-operator"));
    assert!(!super::owns_replicas(&d, "kubectl"));
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "edge-gateway", "managedFields": [
            {"manager": "proxy-pool-operator", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:template": {}}}},
            {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        ]},
    }))
    .expect("Deployment");
    assert!(!super::owns_replicas(&d, "proxy-pool-operator"));
}

#[test]
fn gateway_containers_log_as_the_settings_say() {
    let env_of = |t: &GatewayTemplate| -> BTreeMap<String, String> {
        let pod = gateway_pod(&routing(), t);
        pod.containers[0]
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| Some((e.name, e.value?)))
            .collect()
    };
    // The default: text, RUST_LOG left to the binary (info).
    let env = env_of(&template());
    assert_eq!(
        env.get("PROXY_POOL_LOG_FORMAT").map(String::as_str),
        Some("text")
    );
    assert!(!env.contains_key("RUST_LOG"), "{env:?}");
    // The chart's default in clusters: JSON, with a level.
    let mut t = template();
    t.pod = serde_yaml::from_str("logFormat: json\nlogLevel: debug,hyper=info\n").unwrap();
    let env = env_of(&t);
    assert_eq!(
        env.get("PROXY_POOL_LOG_FORMAT").map(String::as_str),
        Some("json")
    );
    assert_eq!(
        env.get("RUST_LOG").map(String::as_str),
        Some("debug,hyper=info")
    );
    // A format the binaries do not know is refused with the settings file.
    assert!(serde_yaml::from_str::<GatewayPodSettings>("logFormat: xml\n").is_err());
}
