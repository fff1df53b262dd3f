//! The fields of the controller Deployment the config reconciler owns, rendered
//! purely: a projected volume with the config file, exactly the Secret keys the config
//! names and (with TLS) the controller's certificate and the trust bundle, mounted into
//! the controller container, and the config's content hash as a pod-template
//! annotation (a changed hash rolls the controller).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::common::{CERT_KEY, KEY_KEY, SECRET_FILE_MODE};
use crate::identity::kube_adapters::BUNDLE_KEY;

/// Pod-template annotation holding the config's content hash.
pub const CONFIG_HASH_ANNOTATION: &str = "proxypool.io/config-hash";
/// Key of the config inside the ConfigMap (and file name in the volume).
pub const CONFIG_KEY: &str = "config.yaml";
/// Name of the projected volume the operator adds to the controller pod.
pub const CONFIG_VOLUME: &str = "proxy-pool-config";

/// Where the controller's TLS material comes from: the operator-owned TLS Secret and
/// the trust bundle ConfigMap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsSources<'a> {
    /// Secret with `tls.crt` and `tls.key`.
    pub secret: &'a str,
    /// ConfigMap with `ca.crt`.
    pub bundle: &'a str,
}

/// The projected volume: the config file plus `secrets/<secret>/<key>` for each mount,
/// and with TLS `tls/tls.crt`, `tls/tls.key` and `trust/ca.crt`.
pub fn config_volume(
    config_map: &str,
    mounts: &BTreeMap<String, BTreeSet<String>>,
    tls: Option<TlsSources<'_>>,
) -> Value {
    let mut sources = vec![json!({
        "configMap": {"name": config_map, "items": [{"key": CONFIG_KEY, "path": CONFIG_KEY}]}
    })];
    if let Some(t) = tls {
        sources.push(json!({"secret": {"name": t.secret, "items": [
            {"key": CERT_KEY, "path": format!("tls/{CERT_KEY}")},
            {"key": KEY_KEY, "path": format!("tls/{KEY_KEY}")},
        ]}}));
        sources.push(json!({"configMap": {"name": t.bundle, "items": [
            {"key": BUNDLE_KEY, "path": format!("trust/{BUNDLE_KEY}")},
        ]}}));
    }
    for (secret, keys) in mounts {
        let items: Vec<Value> = keys
            .iter()
            .map(|k| json!({"key": k, "path": format!("secrets/{secret}/{k}")}))
            .collect();
        sources.push(json!({"secret": {"name": secret, "items": items}}));
    }
    // Owner and group read only (the pod's fsGroup is the group): Secret keys inside.
    json!({"name": CONFIG_VOLUME, "projected": {"sources": sources, "defaultMode": SECRET_FILE_MODE}})
}

/// The fields of the controller Deployment this operator owns (server-side apply).
pub fn deployment_patch(
    name: &str,
    container: &str,
    config_dir: &str,
    config_map: &str,
    mounts: &BTreeMap<String, BTreeSet<String>>,
    tls: Option<TlsSources<'_>>,
    hash: &str,
) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"template": {
            "metadata": {"annotations": {CONFIG_HASH_ANNOTATION: hash}},
            "spec": {
                "volumes": [config_volume(config_map, mounts, tls)],
                "containers": [{
                    "name": container,
                    "volumeMounts": [{"name": CONFIG_VOLUME, "mountPath": config_dir, "readOnly": true}],
                }],
            },
        }},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_projects_the_config_and_only_the_named_keys() {
        let mounts = BTreeMap::from([(
            "vendor".to_owned(),
            BTreeSet::from(["apiKey".to_owned(), "password".to_owned()]),
        )]);
        let v = config_volume("cfg", &mounts, None);
        let sources = v["projected"]["sources"].as_array().expect("sources");
        assert_eq!(sources[0]["configMap"]["name"], "cfg");
        assert_eq!(
            sources[1]["secret"]["items"][0]["path"],
            "secrets/vendor/apiKey"
        );
        assert_eq!(sources[1]["secret"]["items"][1]["key"], "password");
        let p = deployment_patch(
            "ctl",
            "controller",
            "/etc/proxy-pool",
            "cfg",
            &mounts,
            Some(TlsSources {
                secret: "ctl-tls",
                bundle: "bundle",
            }),
            "abc",
        );
        let t = &p["spec"]["template"];
        assert_eq!(t["metadata"]["annotations"][CONFIG_HASH_ANNOTATION], "abc");
        assert_eq!(
            t["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            "/etc/proxy-pool"
        );
        let sources = t["spec"]["volumes"][0]["projected"]["sources"]
            .as_array()
            .expect("sources");
        assert_eq!(
            sources.len(),
            4,
            "config, TLS Secret, bundle, vendor Secret"
        );
        assert_eq!(sources[1]["secret"]["name"], "ctl-tls");
        assert_eq!(sources[1]["secret"]["items"][0]["path"], "tls/tls.crt");
        assert_eq!(sources[1]["secret"]["items"][1]["path"], "tls/tls.key");
        assert_eq!(sources[2]["configMap"]["name"], "bundle");
        assert_eq!(sources[2]["configMap"]["items"][0]["path"], "trust/ca.crt");
        assert_eq!(sources[3]["secret"]["name"], "vendor");
    }
}
