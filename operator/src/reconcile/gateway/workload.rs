//! A gateway group's workload, rendered purely from a [`Workload`] (a GatewayGroup, or
//! the implicit group of a Routing with an inline `spec.gateway`), the chart's
//! gateway template and the group's clients file: the Deployment, the Service, the
//! PodDisruptionBudget, the HorizontalPodAutoscaler and the ConfigMap holding the
//! clients file.
//!
//! Every object carries a controller owner reference to the group's resource (the
//! GatewayGroup, or the Routing of an implicit group), so deleting it lets the garbage
//! collector remove them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, Container, ContainerPort, EnvVar,
    EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe,
    ProjectedVolumeSource, SecretProjection, Service, ServiceAccountTokenProjection, ServicePort,
    ServiceSpec, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use sha2::{Digest, Sha256};

use super::clients::{CLIENTS_DIR, CLIENTS_KEY, GatewayClients};
use crate::crd::{GatewayGroup, GatewayGroupSpec, Routing};
use crate::reconcile::common::{COMPONENT_LABEL, MANAGED_BY, SECRET_FILE_MODE};
use crate::reconcile::error::Error;
use crate::reconcile::gateway_pod::GatewayPodSettings;
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
/// Label naming the Routing an inline (implicit-group) gateway serves; the selector
/// label of its pods.
pub const ROUTING_LABEL: &str = "proxypool.io/routing";
/// Label naming the GatewayGroup a gateway belongs to; the selector label of its pods.
pub const GROUP_LABEL: &str = "proxypool.io/gateway-group";

/// What a gateway group's objects are rendered from: a GatewayGroup, or the implicit
/// group of a Routing with an inline `spec.gateway` (named after the Routing, with
/// today's object names and selector, owned by the Routing).
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The group's name: the gateways' `--gateway-group`, and what object names derive from.
    pub group: String,
    /// Namespace of the objects.
    pub namespace: Option<String>,
    /// Controller owner reference to the GatewayGroup or the Routing.
    pub owner: OwnerReference,
    /// The selector label key: [`ROUTING_LABEL`] for an implicit group (as before
    /// groups existed: a Deployment's selector cannot change), else [`GROUP_LABEL`].
    pub selector_key: &'static str,
    /// Replicas, listeners, exposure, scaling and limits.
    pub spec: GatewayGroupSpec,
}

impl Workload {
    /// The implicit group of a Routing with an inline `spec.gateway` (`None` without one).
    pub fn of_routing(r: &Routing) -> Result<Option<Self>, Error> {
        let Some(g) = &r.spec.gateway else {
            return Ok(None);
        };
        Ok(Some(Self {
            group: r.meta().name.clone().ok_or(Error::MissingKey("Routing"))?,
            namespace: r.meta().namespace.clone(),
            owner: r
                .controller_owner_ref(&())
                .ok_or(Error::MissingKey("Routing"))?,
            selector_key: ROUTING_LABEL,
            spec: GatewayGroupSpec {
                replicas: g.replicas,
                listeners: g.listeners.clone(),
                resources: g.resources.clone(),
                service: None,
                proxy_protocol: None,
                autoscaling: None,
                pod_disruption_budget: None,
                topology_spread_constraints: Vec::new(),
                limits: None,
            },
        }))
    }

    /// A GatewayGroup's workload.
    pub fn of_group(g: &GatewayGroup) -> Result<Self, Error> {
        Ok(Self {
            group: g
                .meta()
                .name
                .clone()
                .ok_or(Error::MissingKey("GatewayGroup"))?,
            namespace: g.meta().namespace.clone(),
            owner: g
                .controller_owner_ref(&())
                .ok_or(Error::MissingKey("GatewayGroup"))?,
            selector_key: GROUP_LABEL,
            spec: g.spec.clone(),
        })
    }

    /// Name of the Deployment, Service, PodDisruptionBudget and autoscaler.
    pub fn object(&self) -> String {
        object_name(&self.group)
    }

    /// Whether an autoscaler owns the Deployment's `replicas`.
    pub fn autoscaled(&self) -> bool {
        self.spec.autoscaling.is_some()
    }
}

