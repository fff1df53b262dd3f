//! A Routing's gateway workload: the Deployment and Service built from its spec, and
//! the Routing reconciler that applies them and reports status.
//!
//! Both objects carry a controller owner reference to the Routing, so deleting the
//! Routing lets the garbage collector remove them; nothing outside the cluster needs
//! cleaning up, hence no finalizer.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource, Service,
    ServiceAccountTokenProjection, ServicePort, ServiceSpec, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::time::Duration;

use super::Error;
use super::context::{Context, FIELD_MANAGER, GatewayTemplate};
use super::render::Kind;
use super::status::{Outcome, apply_status, conditions, event_on_change};
use crate::crd::Routing;

/// Audience of the projected ServiceAccount token gateways present to the identity issuer.
pub const IDENTITY_AUDIENCE: &str = "proxy-pool-identity";
/// Where a gateway container finds its identity token (`token`) .
pub const IDENTITY_TOKEN_DIR: &str = "/var/run/secrets/proxypool.io/identity";
/// Where a gateway container finds the trust bundle (`ca.crt`).
pub const TRUST_BUNDLE_DIR: &str = "/var/run/secrets/proxypool.io/trust";
/// Label every operator-made object carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "proxy-pool-operator");
/// Component label of gateway objects.
pub const COMPONENT: (&str, &str) = ("proxypool.io/component", "gateway");
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
    ]
}

/// The gateway Deployment of a Routing.
pub fn deployment(r: &Routing, t: &GatewayTemplate) -> Result<Deployment, Error> {
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
    ];
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
        resources: r.spec.gateway.resources.clone(),
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
                default_mode: None,
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
    ];
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
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(t.service_account.clone()),
                    // Workers need no Kubernetes API access: only the projected token.
                    automount_service_account_token: Some(false),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
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
    super::resources::measured(Kind::Routing.as_str(), &ctx, reconcile_inner(&r, &ctx)).await
}

async fn reconcile_inner(r: &Routing, ctx: &Context) -> Result<Action, Error> {
    let rendered = ctx.render().await?;
    let name = r.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let deployments: Api<Deployment> = ctx.api();
    let services: Api<Service> = ctx.api();
    let object = object_name(&name);
    let dep = deployment(r, &ctx.config.gateway)?;
    let applied = deployments
        .patch(&object, &params, &Patch::Apply(&dep))
        .await?;
    let svc = service(r)?;
    services
        .patch(&object, &params, &Patch::Apply(&svc))
        .await?;
    let ready = applied
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let mut problems = rendered.problems_of(Kind::Routing, &name).to_vec();
    problems.extend(ctx.config_problems(&rendered).await?);
    let outcome = Outcome {
        problems,
        ready_message: format!(
            "in the controller config; gateway Deployment and Service {object} applied"
        ),
    };
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
    } else {
        Action::requeue(Duration::from_secs(60))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
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
        let d = deployment(&r, &template()).expect("deployment");
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
        let d = deployment(&r, &template()).expect("deployment");
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
        let d = deployment(&r, &template()).expect("deployment");
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
