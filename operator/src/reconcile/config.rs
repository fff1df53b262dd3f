//! The controller-config reconciler: renders every custom resource of the namespace
//! into the controller's config, writes it to a ConfigMap and points the controller
//! Deployment at it — a projected volume with the ConfigMap and exactly the Secret keys
//! the config names as files, and a content-hash annotation on the pod template so the
//! controller rolls when the config or a referenced Secret value changes.
//!
//! Its root object is the controller Deployment the chart installs; every change of an
//! Upstream, Routing, DistributionClient or Secret triggers it (deletions included,
//! which is why the config is not assembled by the per-resource reconcilers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

pub use super::common::owner_of_deployment;
use super::common::{FIELD_MANAGER, component_labels, deployment_owner};
use super::context::{Context, measured};
use super::controller_deployment::{
    CONFIG_HASH_ANNOTATION, CONFIG_KEY, TlsSources, deployment_patch,
};
use super::error::Error;
use super::{status, tls_secret};

/// Metric label and backoff key of this reconciler.
pub const CONFIG_KIND: &str = "ControllerConfig";
/// `proxypool.io/component` label of the config ConfigMap.
pub const CONFIG_COMPONENT: &str = "controller-config";
/// Annotation on the config ConfigMap: `served`, or `refused: <why>` when no usable
/// DistributionClient is in the config (every extract request gets 401).
pub const EXTRACTION_ANNOTATION: &str = "proxypool.io/extraction";

/// Renders and writes the controller config for the controller Deployment `d`.
#[tracing::instrument(skip_all, fields(deployment = %d.name_any()))]
pub async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    measured(CONFIG_KIND, &ctx, reconcile_inner(&d, &ctx)).await
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
        Some(t) => Some(tls_secret::ensure(ctx, d, t).await?),
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
            labels: Some(component_labels(CONFIG_COMPONENT)),
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
    status::publish(ctx, d, type_, reason, note, "RenderConfig").await;
}
