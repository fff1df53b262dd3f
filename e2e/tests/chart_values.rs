//! The chart guards its values (`charts/proxy-pool/values.schema.json` and its
//! templates' checks), with the real helm (`PROXY_POOL_HELM_BIN`, `scripts/helm-bin.sh`):
//!
//! - every file in `charts/proxy-pool/tests/bad-values/` is refused with the message its
//!   `# Expect:` line names (by `helm lint`, or by `helm template` — what `helm install`
//!   renders — when the file says so);
//! - the default values and every file in `tests/good-values/` (and the local cluster's
//!   values) pass `helm lint --strict` and render, with a base config and a `migrate`
//!   config the controller's validator accepts;
//! - two releases in one namespace share no object name; name overrides are honoured;
//! - the per-component values (labels, env, args, volumes, probes, log settings) reach
//!   the pods; the analytics `migrate` hook Job; the monitoring objects embed the
//!   shipped rules and dashboard, and the gateway PodMonitor selects the pods the
//!   operator makes, on their metrics port.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Volume};
use proxy_pool_operator::crd::GatewayGroup;
use proxy_pool_operator::reconcile::gateway::{GatewayClients, Workload, deployment};
use proxy_pool_operator::reconcile::{GatewayPodSettings, GatewayTemplate};
use serde::Deserialize as _;
use serde_yaml::Value;

const HELM_ENV: &str = "PROXY_POOL_HELM_BIN";
const NS: &str = "proxy-pool";
const ECHO: &str = "checker.echo=203.0.113.10:8080";

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn chart() -> PathBuf {
    repo_path("charts/proxy-pool")
}

/// `helm <args…>` (the chart path is among `args`).
fn helm(args: &[&str]) -> Output {
    let bin = std::env::var_os(HELM_ENV).unwrap_or_else(|| {
        panic!("{HELM_ENV} is not set: build helm with `scripts/helm-bin.sh` and export {HELM_ENV}=<the path it prints> (scripts/test.sh does both)")
    });
    Command::new(bin).args(args).output().expect("run helm")
}

/// Standard output and error of `out`, together.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm template <release> <chart> -n proxy-pool <args…>`; the rendered documents
/// (panics with helm's output when it fails).
fn template(release: &str, args: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut all = vec!["template", release, chart.to_str().unwrap(), "-n", NS];
    all.extend_from_slice(args);
    let out = helm(&all);
    assert!(out.status.success(), "helm {all:?}:\n{}", text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    // YAML 1.2 (serde_yaml) reads the octal file modes as strings: decimal for the types.
    let stdout = stdout.replace("defaultMode: 0440", "defaultMode: 288");
    serde_yaml::Deserializer::from_str(&stdout)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The document of `kind` named `name`, as `T`.
fn find<T: serde::de::DeserializeOwned>(docs: &[Value], kind: &str, name: &str) -> T {
    let doc = docs
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", names(docs)));
    serde_yaml::from_value(doc.clone()).unwrap_or_else(|e| panic!("{kind} {name}: {e}"))
}

/// `(kind, namespace, name)` of every document.
fn names(docs: &[Value]) -> BTreeSet<(String, String, String)> {
    docs.iter()
        .map(|d| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                s(&d["kind"]),
                s(&d["metadata"]["namespace"]),
                s(&d["metadata"]["name"]),
            )
        })
        .collect()
}

/// The values files in `charts/proxy-pool/tests/<dir>/`, sorted.
fn values_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart().join("tests").join(dir))
        .unwrap_or_else(|e| panic!("tests/{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The value of the `# <key>: …` comment line of a values file.
fn header<'a>(file: &'a str, key: &str) -> Option<&'a str> {
    file.lines()
        .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
        .map(str::trim)
}