/// Name of a gateway group's Deployment and Service: `<group>-gateway` when that is a
/// valid Service name (DNS-1035 label, ≤ 63), otherwise `gateway-<hash of the name>`.
/// An implicit group is named after its Routing, so an inline gateway keeps its names.
pub fn object_name(group: &str) -> String {
    let candidate = format!("{group}-gateway");
    let valid = candidate.len() <= 63
        && candidate.starts_with(|c: char| c.is_ascii_lowercase())
        && candidate
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        candidate
    } else {
        let digest = hex::encode(Sha256::digest(group.as_bytes()));
        format!("gateway-{}", &digest[..16])
    }
}

/// Selector labels of a gateway group's pods.
pub fn selector(w: &Workload) -> BTreeMap<String, String> {
    BTreeMap::from([
        (COMPONENT.0.to_owned(), COMPONENT.1.to_owned()),
        (w.selector_key.to_owned(), w.object()),
    ])
}

/// [`selector`] as a label selector.
fn label_selector(w: &Workload) -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector(w)),
        match_expressions: None,
    }
}

fn labels(w: &Workload) -> BTreeMap<String, String> {
    let mut l = selector(w);
    l.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    l.insert("app.kubernetes.io/name".into(), "proxy-pool-gateway".into());
    l.insert("app.kubernetes.io/part-of".into(), "proxy-pool".into());
    l
}

fn meta(w: &Workload) -> ObjectMeta {
    ObjectMeta {
        name: Some(w.object()),
        namespace: w.namespace.clone(),
        labels: Some(labels(w)),
        owner_references: Some(vec![w.owner.clone()]),
        ..ObjectMeta::default()
    }
}

