//! Authorisation of an authenticated pod: the pod must exist with the token's UID and
//! ServiceAccount and be controlled (Pod → ReplicaSet → Deployment, each reference
//! checked by UID) by a Deployment carrying the operator's managed-by label and the
//! gateway component label. Decided afresh on every request; never cached.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{COMPONENT_LABEL, GATEWAY_COMPONENT, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// The caller, as established by token review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCaller {
    /// Namespace of the ServiceAccount (and so of the pod).
    pub namespace: String,
    /// ServiceAccount name.
    pub service_account: String,
    /// Pod name from the token's extras.
    pub pod_name: String,
    /// Pod UID from the token's extras.
    pub pod_uid: String,
}

/// Why a pod may not have an identity (403). The text is safe to return to it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// Namespace not served by this issuer.
    #[error("namespace is not served by this issuer")]
    Namespace,
    /// No such pod.
    #[error("pod not found")]
    PodNotFound,
    /// The pod was replaced since the token was issued.
    #[error("pod UID does not match the token")]
    UidMismatch,
    /// The pod runs under another ServiceAccount.
    #[error("pod ServiceAccount does not match the token")]
    ServiceAccountMismatch,
    /// The pod has finished.
    #[error("pod has terminated")]
    Terminated,
    /// The ownership chain is broken or leads elsewhere.
    #[error("pod is not controlled by a ReplicaSet of a Deployment")]
    NotOwned,
    /// The Deployment is not a gateway the operator manages.
    #[error("pod does not belong to a gateway Deployment managed by proxy-pool-operator")]
    NotManaged,
}

/// Why the decision could not be made (503).
#[derive(Debug, thiserror::Error)]
#[error("workload lookup unavailable: {0}")]
pub struct LookupUnavailable(pub String);

/// Read access to the workload objects the decision needs.
#[async_trait]
pub trait Workloads: fmt::Debug + Send + Sync {
    /// A Pod, if it exists.
    async fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, LookupUnavailable>;
    /// A ReplicaSet, if it exists.
    async fn replica_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ReplicaSet>, LookupUnavailable>;
    /// A Deployment, if it exists.
    async fn deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Deployment>, LookupUnavailable>;
}

/// Decides whether `caller` may have a worker identity.
pub async fn authorize(
    workloads: &dyn Workloads,
    caller: &PodCaller,
    namespaces: Option<&[String]>,
) -> Result<Result<(), Denial>, LookupUnavailable> {
    if namespaces.is_some_and(|ns| !ns.contains(&caller.namespace)) {
        return Ok(Err(Denial::Namespace));
    }
    let ns = caller.namespace.as_str();
    let Some(pod) = workloads.pod(ns, &caller.pod_name).await? else {
        return Ok(Err(Denial::PodNotFound));
    };
    if pod.metadata.uid.as_deref() != Some(caller.pod_uid.as_str()) {
        return Ok(Err(Denial::UidMismatch));
    }
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref());
    if sa.unwrap_or("default") != caller.service_account {
        return Ok(Err(Denial::ServiceAccountMismatch));
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Ok(Err(Denial::Terminated));
    }
    let Some(rs_ref) = controller(&pod.metadata, "ReplicaSet") else {
        return Ok(Err(Denial::NotOwned));
    };
    let Some(rs) = workloads.replica_set(ns, &rs_ref.name).await? else {
        return Ok(Err(Denial::NotOwned));
    };
    if rs.metadata.uid.as_deref() != Some(rs_ref.uid.as_str()) {
        return Ok(Err(Denial::NotOwned));
    }
    let Some(deploy_ref) = controller(&rs.metadata, "Deployment") else {
        return Ok(Err(Denial::NotOwned));
    };
    let Some(deployment) = workloads.deployment(ns, &deploy_ref.name).await? else {
        return Ok(Err(Denial::NotOwned));
    };
    if deployment.metadata.uid.as_deref() != Some(deploy_ref.uid.as_str()) {
        return Ok(Err(Denial::NotOwned));
    }
    let labels = deployment.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    if label(MANAGED_BY_LABEL) != Some(MANAGED_BY_VALUE)
        || label(COMPONENT_LABEL) != Some(GATEWAY_COMPONENT)
    {
        return Ok(Err(Denial::NotManaged));
    }
    Ok(Ok(()))
}

/// The `apps/v1` controller reference of kind `kind`, if any.
fn controller<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true) && r.kind == kind && r.api_version == "apps/v1")
}

/// An in-memory [`Workloads`] for tests and local runs.
#[derive(Debug, Default)]
pub struct MemoryWorkloads {
    // Test adapter: one lock, never held across an await.
    state: parking_lot::Mutex<MemoryState>,
}

#[derive(Debug, Default)]
struct MemoryState {
    pods: HashMap<(String, String), Pod>,
    replica_sets: HashMap<(String, String), ReplicaSet>,
    deployments: HashMap<(String, String), Deployment>,
    unavailable: bool,
}

fn key(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl MemoryWorkloads {
    /// Stores a Pod (keyed by its namespace and name).
    pub fn put_pod(&self, pod: Pod) {
        self.state.lock().pods.insert(key(&pod.metadata), pod);
    }

    /// Stores a ReplicaSet.
    pub fn put_replica_set(&self, rs: ReplicaSet) {
        self.state.lock().replica_sets.insert(key(&rs.metadata), rs);
    }

    /// Stores a Deployment.
    pub fn put_deployment(&self, d: Deployment) {
        self.state.lock().deployments.insert(key(&d.metadata), d);
    }

    /// Makes every lookup fail as unavailable (or work again).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.state.lock().unavailable = unavailable;
    }

    fn get<T: Clone>(
        &self,
        pick: impl FnOnce(&MemoryState) -> &HashMap<(String, String), T>,
        ns: &str,
        name: &str,
    ) -> Result<Option<T>, LookupUnavailable> {
        let state = self.state.lock();
        if state.unavailable {
            return Err(LookupUnavailable("memory workloads switched off".into()));
        }
        Ok(pick(&state).get(&(ns.to_owned(), name.to_owned())).cloned())
    }
}

#[async_trait]
impl Workloads for MemoryWorkloads {
    async fn pod(&self, ns: &str, name: &str) -> Result<Option<Pod>, LookupUnavailable> {
        self.get(|s| &s.pods, ns, name)
    }

    async fn replica_set(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<ReplicaSet>, LookupUnavailable> {
        self.get(|s| &s.replica_sets, ns, name)
    }

    async fn deployment(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Deployment>, LookupUnavailable> {
        self.get(|s| &s.deployments, ns, name)
    }
}

#[cfg(test)]
#[path = "authz_tests.rs"]
mod tests;
