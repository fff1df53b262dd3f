//! A Routing's gateway workload: the Deployment, Service and PodDisruptionBudget built
//! from its spec and the chart's gateway pod settings, and the Routing reconciler that
//! applies them and reports status.
//!
//! Every object carries a controller owner reference to the Routing, so deleting the
//! Routing lets the garbage collector remove them; nothing outside the cluster needs
//! cleaning up, hence no finalizer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, Container, ContainerPort, EnvVar,
    EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe,
    ProjectedVolumeSource, SecretProjection, Service, ServiceAccountTokenProjection, ServicePort,
    ServiceSpec, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::time::Duration;

use super::common::{COMPONENT_LABEL, FIELD_MANAGER, MANAGED_BY, SECRET_FILE_MODE};
use super::context::{Context, measured};
use super::error::Error;
use super::render::{GatewayClient, Kind};
use super::settings::GatewayTemplate;
use super::status::{Outcome, apply_status, conditions, event_on_change};
use crate::crd::Routing;

/// Audience of the projected ServiceAccount token gateways present to the identity issuer.
pub const IDENTITY_AUDIENCE: &str = "proxy-pool-identity";
/// Where a gateway container finds its identity token (`token`) .
pub const IDENTITY_TOKEN_DIR: &str = "/var/run/secrets/proxypool.io/identity";
/// Where a gateway container finds the trust bundle (`ca.crt`).
pub const TRUST_BUNDLE_DIR: &str = "/var/run/secrets/proxypool.io/trust";
/// Where a gateway container finds its clients file and the client Secrets:
/// `clients.json` and `secrets/<secret>/{username,password}`.
pub const CLIENTS_DIR: &str = "/etc/proxy-pool-gateway";
/// Key of the clients file in the clients ConfigMap (and its name in the volume).
pub const CLIENTS_KEY: &str = "clients.json";
/// Pod-template annotation with the hash of the clients file and the credentials it
/// names: the gateway reads them at start, so a rotation rolls the Deployment.
pub const CLIENTS_HASH_ANNOTATION: &str = "proxypool.io/clients-hash";
/// Group that owns the gateway pod's mounted files (the image's non-root group).
pub const GATEWAY_FS_GROUP: i64 = 65532;
/// Component label of gateway objects.
pub const COMPONENT: (&str, &str) = (COMPONENT_LABEL, "gateway");
/// Label naming the Routing a gateway serves.
pub const ROUTING_LABEL: &str = "proxypool.io/routing";

/// Name of a Routing's Deployment and Service: `<routing>-gateway` when that is a valid
/// Service name (DNS-1035 label, ≤ 63), otherwise `gateway-<hash of the name>`.
pub fn object_name(routing: &str) -> String {
    let candidate = format!("{routing}-gateway");
    let valid = candidate.len() <= 63
        && candidate.starts_with(|c: char| c.is_ascii_lowercase())
        && candidate
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        candidate
    } else {
        let digest = hex::encode(Sha256::digest(routing.as_bytes()));
        format!("gateway-{}", &digest[..16])
    }
}

/// Selector labels of a Routing's gateway pods.
pub fn selector(routing: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (COMPONENT.0.to_owned(), COMPONENT.1.to_owned()),
        (ROUTING_LABEL.to_owned(), object_name(routing)),
    ])
}

fn labels(routing: &str) -> BTreeMap<String, String> {
    let mut l = selector(routing);
    l.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    l.insert("app.kubernetes.io/name".into(), "proxy-pool-gateway".into());
    l.insert("app.kubernetes.io/part-of".into(), "proxy-pool".into());
    l
}

fn meta(r: &Routing) -> Result<ObjectMeta, Error> {
    let name = r.meta().name.clone().ok_or(Error::MissingKey("Routing"))?;
    Ok(ObjectMeta {
        name: Some(object_name(&name)),
        namespace: r.meta().namespace.clone(),
        labels: Some(labels(&name)),
        owner_references: Some(vec![
            r.controller_owner_ref(&())
                .ok_or(Error::MissingKey("Routing"))?,
        ]),
        ..ObjectMeta::default()
    })
}

