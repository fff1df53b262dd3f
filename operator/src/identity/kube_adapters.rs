//! Kubernetes implementations of the identity ports: `TokenReview` for
//! [`TokenReviewer`], Pod/ReplicaSet/Deployment reads for [`Workloads`], and the CA
//! Secret + trust-bundle ConfigMaps (server-side apply, field manager
//! `proxy-pool-operator`) for [`CaStore`].
//!
//! RBAC the operator needs: `create` on `tokenreviews`; `get` on pods, replicasets,
//! deployments; `get`/`patch` on its CA Secret; `patch` on the bundle ConfigMaps.
//! Error texts from the API never contain the reviewed token.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

use super::authz::{Lookup, LookupUnavailable, OwnerKind, Workloads};
#[cfg(doc)]
use super::review::TokenReviewer;
use super::store::{CaStore, Loaded, StoreError, StoredCa};
use super::{FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// Key of the trust bundle in its ConfigMap.
pub const BUNDLE_KEY: &str = "ca.crt";
const CA_CERT_KEY: &str = "ca.crt";
const CA_KEY_KEY: &str = "ca.key";
const PREVIOUS_CERT_KEY: &str = "previous-ca.crt";
const PREVIOUS_KEY_KEY: &str = "previous-ca.key";

/// [`TokenReviewer`] backed by `authentication.k8s.io/v1` `TokenReview`: the shared
/// one (`proxy_pool_token_review`), so the controller and the operator read the API
/// server's answer the same way.
pub use proxy_pool_token_review::KubeTokenReviewer;

/// [`Workloads`] read from the API server (no cache: authorisation is never cached).
#[derive(Clone)]
pub struct KubeWorkloads {
    client: kube::Client,
}

impl std::fmt::Debug for KubeWorkloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeWorkloads")
    }
}

impl KubeWorkloads {
    /// Reads through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Workloads for KubeWorkloads {
    async fn pod(&self, ns: &str, name: &str) -> Lookup<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(unavailable)
    }

    async fn owner(&self, kind: OwnerKind, ns: &str, name: &str) -> Lookup<ObjectMeta> {
        let found = match kind {
            OwnerKind::ReplicaSet => metadata::<ReplicaSet>(&self.client, ns, name).await,
            OwnerKind::Deployment => metadata::<Deployment>(&self.client, ns, name).await,
        };
        found.map_err(unavailable)
    }
}

/// Only the metadata of a namespaced object, if it exists.
async fn metadata<K>(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> kube::Result<Option<ObjectMeta>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let found = Api::<K>::namespaced(client.clone(), ns)
        .get_metadata_opt(name)
        .await?;
    Ok(found.map(|o| o.metadata))
}

fn unavailable(e: kube::Error) -> LookupUnavailable {
    LookupUnavailable(e.to_string())
}

/// [`CaStore`] in a Secret, with the bundle in a ConfigMap per namespace.
#[derive(Clone)]
pub struct KubeCaStore {
    client: kube::Client,
    namespace: String,
    secret_name: String,
    bundle_name: String,
    bundle_namespaces: Vec<String>,
    owner: Option<OwnerReference>,
}

impl std::fmt::Debug for KubeCaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCaStore")
            .field("namespace", &self.namespace)
            .field("secret_name", &self.secret_name)
            .field("bundle_name", &self.bundle_name)
            .field("bundle_namespaces", &self.bundle_namespaces)
            .finish()
    }
}

