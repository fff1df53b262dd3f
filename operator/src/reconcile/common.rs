//! What every object the operator writes shares: the server-side apply field manager,
//! the labels that mark operator-made objects, the mode of mounted Secret files, the
//! keys of the controller's TLS Secret and the owner reference to the controller
//! Deployment. A leaf: it imports nothing else of the reconcilers.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use super::error::Error;

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "proxy-pool-operator";
/// Label every operator-made object carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "proxy-pool-operator");
/// Label naming what an operator-made object is part of (`gateway`, `controller-config`, …).
pub const COMPONENT_LABEL: &str = "proxypool.io/component";
/// Mode of projected files that carry Secret keys (`0440`: owner and group read).
pub const SECRET_FILE_MODE: i32 = 0o440;
/// Key of the certificate chain in the controller's TLS Secret.
pub const CERT_KEY: &str = "tls.crt";
/// Key of the private key in the controller's TLS Secret.
pub const KEY_KEY: &str = "tls.key";

/// Labels of an operator-made object of `component`: [`MANAGED_BY`] and
/// [`COMPONENT_LABEL`].
pub fn component_labels(component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        (COMPONENT_LABEL.to_owned(), component.to_owned()),
    ])
}

/// A (non-controller) owner reference to the Deployment `d`: objects the operator
/// writes for the controller (its config ConfigMap, its TLS Secret) go when it goes.
pub(crate) fn deployment_owner(d: &Deployment) -> Result<OwnerReference, Error> {
    Ok(OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: d.name_any(),
        uid: d
            .meta()
            .uid
            .clone()
            .ok_or(Error::MissingKey("Deployment"))?,
        controller: None,
        block_owner_deletion: None,
    })
}

/// [`deployment_owner`] of Deployment `namespace/name`, read from the API server.
pub async fn owner_of_deployment(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<OwnerReference, Error> {
    let d = kube::Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    deployment_owner(&d)
}
