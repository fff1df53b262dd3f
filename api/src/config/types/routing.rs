//! `routings[]`, validated: gateway routing rules.

use std::time::Duration;

pub use crate::controlplane::model::Sticky;
use crate::egress::PortRanges;
use crate::proxy::Strategy;
pub use crate::proxy::{Dimension, Selector};

/// One routing rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingConfig {
    /// Name.
    pub name: String,
    /// Order.
    pub priority: i32,
    /// Clients (empty: all).
    pub clients: Vec<String>,
    /// Upstreams.
    pub upstreams: Vec<String>,
    /// Regions (empty: any).
    pub regions: Vec<String>,
    /// Carriers (empty: any).
    pub carriers: Vec<String>,
    /// Cities (empty: any).
    pub cities: Vec<String>,
    /// Strategy.
    pub strategy: Strategy,
    /// Username parameters that must match, by key (sorted).
    pub username_params: Vec<UsernameParamConfig>,
    /// Target hosts, exact or `*.suffix` (empty: any).
    pub target_hosts: Vec<String>,
    /// Port of the TARGET health checks of the exact `target_hosts`.
    pub target_check_port: u16,
    /// Username parameters that select proxies (`None`: the defaults).
    pub selectors: Option<Vec<Selector>>,
    /// Sticky sessions (on by default; `None`: turned off).
    pub sticky: Option<Sticky>,
    /// Retry budget.
    pub retry: RetryConfig,
    /// Gateway groups that serve it (empty: every gateway).
    pub gateway_groups: Vec<String>,
    /// Target ports CONNECT may reach.
    pub connect_ports: PortRanges,
}

/// One username parameter condition of a routing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsernameParamConfig {
    /// Key, e.g. `region`.
    pub key: String,
    /// Accepted values (empty: the key must be present with any value).
    pub values: Vec<String>,
}

/// Retries of DIAL / PROXY_HANDSHAKE failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts including the first (1–10).
    pub max_attempts: u32,
    /// Deadline over all attempts.
    pub deadline: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            deadline: Duration::from_secs(10),
        }
    }
}