fn ports(r: &Routing) -> Vec<(&'static str, i32)> {
    let l = &r.spec.gateway.listeners;
    let mut out = Vec::new();
    if let Some(h) = &l.http {
        out.push(("http", h.port));
    }
    if let Some(s) = &l.socks5 {
        out.push(("socks5", s.port));
    }
    out
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The egress policy the gateway applies to vendor proxies and targets: the same
/// ranges as the controller's `egress` section.
fn egress_env(t: &GatewayTemplate) -> Vec<EnvVar> {
    [
        ("PROXY_POOL_EGRESS_DENY_CIDRS", &t.egress_deny_cidrs),
        ("PROXY_POOL_EGRESS_ALLOW_CIDRS", &t.egress_allow_cidrs),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(name, v)| env(name, v.join(",")))
    .collect()
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// The gateway's ops port: 9090 unless a listener uses it.
fn admin_port(r: &Routing) -> i32 {
    let used: Vec<i32> = ports(r).into_iter().map(|(_, p)| p).collect();
    (9090..).find(|p| !used.contains(p)).unwrap_or(9090)
}

/// Name of a Routing's clients ConfigMap.
pub fn clients_config_map_name(routing: &str) -> String {
    format!("{}-clients", object_name(routing))
}

/// The clients a Routing's gateway accepts, as the gateway's `--clients-file` and
/// the Secret keys it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayClients {
    /// Names of the DistributionClients, sorted.
    pub names: Vec<String>,
    /// The clients file (JSON); credentials only by mounted file path.
    pub file: String,
    /// Secret keys the gateway pod mounts, by Secret name.
    pub mounts: BTreeMap<String, BTreeSet<String>>,
    /// Content hash of the file and the credentials' values.
    pub hash: String,
}

/// The clients of a Routing's gateway: every usable gateway client (`gateway:connect`
/// with `auth.basic`), narrowed to `match.clients` when the Routing names clients —
/// a gateway serves only its own Routing, so others would be refused anyway and their
/// Secrets stay out of its pods.
pub fn gateway_clients(r: &Routing, available: &BTreeMap<String, GatewayClient>) -> GatewayClients {
    let wanted: BTreeSet<&str> = r
        .spec
        .match_
        .as_ref()
        .map(|m| m.clients.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut names = Vec::new();
    let mut entries = Vec::new();
    let mut mounts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut h = Sha256::new();
    for (name, c) in available {
        if !wanted.is_empty() && !wanted.contains(name.as_str()) {
            continue;
        }
        let file = |key: &str| format!("{CLIENTS_DIR}/secrets/{}/{key}", c.secret);
        entries.push(json!({
            "client": name,
            "usernameFile": file("username"),
            "passwordFile": file("password"),
        }));
        mounts
            .entry(c.secret.clone())
            .or_default()
            .extend(["username".to_owned(), "password".to_owned()]);
        h.update(c.digest.as_bytes());
        h.update([0]);
        names.push(name.clone());
    }
    let file = serde_json::Value::Array(entries).to_string();
    h.update(file.as_bytes());
    GatewayClients {
        names,
        file,
        mounts,
        hash: hex::encode(h.finalize()),
    }
}

/// The ConfigMap holding a Routing's clients file, owned by the Routing.
pub fn clients_config_map(r: &Routing, clients: &GatewayClients) -> Result<ConfigMap, Error> {
    let name = r.meta().name.clone().ok_or(Error::MissingKey("Routing"))?;
    let mut metadata = meta(r)?;
    metadata.name = Some(clients_config_map_name(&name));
    Ok(ConfigMap {
        metadata,
        data: Some(BTreeMap::from([(
            CLIENTS_KEY.to_owned(),
            clients.file.clone(),
        )])),
        ..ConfigMap::default()
    })
}

/// The projected volume with the clients file and exactly the Secret keys it names.
fn clients_volume(routing: &str, clients: &GatewayClients) -> Volume {
    let mut sources = vec![VolumeProjection {
        config_map: Some(ConfigMapProjection {
            name: clients_config_map_name(routing),
            items: Some(vec![KeyToPath {
                key: CLIENTS_KEY.into(),
                path: CLIENTS_KEY.into(),
                mode: None,
            }]),
            optional: None,
        }),
        ..VolumeProjection::default()
    }];
    for (secret, keys) in &clients.mounts {
        sources.push(VolumeProjection {
            secret: Some(SecretProjection {
                name: secret.clone(),
                items: Some(
                    keys.iter()
                        .map(|k| KeyToPath {
                            key: k.clone(),
                            path: format!("secrets/{secret}/{k}"),
                            mode: None,
                        })
                        .collect(),
                ),
                optional: None,
            }),
            ..VolumeProjection::default()
        });
    }
    Volume {
        name: "gateway-clients".into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            // Owner and group read only (the pod's fsGroup is the group).
            default_mode: Some(SECRET_FILE_MODE),
        }),
        ..Volume::default()
    }
}

