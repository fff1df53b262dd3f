//! The controller's TLS Secret: holds a certificate from the current identity CA (see
//! [`super::tls`] for the issuance and renewal rules), owned by the controller
//! Deployment. The config reconciler keeps it current before it writes the config.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::common::{CERT_KEY, FIELD_MANAGER, KEY_KEY, component_labels, deployment_owner};
use super::context::Context;
use super::error::Error;
use super::tls::{ControllerTls, TlsState, certificate_renew_at, digest, issue, renewal_reason};
use crate::identity::ca::{CaCert, CaSet};
use crate::identity::kube_adapters::{BUNDLE_KEY, KubeCaStore};
use crate::identity::store::CaStore as _;

/// `proxypool.io/component` label of the TLS Secret.
pub const TLS_COMPONENT: &str = "controller-tls";

/// Makes sure the controller's TLS Secret holds a valid certificate from the current
/// CA; issues and writes one when needed.
pub async fn ensure(
    ctx: &Context,
    d: &Deployment,
    settings: &ControllerTls,
) -> Result<TlsState, Error> {
    let cfg = &ctx.config;
    let now = SystemTime::now();
    let store = KubeCaStore::new(
        ctx.client.clone(),
        cfg.namespace.clone(),
        settings.ca_secret.clone(),
        settings.trust_bundle_config_map.clone(),
        Vec::new(),
    );
    let loaded = store
        .load()
        .await
        .map_err(|e| Error::Tls(format!("identity CA: {e}")))?;
    let cas: Vec<Arc<CaCert>> = loaded
        .cas
        .iter()
        .map(|c| CaCert::from_pem(&c.cert_pem, &c.key_pem).map(Arc::new))
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Tls(format!("identity CA: {e}")))?;
    if cas.is_empty() {
        return Err(Error::Tls(format!(
            "identity CA Secret {:?} does not exist yet (the identity service creates it)",
            settings.ca_secret
        )));
    }
    let cas = CaSet::new(cas);
    let bundle = ctx
        .api::<ConfigMap>()
        .get_opt(&settings.trust_bundle_config_map)
        .await?
        .and_then(|cm| cm.data)
        .and_then(|mut data| data.remove(BUNDLE_KEY))
        .ok_or_else(|| {
            Error::Tls(format!(
                "trust bundle ConfigMap {:?} (key {BUNDLE_KEY}) does not exist yet",
                settings.trust_bundle_config_map
            ))
        })?;
    let secrets: Api<Secret> = ctx.api();
    let stored = secrets.get_opt(&settings.secret).await?.and_then(|s| {
        let data = s.data?;
        let text = |k: &str| {
            data.get(k)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        Some((text(CERT_KEY)?, text(KEY_KEY)?))
    });
    let spiffe_id = settings.spiffe_id();
    let reason = match &stored {
        None => Some("no certificate yet"),
        Some((cert, key)) => renewal_reason(cert, key, &cas, now, &spiffe_id, &settings.dns_names),
    };
    let Some(reason) = reason else {
        let (cert, _) = stored.unwrap_or_default();
        let renew = certificate_renew_at(&cert).unwrap_or(now);
        return Ok(TlsState {
            digest: digest(&cert, &bundle),
            renew_at: renew,
            issued: false,
        });
    };
    let (cert, key, renew) = issue(settings, &cas, now)?;
    let owner = deployment_owner(d)?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(settings.secret.clone()),
            labels: Some(component_labels(TLS_COMPONENT)),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (CERT_KEY.to_owned(), ByteString(cert.clone().into_bytes())),
            (KEY_KEY.to_owned(), ByteString(key.into_bytes())),
        ])),
        ..Secret::default()
    };
    secrets
        .patch(
            &settings.secret,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    tracing::info!(
        secret = %settings.secret,
        spiffe_id = %spiffe_id,
        reason,
        "controller control-plane certificate issued"
    );
    Ok(TlsState {
        digest: digest(&cert, &bundle),
        renew_at: renew,
        issued: true,
    })
}
