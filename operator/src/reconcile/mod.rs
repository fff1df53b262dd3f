//! The reconcilers: Upstream / Routing / DistributionClient → the controller's config
//! (a ConfigMap plus Secret keys mounted as files into the controller pod), a gateway
//! Deployment + Service per GatewayGroup (or per Routing with an inline gateway), and status conditions and events on each resource.
//!
//! Five kube-runtime controllers (the `reconcile(Arc<Obj>, Arc<Context>) -> Result<Action>`
//! + `error_policy` model of kube-rs/controller-rs), all in one namespace:
//!
//! * the config reconciler ([`config`]), rooted at the controller Deployment and
//!   triggered by any change of the three kinds or of a Secret, deletions included;
//! * the Routing and GatewayGroup reconcilers ([`gateway`]), which own the gateway
//!   objects (a group's, or a Routing's inline gateway);
//! * the Upstream and DistributionClient reconcilers ([`resources`]), status only.
//!
//! Everything is written with server-side apply (field manager `proxy-pool-operator`),
//! so a reconcile of an unchanged world changes nothing on the server. A bad reference
//! is a Degraded condition, never an error: errors are API failures, retried with a
//! per-object exponential backoff. No finalizers: every object the operator makes is
//! in the cluster, in the namespace and owned (garbage-collected with its owner), and
//! the config is re-rendered from the remaining resources when one is deleted.
//!
//! The modules form layers; each imports only from the layers below it:
//!
//! 1. leaves: [`error`](Error), [`common`] (field manager, labels, owner references),
//!    [`metrics`], [`inventory`], [`hash_key`], [`leader`], [`gateway_pod`], [`http`];
//! 2. pure renderers, no Kubernetes client: [`render`] (custom resources → the
//!    controller config), [`tls`] (certificate rules), [`controller_deployment`], and
//!    the gateway workload and clients file under [`gateway`]; [`settings`];
//! 3. [`context`]: the client, settings, metrics and backoff every reconcile shares;
//! 4. [`status`]: conditions, status writes and events;
//! 5. the reconcilers [`config`] (with [`tls_secret`]), [`gateway`], [`resources`];
//! 6. this module, which runs them.

pub mod common;
pub mod config;
pub mod context;
pub mod controller_deployment;
mod error;
pub mod gateway;
pub mod gateway_pod;
pub mod hash_key;
pub mod http;
pub mod inventory;
pub mod leader;
pub mod metrics;
pub mod render;
pub mod resources;
pub mod settings;
pub mod status;
pub mod tls;
pub mod tls_secret;

pub use common::FIELD_MANAGER;
pub use context::Context;
pub use error::Error;
pub use gateway_pod::GatewayPodSettings;
pub use metrics::Metrics;
pub use settings::{GatewayTemplate, OperatorConfig};
pub use tls::ControllerTls;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::crd::{DistributionClient, GatewayGroup, Routing, Upstream};
use render::Kind;

