//! The controller's configuration file as written: serde structs only.
//!
//! Every struct denies unknown fields and carries its defaults; nothing here checks a
//! value (that is `validate/`) and nothing here does I/O.
//!
//! One file per section; every struct is re-exported here (`config::raw::RawUpstream`).

mod client;
mod control_plane;
mod distribution;
mod leadership;
mod routing;
mod store;
mod upstream;
mod usage;

use serde::{Deserialize, Serialize};

pub use client::{RawBasic, RawClient, RawHashedSecret};
pub use control_plane::{RawControlPlane, RawControlPlaneTls};
pub use distribution::{
    RawAuth, RawAuthMethod, RawDistribution, RawLimits, RawRate, RawRateLimits, RawTokenReview,
};
pub use leadership::{RawKubernetesLeadership, RawLeadership};
pub use routing::{RawRetry, RawRouting, RawStickySession};
pub use store::{RawPool, RawRedis, RawRedisTls, RawSentinel, RawStore};
pub use upstream::{
    RawLabels, RawProxyCredentials, RawSource, RawStaticSource, RawUpstream, RawUpstreamHealth,
    RawVendorApi,
};
pub use usage::{RawAnalytics, RawCache, RawCacheNamespace, RawCacheNamespaces};

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawConfig {
    /// Where the activity pool lives.
    #[serde(default)]
    pub store: RawStore,
    /// Activity pool tunables.
    #[serde(default)]
    pub pool: RawPool,
    /// The Distribution HTTP API listener.
    #[serde(default)]
    pub distribution: RawDistribution,
    /// The admin / ops listener.
    #[serde(default)]
    pub admin: RawAdmin,
    /// The gRPC control-plane listener (off by default).
    #[serde(default)]
    pub control_plane: RawControlPlane,
    /// Providers of proxies.
    #[serde(default)]
    pub upstreams: Vec<RawUpstream>,
    /// Gateway routing rules.
    #[serde(default)]
    pub routings: Vec<RawRouting>,
    /// Distribution (and gateway) clients.
    #[serde(default)]
    pub clients: Vec<RawClient>,
    /// Usage analytics (off by default).
    #[serde(default)]
    pub analytics: RawAnalytics,
    /// Read-through cache (off by default).
    #[serde(default)]
    pub cache: RawCache,
    /// Graceful shutdown.
    #[serde(default)]
    pub shutdown: RawShutdown,
    /// Controller replicas and the leader lease.
    #[serde(default)]
    pub leadership: RawLeadership,
    /// Addresses the controller dials for others (vendor-supplied proxy addresses).
    #[serde(default)]
    pub egress: RawEgress,
}

/// `admin`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAdmin {
    /// Listen address, e.g. `127.0.0.1:9090`.
    #[serde(default)]
    pub listen: Option<String>,
}

/// `shutdown`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawShutdown {
    /// Longest time from the signal to exit.
    #[serde(default)]
    pub grace_period: Option<String>,
    /// Time spent not-ready (answering 503) before the listeners stop accepting.
    #[serde(default)]
    pub drain_delay: Option<String>,
}

/// `egress`: the egress policy (`proxy_pool_api::egress`). Built-in deny ranges
/// (loopback, link-local, metadata, unspecified, multicast) always apply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawEgress {
    /// More ranges refused: the cluster's pod and service CIDRs, other internal ranges.
    #[serde(default)]
    pub deny_cidrs: Vec<String>,
    /// Ranges allowed even when denied above or built in (explicit opt-in, e.g.
    /// `127.0.0.0/8` for local runs with the vendor simulator).
    #[serde(default)]
    pub allow_cidrs: Vec<String>,
}
