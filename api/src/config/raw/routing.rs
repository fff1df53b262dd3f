//! `routings[]`: gateway routing rules, as written (the gateway's section).

use serde::{Deserialize, Serialize};

/// One `routings[]` entry (the gateway's section; only its references are checked here).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRouting {
    /// Unique name.
    pub name: String,
    /// Lower runs first.
    #[serde(default)]
    pub priority: i32,
    /// Clients it applies to (empty: every client).
    #[serde(default)]
    pub clients: Vec<String>,
    /// Upstreams it draws from.
    #[serde(default)]
    pub upstreams: Vec<String>,
    /// Allowed regions (empty: any).
    #[serde(default)]
    pub regions: Vec<String>,
    /// Allowed carriers (empty: any).
    #[serde(default)]
    pub carriers: Vec<String>,
    /// Allowed cities (empty: any).
    #[serde(default)]
    pub cities: Vec<String>,
    /// `roundRobin`, `leastActive` or `powerOfTwoChoices`.
    #[serde(default)]
    pub strategy: Option<String>,
    /// Username parameters that must be present, each with its accepted values
    /// (empty list: any value), e.g. `region: [shanghai]`.
    #[serde(default)]
    pub username_params: std::collections::BTreeMap<String, Vec<String>>,
    /// Username parameters that select proxies, each with the dimension it selects by
    /// (`region`, `city`, `carrier`, `upstream`, `protocol`), e.g. `country: region`.
    /// Absent: the defaults (`country` and `region` → region, `city`, `carrier`);
    /// `{}`: none.
    #[serde(default)]
    pub selectors: Option<std::collections::BTreeMap<String, String>>,
    /// Target hosts: exact names or `*.suffix` wildcards (empty: any target).
    #[serde(default)]
    pub target_hosts: Vec<String>,
    /// Port TARGET health checks of this routing's exact `targetHosts` use (default 443).
    #[serde(default)]
    pub target_check_port: Option<u16>,
    /// Keep a session (the `session` username parameter) on one proxy.
    #[serde(default)]
    pub sticky_session: Option<RawStickySession>,
    /// Retries of DIAL / PROXY_HANDSHAKE failures on another proxy.
    #[serde(default)]
    pub retry: Option<RawRetry>,
    /// Gateway groups that serve this routing (empty: every gateway).
    #[serde(default)]
    pub gateway_groups: Vec<String>,
    /// Target ports CONNECT may reach: `443`, `8000-8999` (empty: 443 and 80).
    #[serde(default)]
    pub connect_ports: Vec<String>,
}

/// `routings[].stickySession`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawStickySession {
    /// Longest life of a session's binding to one proxy.
    #[serde(default)]
    pub ttl: Option<String>,
    /// A session unused this long is forgotten.
    #[serde(default)]
    pub idle_timeout: Option<String>,
    /// Username parameter holding the session key (default `session`).
    #[serde(default)]
    pub param: Option<String>,
    /// Longest life a client may choose with `sesstime-<minutes>` (default 30 minutes,
    /// or `ttl` when longer; at most 24 hours).
    #[serde(default)]
    pub max_ttl: Option<String>,
    /// `false` turns sessions off for this routing (every request rotates, a `session`
    /// parameter is ignored). Default `true`, also when the block is absent.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// `routings[].retry`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRetry {
    /// Attempts per request, the first included.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Deadline for all attempts together.
    #[serde(default)]
    pub deadline: Option<String>,
}
