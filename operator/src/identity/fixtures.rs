//! Readable test fixtures: a managed gateway (or the checker) Deployment → ReplicaSet
//! → Pod chain.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::authz::{CheckerWorkload, MemoryWorkloads, PodCaller};
use super::{COMPONENT_LABEL, GATEWAY_COMPONENT, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

pub(crate) const NS: &str = "proxy-pool";
pub(crate) const SA: &str = "gateway";
/// The checker Deployment and its ServiceAccount, as the chart names them.
pub(crate) const CHECKER: &str = "proxy-pool-checker";

/// The three objects of one gateway pod.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    pub(crate) deployment: Deployment,
    pub(crate) replica_set: ReplicaSet,
    pub(crate) pod: Pod,
}

fn meta(name: &str, owner: Option<OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        uid: Some(format!("uid-{name}")),
        owner_references: owner.map(|o| vec![o]),
        ..Default::default()
    }
}

fn controller_ref(kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(true),
        ..Default::default()
    }
}

/// A gateway Deployment `gw` with the operator's labels, its ReplicaSet and `pod`.
pub(crate) fn gateway_chain(pod: &str) -> Chain {
    let mut c = chain("gw", SA, pod);
    c.deployment.metadata.labels = Some(BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (COMPONENT_LABEL.to_owned(), GATEWAY_COMPONENT.to_owned()),
    ]));
    c
}

/// The checker Deployment [`CHECKER`] (no operator labels: the chart makes it), its
/// ReplicaSet and `pod` running under ServiceAccount [`CHECKER`].
pub(crate) fn checker_chain(pod: &str) -> Chain {
    chain(CHECKER, CHECKER, pod)
}

/// The issuer's view of that checker Deployment.
pub(crate) fn checker_workload() -> CheckerWorkload {
    CheckerWorkload {
        namespace: NS.into(),
        deployment: CHECKER.into(),
        service_account: CHECKER.into(),
    }
}

/// Deployment `deployment` → ReplicaSet `<deployment>-5d9f` → `pod` under `sa`.
fn chain(deployment: &str, sa: &str, pod: &str) -> Chain {
    let rs = format!("{deployment}-5d9f");
    Chain {
        deployment: Deployment {
            metadata: meta(deployment, None),
            ..Default::default()
        },
        replica_set: ReplicaSet {
            metadata: meta(&rs, Some(controller_ref("Deployment", deployment))),
            ..Default::default()
        },
        pod: Pod {
            metadata: meta(pod, Some(controller_ref("ReplicaSet", &rs))),
            spec: Some(PodSpec {
                service_account_name: Some(sa.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

impl Chain {
    pub(crate) fn load(&self, workloads: &MemoryWorkloads) {
        workloads.put_deployment(self.deployment.clone());
        workloads.put_replica_set(self.replica_set.clone());
        workloads.put_pod(self.pod.clone());
    }

    /// The caller a token bound to this chain's pod authenticates as.
    pub(crate) fn caller(&self) -> PodCaller {
        PodCaller {
            namespace: NS.into(),
            service_account: self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            pod_name: self.pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: self.pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}