impl KubeCaStore {
    /// The CA in Secret `namespace/secret_name`; the bundle in ConfigMap `bundle_name`
    /// of every namespace in `bundle_namespaces` (where workers mount it).
    pub fn new(
        client: kube::Client,
        namespace: impl Into<String>,
        secret_name: impl Into<String>,
        bundle_name: impl Into<String>,
        bundle_namespaces: Vec<String>,
    ) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            secret_name: secret_name.into(),
            bundle_name: bundle_name.into(),
            bundle_namespaces,
            owner: None,
        }
    }

    /// Objects this store writes in its own namespace get `owner` (an object in
    /// another namespace cannot have an owner there).
    pub fn with_owner(mut self, owner: Option<OwnerReference>) -> Self {
        self.owner = owner;
        self
    }

    fn meta(&self, name: &str, namespace: &str, version: Option<&str>) -> ObjectMeta {
        let owner = self
            .owner
            .clone()
            .filter(|_| namespace == self.namespace)
            .map(|o| vec![o]);
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_owned(),
                MANAGED_BY_VALUE.to_owned(),
            )])),
            owner_references: owner,
            resource_version: version.map(str::to_owned),
            ..Default::default()
        }
    }
}

fn store_error(e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(ae) if ae.code == 409 => StoreError::Conflict,
        other => StoreError::Unavailable(other.to_string()),
    }
}

#[async_trait]
impl CaStore for KubeCaStore {
    async fn load(&self) -> Result<Loaded, StoreError> {
        let api = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        let Some(secret) = api.get_opt(&self.secret_name).await.map_err(store_error)? else {
            return Ok(Loaded {
                cas: Vec::new(),
                version: None,
            });
        };
        let data = secret.data.unwrap_or_default();
        let text = |k: &str| -> Result<Option<String>, StoreError> {
            data.get(k)
                .map(|b| String::from_utf8(b.0.clone()))
                .transpose()
                .map_err(|_| StoreError::Invalid(format!("{k} is not UTF-8")))
        };
        let mut cas = Vec::new();
        for (cert, key) in [
            (PREVIOUS_CERT_KEY, PREVIOUS_KEY_KEY),
            (CA_CERT_KEY, CA_KEY_KEY),
        ] {
            match (text(cert)?, text(key)?) {
                (Some(cert_pem), Some(key_pem)) => cas.push(StoredCa { cert_pem, key_pem }),
                (None, None) => {}
                _ => {
                    return Err(StoreError::Invalid(format!(
                        "{cert} and {key} must come together"
                    )));
                }
            }
        }
        Ok(Loaded {
            cas,
            version: secret.metadata.resource_version,
        })
    }

    async fn save(&self, cas: &[StoredCa], version: Option<&str>) -> Result<(), StoreError> {
        let (previous, newest) = match cas {
            [newest] => (None, newest),
            [previous, newest] => (Some(previous), newest),
            _ => {
                return Err(StoreError::Invalid(format!(
                    "{} CAs; expected 1 or 2",
                    cas.len()
                )));
            }
        };
        let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
        let mut data = BTreeMap::from([
            (CA_CERT_KEY.to_owned(), bytes(&newest.cert_pem)),
            (CA_KEY_KEY.to_owned(), bytes(&newest.key_pem)),
        ]);
        if let Some(p) = previous {
            data.insert(PREVIOUS_CERT_KEY.to_owned(), bytes(&p.cert_pem));
            data.insert(PREVIOUS_KEY_KEY.to_owned(), bytes(&p.key_pem));
        }
        let secret = Secret {
            metadata: self.meta(&self.secret_name, &self.namespace, version),
            type_: Some("Opaque".into()),
            data: Some(data),
            ..Default::default()
        };
        apply(&self.client, &self.namespace, &self.secret_name, &secret).await
    }

    async fn publish_bundle(&self, bundle_pem: &str) -> Result<(), StoreError> {
        for ns in &self.bundle_namespaces {
            let cm = ConfigMap {
                metadata: self.meta(&self.bundle_name, ns, None),
                data: Some(BTreeMap::from([(
                    BUNDLE_KEY.to_owned(),
                    bundle_pem.to_owned(),
                )])),
                ..Default::default()
            };
            apply(&self.client, ns, &self.bundle_name, &cm).await?;
        }
        Ok(())
    }
}

/// Server-side applies `obj` as `name` in `ns` (field manager `proxy-pool-operator`,
/// taking over conflicting fields).
async fn apply<K>(client: &kube::Client, ns: &str, name: &str, obj: &K) -> Result<(), StoreError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .map_err(store_error)?;
    Ok(())
}
