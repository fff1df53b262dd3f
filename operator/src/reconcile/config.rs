//! The controller-config reconciler: renders every custom resource of the namespace
//! into the controller's config, writes it to a ConfigMap and points the controller
//! Deployment at it — a projected volume with the ConfigMap and exactly the Secret keys
//! the config names as files, and a content-hash annotation on the pod template so the
//! controller rolls when the config or a referenced Secret value changes.
//!
//! Its root object is the controller Deployment the chart installs; every change of an
//! Upstream, Routing, DistributionClient or Secret triggers it (deletions included,
//! which is why the config is not assembled by the per-resource reconcilers).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::Error;
use super::context::{Context, FIELD_MANAGER};
use super::gateway::MANAGED_BY;

/// Metric label and backoff key of this reconciler.
pub const CONFIG_KIND: &str = "ControllerConfig";
/// `proxypool.io/component` label of the config ConfigMap.
pub const CONFIG_COMPONENT: &str = "controller-config";
/// Pod-template annotation holding the config's content hash.
pub const CONFIG_HASH_ANNOTATION: &str = "proxypool.io/config-hash";
/// Annotation on the config ConfigMap: `served`, or `refused: <why>` when no usable
/// DistributionClient is in the config (every extract request gets 401).
pub const EXTRACTION_ANNOTATION: &str = "proxypool.io/extraction";
/// Key of the config inside the ConfigMap (and file name in the volume).
pub const CONFIG_KEY: &str = "config.yaml";
/// Mode of projected files that carry Secret keys (`0440`: owner and group read).
pub const SECRET_FILE_MODE: i32 = 0o440;
/// Name of the projected volume the operator adds to the controller pod.
pub const CONFIG_VOLUME: &str = "proxy-pool-config";

/// Where the controller's TLS material comes from: the operator-owned TLS Secret and
/// the trust bundle ConfigMap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsSources<'a> {
    /// Secret with `tls.crt` and `tls.key`.
    pub secret: &'a str,
    /// ConfigMap with `ca.crt`.
    pub bundle: &'a str,
}

/// A (non-controller) owner reference to the Deployment `d`: objects the operator
/// writes for the controller (its config ConfigMap, its TLS Secret) go when it goes.
pub(crate) fn deployment_owner(d: &Deployment) -> Result<OwnerReference, Error> {
    Ok(OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: d.name_any(),
        uid: d
            .meta()
            .uid
            .clone()
            .ok_or(Error::MissingKey("Deployment"))?,
        controller: None,
        block_owner_deletion: None,
    })
}

/// [`deployment_owner`] of Deployment `namespace/name`, read from the API server.
pub async fn owner_of_deployment(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<OwnerReference, Error> {
    let d = kube::Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    deployment_owner(&d)
}

/// The projected volume: the config file plus `secrets/<secret>/<key>` for each mount,
/// and with TLS `tls/tls.crt`, `tls/tls.key` and `trust/ca.crt`.
pub fn config_volume(
    config_map: &str,
    mounts: &BTreeMap<String, BTreeSet<String>>,
    tls: Option<TlsSources<'_>>,
) -> Value {
    let mut sources = vec![json!({
        "configMap": {"name": config_map, "items": [{"key": CONFIG_KEY, "path": CONFIG_KEY}]}
    })];
    if let Some(t) = tls {
        use super::tls::{CERT_KEY, KEY_KEY};
        use crate::identity::kube_adapters::BUNDLE_KEY;
        sources.push(json!({"secret": {"name": t.secret, "items": [
            {"key": CERT_KEY, "path": format!("tls/{CERT_KEY}")},
            {"key": KEY_KEY, "path": format!("tls/{KEY_KEY}")},
        ]}}));
        sources.push(json!({"configMap": {"name": t.bundle, "items": [
            {"key": BUNDLE_KEY, "path": format!("trust/{BUNDLE_KEY}")},
        ]}}));
    }
    for (secret, keys) in mounts {
        let items: Vec<Value> = keys
            .iter()
            .map(|k| json!({"key": k, "path": format!("secrets/{secret}/{k}")}))
            .collect();
        sources.push(json!({"secret": {"name": secret, "items": items}}));
    }
    // Owner and group read only (the pod's fsGroup is the group): Secret keys inside.
    json!({"name": CONFIG_VOLUME, "projected": {"sources": sources, "defaultMode": SECRET_FILE_MODE}})
}

/// The fields of the controller Deployment this operator owns (server-side apply).
pub fn deployment_patch(
    name: &str,
    container: &str,
    config_dir: &str,
    config_map: &str,
    mounts: &BTreeMap<String, BTreeSet<String>>,
    tls: Option<TlsSources<'_>>,
    hash: &str,
) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"template": {
            "metadata": {"annotations": {CONFIG_HASH_ANNOTATION: hash}},
            "spec": {
                "volumes": [config_volume(config_map, mounts, tls)],
                "containers": [{
                    "name": container,
                    "volumeMounts": [{"name": CONFIG_VOLUME, "mountPath": config_dir, "readOnly": true}],
                }],
            },
        }},
    })
}

/// Renders and writes the controller config for the controller Deployment `d`.
#[tracing::instrument(skip_all, fields(deployment = %d.name_any()))]
pub async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    super::resources::measured(CONFIG_KIND, &ctx, reconcile_inner(&d, &ctx)).await
}