/// Runs the five controllers until `shutdown` completes, then lets in-flight
/// reconciles finish. Call it only while holding leadership (see [`run_as_leader`]).
pub async fn run(
    client: Client,
    config: OperatorConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let shutdown = shutdown.shared();
    let ctx = Arc::new(Context::new(client, config, metrics));
    let wc = watcher::Config::default();
    let gateway_wc = watcher::Config::default().labels(&format!(
        "{}={}",
        gateway::COMPONENT.0,
        gateway::COMPONENT.1
    ));
    let controller_name = ctx.config.controller_deployment.clone();
    let root = ObjectRef::<Deployment>::new(&controller_name).within(&ctx.config.namespace);
    let debounce = controller::Config::default().debounce(Duration::from_millis(300));
    // Secrets only trigger reconciles: watch their metadata (an `Api` of
    // `PartialObjectMeta` makes metadata-only requests), so the operator never
    // receives the values of Secrets no resource references.
    let secrets = || ctx.api::<PartialObjectMeta<Secret>>();

    let config_ctrl = Controller::new(
        ctx.api::<Deployment>(),
        watcher::Config::default().fields(&format!("metadata.name={controller_name}")),
    )
    .with_config(debounce.clone())
    .owns(
        ctx.api::<ConfigMap>(),
        watcher::Config::default().labels(&format!(
            "{}={}",
            common::COMPONENT_LABEL,
            config::CONFIG_COMPONENT
        )),
    )
    .watches(ctx.api::<Upstream>(), wc.clone(), to(&root))
    .watches(ctx.api::<Routing>(), wc.clone(), to(&root))
    .watches(ctx.api::<DistributionClient>(), wc.clone(), to(&root))
    .watches(secrets(), wc.clone(), to(&root));

    let (routing_ctrl, store) = resource_controller::<Routing>(&ctx, &wc, &debounce);
    let routing_ctrl = routing_ctrl
        .owns(ctx.api::<Deployment>(), gateway_wc.clone())
        .owns(ctx.api::<Service>(), gateway_wc.clone())
        .owns(ctx.api::<ConfigMap>(), gateway_wc.clone())
        .watches(ctx.api::<Upstream>(), wc.clone(), all(&store))
        .watches(ctx.api::<DistributionClient>(), wc.clone(), all(&store))
        // A group's status (its pods' readiness) is its Routings' readiness.
        .watches(ctx.api::<GatewayGroup>(), wc.clone(), all(&store));

    // Every group again when a Routing changes: one may have left a group for another.
    let (group_ctrl, store) = resource_controller::<GatewayGroup>(&ctx, &wc, &debounce);
    let group_ctrl = group_ctrl
        .owns(ctx.api::<Deployment>(), gateway_wc.clone())
        .owns(ctx.api::<Service>(), gateway_wc.clone())
        .owns(ctx.api::<ConfigMap>(), gateway_wc)
        .watches(ctx.api::<Routing>(), wc.clone(), all(&store))
        .watches(ctx.api::<DistributionClient>(), wc.clone(), all(&store));

    let (upstream_ctrl, _) = resource_controller::<Upstream>(&ctx, &wc, &debounce);

    let (client_ctrl, store) = resource_controller::<DistributionClient>(&ctx, &wc, &debounce);
    let client_ctrl = client_ctrl.watches(ctx.api::<Upstream>(), wc, all(&store));

    tokio::join!(
        serve(
            config::CONFIG_KIND,
            config_ctrl,
            config::reconcile,
            shutdown.clone(),
            &ctx
        ),
        serve(
            Kind::Routing.as_str(),
            routing_ctrl,
            gateway::reconcile,
            shutdown.clone(),
            &ctx
        ),
        serve(
            gateway::GROUP_KIND,
            group_ctrl,
            gateway::reconcile_group,
            shutdown.clone(),
            &ctx
        ),
        serve(
            Kind::Upstream.as_str(),
            upstream_ctrl,
            resources::reconcile_upstream,
            shutdown.clone(),
            &ctx
        ),
        serve(
            Kind::DistributionClient.as_str(),
            client_ctrl,
            resources::reconcile_client,
            shutdown,
            &ctx
        ),
    );
    Ok(())
}

/// An object kind a [`Controller`] can watch and run.
trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// Runs `controller` with `reconcile` and the shared error [`policy`] until `shutdown`
/// completes, consuming its results with [`drain`].
async fn serve<K, F>(
    kind: &'static str,
    controller: Controller<K>,
    reconcile: impl FnMut(Arc<K>, Arc<Context>) -> F,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ctx: &Arc<Context>,
) where
    K: Watched,
    F: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let results = controller.graceful_shutdown_on(shutdown).run(
        reconcile,
        move |obj, error, ctx| policy(kind, &obj.name_any(), error, &ctx),
        ctx.clone(),
    );
    drain(kind, results, ctx).await;
}