fn ports(w: &Workload) -> Vec<(&'static str, i32)> {
    let l = &w.spec.listeners;
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
fn admin_port(w: &Workload) -> i32 {
    let used: Vec<i32> = ports(w).into_iter().map(|(_, p)| p).collect();
    (9090..).find(|p| !used.contains(p)).unwrap_or(9090)
}

/// Name of a gateway group's clients ConfigMap.
pub fn clients_config_map_name(group: &str) -> String {
    format!("{}-clients", object_name(group))
}

/// The ConfigMap holding a gateway group's clients file, owned like its other objects.
pub fn clients_config_map(w: &Workload, clients: &GatewayClients) -> ConfigMap {
    let mut metadata = meta(w);
    metadata.name = Some(clients_config_map_name(&w.group));
    ConfigMap {
        metadata,
        data: Some(BTreeMap::from([(
            CLIENTS_KEY.to_owned(),
            clients.file.clone(),
        )])),
        ..ConfigMap::default()
    }
}

/// The projected volume with the clients file and exactly the Secret keys it names.
fn clients_volume(group: &str, clients: &GatewayClients) -> Volume {
    let mut sources = vec![VolumeProjection {
        config_map: Some(ConfigMapProjection {
            name: clients_config_map_name(group),
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
fn args(w: &Workload, t: &GatewayTemplate, admin: i32) -> Vec<String> {
    let l = &w.spec.listeners;
    let listen = |port: Option<i32>| match port {
        Some(p) => format!("0.0.0.0:{p}"),
        None => "127.0.0.1:0".to_owned(),
    };
    let name = &w.group;
    let mut args = vec![
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
    ];
    if let Some(l) = &w.spec.limits {
        args.extend(l.flags().into_iter().map(|(f, v)| format!("--{f}={v}")));
    }
    // Only when set: the flag is new in the gateway.
    if let Some(p) = &w.spec.proxy_protocol {
        args.extend(
            p.trusted_sources
                .iter()
                .map(|c| format!("--proxy-protocol-from={c}")),
        );
    }
    args
}

/// The gateway Deployment of a group. Its `replicas` is left out while an autoscaler
/// owns it (server-side apply then does not claim the field, so neither the
/// autoscaler nor a `kubectl scale` is reverted).
pub fn deployment(w: &Workload, t: &GatewayTemplate, clients: &GatewayClients) -> Deployment {
    let name = &w.group;
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
        env(
            proxy_pool_runtime::telemetry::logging::FORMAT_ENV,
            t.pod.log_format.to_string(),
        ),
    ]
    .into_iter()
    .chain((!t.pod.log_level.is_empty()).then(|| env("RUST_LOG", t.pod.log_level.clone())))
    .chain(egress_env(t))
    .collect::<Vec<_>>();
    let admin = admin_port(w);
    let container_ports: Vec<ContainerPort> = ports(w)
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
        args: Some(args(w, t, admin)),
        env: Some(env_vars),
        ports: Some(container_ports),
        readiness_probe: Some(probe("/readyz")),
        liveness_probe: Some(probe("/healthz")),
        resources: w.spec.resources.clone().or_else(|| t.pod.resources.clone()),
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
        clients_volume(name, clients),
    ];
    let p = &t.pod;
    // The group's own spread, else the chart's.
    let spread = if w.spec.topology_spread_constraints.is_empty() {
        p.spread_for(&selector(w))
    } else {
        GatewayPodSettings {
            topology_spread_constraints: w.spec.topology_spread_constraints.clone(),
            ..GatewayPodSettings::default()
        }
        .spread_for(&selector(w))
    };
    let mut annotations = p.pod_annotations.clone();
    annotations.insert(CLIENTS_HASH_ANNOTATION.to_owned(), clients.hash.clone());
    let some_map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
    Deployment {
        metadata: meta(w),
        spec: Some(DeploymentSpec {
            replicas: (!w.autoscaled()).then_some(w.spec.replicas),
            selector: label_selector(w),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(w)),
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
                    topology_spread_constraints: some_vec(spread),
                    priority_class_name: p.priority_class_name.clone(),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// `None` for an empty list (server-side apply then leaves the field out).
fn some_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

/// The PodDisruptionBudget of a group's pods: the group's own, else the chart's
/// (`None` when the chart turns them off and the group sets none).
pub fn pod_disruption_budget(w: &Workload, t: &GatewayTemplate) -> Option<PodDisruptionBudget> {
    let (min_available, max_unavailable) = match &w.spec.pod_disruption_budget {
        Some(b) if b.min_available.is_some() || b.max_unavailable.is_some() => {
            (b.min_available.clone(), b.max_unavailable.clone())
        }
        _ if t.pod.pod_disruption_budget.enabled => (
            None,
            Some(t.pod.pod_disruption_budget.max_unavailable.clone()),
        ),
        _ => return None,
    };
    Some(PodDisruptionBudget {
        metadata: meta(w),
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(label_selector(w)),
            min_available,
            max_unavailable,
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

/// The group's CPU autoscaler (`None` without `autoscaling`).
pub fn autoscaler(w: &Workload) -> Option<HorizontalPodAutoscaler> {
    let a = w.spec.autoscaling.as_ref()?;
    Some(HorizontalPodAutoscaler {
        metadata: meta(w),
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: w.object(),
            },
            min_replicas: Some(a.min_replicas),
            max_replicas: a.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(a.target_cpu_utilization_percentage),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            behavior: None,
        },
        status: None,
    })
}

/// The gateway Service of a group, exposed as its `service` says.
pub fn service(w: &Workload) -> Service {
    let exposure = w.spec.service.clone().unwrap_or_default();
    let node_port = |name: &str| {
        let n = exposure.node_ports.as_ref()?;
        match name {
            "http" => n.http,
            _ => n.socks5,
        }
    };
    let mut metadata = meta(w);
    if !exposure.annotations.is_empty() {
        metadata.annotations = Some(exposure.annotations.clone());
    }
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(exposure.type_.as_str().into()),
            selector: Some(selector(w)),
            ports: Some(
                ports(w)
                    .into_iter()
                    .map(|(n, p)| ServicePort {
                        name: Some(n.into()),
                        port: p,
                        target_port: Some(IntOrString::String(n.into())),
                        protocol: Some("TCP".into()),
                        node_port: node_port(n),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            external_traffic_policy: exposure.external_traffic_policy.map(|p| p.as_str().into()),
            load_balancer_source_ranges: some_vec(exposure.load_balancer_source_ranges.clone()),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
