//! Workload objects for identity tests on the real API server: namespaces,
//! ServiceAccounts, and Deployment → ReplicaSet → Pod chains linked by controller
//! references with real UIDs (no controllers run in the harness, so the chain is
//! created directly), plus bound ServiceAccount tokens as the kubelet projects them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Pod, PodSpec, PodTemplateSpec, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};

/// A created Pod: what a bound token and the issuer's checks need.
#[derive(Clone, Debug)]
pub struct PodRef {
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// The ServiceAccount it runs under.
    pub service_account: String,
}

/// Creates workload objects in one namespace. Test fixture: panics on API errors.
#[derive(Clone)]
pub struct Workloads {
    client: kube::Client,
    namespace: String,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Workloads {
    /// Objects go into `namespace` (created by [`Workloads::create_namespace`]).
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the namespace `name` (cluster scope).
    pub async fn create_namespace(client: &kube::Client, name: &str) {
        let ns = Namespace {
            metadata: meta(name, BTreeMap::new(), None),
            ..Default::default()
        };
        create(&Api::all(client.clone()), &ns).await;
    }

    /// Creates ServiceAccount `name`.
    pub async fn create_service_account(&self, name: &str) {
        let sa = ServiceAccount {
            metadata: meta(name, BTreeMap::new(), None),
            ..Default::default()
        };
        create(&self.api(), &sa).await;
    }

    /// Deployment `name` (with the operator's gateway labels when `managed`), its
    /// ReplicaSet and one Pod running under ServiceAccount `sa`, linked by controller
    /// references with real UIDs.
    pub async fn deployment_chain(&self, name: &str, sa: &str, managed: bool) -> PodRef {
        let mut labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
        if managed {
            labels.insert(
                "app.kubernetes.io/managed-by".into(),
                "proxy-pool-operator".into(),
            );
            labels.insert("proxypool.io/component".into(), "gateway".into());
        }
        let app = BTreeMap::from([("app".to_owned(), name.to_owned())]);
        let selector = LabelSelector {
            match_labels: Some(app.clone()),
            ..Default::default()
        };
        let tmpl = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(app.clone()),
                ..Default::default()
            }),
            spec: Some(pod_spec(sa)),
        };
        let deployment = create(
            &self.api(),
            &Deployment {
                metadata: meta(name, labels, None),
                spec: Some(DeploymentSpec {
                    replicas: Some(1),
                    selector: selector.clone(),
                    template: tmpl.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await;
        let rs_name = format!("{name}-7c9d5");
        let rs = create(
            &self.api(),
            &ReplicaSet {
                metadata: meta(
                    &rs_name,
                    app,
                    Some(controller_ref(
                        "Deployment",
                        name,
                        &uid_of(&deployment.metadata),
                    )),
                ),
                spec: Some(ReplicaSetSpec {
                    replicas: Some(1),
                    selector,
                    template: Some(tmpl),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await;
        let owner = controller_ref("ReplicaSet", &rs_name, &uid_of(&rs.metadata));
        self.create_pod(&format!("{rs_name}-x2k4q"), sa, Some(owner))
            .await
    }

    /// Pod `name` under ServiceAccount `sa`, owned by `owner` (none: a bare pod).
    pub async fn create_pod(&self, name: &str, sa: &str, owner: Option<OwnerReference>) -> PodRef {
        let pod = create(
            &self.api(),
            &Pod {
                metadata: meta(name, BTreeMap::new(), owner),
                spec: Some(pod_spec(sa)),
                ..Default::default()
            },
        )
        .await;
        PodRef {
            name: name.into(),
            uid: uid_of(&pod.metadata),
            service_account: sa.into(),
        }
    }

    /// A ServiceAccount token for `audience`, bound to `pod` (so its extras carry the
    /// pod's name and UID), as the kubelet would project it.
    pub async fn token_for(&self, pod: &PodRef, audience: &str) -> String {
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(vec![audience.into()]),
                expiration_seconds: Some(600),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.name.clone()),
                    uid: Some(pod.uid.clone()),
                }),
            }),
            ..Default::default()
        };
        self.api::<ServiceAccount>()
            .create_token_request(&pod.service_account, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {}: {e}", pod.name))
            .status
            .and_then(|s| s.token)
            .unwrap_or_else(|| panic!("TokenRequest for {} returned no token", pod.name))
    }
}

async fn create<K>(api: &Api<K>, obj: &K) -> K
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), obj)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", obj.meta().name))
}

fn meta(name: &str, labels: BTreeMap<String, String>, owner: Option<OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(labels),
        owner_references: owner.map(|o| vec![o]),
        ..Default::default()
    }
}

fn controller_ref(kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn pod_spec(sa: &str) -> PodSpec {
    PodSpec {
        service_account_name: Some(sa.into()),
        containers: vec![Container {
            name: "workload".into(),
            image: Some("proxy-pool:e2e".into()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn uid_of(meta: &ObjectMeta) -> String {
    meta.uid
        .clone()
        .unwrap_or_else(|| panic!("created object {:?} has no UID", meta.name))
}