#[test]
fn bad_values_files_are_refused_with_their_message() {
    let files = values_files("bad-values");
    assert!(files.len() >= 10, "{files:?}");
    let chart = chart();
    let mut refused_by_lint = 0;
    for path in &files {
        let content = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        assert!(
            header(&content, "Breaks").is_some(),
            "{name}: no `# Breaks:` line"
        );
        let expect =
            header(&content, "Expect").unwrap_or_else(|| panic!("{name}: no `# Expect:` line"));
        let by_template =
            header(&content, "Refused by").is_some_and(|b| b.starts_with("helm template"));
        let file = path.to_str().unwrap();
        let out = if by_template {
            helm(&["template", "r", chart.to_str().unwrap(), "-f", file])
        } else {
            refused_by_lint += 1;
            helm(&["lint", chart.to_str().unwrap(), "-f", file])
        };
        let said = text(&out);
        assert!(
            !out.status.success(),
            "{name} was accepted (it breaks: {}):\n{said}",
            header(&content, "Breaks").unwrap_or_default()
        );
        assert!(
            said.contains(expect),
            "{name}: expected {expect:?} in:\n{said}"
        );
        // What lint refuses, install refuses too (the schema is checked first).
        if !by_template {
            let out = helm(&["template", "r", chart.to_str().unwrap(), "-f", file]);
            assert!(
                !out.status.success() && text(&out).contains(expect),
                "{name}: helm template accepted it:\n{}",
                text(&out)
            );
        }
    }
    assert!(refused_by_lint >= 10);
}

#[test]
fn default_and_good_values_pass_lint_strict_and_render_valid_configs() {
    let chart = chart();
    let cluster = repo_path("scripts/cluster/values.yaml");
    let mut cases: Vec<Vec<String>> = vec![vec![], vec!["--set".into(), ECHO.into()]];
    for f in values_files("good-values").into_iter().chain([cluster]) {
        cases.push(vec!["-f".into(), f.to_str().unwrap().to_owned()]);
    }
    assert!(cases.len() >= 5);
    for args in &cases {
        let mut lint = vec!["lint", "--strict", chart.to_str().unwrap()];
        lint.extend(args.iter().map(String::as_str));
        let out = helm(&lint);
        let said = text(&out);
        assert!(out.status.success(), "helm {lint:?}:\n{said}");
        assert!(
            !said.contains("[WARNING]") && !said.contains("[ERROR]"),
            "helm {lint:?}:\n{said}"
        );
        if args.is_empty() {
            continue; // the default install needs checker.echo to render
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let docs = template("pp", &args);
        let base: ConfigMap = find(
            &docs,
            "ConfigMap",
            &format!("{}-operator-base-config", fullname(&docs)),
        );
        let yaml = &base.data.unwrap()["base.yaml"];
        let config = proxy_pool_api::config::load_yaml(yaml)
            .unwrap_or_else(|e| panic!("{args:?}: base config: {e}\n{yaml}"));
        // Analytics: the hook's config is the store and analytics of the same config.
        if let Some(cm) = docs.iter().find(|d| {
            d["kind"] == "ConfigMap"
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-migrate"))
        }) {
            let yaml = cm["data"]["config.yaml"].as_str().unwrap();
            let migrate = proxy_pool_api::config::load_yaml(yaml)
                .unwrap_or_else(|e| panic!("{args:?}: migrate config: {e}\n{yaml}"));
            assert_eq!(migrate.analytics, config.analytics, "{yaml}");
            assert_eq!(migrate.store, config.store, "{yaml}");
            assert!(migrate.analytics.is_some());
        }
    }
}

/// The base name of a rendering: the operator Deployment's name without `-operator`.
fn fullname(docs: &[Value]) -> String {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .find_map(|n| n.strip_suffix("-operator"))
        .expect("an operator Deployment")
        .to_owned()
}

/// The value of `--<flag>=` in `args` (exactly once).
fn flag_value(args: &[String], flag: &str) -> String {
    let prefix = format!("--{flag}=");
    let found: Vec<&str> = args
        .iter()
        .filter_map(|a| a.strip_prefix(&prefix))
        .collect();
    match found.as_slice() {
        [one] => (*one).to_owned(),
        other => panic!("--{flag} given {} times in {args:?}", other.len()),
    }
}

/// The identity CA Secret and trust-bundle ConfigMap names a rendering's operator is
/// told (its args), after checking every other user of them in the release agrees: the
/// Role lets the operator update exactly that Secret, the checker mounts that bundle,
/// and the gateway Deployments the operator renders with those args mount it too.
fn identity_objects(docs: &[Value]) -> (String, String) {
    let full = fullname(docs);
    let operator: Deployment = find(docs, "Deployment", &format!("{full}-operator"));
    let (_, c) = container(operator);
    let args = c.args.unwrap();
    let (ca, bundle) = (
        flag_value(&args, "identity-ca-secret"),
        flag_value(&args, "trust-bundle-config-map"),
    );
    // The Role's by-name grant on Secrets: the CA Secret (and the controller's TLS).
    let role = docs
        .iter()
        .find(|d| {
            d["kind"] == "Role" && d["metadata"]["name"] == format!("{full}-operator").as_str()
        })
        .unwrap_or_else(|| panic!("no operator Role in {:?}", names(docs)));
    let granted: Vec<String> = role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|r| r["resources"][0] == "secrets" && !r["resourceNames"].is_null())
        .flat_map(|r| r["resourceNames"].as_sequence().unwrap().clone())
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    assert!(
        granted.contains(&ca),
        "Role grants {granted:?}, operator told {ca}"
    );
    assert!(
        !granted
            .iter()
            .any(|n| n.ends_with("identity-ca") && *n != ca),
        "{granted:?}"
    );
    // The checker's trust-bundle volume.
    let checker: Deployment = find(docs, "Deployment", &format!("{full}-checker"));
    let mounted: Vec<String> = volumes(checker)
        .iter()
        .filter(|v| v.name == "trust-bundle")
        .filter_map(|v| v.config_map.as_ref().map(|c| c.name.clone()))
        .collect();
    assert_eq!(
        mounted,
        std::slice::from_ref(&bundle),
        "checker mounts {mounted:?}"
    );
    // The gateway pods the operator renders with what it is told.
    let mut group: GatewayGroup = serde_yaml::from_str(
        &std::fs::read_to_string(repo_path("examples/gateway-group.yaml")).unwrap(),
    )
    .unwrap();
    group.metadata.namespace = Some(NS.into());
    group.metadata.uid = Some("0000-1111".into());
    let template = GatewayTemplate {
        trust_bundle_config_map: bundle.clone(),
        ..gateway_template()
    };
    let gateway = deployment(
        &Workload::of_group(&group).unwrap(),
        &template,
        &no_clients(),
    );
    let gateway_volumes = volumes(gateway);
    assert!(
        gateway_volumes
            .iter()
            .any(|v| v.config_map.as_ref().is_some_and(|c| c.name == bundle)),
        "gateway pods do not mount {bundle}: {gateway_volumes:?}"
    );
    (ca, bundle)
}

