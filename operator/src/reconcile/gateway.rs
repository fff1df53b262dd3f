//! The gateway reconcilers. A gateway group's workload (rendered by `workload` from
//! a [`Workload`], the chart's template and the group's `clients` file) is applied by
//! the GatewayGroup reconciler for a GatewayGroup, and by the Routing reconciler for
//! the implicit group of a Routing with an inline (deprecated) `spec.gateway`. A
//! Routing naming a group reports the group's gateways in its status.
//!
//! Every object carries a controller owner reference to the GatewayGroup (or the
//! Routing of an implicit group), so deleting it lets the garbage collector remove
//! them; nothing outside the cluster needs cleaning up, hence no finalizer.

mod clients;
mod workload;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

pub use clients::{CLIENTS_DIR, CLIENTS_KEY, GatewayClients, gateway_clients, wanted_clients};
pub use workload::{
    CLIENTS_HASH_ANNOTATION, COMPONENT, GATEWAY_FS_GROUP, GROUP_LABEL, IDENTITY_AUDIENCE,
    IDENTITY_TOKEN_DIR, ROUTING_LABEL, TRUST_BUNDLE_DIR, Workload, autoscaler, clients_config_map,
    clients_config_map_name, deployment, object_name, pod_disruption_budget, selector, service,
};

use super::common::FIELD_MANAGER;
use super::context::{Context, measured};
use super::error::Error;
use super::render::{Kind, Problem, Rendered};
use super::status::{Outcome, report};
use crate::crd::{GatewayGroup, Routing};

/// Metric `kind` label and event kind of the GatewayGroup reconciler.
pub const GROUP_KIND: &str = "GatewayGroup";
/// Field manager that hands the Deployment's `replicas` over to an autoscaler: it
/// applies only `replicas` (the current value, or `minReplicas` on creation), so the
/// operator's own manager can stop claiming the field without the API server
/// resetting it; the autoscaler's (or `kubectl scale`'s) next update takes it over.
pub const REPLICAS_MANAGER: &str = "proxy-pool-operator-replicas";

/// Applies the Routing's inline gateway (or reports its group's), then its status.
#[tracing::instrument(skip_all, fields(routing = %r.name_any()))]
pub async fn reconcile(r: Arc<Routing>, ctx: Arc<Context>) -> Result<Action, Error> {
    measured(Kind::Routing.as_str(), &ctx, reconcile_inner(&r, &ctx)).await
}

/// Applies the GatewayGroup's workload for the Routings naming it, then its status.
#[tracing::instrument(skip_all, fields(group = %g.name_any()))]
pub async fn reconcile_group(g: Arc<GatewayGroup>, ctx: Arc<Context>) -> Result<Action, Error> {
    measured(GROUP_KIND, &ctx, reconcile_group_inner(&g, &ctx)).await
}

fn problem(reason: &'static str, message: String) -> Problem {
    Problem { reason, message }
}

/// Deployment status: (desired, ready) pods.
fn pods(d: Option<&Deployment>) -> (i32, i32) {
    let ready = d
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let desired = d
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    (desired, ready)
}

/// Waiting for gateway pods, when not all of them are ready.
fn waiting_for_pods(desired: i32, ready: i32, object: &str) -> Option<(&'static str, String)> {
    (desired < 1 || ready < desired).then(|| {
        (
            "GatewayPodsNotReady",
            format!("{ready} of {desired} gateway pod(s) of Deployment {object} ready"),
        )
    })
}

fn requeue(outcome: &Outcome) -> Action {
    if outcome.is_ready() {
        Action::requeue(Duration::from_secs(300))
    } else if outcome.problems.is_empty() {
        // Waiting for pods (the Deployment's status changes trigger a reconcile too).
        Action::requeue(Duration::from_secs(15))
    } else {
        Action::requeue(Duration::from_secs(60))
    }
}

