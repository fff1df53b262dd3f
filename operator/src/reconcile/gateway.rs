//! The Routing reconciler: applies a Routing's gateway workload (rendered by
//! `workload` from the Routing, the chart's template and its `clients` file) and
//! reports status: Ready once the gateway pods are.
//!
//! Every object carries a controller owner reference to the Routing, so deleting the
//! Routing lets the garbage collector remove them; nothing outside the cluster needs
//! cleaning up, hence no finalizer.

mod clients;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

pub use clients::{CLIENTS_DIR, CLIENTS_KEY, GatewayClients, gateway_clients};
pub use workload::{
    CLIENTS_HASH_ANNOTATION, COMPONENT, GATEWAY_FS_GROUP, IDENTITY_AUDIENCE, IDENTITY_TOKEN_DIR,
    ROUTING_LABEL, TRUST_BUNDLE_DIR, clients_config_map, clients_config_map_name, deployment,
    object_name, pod_disruption_budget, selector, service,
};

use super::common::FIELD_MANAGER;
use super::context::{Context, measured};
use super::error::Error;
use super::render::Kind;
use super::status::{Outcome, report};
use crate::crd::Routing;

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
    let status = json!({
        "readyReplicas": ready,
        "service": object,
    });
    report(ctx, r, status, &outcome).await?;
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
#[path = "gateway_tests.rs"]
mod tests;
