//! The validated controller configuration: every value parsed into its final type.
//!
//! Built only by [`super::validate`]; every later function trusts it.
//!
//! One file per config section; every type is re-exported here.

mod client;
mod control_plane;
mod distribution;
mod leadership;
mod routing;
mod store;
mod upstream;
mod usage;

use std::net::SocketAddr;
use std::time::Duration;

pub use crate::egress::{EgressPolicy, PortRanges};
pub use crate::proxy::{Protocol, Strategy};
pub use crate::secret::SaltedHash;
pub use client::{
    BasicCredentials, ClientConfig, ClientGrants, ClientSecretFile, ClientSecretKind, SecretHash,
    service_account_user,
};
pub use control_plane::{ControlPlaneConfig, ControlPlaneTls, ControlPlaneTransport};
pub use distribution::{
    AuthConfig, AuthMethodConfig, AuthMethodKind, AuthMode, DistributionConfig, FulfillmentDefault,
    LimitsConfig, Permission, Rate, TokenReviewConfig,
};
pub use leadership::{KubernetesLeadership, LEADER_POD_LABEL, LeadershipBackend, LeadershipConfig};
pub use routing::{Dimension, RetryConfig, RoutingConfig, Selector, Sticky, UsernameParamConfig};
pub use store::{PoolConfig, RedisConfig, RedisTarget, RedisTls, StoreConfig};
pub use upstream::{
    PasswordSource, ProxyCredentials, SourceConfig, StaticProxy, StaticSourceConfig,
    UpstreamConfig, UpstreamHealthConfig, VendorApiConfig, VendorFormat,
};
pub use usage::{AnalyticsConfig, CacheConfig, CacheNamespaceConfig};

/// The controller's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Where the activity pool lives.
    pub store: StoreConfig,
    /// Activity pool tunables.
    pub pool: PoolConfig,
    /// The Distribution API.
    pub distribution: DistributionConfig,
    /// The admin listener.
    pub admin: AdminConfig,
    /// The gRPC control plane (`None`: off).
    pub control_plane: Option<ControlPlaneConfig>,
    /// Providers of proxies, by unique name.
    pub upstreams: Vec<UpstreamConfig>,
    /// Gateway routing rules, ordered by priority then name.
    pub routings: Vec<RoutingConfig>,
    /// Distribution clients.
    pub clients: Vec<ClientConfig>,
    /// Usage analytics (`None`: off).
    pub analytics: Option<AnalyticsConfig>,
    /// Read-through cache (`None`: off).
    pub cache: Option<CacheConfig>,
    /// Graceful shutdown.
    pub shutdown: ShutdownConfig,
    /// Controller replicas and the leader lease.
    pub leadership: LeadershipConfig,
    /// Addresses the controller dials for others (vendor-supplied proxy addresses).
    pub egress: EgressPolicy,
}

/// The admin listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminConfig {
    /// Listen address.
    pub listen: SocketAddr,
}

/// Graceful shutdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownConfig {
    /// Longest time from the signal to exit.
    pub grace_period: Duration,
    /// Time spent not-ready before the listeners stop accepting.
    pub drain_delay: Duration,
}