async fn reconcile_inner(r: &Routing, ctx: &Context) -> Result<Action, Error> {
    let rendered = ctx.render().await?;
    let name = r.name_any();
    let mut problems = rendered.problems_of(Kind::Routing, &name).to_vec();
    problems.extend(ctx.config_problems(&rendered).await?);
    let (object, applied, message) = match Workload::of_routing(r)? {
        Some(w) => {
            let wanted = wanted_clients([r]);
            let (applied, clients) = apply_workload(ctx, &w, wanted.as_ref(), &rendered).await?;
            let message = format!(
                "accepting {} client(s) (inline spec.gateway is deprecated: use a GatewayGroup)",
                clients.names.len()
            );
            (w.object(), Some(applied), message)
        }
        None => {
            let group = r.group_name();
            // Migration: the Routing's old inline gateway goes once it names a group.
            remove_inline_gateway(ctx, r).await?;
            if ctx.api::<GatewayGroup>().get_opt(&group).await?.is_none() {
                problems.push(problem(
                    "GatewayGroupNotFound",
                    format!("GatewayGroup {group:?} not found in this namespace"),
                ));
            }
            let object = object_name(&group);
            let applied = ctx.api::<Deployment>().get_opt(&object).await?;
            (object, applied, format!("served by GatewayGroup {group}"))
        }
    };
    let (desired, ready) = pods(applied.as_ref());
    let mut outcome = Outcome::new(
        problems,
        format!("{ready} of {desired} gateway pod(s) of {object} ready, {message}"),
    );
    // Ready only when the gateway pods serve: written into the config is not enough.
    outcome.waiting = waiting_for_pods(desired, ready, &object);
    let status = json!({
        "readyReplicas": ready,
        "service": object,
        "gatewayGroup": r.group_name(),
    });
    report(ctx, r, status, &outcome).await?;
    Ok(requeue(&outcome))
}

async fn reconcile_group_inner(g: &GatewayGroup, ctx: &Context) -> Result<Action, Error> {
    let name = g.name_any();
    let w = Workload::of_group(g)?;
    let object = w.object();
    let all = ctx
        .api::<Routing>()
        .list(&ListParams::default())
        .await?
        .items;
    let routings = routings_of(&all, &name);
    let mut problems = Vec::new();
    if let Some(r) = all
        .iter()
        .find(|r| r.spec.gateway.is_some() && r.name_any() == name)
    {
        problems.push(problem(
            "NameConflict",
            format!(
                "Routing {:?} has an inline spec.gateway: its implicit gateway group has this \
                 group's name and objects; move it to spec.gatewayGroup or rename the group",
                r.name_any()
            ),
        ));
    }
    let served: Vec<String> = routings.iter().map(|r| r.name_any()).collect();
    let (applied, waiting) = if !problems.is_empty() {
        (None, None)
    } else if routings.is_empty() {
        // Nothing to serve: the group's gateways go (and come back with a Routing).
        remove_workload(ctx, &w).await?;
        let why = (
            "NoRoutings",
            "no Routing names this group in spec.gatewayGroup: no gateways run".to_owned(),
        );
        (None, Some(why))
    } else {
        let rendered = ctx.render().await?;
        let wanted = wanted_clients(routings.iter().copied());
        let (applied, _) = apply_workload(ctx, &w, wanted.as_ref(), &rendered).await?;
        let (desired, ready) = pods(Some(&applied));
        (Some(applied), waiting_for_pods(desired, ready, &object))
    };
    let (desired, ready) = pods(applied.as_ref());
    let mut outcome = Outcome::new(
        problems,
        format!(
            "{ready} of {desired} gateway pod(s) of {object} ready, serving {} Routing(s)",
            served.len()
        ),
    );
    outcome.waiting = waiting;
    let status = json!({
        "routings": served,
        "replicas": applied.as_ref().map(|_| desired),
        "readyReplicas": applied.as_ref().map(|_| ready),
        "service": applied.as_ref().map(|_| object.clone()),
    });
    report(ctx, g, status, &outcome).await?;
    Ok(requeue(&outcome))
}