#[test]
fn two_releases_in_one_namespace_share_no_object_name() {
    let full = [
        ECHO,
        "store.backend=redis",
        "redis.address=redis://redis:6379/0",
        "postgresql.enabled=true",
        "postgresql.dsnSecret.name=pg-dsn",
        "controller.tokenReview.enabled=true",
        "ingress.enabled=true",
        "tests.enabled=true",
        "tests.gateway.service=gw",
        "tests.target=http://example.com/",
        "tests.clientSecret.name=client",
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.podMonitor.enabled=true",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
    ];
    let sets: Vec<&str> = full.iter().flat_map(|s| ["--set", *s]).collect();
    let long_a = "team-crawling-proxy-pool-production-eu-west-1-aaaa";
    let long_b = "team-crawling-proxy-pool-production-eu-west-1-bbbb";
    for (a, b) in [
        ("proxy-pool", "proxy-pool-canary"),
        ("alpha", "beta"),
        (long_a, long_b),
    ] {
        let (da, db) = (template(a, &sets), template(b, &sets));
        let (na, nb) = (names(&da), names(&db));
        assert!(na.len() > 20, "{na:?}");
        let shared: Vec<_> = na.intersection(&nb).collect();
        assert!(shared.is_empty(), "releases {a} and {b} share {shared:?}");
        // Nor what their operators make at run time: each its own identity CA Secret
        // and trust bundle, which its workloads mount and its Role grants.
        let (ca_a, bundle_a) = identity_objects(&da);
        let (ca_b, bundle_b) = identity_objects(&db);
        assert_ne!(
            ca_a, ca_b,
            "releases {a} and {b} share the identity CA Secret"
        );
        assert_ne!(
            bundle_a, bundle_b,
            "releases {a} and {b} share the trust bundle"
        );
        for name in [&ca_a, &ca_b, &bundle_a, &bundle_b] {
            assert!(name.len() <= 253, "{name}");
            assert!(
                !na.iter().chain(&nb).any(|(_, _, n)| n == name),
                "{name} is also a chart object's name"
            );
        }
        for (kind, _, name) in na.iter().chain(&nb) {
            // Services are DNS labels; other names DNS subdomains.
            let max = if kind == "Service" { 63 } else { 253 };
            assert!(name.len() <= max, "{kind} {name} is longer than {max}");
        }
    }

    // A release named proxy-pool keeps the names its operator used before they were
    // per release (an upgrade keeps its CA).
    let docs = template("proxy-pool", &["--set", ECHO]);
    assert_eq!(
        identity_objects(&docs),
        (
            "proxy-pool-identity-ca".to_owned(),
            "proxy-pool-trust-bundle".to_owned()
        )
    );

    // fullnameOverride names every object; nameOverride replaces the chart's name.
    let docs = template("x", &["--set", ECHO, "--set", "fullnameOverride=edge"]);
    assert_eq!(
        identity_objects(&docs),
        (
            "edge-identity-ca".to_owned(),
            "edge-trust-bundle".to_owned()
        )
    );
    for (kind, _, name) in names(&docs) {
        if kind != "CustomResourceDefinition" {
            assert!(name.starts_with("edge-"), "{kind} {name}");
        }
    }
    let docs = template("x", &["--set", ECHO, "--set", "nameOverride=pool"]);
    assert_eq!(fullname(&docs), "x-pool");
    let d: Deployment = find(&docs, "Deployment", "x-pool-controller");
    let labels = d.spec.unwrap().template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels["app.kubernetes.io/name"], "pool");
}

