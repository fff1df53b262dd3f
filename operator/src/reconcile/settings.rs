//! The operator's settings, parsed once at start-up (command line and chart values):
//! what the reconcilers render from besides the custom resources. Plain data.

use proxy_pool_api::config::RawConfig;

use super::gateway_pod::GatewayPodSettings;
use super::hash_key::HashKey;
use super::tls::ControllerTls;

/// The operator's settings (from the command line / the chart), already parsed.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Namespace watched; the controller, its config and all referenced Secrets live here.
    pub namespace: String,
    /// Controller settings not derived from custom resources (store, listeners, …).
    pub base_config: RawConfig,
    /// The controller Deployment (installed by the chart) the config rolls.
    pub controller_deployment: String,
    /// Its container that reads the config.
    pub controller_container: String,
    /// The ConfigMap the config is written to (key `config.yaml`).
    pub config_map: String,
    /// Where the controller container sees the projected config volume: `config.yaml`
    /// and `secrets/<secret>/<key>` inside it.
    pub config_dir: String,
    /// Gateway workload settings.
    pub gateway: GatewayTemplate,
    /// This replica's name (pod name), reported with events.
    pub instance: Option<String>,
    /// Issue the controller's control-plane certificate and render `controlPlane.tls`
    /// (`None`: the base config's `controlPlane` is rendered as it is).
    pub controller_tls: Option<ControllerTls>,
    /// Seals the content hashes written as pod annotations.
    pub hash_key: HashKey,
    /// `http://host:port` of the controller's admin listener: each Upstream's status
    /// takes its inventory, last fetch time and fetch failures from there (`None`:
    /// Upstream status reports the config only).
    pub controller_admin: Option<String>,
}

impl OperatorConfig {
    /// Directory of the mounted Secret keys, as the rendered config names them.
    pub fn secret_dir(&self) -> String {
        format!("{}/secrets", self.config_dir.trim_end_matches('/'))
    }

    /// The base config with `controlPlane.tls` pointing at the operator-issued
    /// certificate when the operator secures the control plane.
    pub fn effective_base(&self) -> RawConfig {
        let mut base = self.base_config.clone();
        if let Some(tls) = &self.controller_tls
            && base.control_plane.enabled
        {
            base.control_plane.loopback_plaintext = false;
            base.control_plane.tls = Some(tls.raw(&self.config_dir));
        }
        base
    }
}

/// How gateway Deployments are built.
#[derive(Clone, Debug)]
pub struct GatewayTemplate {
    /// Container image.
    pub image: String,
    /// Image pull policy (`IfNotPresent`, …).
    pub image_pull_policy: String,
    /// ServiceAccount of the gateway pods (no RBAC; only its projected token is used).
    pub service_account: String,
    /// `host:port` of the controller's control-plane Service.
    pub controller_address: String,
    /// URL of the operator's identity issuance endpoint.
    pub identity_endpoint: String,
    /// ConfigMap with the identity trust bundle (`ca.crt`).
    pub trust_bundle_config_map: String,
    /// Egress policy of the gateways: more refused ranges (the cluster's pod and
    /// service CIDRs), the base config's `egress.denyCidrs`.
    pub egress_deny_cidrs: Vec<String>,
    /// Ranges allowed although refused (`egress.allowCidrs`).
    pub egress_allow_cidrs: Vec<String>,
    /// Hardening, scheduling, shutdown timing and PodDisruptionBudget (the chart's
    /// `gateway.*` values).
    pub pod: GatewayPodSettings,
}
