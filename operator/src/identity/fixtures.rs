//! Readable test fixtures: a managed gateway Deployment → ReplicaSet → Pod chain.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::authz::{MemoryWorkloads, PodCaller};
use super::{COMPONENT_LABEL, GATEWAY_COMPONENT, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

pub(crate) const NS: &str = "proxy-pool";
pub(crate) const SA: &str = "gateway";

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
    let mut deployment = Deployment {
        metadata: meta("gw", None),
        ..Default::default()
    };
    deployment.metadata.labels = Some(BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (COMPONENT_LABEL.to_owned(), GATEWAY_COMPONENT.to_owned()),
    ]));
    Chain {
        deployment,
        replica_set: ReplicaSet {
            metadata: meta("gw-5d9f", Some(controller_ref("Deployment", "gw"))),
            ..Default::default()
        },
        pod: Pod {
            metadata: meta(pod, Some(controller_ref("ReplicaSet", "gw-5d9f"))),
            spec: Some(PodSpec {
                service_account_name: Some(SA.into()),
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
            service_account: SA.into(),
            pod_name: self.pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: self.pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}