fn env<'a>(c: &'a Container, name: &str) -> Vec<&'a EnvVar> {
    c.env.iter().flatten().filter(|e| e.name == name).collect()
}

fn env_value(c: &Container, name: &str) -> Option<String> {
    match env(c, name).as_slice() {
        [one] => one.value.clone(),
        [] => None,
        many => panic!("{name} set {} times in {}", many.len(), c.name),
    }
}

fn container(d: Deployment) -> (BTreeMap<String, String>, Container) {
    let t = d.spec.unwrap().template;
    let labels = t.metadata.unwrap().labels.unwrap();
    (
        labels,
        t.spec.unwrap().containers.into_iter().next().unwrap(),
    )
}

/// The volumes of `d`'s pods.
fn volumes(d: Deployment) -> Vec<Volume> {
    d.spec.unwrap().template.spec.unwrap().volumes.unwrap()
}

#[test]
fn per_component_values_reach_the_pods() {
    // Defaults: JSON logs at info in every chart-rendered container, probe timing.
    let docs = template("pp", &["--set", ECHO]);
    for component in ["operator", "controller", "checker"] {
        let (_, c) = container(find(
            &docs,
            "Deployment",
            &format!("pp-proxy-pool-{component}"),
        ));
        assert_eq!(
            env_value(&c, "PROXY_POOL_LOG_FORMAT").as_deref(),
            Some("json")
        );
        assert_eq!(env_value(&c, "RUST_LOG").as_deref(), Some("info"));
        let live = c.liveness_probe.unwrap();
        assert_eq!(
            (live.period_seconds, live.failure_threshold),
            (Some(10), Some(3))
        );
        assert_eq!(c.readiness_probe.unwrap().period_seconds, Some(5));
    }

    let file = chart().join("tests/good-values/redis-ha.yaml");
    let docs = template("pp", &["-f", file.to_str().unwrap()]);
    let (labels, c) = container(find(&docs, "Deployment", "pp-pool-controller"));
    assert_eq!(labels["team"], "crawling");
    assert_eq!(labels["proxypool.io/component"], "controller");
    // extraEnv replaces the chart's RUST_LOG (once) and adds its own.
    assert_eq!(
        env_value(&c, "RUST_LOG").as_deref(),
        Some("info,proxy_pool_controller=debug")
    );
    assert_eq!(env(&c, "EXTRA_FROM_SECRET").len(), 1);
    assert_eq!(env(&c, "PROXY_POOL_POD_NAME").len(), 1);
    assert!(
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "ca-extra" && m.mount_path == "/etc/extra-ca")
    );
    let ready = c.readiness_probe.unwrap();
    assert_eq!(
        (ready.period_seconds, ready.failure_threshold),
        (Some(3), Some(2))
    );
    let d: Deployment = find(&docs, "Deployment", "pp-pool-controller");
    assert!(volumes(d).iter().any(|v| v.name == "ca-extra"));

    let (labels, c) = container(find(&docs, "Deployment", "pp-pool-checker"));
    assert_eq!(labels["team"], "crawling");
    assert_eq!(env_value(&c, "RUST_LOG").as_deref(), Some("debug"));
    assert_eq!(
        c.args.unwrap().last().map(String::as_str),
        Some("--concurrency=64")
    );
    let live = c.liveness_probe.unwrap();
    assert_eq!(
        (
            live.period_seconds,
            live.timeout_seconds,
            live.initial_delay_seconds
        ),
        (Some(20), Some(3), Some(5))
    );
    let (_, c) = container(find(&docs, "Deployment", "pp-pool-operator"));
    assert_eq!(env_value(&c, "TZ").as_deref(), Some("UTC"));
    assert_eq!(env(&c, "POD_NAMESPACE").len(), 1);
}

