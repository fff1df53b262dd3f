//! Tests of the gateway workload and clients-file renderers.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use serde_json::json;

use super::*;
use crate::reconcile::gateway_pod::GatewayPodSettings;
use crate::reconcile::render::GatewayClient;
use crate::reconcile::settings::GatewayTemplate;

fn routing() -> Routing {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/routing.yaml"),
    )
    .expect("example");
    let mut r: Routing = serde_yaml::from_str(&text).expect("Routing");
    r.meta_mut().namespace = Some("proxy".into());
    r.meta_mut().uid = Some("0000-1111".into());
    r
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
    let d = deployment(r, t, &no_clients()).expect("deployment");
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
    gateway_clients(&routing(), &BTreeMap::new())
}

fn available() -> BTreeMap<String, GatewayClient> {
    let c = |secret: &str, digest: &str| GatewayClient {
        secret: secret.into(),
        digest: digest.into(),
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
    let all = gateway_clients(&r, &available());
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
    let one = gateway_clients(&r, &available());
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
    let again = gateway_clients(&r, &rotated);
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
    let clients = gateway_clients(&r, &available());
    let d = deployment(&r, &template(), &clients).expect("deployment");
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
    let map = clients_config_map(&r, &clients).expect("ConfigMap");
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
    r.spec.gateway.resources = None;
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
    let d = deployment(&r, &t, &no_clients()).expect("deployment");
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
        Some(selector("shanghai-crawler"))
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
    assert_eq!(
        pod.containers[0].resources,
        routing().spec.gateway.resources
    );
}

#[test]
fn the_pod_disruption_budget_selects_the_gateway_pods_unless_turned_off() {
    let r = routing();
    let mut t = template();
    let pdb = pod_disruption_budget(&r, &t)
        .expect("pdb")
        .expect("enabled by default");
    let spec = pdb.spec.expect("spec");
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        Some(selector("shanghai-crawler"))
    );
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(
        pdb.metadata.owner_references.expect("owner")[0].kind,
        "Routing"
    );
    t.pod.pod_disruption_budget.enabled = false;
    assert!(pod_disruption_budget(&r, &t).expect("pdb").is_none());
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
    let d = deployment(&r, &template(), &no_clients()).expect("deployment");
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
    assert_eq!(c.resources, r.spec.gateway.resources);
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
fn an_absent_listener_binds_loopback_and_admin_avoids_listener_ports() {
    let mut r = routing();
    r.spec.gateway.listeners.http = None;
    if let Some(s) = r.spec.gateway.listeners.socks5.as_mut() {
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
    let s = service(&r).expect("service");
    let d = deployment(&r, &template(), &no_clients()).expect("deployment");
    let spec = s.spec.as_ref().expect("spec");
    assert_eq!(
        spec.selector,
        d.spec.as_ref().expect("spec").selector.match_labels
    );
    assert_eq!(numbers(&spec.ports, |p| p.port), vec![3128, 1080]);
}
