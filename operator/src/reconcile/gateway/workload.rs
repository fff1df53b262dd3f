//! A Routing's gateway workload, rendered purely from its spec, the chart's gateway
//! template and the Routing's clients file: the Deployment, the Service, the
//! PodDisruptionBudget and the ConfigMap holding the clients file.
//!
//! Every object carries a controller owner reference to the Routing, so deleting the
//! Routing lets the garbage collector remove them.

use std::collections::BTreeMap;

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
use kube::Resource;
use sha2::{Digest, Sha256};

use super::clients::{CLIENTS_DIR, CLIENTS_KEY, GatewayClients};
use crate::crd::Routing;
use crate::reconcile::common::{COMPONENT_LABEL, MANAGED_BY, SECRET_FILE_MODE};
use crate::reconcile::error::Error;
use crate::reconcile::settings::GatewayTemplate;

/// Audience of the projected ServiceAccount token gateways present to the identity issuer.
pub const IDENTITY_AUDIENCE: &str = "proxy-pool-identity";
/// Where a gateway container finds its identity token (`token`) .
pub const IDENTITY_TOKEN_DIR: &str = "/var/run/secrets/proxypool.io/identity";
/// Where a gateway container finds the trust bundle (`ca.crt`).
pub const TRUST_BUNDLE_DIR: &str = "/var/run/secrets/proxypool.io/trust";
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

/// [`selector`] as a label selector.
fn label_selector(routing: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector(routing)),
        match_expressions: None,
    }
}

fn labels(routing: &str) -> BTreeMap<String, String> {
    let mut l = selector(routing);
    l.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    l.insert("app.kubernetes.io/name".into(), "proxy-pool-gateway".into());
    l.insert("app.kubernetes.io/part-of".into(), "proxy-pool".into());
    l
}

/// The Routing's name (an object from the API server always has one).
fn routing_name(r: &Routing) -> Result<String, Error> {
    r.meta().name.clone().ok_or(Error::MissingKey("Routing"))
}

fn meta(r: &Routing) -> Result<ObjectMeta, Error> {
    let name = routing_name(r)?;
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

/// The ConfigMap holding a Routing's clients file, owned by the Routing.
pub fn clients_config_map(r: &Routing, clients: &GatewayClients) -> Result<ConfigMap, Error> {
    let name = routing_name(r)?;
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
    let name = routing_name(r)?;
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
            selector: label_selector(&name),
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
    let name = routing_name(r)?;
    Ok(Some(PodDisruptionBudget {
        metadata: meta(r)?,
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(label_selector(&name)),
            max_unavailable: Some(pdb.max_unavailable.clone()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }))
}

/// The gateway Service of a Routing.
pub fn service(r: &Routing) -> Result<Service, Error> {
    let name = routing_name(r)?;
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