#[test]
fn analytics_schema_is_migrated_by_a_hook_before_install_and_upgrade() {
    let file = chart().join("tests/good-values/analytics.yaml");
    let docs = template("pp", &["-f", file.to_str().unwrap()]);
    let job: Job = find(&docs, "Job", "edge-pool-migrate");
    let annotations = job.metadata.annotations.unwrap();
    assert_eq!(annotations["helm.sh/hook"], "pre-install,pre-upgrade");
    let cm: ConfigMap = find(&docs, "ConfigMap", "edge-pool-migrate");
    let cm_weight: i32 = cm.metadata.annotations.unwrap()["helm.sh/hook-weight"]
        .parse()
        .unwrap();
    let job_weight: i32 = annotations["helm.sh/hook-weight"].parse().unwrap();
    assert!(cm_weight < job_weight, "the config exists before the Job");
    let spec = job.spec.unwrap();
    assert_eq!(spec.backoff_limit, Some(1));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    let c = &pod.containers[0];
    assert_eq!(
        c.args.clone().unwrap(),
        ["migrate", "--config", "/etc/proxy-pool-migrate/config.yaml"]
    );
    assert!(
        c.image
            .as_deref()
            .unwrap()
            .contains("proxy-pool-controller")
    );
    assert_eq!(
        env_value(c, "PROXY_POOL_LOG_FORMAT").as_deref(),
        Some("text")
    );
    assert_eq!(env_value(c, "RUST_LOG").as_deref(), Some("warn"));
    // The DSN file where the config says, from the Secret the controller mounts.
    let yaml = &cm.data.unwrap()["config.yaml"];
    let config = proxy_pool_api::config::load_yaml(yaml).unwrap();
    let dsn = config.analytics.unwrap().dsn_file;
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| dsn.starts_with(&m.mount_path))
        .unwrap_or_else(|| panic!("{} not mounted", dsn.display()));
    let volume = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    assert_eq!(
        volume.secret.unwrap().secret_name.as_deref(),
        Some("pg-dsn")
    );

    // No analytics, no hook.
    let docs = template("pp", &["--set", ECHO]);
    assert!(!docs.iter().any(|d| d["kind"] == "Job"));
}

