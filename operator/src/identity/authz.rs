//! Authorisation of an authenticated pod: the pod must exist with the token's UID and
//! ServiceAccount and be controlled (Pod → ReplicaSet → Deployment, each reference
//! checked by UID) by either
//!
//! - the checker Deployment of this installation ([`CheckerWorkload`]: named by
//!   namespace and name in the operator's configuration, its pods running under the
//!   checker's ServiceAccount) → a checker identity, or
//! - a Deployment carrying the operator's managed-by label and the gateway component
//!   label, its pod running under the gateway ServiceAccount (when the operator names
//!   one, as the chart does) → a gateway worker identity.
//!
//! Labels alone never make a checker. Decided afresh on every request; never cached.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
pub use proxy_pool_api::controlplane::spiffe::WorkloadKind;

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

/// The checker Deployment whose pods get `checker/<pod-name>` identities: set by the
/// operator's `--checker-deployment` / `--checker-service-account` flags (the chart
/// names its own checker Deployment and ServiceAccount).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckerWorkload {
    /// Namespace of the Deployment (the operator's).
    pub namespace: String,
    /// Deployment name.
    pub deployment: String,
    /// ServiceAccount its pods run under; the token must name it.
    pub service_account: String,
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
    /// The Deployment is neither a gateway the operator manages nor the checker.
    #[error(
        "pod does not belong to a gateway Deployment managed by proxy-pool-operator \
         or to the checker Deployment"
    )]
    NotManaged,
    /// A pod of the checker Deployment under another ServiceAccount than the checker's.
    #[error("pod of the checker Deployment does not run under the checker ServiceAccount")]
    CheckerServiceAccount,
    /// A pod of a gateway Deployment under another ServiceAccount than the gateways'.
    #[error("pod of a gateway Deployment does not run under the gateway ServiceAccount")]
    GatewayServiceAccount,
}

/// Why the decision could not be made (503).
#[derive(Debug, thiserror::Error)]
#[error("workload lookup unavailable: {0}")]
pub struct LookupUnavailable(pub String);

/// The `apps/v1` kinds on a pod's ownership chain, pod side first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    /// The ReplicaSet controlling the pod.
    ReplicaSet,
    /// The Deployment controlling that ReplicaSet.
    Deployment,
}

impl OwnerKind {
    /// The chain from the pod up: ReplicaSet, then Deployment.
    pub const CHAIN: [OwnerKind; 2] = [OwnerKind::ReplicaSet, OwnerKind::Deployment];

    /// The `kind` an owner reference names.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReplicaSet => "ReplicaSet",
            Self::Deployment => "Deployment",
        }
    }
}

/// A lookup's answer: the object if it exists, or why the lookup could not be made.
pub type Lookup<T> = Result<Option<T>, LookupUnavailable>;

/// Read access to the workload objects the decision needs.
#[async_trait]
pub trait Workloads: fmt::Debug + Send + Sync {
    /// A Pod, if it exists.
    async fn pod(&self, namespace: &str, name: &str) -> Lookup<Pod>;
    /// The metadata of a ReplicaSet or Deployment, if it exists (the decision reads
    /// only their UIDs, owner references and labels).
    async fn owner(&self, kind: OwnerKind, namespace: &str, name: &str) -> Lookup<ObjectMeta>;
}

/// Decides whether `caller` may have an identity, and which kind: a gateway
/// [`WorkloadKind::Worker`] (only under `gateway_service_account` when it is set) or a
/// [`WorkloadKind::Checker`] (only when `checker` is set).
pub async fn authorize(
    workloads: &dyn Workloads,
    caller: &PodCaller,
    namespaces: Option<&[String]>,
    checker: Option<&CheckerWorkload>,
    gateway_service_account: Option<&str>,
) -> Result<Result<WorkloadKind, Denial>, LookupUnavailable> {
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
    // Pod → ReplicaSet → Deployment, each link the owner's controller reference to
    // the very object (same UID) that exists now.
    let mut owned = pod.metadata;
    for kind in OwnerKind::CHAIN {
        let Some(r) = controller(&owned, kind.as_str()) else {
            return Ok(Err(Denial::NotOwned));
        };
        let found = workloads.owner(kind, ns, &r.name).await?;
        let Some(meta) = found.filter(|m| m.uid.as_deref() == Some(r.uid.as_str())) else {
            return Ok(Err(Denial::NotOwned));
        };
        owned = meta;
    }
    let deployment = owned;
    // The checker is named by the operator's configuration (and its Deployment UID
    // was checked above), never recognised by labels.
    if let Some(c) = checker
        && c.namespace == ns
        && deployment.name.as_deref() == Some(c.deployment.as_str())
    {
        if caller.service_account != c.service_account {
            return Ok(Err(Denial::CheckerServiceAccount));
        }
        return Ok(Ok(WorkloadKind::Checker));
    }
    let labels = deployment.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    if label(MANAGED_BY_LABEL) != Some(MANAGED_BY_VALUE)
        || label(COMPONENT_LABEL) != Some(GATEWAY_COMPONENT)
    {
        return Ok(Err(Denial::NotManaged));
    }
    if gateway_service_account.is_some_and(|sa| sa != caller.service_account) {
        return Ok(Err(Denial::GatewayServiceAccount));
    }
    Ok(Ok(WorkloadKind::Worker))
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
    owners: HashMap<(OwnerKind, String, String), ObjectMeta>,
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
        self.put_owner(OwnerKind::ReplicaSet, rs.metadata);
    }

    /// Stores a Deployment.
    pub fn put_deployment(&self, d: Deployment) {
        self.put_owner(OwnerKind::Deployment, d.metadata);
    }

    fn put_owner(&self, kind: OwnerKind, meta: ObjectMeta) {
        let (ns, name) = key(&meta);
        self.state.lock().owners.insert((kind, ns, name), meta);
    }

    /// Makes every lookup fail as unavailable (or work again).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.state.lock().unavailable = unavailable;
    }

    fn get<K: Eq + std::hash::Hash, T: Clone>(
        &self,
        pick: impl FnOnce(&MemoryState) -> &HashMap<K, T>,
        key: K,
    ) -> Lookup<T> {
        let state = self.state.lock();
        if state.unavailable {
            return Err(LookupUnavailable("memory workloads switched off".into()));
        }
        Ok(pick(&state).get(&key).cloned())
    }
}

#[async_trait]
impl Workloads for MemoryWorkloads {
    async fn pod(&self, ns: &str, name: &str) -> Lookup<Pod> {
        self.get(|s| &s.pods, (ns.to_owned(), name.to_owned()))
    }

    async fn owner(&self, kind: OwnerKind, ns: &str, name: &str) -> Lookup<ObjectMeta> {
        self.get(|s| &s.owners, (kind, ns.to_owned(), name.to_owned()))
    }
}

#[cfg(test)]
#[path = "authz_tests.rs"]
mod tests;
