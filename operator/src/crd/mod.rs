//! The Proxy Pool custom resources (`proxypool.io/v1alpha1`) and their generated
//! CustomResourceDefinitions.
//!
//! The Rust types are the source of truth; `crds/proxy-pool.yaml` is generated from
//! them by the `crdgen` binary and a test fails when the two drift apart.

/// Declares one Proxy Pool custom resource on its spec struct: `#[derive(CustomResource)]`
/// with what every kind shares (group and version, namespaced scope, the `proxypool`
/// category, `PartialEq`, and the Ready and Age printer columns that end the list).
/// The caller gives the kind's own `#[kube(...)]` keys (kind, doc, status, shortname
/// and its printer columns, without a trailing comma), then the spec's other
/// attributes (its schema derive among them) and the struct.
macro_rules! custom_resource {
    (
        #[kube($($kind:tt)*)]
        $(#[$attr:meta])*
        pub struct $spec:ident $fields:tt
    ) => {
        #[allow(
            clippy::duplicated_attributes,
            reason = "each printcolumn(...) repeats the type_ key by design"
        )]
        #[derive(
            kube::CustomResource, Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize,
        )]
        #[kube(
            group = "proxypool.io",
            version = "v1alpha1",
            namespaced,
            category = "proxypool",
            derive = "PartialEq",
            $($kind)*,
            printcolumn(
                name = "Ready",
                type_ = "string",
                json_path = r#".status.conditions[?(@.type=="Ready")].status"#
            ),
            printcolumn(
                name = "Age",
                type_ = "date",
                json_path = ".metadata.creationTimestamp"
            )
        )]
        $(#[$attr])*
        pub struct $spec $fields
    };
}

mod common;
mod distribution_client;
mod gateway_group;
mod routing;
mod upstream;

/// The proxy protocol, routing strategy, vendor format and client permissions the
/// specs use are the api's own.
pub use proxy_pool_api::config::{Permission, VendorFormat};
pub use proxy_pool_api::proxy::{Protocol, Strategy};

pub use common::{
    CONDITION_DEGRADED, CONDITION_READY, DURATION_PATTERN, HasConditions, InvalidDuration,
    ObservedConditions, SecretKeyRef, SecretRef, parse_duration,
};
pub use distribution_client::{
    BasicAuth, ClientAuth, DistributionClient, DistributionClientSpec, DistributionClientStatus,
    GatewayLimitsSpec, RateLimit, SecretKeyAuth,
};
pub use gateway_group::{
    Autoscaling, DisruptionBudget, GatewayGroup, GatewayGroupSpec, GatewayGroupStatus,
    GatewayLimits, GatewayService, NodePorts, ProxyProtocol, ServiceType, TrafficPolicy,
};
pub use routing::{
    GROUP_NAME_PATTERN, GatewayListeners, GatewaySpec, LabelFilter, Listener, RetryBudget, Routing,
    RoutingMatch, RoutingSpec, RoutingStatus, StickySession,
};
pub use upstream::{
    FetchBudget, HealthSettings, StaticSource, Upstream, UpstreamInventory, UpstreamLabels,
    UpstreamSource, UpstreamSpec, UpstreamStatus, VendorApiSource,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every Proxy Pool resource.
pub const GROUP: &str = "proxypool.io";
/// The served and stored version.
pub const VERSION: &str = "v1alpha1";

/// Header of the generated YAML file.
const YAML_HEADER: &str = "\
# Proxy Pool CustomResourceDefinitions (proxypool.io/v1alpha1).
# Generated from the Rust types in operator/src/crd/ - do not edit by hand.
# Regenerate: cargo run -p proxy-pool-operator --bin crdgen > crds/proxy-pool.yaml
";

/// Failure to render the CRDs.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// A CRD did not serialise to YAML.
    #[error("cannot serialise CRD {name} to YAML: {source}")]
    Yaml {
        /// The CRD's name.
        name: String,
        /// The serialiser's error.
        source: serde_yaml::Error,
    },
}

/// Every CRD this operator owns, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        Upstream::crd(),
        Routing::crd(),
        DistributionClient::crd(),
        GatewayGroup::crd(),
    ]
}

/// All CRDs as one multi-document YAML file, exactly as committed in `crds/proxy-pool.yaml`.
pub fn to_yaml() -> Result<String, CrdError> {
    let mut out = String::from(YAML_HEADER);
    for crd in all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let doc = serde_yaml::to_string(&crd).map_err(|source| CrdError::Yaml { name, source })?;
        out.push_str("---\n");
        out.push_str(&doc);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