/// How a Lease-guarded operator replica identifies itself.
#[derive(Clone, Debug)]
pub struct LeaderSettings {
    /// Name of the Lease in the operator's namespace.
    pub lease_name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long the Lease lasts without renewal.
    pub lease_duration: Duration,
}

/// Waits for the leader Lease, runs the controllers while holding it and releases it
/// on shutdown. Returns [`Error::LeaseLost`] when leadership is lost: the caller should
/// exit so a restart starts over as a standby.
pub async fn run_as_leader(
    client: Client,
    config: OperatorConfig,
    metrics: Arc<Metrics>,
    leader: LeaderSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let shutdown = shutdown.shared();
    let lock = leader::LeaseLock::new(
        Api::namespaced(client.clone(), &config.namespace),
        &leader.lease_name,
        &leader.identity,
        leader.lease_duration,
    );
    let retry = leader.lease_duration / 3;
    loop {
        match lock.try_acquire().await {
            Ok(true) => break,
            Ok(false) => tracing::debug!(lease = %leader.lease_name, "standing by"),
            Err(error) => tracing::warn!(%error, "cannot read the leader Lease"),
        }
        tokio::select! {
            () = shutdown.clone() => return Ok(()),
            () = tokio::time::sleep(retry) => {}
        }
    }
    tracing::info!(lease = %leader.lease_name, identity = %leader.identity, "leading");
    metrics.set_leader(true);
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = {
        let lock = lock.clone();
        tokio::spawn(async move {
            leader::hold(&lock).await;
            let _ = lost_tx.send(());
        })
    };
    let stop = {
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                () = shutdown => {}
                _ = lost_rx => {}
            }
        }
    };
    let result = run(client, config, metrics.clone(), stop).await;
    let lost = holder.is_finished();
    holder.abort();
    metrics.set_leader(false);
    if lost {
        return Err(Error::LeaseLost(leader.lease_name));
    }
    if let Err(error) = lock.release().await {
        tracing::warn!(%error, "cannot release the leader Lease");
    }
    result
}

/// Maps any event to one object.
fn to<K, O>(target: &ObjectRef<K>) -> impl Fn(O) -> Option<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let target = target.clone();
    move |_| Some(target.clone())
}

/// A debounced controller of the custom resource `K` that reconciles every `K` again
/// when a Secret changes (each reconcile checks the resource's Secret references;
/// Secrets are watched by their metadata only, as in [`run`]), and its store of `K`.
fn resource_controller<K>(
    ctx: &Context,
    wc: &watcher::Config,
    debounce: &controller::Config,
) -> (Controller<K>, Store<K>)
where
    K: Watched + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let ctrl = Controller::new(ctx.api::<K>(), wc.clone()).with_config(debounce.clone());
    let store = ctrl.store();
    let secrets = ctx.api::<PartialObjectMeta<Secret>>();
    (ctrl.watches(secrets, wc.clone(), all(&store)), store)
}

/// Maps any event to every object of the controller's own kind.
fn all<K, O>(store: &Store<K>) -> impl Fn(O) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let store = store.clone();
    move |_| {
        store
            .state()
            .iter()
            .map(|o| ObjectRef::from_obj(&**o))
            .collect()
    }
}

/// The error policy: counts the failure and retries with the object's backoff.
fn policy(kind: &'static str, name: &str, error: &Error, ctx: &Context) -> Action {
    let delay = ctx.failed(kind, name);
    tracing::warn!(kind, name, %error, retry_in_s = delay.as_secs(), "reconcile failed");
    Action::requeue(delay)
}

/// Consumes a controller's result stream: resets the backoff of objects that
/// reconciled, logs the rest at debug (the error policy already logged failures).
async fn drain<K, S, E>(kind: &'static str, stream: S, ctx: &Context)
where
    K: Resource,
    S: futures::Stream<Item = Result<(ObjectRef<K>, Action), E>>,
    E: std::fmt::Display,
{
    stream
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => ctx.succeeded(kind, &obj.name),
                Err(error) => tracing::debug!(kind, %error, "controller event"),
            }
        })
        .await;
}
