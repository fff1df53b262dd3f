//! The reconcilers' one error type. A bad reference in a custom resource is not an
//! error (it becomes a Degraded condition); these are failures worth a retry.

/// Why a reconcile (or the operator's run) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The rendered controller config could not be written as YAML.
    #[error("writing the controller config as YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// The controller config would be invalid for a reason no custom resource explains
    /// (the base config from the chart); nothing is written until it is fixed.
    #[error("the controller config is invalid: {0}")]
    InvalidConfig(String),
    /// An object from the API server lacks its name or namespace.
    #[error("{0} has no name or namespace")]
    MissingKey(&'static str),
    /// The controller's control-plane certificate could not be made (the identity CA
    /// or trust bundle is missing or unreadable, or signing failed).
    #[error("controller TLS: {0}")]
    Tls(String),
    /// Another replica took the leader Lease; this one must stop reconciling.
    #[error("lost the leader Lease {0}")]
    LeaseLost(String),
}