/// The gateway binary's command line. It always binds both listeners, so an
/// unconfigured one goes to an ephemeral loopback port nobody can reach.
fn args(r: &Routing, name: &str, t: &GatewayTemplate, admin: i32) -> Vec<String> {
    let l = &r.spec.gateway.listeners;
    let listen = |port: Option<i32>| match port {
        Some(p) => format!("0.0.0.0:{p}"),
        None => "127.0.0.1:0".to_owned(),
    };
    vec![
        format!("--http-listen={}", listen(l.http.as_ref().map(|h| h.port))),
        format!(
            "--socks5-listen={}",
            listen(l.socks5.as_ref().map(|s| s.port))
        ),
        format!("--admin-listen=0.0.0.0:{admin}"),
        format!("--controller=https://{}", t.controller_address),
        format!("--gateway-group={name}"),
        format!("--clients-file={CLIENTS_DIR}/{CLIENTS_KEY}"),
        format!("--shutdown-delay-seconds={}", t.pod.shutdown_delay_seconds),
        format!("--drain-grace-seconds={}", t.pod.drain_grace_seconds),
    ]
}

/// The gateway Deployment of a Routing.
pub fn deployment(
    r: &Routing,
    t: &GatewayTemplate,
    clients: &GatewayClients,
) -> Result<Deployment, Error> {
    let name = r.meta().name.clone().ok_or(Error::MissingKey("Routing"))?;
    let env_vars = vec![
        env("PROXY_POOL_IDENTITY_ENDPOINT", t.identity_endpoint.clone()),
        env(
            "PROXY_POOL_IDENTITY_TOKEN_FILE",
            format!("{IDENTITY_TOKEN_DIR}/token"),
        ),
        env(
            "PROXY_POOL_TRUST_BUNDLE_FILE",
            format!("{TRUST_BUNDLE_DIR}/ca.crt"),
        ),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_UID", "metadata.uid"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
    ]
    .into_iter()
    .chain(egress_env(t))
    .collect::<Vec<_>>();
    let admin = admin_port(r);
    let container_ports: Vec<ContainerPort> = ports(r)
        .into_iter()
        .chain([("admin", admin)])
        .map(|(n, p)| ContainerPort {
            name: Some(n.into()),
            container_port: p,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        })
        .collect();
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("admin".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(5),
        ..Probe::default()
    };
    let container = Container {
        name: "gateway".into(),
        image: Some(t.image.clone()),
        image_pull_policy: Some(t.image_pull_policy.clone()),
        args: Some(args(r, &name, t, admin)),
        env: Some(env_vars),
        ports: Some(container_ports),
        readiness_probe: Some(probe("/readyz")),
        liveness_probe: Some(probe("/healthz")),
        resources: r
            .spec
            .gateway
            .resources
            .clone()
            .or_else(|| t.pod.resources.clone()),
        security_context: t.pod.security_context.clone(),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "identity-token".into(),
                mount_path: IDENTITY_TOKEN_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "trust-bundle".into(),
                mount_path: TRUST_BUNDLE_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "gateway-clients".into(),
                mount_path: CLIENTS_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    };
    let volumes = vec![
        Volume {
            name: "identity-token".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(IDENTITY_AUDIENCE.into()),
                        expiration_seconds: Some(3600),
                        path: "token".into(),
                    }),
                    ..VolumeProjection::default()
                }]),
                default_mode: Some(SECRET_FILE_MODE),
            }),
            ..Volume::default()
        },
        Volume {
            name: "trust-bundle".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: t.trust_bundle_config_map.clone(),
                optional: Some(true),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        clients_volume(&name, clients),
    ];
    let p = &t.pod;
    let mut annotations = p.pod_annotations.clone();
    annotations.insert(CLIENTS_HASH_ANNOTATION.to_owned(), clients.hash.clone());
    let some_map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
    Ok(Deployment {
        metadata: meta(r)?,
        spec: Some(DeploymentSpec {
            replicas: Some(r.spec.gateway.replicas),
            selector: LabelSelector {
                match_labels: Some(selector(&name)),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&name)),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(t.service_account.clone()),
                    // Workers need no Kubernetes API access: only the projected token.
                    automount_service_account_token: Some(false),
                    containers: vec![container],
                    volumes: Some(volumes),
                    // The chart's pod settings; the group of the mounted Secret files
                    // (mode 0440) is always set (the chart's, else the gateway user's).
                    security_context: Some({
                        let mut c = p.pod_security_context.clone().unwrap_or_default();
                        c.fs_group.get_or_insert(GATEWAY_FS_GROUP);
                        c
                    }),
                    image_pull_secrets: some_vec(p.image_pull_secrets.clone()),
                    // Longer than the unready delay plus the drain, so the kubelet
                    // never kills a gateway that is still draining.
                    termination_grace_period_seconds: Some(p.termination_grace_seconds()),
                    node_selector: some_map(&p.node_selector),
                    tolerations: some_vec(p.tolerations.clone()),
                    affinity: p.affinity.clone(),
                    topology_spread_constraints: some_vec(p.spread_for(&selector(&name))),
                    priority_class_name: p.priority_class_name.clone(),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// `None` for an empty list (server-side apply then leaves the field out).
fn some_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

/// The PodDisruptionBudget of a Routing's gateway pods (`None` when the chart turns
/// them off).
pub fn pod_disruption_budget(
    r: &Routing,
    t: &GatewayTemplate,
) -> Result<Option<PodDisruptionBudget>, Error> {
    let pdb = &t.pod.pod_disruption_budget;
    if !pdb.enabled {
        return Ok(None);
    }
    let name = r.meta().name.clone().ok_or(Error::MissingKey("Routing"))?;
    Ok(Some(PodDisruptionBudget {
        metadata: meta(r)?,
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(selector(&name)),
                match_expressions: None,
            }),
            max_unavailable: Some(pdb.max_unavailable.clone()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }))
}

/// The gateway Service of a Routing.
pub fn service(r: &Routing) -> Result<Service, Error> {
    let name = r.meta().name.clone().ok_or(Error::MissingKey("Routing"))?;
    Ok(Service {
        metadata: meta(r)?,
        spec: Some(ServiceSpec {
            selector: Some(selector(&name)),
            ports: Some(
                ports(r)
                    .into_iter()
                    .map(|(n, p)| ServicePort {
                        name: Some(n.into()),
                        port: p,
                        target_port: Some(IntOrString::String(n.into())),
                        protocol: Some("TCP".into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// Applies the Routing's gateway, then reports its status.
#[tracing::instrument(skip_all, fields(routing = %r.name_any()))]
pub async fn reconcile(r: Arc<Routing>, ctx: Arc<Context>) -> Result<Action, Error> {
    measured(Kind::Routing.as_str(), &ctx, reconcile_inner(&r, &ctx)).await
}

async fn reconcile_inner(r: &Routing, ctx: &Context) -> Result<Action, Error> {
    let rendered = ctx.render().await?;
    let name = r.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let deployments: Api<Deployment> = ctx.api();
    let services: Api<Service> = ctx.api();
    let config_maps: Api<ConfigMap> = ctx.api();
    let object = object_name(&name);
    // The clients file first: the Deployment's pods mount it.
    let mut clients = gateway_clients(r, &rendered.gateway_clients);
    // Sealed before it becomes an annotation: it covers credential values.
    clients.hash = ctx.config.hash_key.seal(&clients.hash);
    config_maps
        .patch(
            &clients_config_map_name(&name),
            &params,
            &Patch::Apply(&clients_config_map(r, &clients)?),
        )
        .await?;
    let dep = deployment(r, &ctx.config.gateway, &clients)?;
    let applied = deployments
        .patch(&object, &params, &Patch::Apply(&dep))
        .await?;
    let svc = service(r)?;
    services
        .patch(&object, &params, &Patch::Apply(&svc))
        .await?;
    let budgets: Api<PodDisruptionBudget> = ctx.api();
    match pod_disruption_budget(r, &ctx.config.gateway)? {
        Some(pdb) => {
            budgets.patch(&object, &params, &Patch::Apply(&pdb)).await?;
        }
        // Turned off in the chart: remove the one made before, if any.
        None => match budgets.delete(&object, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        },
    }
    let ready = applied
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let desired = applied.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let mut problems = rendered.problems_of(Kind::Routing, &name).to_vec();
    problems.extend(ctx.config_problems(&rendered).await?);
    let mut outcome = Outcome::new(
        problems,
        format!(
            "{ready} of {desired} gateway pod(s) of {object} ready, accepting {} client(s)",
            clients.names.len()
        ),
    );
    // Ready only when the gateway pods serve: written into the config is not enough.
    if desired < 1 || ready < desired {
        outcome.waiting = Some((
            "GatewayPodsNotReady",
            format!("{ready} of {desired} gateway pod(s) of Deployment {object} ready"),
        ));
    }
    let old = r
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let status = json!({
        "observedGeneration": r.meta().generation,
        "conditions": conditions(&old, r.meta().generation, &outcome),
        "readyReplicas": ready,
        "service": object,
    });
    apply_status(ctx, r, status).await?;
    event_on_change(ctx, r, &old, &outcome).await;
    Ok(if outcome.is_ready() {
        Action::requeue(Duration::from_secs(300))
    } else if outcome.problems.is_empty() {
        // Waiting for pods (the Deployment's status changes trigger a reconcile too).
        Action::requeue(Duration::from_secs(15))
    } else {
        Action::requeue(Duration::from_secs(60))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::gateway_pod::GatewayPodSettings;

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

    #[test]
    fn gateway_pods_get_the_egress_policy_and_tight_secret_modes() {
        let d = deployment(&routing(), &template(), &no_clients()).expect("deployment");
        let pod = d.spec.expect("spec").template.spec.expect("pod");
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
        let args = c.args.as_ref().expect("args");
        assert!(
            args.contains(&"--shutdown-delay-seconds=7".to_owned()),
            "{args:?}"
        );
        assert!(
            args.contains(&"--drain-grace-seconds=20".to_owned()),
            "{args:?}"
        );
        // A Routing's own resources win over the default.
        let d = deployment(&routing(), &t, &no_clients()).expect("deployment");
        let c = &d.spec.expect("spec").template.spec.expect("pod").containers[0];
        assert_eq!(c.resources, routing().spec.gateway.resources);
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
        let ports: Vec<i32> = c
            .ports
            .as_ref()
            .expect("ports")
            .iter()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, vec![3128, 1080, 9090]);
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
        let d = deployment(&r, &template(), &no_clients()).expect("deployment");
        let c = &d.spec.expect("spec").template.spec.expect("pod").containers[0];
        let args = c.args.as_ref().expect("args");
        assert!(
            args.contains(&"--http-listen=127.0.0.1:0".to_owned()),
            "{args:?}"
        );
        assert!(
            args.contains(&"--admin-listen=0.0.0.0:9091".to_owned()),
            "{args:?}"
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
        let ports: Vec<i32> = spec
            .ports
            .as_ref()
            .expect("ports")
            .iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(ports, vec![3128, 1080]);
    }
}