#[test]
fn monitoring_objects_embed_the_shipped_rules_and_dashboard() {
    // Off by default.
    let docs = template("pp", &["--set", ECHO]);
    for kind in ["ServiceMonitor", "PodMonitor", "PrometheusRule"] {
        assert!(!docs.iter().any(|d| d["kind"] == kind), "{kind} by default");
    }
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "pp-proxy-pool-dashboard")
    );

    let file = chart().join("tests/good-values/redis-ha.yaml");
    let docs = template("pp", &["-f", file.to_str().unwrap()]);
    let monitors: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceMonitor" || d["kind"] == "PodMonitor")
        .collect();
    assert_eq!(monitors.len(), 4, "{:?}", names(&docs));
    for m in &monitors {
        assert_eq!(m["metadata"]["labels"]["release"], "kube-prometheus-stack");
    }
    let port = |kind: &str, name: &str| -> String {
        let m = docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"));
        let endpoints = if kind == "ServiceMonitor" {
            "endpoints"
        } else {
            "podMetricsEndpoints"
        };
        m["spec"][endpoints][0]["port"].as_str().unwrap().to_owned()
    };
    assert_eq!(port("ServiceMonitor", "pp-pool-controller"), "admin");
    assert_eq!(port("ServiceMonitor", "pp-pool-operator"), "ops");
    assert_eq!(port("PodMonitor", "pp-pool-checker"), "ops");

    // The gateway PodMonitor selects the pods the operator makes, on a port they have.
    let mut group: GatewayGroup = serde_yaml::from_str(
        &std::fs::read_to_string(repo_path("examples/gateway-group.yaml")).unwrap(),
    )
    .unwrap();
    group.metadata.namespace = Some(NS.into());
    group.metadata.uid = Some("0000-1111".into());
    let workload = Workload::of_group(&group).unwrap();
    let gateway = deployment(&workload, &gateway_template(), &no_clients());
    let pod = gateway.spec.unwrap().template;
    let pod_labels = pod.metadata.unwrap().labels.unwrap();
    let pm = docs
        .iter()
        .find(|d| d["kind"] == "PodMonitor" && d["metadata"]["name"] == "pp-pool-gateway")
        .unwrap();
    let selector: BTreeMap<String, String> =
        serde_yaml::from_value(pm["spec"]["selector"]["matchLabels"].clone()).unwrap();
    for (k, v) in &selector {
        assert_eq!(pod_labels.get(k), Some(v), "gateway pods lack {k}={v}");
    }
    let metrics_port = port("PodMonitor", "pp-pool-gateway");
    let ports = pod.spec.unwrap().containers[0].ports.clone().unwrap();
    assert!(
        ports
            .iter()
            .any(|p| p.name.as_deref() == Some(metrics_port.as_str())),
        "gateway pods have no port {metrics_port}: {ports:?}"
    );

    // The PrometheusRule is the shipped rules file.
    let shipped: Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart().join("files/prometheus-rules.yaml")).unwrap(),
    )
    .unwrap();
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("PrometheusRule");
    assert_eq!(rule["spec"]["groups"], shipped["groups"]);
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );

    // The dashboard ConfigMap for Grafana's sidecar, in the namespace asked for.
    let cm: ConfigMap = find(&docs, "ConfigMap", "pp-pool-dashboard");
    assert_eq!(cm.metadata.namespace.as_deref(), Some("monitoring"));
    assert_eq!(cm.metadata.labels.unwrap()["grafana_dashboard"], "1");
    let rendered: serde_json::Value =
        serde_json::from_str(&cm.data.unwrap()["proxy-pool.json"]).unwrap();
    let shipped: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("files/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rendered, shipped);
    assert_eq!(shipped["uid"], "proxy-pool");
}

fn gateway_template() -> GatewayTemplate {
    GatewayTemplate {
        image: "proxy-pool-gateway:test".into(),
        image_pull_policy: "IfNotPresent".into(),
        service_account: "pp-pool-gateway".into(),
        controller_address: "pp-pool-controller-control-plane:9443".into(),
        identity_endpoint: "https://pp-pool-operator:8443".into(),
        trust_bundle_config_map: "proxy-pool-trust-bundle".into(),
        egress_deny_cidrs: vec!["10.96.0.0/12".into()],
        egress_allow_cidrs: Vec::new(),
        pod: GatewayPodSettings::default(),
    }
}