/// The Routings naming group `name`, in match order: highest priority first, ties by
/// name (the order the controller config and the gateways' snapshots keep).
pub fn routings_of<'a>(all: &'a [Routing], name: &str) -> Vec<&'a Routing> {
    let mut v: Vec<&Routing> = all
        .iter()
        .filter(|r| r.spec.gateway.is_none() && r.spec.gateway_group.as_deref() == Some(name))
        .collect();
    v.sort_by(|a, b| {
        b.spec
            .priority
            .cmp(&a.spec.priority)
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    v
}

/// Applies a group's clients ConfigMap, Deployment, Service, PodDisruptionBudget and
/// autoscaler (removing those its spec no longer asks for); returns the applied
/// Deployment and the clients.
async fn apply_workload(
    ctx: &Context,
    w: &Workload,
    wanted: Option<&BTreeSet<String>>,
    rendered: &Rendered,
) -> Result<(Deployment, GatewayClients), Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let object = w.object();
    // The clients file first: the Deployment's pods mount it.
    let mut clients = gateway_clients(wanted, &rendered.gateway_clients);
    // Sealed before it becomes an annotation: it covers credential values.
    clients.hash = ctx.config.hash_key.seal(&clients.hash);
    ctx.api::<ConfigMap>()
        .patch(
            &clients_config_map_name(&w.group),
            &params,
            &Patch::Apply(&clients_config_map(w, &clients)),
        )
        .await?;
    let deployments: Api<Deployment> = ctx.api();
    let dep = deployment(w, &ctx.config.gateway, &clients);
    let before = if w.autoscaled() {
        deployments.get_opt(&object).await?
    } else {
        None
    };
    if let (Some(a), Some(d)) = (&w.spec.autoscaling, &before)
        && owns_replicas(d, FIELD_MANAGER)
    {
        // Autoscaling just turned on: keep today's count while our claim goes.
        let current = pods(Some(d)).0.max(a.min_replicas);
        apply_replicas(&deployments, &object, current).await?;
    }
    let mut applied = deployments
        .patch(&object, &params, &Patch::Apply(&dep))
        .await?;
    if let (Some(a), None) = (&w.spec.autoscaling, &before) {
        // Created without replicas (1 by default): start at the autoscaler's minimum.
        applied = apply_replicas(&deployments, &object, a.min_replicas).await?;
    }
    ctx.api::<Service>()
        .patch(&object, &params, &Patch::Apply(&service(w)))
        .await?;
    apply_or_remove(ctx, &object, pod_disruption_budget(w, &ctx.config.gateway)).await?;
    // An inline gateway never has an autoscaler: no request for it.
    if w.selector_key == GROUP_LABEL {
        apply_or_remove(ctx, &object, autoscaler(w)).await?;
    }
    Ok((applied, clients))
}

/// Applies `replicas` alone under [`REPLICAS_MANAGER`].
async fn apply_replicas(
    api: &Api<Deployment>,
    name: &str,
    replicas: i32,
) -> Result<Deployment, Error> {
    let patch = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    });
    Ok(api
        .patch(
            name,
            &PatchParams::apply(REPLICAS_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?)
}

/// Whether field manager `manager` claims the Deployment's `spec.replicas` by apply.
pub fn owns_replicas(d: &Deployment, manager: &str) -> bool {
    d.meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Apply")
        })
        .filter_map(|m| m.fields_v1.as_ref())
        .any(|f| {
            f.0.get("f:spec")
                .and_then(|s| s.get("f:replicas"))
                .is_some()
        })
}

/// Applies `obj` under `name`, or deletes what was there when `obj` is `None`.
async fn apply_or_remove<K>(ctx: &Context, name: &str, obj: Option<K>) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = ctx.api();
    match obj {
        Some(o) => {
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&o),
            )
            .await?;
            Ok(())
        }
        None => delete_if_present(&api, name).await,
    }
}

async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes every object of a group's workload (a group no Routing names).
async fn remove_workload(ctx: &Context, w: &Workload) -> Result<(), Error> {
    let object = w.object();
    delete_if_present(&ctx.api::<HorizontalPodAutoscaler>(), &object).await?;
    delete_if_present(&ctx.api::<PodDisruptionBudget>(), &object).await?;
    delete_if_present(&ctx.api::<Service>(), &object).await?;
    delete_if_present(&ctx.api::<Deployment>(), &object).await?;
    delete_if_present(&ctx.api::<ConfigMap>(), &clients_config_map_name(&w.group)).await
}

/// Removes the inline gateway a Routing had before it named a group: only objects the
/// Routing itself controls (a group of the same name owns its own).
async fn remove_inline_gateway(ctx: &Context, r: &Routing) -> Result<(), Error> {
    let object = object_name(&r.name_any());
    let Some(d) = ctx.api::<Deployment>().get_opt(&object).await? else {
        return Ok(());
    };
    let uid = r.meta().uid.as_deref();
    let controlled = d
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid);
    if !controlled {
        return Ok(());
    }
    tracing::info!(%object, "removing the inline gateway of a Routing that names a group");
    delete_if_present(&ctx.api::<PodDisruptionBudget>(), &object).await?;
    delete_if_present(&ctx.api::<Service>(), &object).await?;
    delete_if_present(&ctx.api::<Deployment>(), &object).await?;
    delete_if_present(
        &ctx.api::<ConfigMap>(),
        &clients_config_map_name(&r.name_any()),
    )
    .await
}

#[cfg(test)]
#[path = "gateway_tests.rs"]
mod tests;
