//! What every reconciler shares: the client, the operator's settings, the event
//! recorder, metrics and per-object retry backoff, plus reading the namespace's
//! custom resources and the Secrets they reference for a rendering.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};

use super::error::Error;
use super::inventory::InventoryCache;
use super::metrics::Metrics;
use super::render::{Inputs, Problem, Rendered, SecretData, render};
use super::settings::OperatorConfig;
use crate::crd::{DistributionClient, Routing, Upstream};

/// Name the operator reports events under.
pub const REPORTER: &str = "proxy-pool-operator";

/// Shared by every reconcile.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Settings.
    pub config: OperatorConfig,
    /// Event recorder (one per operator; events name their object).
    pub recorder: Recorder,
    /// Reconcile metrics.
    pub metrics: Arc<Metrics>,
    /// Consecutive failures per object, for the error policy's backoff. A std mutex:
    /// held for a map lookup only, never across an await.
    failures: Arc<Mutex<HashMap<(&'static str, String), u32>>>,
    /// The controller's inventory, read once for every Upstream's status.
    pub(crate) inventory: Arc<InventoryCache>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for `client` with these settings.
    pub fn new(client: Client, config: OperatorConfig, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter {
            controller: REPORTER.into(),
            instance: config.instance.clone(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            metrics,
            failures: Arc::default(),
            inventory: Arc::default(),
        }
    }

    /// Namespaced API of `K` in the watched namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    /// Renders the controller config from the namespace's current resources.
    pub async fn render(&self) -> Result<Rendered, Error> {
        let lp = ListParams::default();
        let upstreams = self.api::<Upstream>().list(&lp).await?.items;
        let routings = self.api::<Routing>().list(&lp).await?.items;
        let clients = self.api::<DistributionClient>().list(&lp).await?.items;
        let secrets = self.secrets(&upstreams, &clients).await?;
        let secret_dir = self.config.secret_dir();
        let base = self.config.effective_base();
        Ok(render(&Inputs {
            base: &base,
            upstreams: &upstreams,
            routings: &routings,
            clients: &clients,
            secrets: &secrets,
            secret_dir: &secret_dir,
        }))
    }

    /// Why no resource can be in the controller's config right now, beyond its own
    /// problems: the base config is invalid, or the controller Deployment is missing
    /// (so nothing renders the config).
    pub async fn config_problems(&self, rendered: &Rendered) -> Result<Vec<Problem>, Error> {
        let mut out = Vec::new();
        if !rendered.global.is_empty() {
            out.push(Problem {
                reason: "ControllerConfigInvalid",
                message: "the controller config is not written: see the events of the controller Deployment".into(),
            });
        }
        let deployments = self.api::<Deployment>();
        if deployments
            .get_opt(&self.config.controller_deployment)
            .await?
            .is_none()
        {
            out.push(Problem {
                reason: "ControllerNotFound",
                message: format!(
                    "controller Deployment {:?} not found in namespace {:?}: no config is written",
                    self.config.controller_deployment, self.config.namespace
                ),
            });
        }
        Ok(out)
    }

    /// Data of every Secret the resources reference (absent ones are left out).
    async fn secrets(
        &self,
        upstreams: &[Upstream],
        clients: &[DistributionClient],
    ) -> Result<SecretData, Error> {
        let mut names = BTreeSet::new();
        for u in upstreams {
            let s = &u.spec.source;
            if let Some(r) = s
                .vendor_api
                .as_ref()
                .and_then(|v| v.credentials_secret_ref.as_ref())
            {
                names.insert(r.name.clone());
            }
            if let Some(r) = s
                .static_list
                .as_ref()
                .and_then(|v| v.credentials_secret_ref.as_ref())
            {
                names.insert(r.name.clone());
            }
        }
        for c in clients {
            let a = &c.spec.auth;
            names.extend(a.api_key.iter().map(|k| k.secret_ref.name.clone()));
            names.extend(a.bearer.iter().map(|k| k.secret_ref.name.clone()));
            names.extend(a.basic.iter().map(|k| k.secret_ref.name.clone()));
        }
        let api = self.api::<Secret>();
        let mut out = BTreeMap::new();
        for name in names {
            if let Some(secret) = api.get_opt(&name).await? {
                let data = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                out.insert(name, data);
            }
        }
        Ok(out)
    }

    /// Records a success: the next failure starts the backoff afresh.
    pub fn succeeded(&self, kind: &'static str, name: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&(kind, name.to_owned()));
        }
    }

    /// Records a failure and returns how long to wait before retrying:
    /// 2 s doubling up to 5 min.
    pub fn failed(&self, kind: &'static str, name: &str) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry((kind, name.to_owned())).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        backoff(n)
    }
}

/// Times and counts a reconcile.
pub(crate) async fn measured<F>(kind: &'static str, ctx: &Context, fut: F) -> Result<Action, Error>
where
    F: Future<Output = Result<Action, Error>>,
{
    let timer = ctx.metrics.start(kind);
    let result = fut.await;
    timer.finish(result.is_ok());
    result
}

/// Delay after `n` consecutive failures.
pub fn backoff(n: u32) -> Duration {
    let secs = 2u64.saturating_mul(1u64 << n.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(2), Duration::from_secs(4));
        assert_eq!(backoff(5), Duration::from_secs(32));
        assert_eq!(backoff(9), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }
}