fn no_clients() -> GatewayClients {
    GatewayClients {
        names: Vec::new(),
        file: "[]".into(),
        mounts: BTreeMap::new(),
        hash: String::new(),
    }
}

#[test]
fn the_dashboard_queries_only_proxy_pool_metrics_the_rules_know() {
    // Every metric the dashboard and the rules query is a proxy_pool_<component>_ name of
    // a binary (the metric-name tests hold the binaries to docs/operations.md).
    let dashboard = std::fs::read_to_string(chart().join("files/grafana-dashboard.json")).unwrap();
    let rules = std::fs::read_to_string(chart().join("files/prometheus-rules.yaml")).unwrap();
    for (what, text) in [("dashboard", &dashboard), ("rules", &rules)] {
        let mut found = 0;
        for (i, _) in text.match_indices("proxy_pool_") {
            let rest = &text[i..];
            // `proxy_pool_(gateway|controller|checker|operator)_…` (a name regex).
            if rest.starts_with("proxy_pool_(gateway|controller|checker|operator)_") {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let component = name
                .trim_start_matches("proxy_pool_")
                .split('_')
                .next()
                .unwrap();
            assert!(
                ["gateway", "controller", "checker", "operator"].contains(&component),
                "{what}: {name} is not a proxy_pool_<component>_ metric"
            );
            found += 1;
        }
        assert!(found > 5, "{what}");
    }
    let doc: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let panels = doc["panels"].as_array().unwrap();
    assert!(panels.iter().filter(|p| p["type"] != "row").count() >= 10);
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
    }
}

/// Every file under `templates/` (and `crds/`, `files/` except the rules' unit tests) is
/// in the packaged chart — `.helmignore` keeps only the repository's `tests/` out — and
/// the cluster's values render the `helm test` hook (a pattern like `tests/` would drop
/// `templates/tests/` too, and `helm test` would then find no test at all).
#[test]
fn the_packaged_chart_keeps_every_template_and_the_test_hook() {
    let dir = std::env::temp_dir().join(format!("proxy-pool-package-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let chart = chart();
    let out = helm(&[
        "package",
        chart.to_str().unwrap(),
        "-d",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "helm package:\n{}", text(&out));
    let archive = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .expect("a packaged chart");
    let listing = Command::new("tar")
        .arg("tzf")
        .arg(&archive)
        .output()
        .expect("tar");
    assert!(listing.status.success(), "tar tzf: {}", text(&listing));
    let packaged: BTreeSet<String> = String::from_utf8(listing.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("proxy-pool/").map(str::to_owned))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);

    fn walk(root: &Path, rel: &str, into: &mut Vec<String>) {
        for e in std::fs::read_dir(root.join(rel)).unwrap() {
            let e = e.unwrap();
            let name = format!("{rel}/{}", e.file_name().to_string_lossy());
            if e.file_type().unwrap().is_dir() {
                walk(root, &name, into);
            } else {
                into.push(name);
            }
        }
    }
    let mut expected = Vec::new();
    for dir in ["templates", "crds", "files"] {
        walk(&chart, dir, &mut expected);
    }
    expected.retain(|f| f != "files/prometheus-rules.test.yaml");
    assert!(expected.contains(&"templates/tests/smoke-test.yaml".to_owned()));
    let missing: Vec<&String> = expected.iter().filter(|f| !packaged.contains(*f)).collect();
    assert!(missing.is_empty(), "left out of the package: {missing:?}");
    assert!(
        !packaged.iter().any(|f| f.starts_with("tests/")),
        "the values-file tests are packaged: {packaged:?}"
    );

    let docs = template(
        "proxy-pool",
        &[
            "--values",
            repo_path("scripts/cluster/values.yaml").to_str().unwrap(),
        ],
    );
    let smoke = docs
        .iter()
        .find(|d| d["kind"] == "Pod" && d["metadata"]["name"] == "proxy-pool-smoke-test")
        .unwrap_or_else(|| panic!("no helm test Pod in {:?}", names(&docs)));
    assert_eq!(smoke["metadata"]["annotations"]["helm.sh/hook"], "test");
}