async fn reconcile_inner(d: &Deployment, ctx: &Context) -> Result<Action, Error> {
    let cfg = &ctx.config;
    let rendered = ctx.render().await?;
    if !rendered.global.is_empty() {
        let message = rendered
            .global
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        publish(ctx, d, EventType::Warning, "InvalidConfig", &message).await;
        return Err(Error::InvalidConfig(message));
    }
    let yaml = rendered.to_yaml()?;
    let tls = match &cfg.controller_tls {
        Some(t) => Some(super::tls::ensure(ctx, d, t).await?),
        None => None,
    };
    let hash = match &tls {
        None => rendered.hash(&yaml),
        // The certificate and bundle are files the controller reads at start-up:
        // a renewal or a CA rotation must roll it.
        Some(state) => {
            use sha2::Digest as _;
            let mut h = sha2::Sha256::new();
            h.update(rendered.hash(&yaml).as_bytes());
            h.update([0]);
            h.update(state.digest.as_bytes());
            hex::encode(h.finalize())
        }
    };
    // Sealed before it becomes an annotation: it covers Secret values.
    let hash = cfg.hash_key.seal(&hash);
    let owner = deployment_owner(d)?;
    let refused = rendered.extraction_refused();
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cfg.config_map.clone()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
                (
                    "proxypool.io/component".to_owned(),
                    CONFIG_COMPONENT.to_owned(),
                ),
            ])),
            annotations: Some(BTreeMap::from([
                (CONFIG_HASH_ANNOTATION.to_owned(), hash.clone()),
                (
                    EXTRACTION_ANNOTATION.to_owned(),
                    refused.as_ref().map_or_else(
                        || "served".to_owned(),
                        |p| format!("refused: {}", p.message),
                    ),
                ),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), yaml)])),
        ..ConfigMap::default()
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let config_maps: Api<ConfigMap> = ctx.api();
    config_maps
        .patch(&cfg.config_map, &params, &Patch::Apply(&config_map))
        .await?;
    let previous = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
        .cloned();
    let patch = deployment_patch(
        &d.name_any(),
        &cfg.controller_container,
        &cfg.config_dir,
        &cfg.config_map,
        &rendered.mounts,
        cfg.controller_tls.as_ref().map(|t| TlsSources {
            secret: &t.secret,
            bundle: &t.trust_bundle_config_map,
        }),
        &hash,
    );
    let deployments: Api<Deployment> = ctx.api();
    deployments
        .patch(&d.name_any(), &params, &Patch::Apply(&patch))
        .await?;
    if previous.as_deref() != Some(hash.as_str()) {
        let note = format!(
            "controller config {} written: {} upstream(s), {} routing(s), {} client(s); {} resource(s) left out",
            cfg.config_map,
            rendered.config.upstreams.len(),
            rendered.config.routings.len(),
            rendered.config.clients.len(),
            rendered.problems.len(),
        );
        tracing::info!(hash = %&hash[..12], "{note}");
        publish(ctx, d, EventType::Normal, "ConfigRendered", &note).await;
        if let Some(p) = &refused {
            tracing::warn!("{}", p.message);
            publish(ctx, d, EventType::Warning, p.reason, &p.message).await;
        }
    }
    let mut next = Duration::from_secs(300);
    if let Some(state) = &tls {
        let until_renewal = state
            .renew_at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        next = next.min(until_renewal.max(Duration::from_secs(1)));
    }
    Ok(Action::requeue(next))
}

async fn publish(ctx: &Context, d: &Deployment, type_: EventType, reason: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "RenderConfig".into(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &d.object_ref(&())).await {
        tracing::warn!(%error, "cannot publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_projects_the_config_and_only_the_named_keys() {
        let mounts = BTreeMap::from([(
            "vendor".to_owned(),
            BTreeSet::from(["apiKey".to_owned(), "password".to_owned()]),
        )]);
        let v = config_volume("cfg", &mounts, None);
        let sources = v["projected"]["sources"].as_array().expect("sources");
        assert_eq!(sources[0]["configMap"]["name"], "cfg");
        assert_eq!(
            sources[1]["secret"]["items"][0]["path"],
            "secrets/vendor/apiKey"
        );
        assert_eq!(sources[1]["secret"]["items"][1]["key"], "password");
        let p = deployment_patch(
            "ctl",
            "controller",
            "/etc/proxy-pool",
            "cfg",
            &mounts,
            Some(TlsSources {
                secret: "ctl-tls",
                bundle: "bundle",
            }),
            "abc",
        );
        let t = &p["spec"]["template"];
        assert_eq!(t["metadata"]["annotations"][CONFIG_HASH_ANNOTATION], "abc");
        assert_eq!(
            t["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            "/etc/proxy-pool"
        );
        let sources = t["spec"]["volumes"][0]["projected"]["sources"]
            .as_array()
            .expect("sources");
        assert_eq!(
            sources.len(),
            4,
            "config, TLS Secret, bundle, vendor Secret"
        );
        assert_eq!(sources[1]["secret"]["name"], "ctl-tls");
        assert_eq!(sources[1]["secret"]["items"][0]["path"], "tls/tls.crt");
        assert_eq!(sources[1]["secret"]["items"][1]["path"], "tls/tls.key");
        assert_eq!(sources[2]["configMap"]["name"], "bundle");
        assert_eq!(sources[2]["configMap"]["items"][0]["path"], "trust/ca.crt");
        assert_eq!(sources[3]["secret"]["name"], "vendor");
    }
}
